"""The A/A noise floor: what a later A/B cannot see in its own CI (docs/methods-aa.md).

An A/A session (``abtui run --aa``) plays the same endpoint twice, the copies taking turns in
alternation blocks (A B | B A | …, :mod:`abtui.workload.segments`): they never share an instant or
an engine step. Block pair ``j`` (one ``(run, level, block)`` segment) gives, per latency row
(``ttft.p50``, ``e2e.p90``, …), the block effect ``d_j = log(stat_B,j / stat_A,j)`` and its
within-block sampling variance ``v_j`` (a bootstrap of each arm's requests inside the block:
circular blocks of ``⌈n^⅓⌉`` consecutive requests, so short-range dependence under load is kept;
ITL gaps are resampled with their request). Over the ``k`` block pairs:

- **bias** ``b``: the pooled A/A effect, ``log(stat_B / stat_A)`` over the whole session (what a
  later A/B would report between identical arms: order effects that do not cancel, a copy that
  is systematically slower). ``bias_se`` = ``sd(d_j) / √k``, for the reader.
- **spread** ``τ``: the between-block component of ``d_j``'s variance beyond within-block sampling
  noise, the moment estimator of DerSimonian–Laird in its unweighted (Hedges) form,
  ``τ² = max(0, Var(d_j) − mean(v_j))``. Unweighted because ``v_j`` comes from small blocks and is
  itself noisy: ``1/v_j`` weights would chase that noise. ``τ`` is counted only when Cochran's
  ``Q = Σ (d_j − d̄)² / v_j`` says the blocks differ more than their sampling noise allows
  (``χ²_{k−1}`` test at :data:`HETEROGENEITY_ALPHA`): with ~8 blocks the moment estimate is
  positive in about half of wobble-free A/As and then of the size of one block's sampling SD,
  which would bake sampling noise into δ — the flaw of the old floor. ``tau_detectable`` says
  how large a spread this A/A could have told from block noise (detected about half the time).
- **floor** ``= |b| + z·τ`` with ``z = 1.96`` (:data:`Z`).

Why this and not the A/A CI: a later *parallel* A/B resamples requests within one run, so its
CI covers its own sampling noise but not the run-to-run (here: block-to-block) wobble of the
setup, nor a systematic offset; δ must cover exactly those. ``1.96 τ`` covers the offset of 95 %
of runs (the level of the decision CIs). Sampling noise is the later A/B's CI's job, and the
A/A's own CI width (what ``max(|lo|, |hi|)`` measured, and what made a small A/A raise δ to
10–20 %) is not put into δ.

Rows left out (with a reason in ``left_out``): breakdowns (``…@in16-255``, ``…@level2``: their
buckets are particular to one session; a later breakdown row takes the floor of its base key),
rates and cost (not measured per block), and rows whose blocks hold too few values per arm for
the statistic (``max(MIN_BLOCK_N, tail_min_n)``: P99 needs ≥ 1000 per block and arm). A session
whose copies overlapped in time (an old, parallel ``--aa`` run) has no floor at all.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from abtui.jsonable import json_ready
from abtui.metrics import catalogue as cat
from abtui.metrics import request as request_metrics
from abtui.metrics.summary import segment_ids
from abtui.metrics.table import RequestTable
from abtui.stats.decide import tail_min_n

METHOD = "aa-blocks-v2"  # |pooled bias| + z·τ over alternation blocks
LEGACY_METHOD = "ci-bound"  # the old max(|lo|, |hi|) of the A/A CI
Z = 1.96
AA_MIN_BLOCKS = 8  # block pairs --aa plays at least (runs × blocks)
MIN_BLOCK_N = 10  # values per arm and block for a mean or median
HETEROGENEITY_ALPHA = 0.05
PERMUTATIONS = 200
METRICS = cat.LATENCY_KEYS
STATS = cat.STAT_KEYS


def base_key(key: str) -> str:
    """The row a breakdown belongs to: ``ttft.p50@in16-255`` → ``ttft.p50``."""
    return key.partition("@")[0]


@dataclass(frozen=True, slots=True)
class FloorRow:
    bias: float  # pooled log(B/A)
    bias_se: float
    tau: float  # counted between-block spread (0 when not detected)
    tau_raw: float  # the moment estimate before the heterogeneity test
    floor: float  # |bias| + z·tau
    blocks: int  # block pairs used
    within_sd: float  # √mean(v_j): one block's sampling SD of d_j
    q_p: float  # Cochran's Q test p-value (small: the blocks really differ)
    tau_detectable: float  # spread this A/A detects about half the time

    def to_dict(self) -> dict:
        """The JSON row: a non-finite figure as ``null``."""
        return json_ready(asdict(self))

    @classmethod
    def from_dict(cls, d: dict) -> FloorRow:
        """A stored row, its ``null`` figures read back as NaN."""
        f = {k: math.nan if d.get(k) is None else float(d[k]) for k in _FLOATS}
        return cls(**f, blocks=int(d.get("blocks") or 0))


_FLOATS = tuple(k for k in FloorRow.__dataclass_fields__ if k != "blocks")


@dataclass(frozen=True, slots=True)
class NoiseFloor:
    """The noise floor of an A/A session: :func:`measure_aa`'s, or one read back from a session
    file (:meth:`from_dict`; :func:`abtui.verdict.saved.read_noise_floor`). A legacy floor
    (:data:`LEGACY_METHOD`: an old parallel A/A's largest CI bound per row) has only
    ``legacy_values``. ``path``: the A/A session it was read from (None: measured here)."""

    rows: dict[str, FloorRow] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)
    blocks: int = 0
    method: str = METHOD
    z: float = Z
    notes: tuple[str, ...] = ()
    legacy_values: dict[str, float] | None = None
    path: str | None = None

    @property
    def legacy(self) -> bool:
        return self.method != METHOD

    def values(self) -> dict[str, float]:
        """{row: floor} (a legacy floor: its stored values, base rows only)."""
        if self.legacy:
            return dict(self.legacy_values or {})
        return {k: r.floor for k, r in self.rows.items()}

    def to_dict(self) -> dict:
        """The JSON document (``noise_floor_detail``): ``method``, then ``z``, ``blocks``,
        ``rows``, ``left_out`` (a legacy floor: ``values``), ``notes`` and the ``path`` it was
        read from."""
        if self.legacy:
            d = {"method": self.method, "values": dict(self.legacy_values or {})}
        else:
            d = {
                "method": self.method,
                "z": self.z,
                "blocks": self.blocks,
                "rows": {k: r.to_dict() for k, r in self.rows.items()},
                "left_out": dict(self.left_out),
            }
        d["notes"] = list(self.notes)
        if self.path is not None:
            d["path"] = self.path
        return d

    @classmethod
    def from_dict(cls, d: dict) -> NoiseFloor:
        """A stored floor document (either method)."""
        path = d.get("path")
        notes = tuple(str(n) for n in d.get("notes") or ())
        path = None if path is None else str(path)
        method = str(d.get("method"))
        if method != METHOD:
            values = d.get("values") or {}
            legacy = {k: float(v) for k, v in values.items() if v is not None}
            return cls(method=method, notes=notes, legacy_values=legacy, path=path)
        return cls(
            rows={k: FloorRow.from_dict(r) for k, r in (d.get("rows") or {}).items()},
            left_out=dict(d.get("left_out") or {}),
            blocks=int(d.get("blocks") or 0),
            z=float(d.get("z", Z)),
            notes=notes,
            path=path,
        )


def overlapped(t: RequestTable, a: int, b: int) -> bool:
    """Whether arms ``a`` and ``b`` had requests in flight at the same time in any segment
    (``parallel``: they did; ``alternate``: they took turns)."""
    sent = ~t.warmup & (t.status != "cancelled")
    seg = segment_ids(t)
    done = np.where(t.valid("done_ns"), t.done_ns, t.dispatched_ns)
    for s in np.unique(seg[sent]):
        spans = []
        for x in (a, b):
            m = sent & (seg == s) & (t.arm == x)
            if not m.any():
                break
            spans.append((int(t.dispatched_ns[m].min()), int(done[m].max())))
        else:
            (s0, e0), (s1, e1) = spans
            if max(s0, s1) < min(e0, e1):
                return True
    return False


def _values(ok: RequestTable, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, request row of each) over ``ok`` (finite values only)."""
    if metric == "itl":
        rows, v = request_metrics.chunk_gaps(ok)
    else:
        v, rows = cat.per_request_values(ok, metric), np.arange(len(ok))
    keep = np.isfinite(v)
    return v[keep], rows[keep]


def _stat(v: np.ndarray, stat: str) -> float:
    if not len(v):
        return math.nan
    if stat == "mean":
        return float(v.mean())
    return float(np.percentile(v, cat.QUANTILES[stat] * 100))


def _block_stats(xs: np.ndarray, labels: np.ndarray, k: int, stats: list[str]) -> np.ndarray:
    """``stats × k``: each statistic of each block, ``xs`` sorted ascending and ``labels`` its
    block (quantiles: numpy's linear method, as :mod:`abtui.metrics.summary`)."""
    order = np.argsort(labels, kind="stable")  # stays sorted by value inside each block
    v = xs[order]
    n = np.bincount(labels, minlength=k)
    start = np.concatenate([[0], np.cumsum(n)[:-1]])
    out = np.full((len(stats), k), np.nan)
    has = n > 0
    for i, st in enumerate(stats):
        if st == "mean":
            sums = np.add.reduceat(v, start[has]) if has.any() else np.zeros(0)
            out[i, has] = sums / n[has]
            continue
        pos = cat.QUANTILES[st] * (n[has] - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, n[has] - 1)
        a, b = v[start[has] + lo], v[start[has] + hi]
        out[i, has] = a + (pos - lo) * (b - a)
    return out


def _chunks(part_rows: list[int], ell: int) -> tuple[np.ndarray, np.ndarray]:
    """Chunks of about ``ell`` consecutive requests inside each block (a block of ``n`` cut into
    ``m = max(1, round(n / ell))`` near-equal chunks): (chunk of each request, chunks per
    block)."""
    chunk, per_block, c = [], [], 0
    for n in part_rows:
        m = max(1, round(n / ell)) if n else 0
        chunk.append(c + (np.arange(n) * m) // max(n, 1))
        per_block.append(m)
        c += m
    return np.concatenate(chunk) if chunk else np.zeros(0, np.int64), np.asarray(per_block)


def _log_d(sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(sb) - np.log(sa)


def _chi2_ppf(p: float, df: int) -> float:
    from scipy.stats import chi2

    return float(chi2.ppf(p, df))


def measure(table: RequestTable, a: int = 0, b: int = 1, *, seed: int = 0) -> NoiseFloor:
    """The noise floor of A/A arms ``a`` and ``b`` of ``table`` (see the module docstring)."""
    t = table.select(((table.arm == a) | (table.arm == b)) & ~table.warmup)
    found: dict[str, FloorRow] = {}
    left_out: dict[str, str] = {}
    notes: list[str] = []
    if overlapped(t, a, b):
        notes.append(
            "the two copies were in flight at the same instants (a parallel A/A): they shared "
            "engine steps, so their difference measures nothing a later A/B would see; rerun "
            "with `abtui run --aa` (it alternates)"
        )
        return NoiseFloor(notes=tuple(notes))
    ok = t.select(t.ok)
    seg = segment_ids(ok)
    segs = [
        int(s) for s in np.unique(seg) if all(((seg == s) & (ok.arm == x)).any() for x in (a, b))
    ]
    k = len(segs)
    if k < 2:
        notes.append(
            f"{k} block pair(s) with both copies: a spread needs ≥ 2 "
            f"(`abtui run --aa` plays ≥ {AA_MIN_BLOCKS})"
        )
        return NoiseFloor(blocks=k, notes=tuple(notes))
    if k < AA_MIN_BLOCKS:
        notes.append(f"only {k} block pairs (≥ {AA_MIN_BLOCKS} advised): the spread is rough")
    rng = np.random.default_rng([seed, 24, 3])
    arm_t, arm_chunks, arm_counts, ell_of = {}, {}, {}, {}
    for x in (a, b):  # each arm's ok requests in block order, then schedule order
        rows = np.flatnonzero(np.isin(seg, segs) & (ok.arm == x))
        rows = rows[np.lexsort((ok.item[rows], seg[rows]))]
        arm_t[x] = ok.select(rows)
        blk = np.searchsorted(segs, seg[rows])
        ell_of[x] = ell = _chunk_len(arm_t[x], blk, k)
        arm_chunks[x], arm_counts[x] = _chunks(np.bincount(blk, minlength=k).tolist(), ell)
    notes.append(
        f"within-block noise: up to {PERMUTATIONS} permutations of chunks of ~"
        f"{'/'.join(str(ell_of[x]) for x in (a, b))} consecutive requests across blocks"
    )
    crit_q = 1 - HETEROGENEITY_ALPHA
    for metric in cat.latency_keys(ok):  # TTFO where it is not TTFT (as the comparison)
        vals = {}
        for x in (a, b):
            v, req = _values(arm_t[x], metric)
            order = np.argsort(v, kind="stable")
            vals[x] = (v[order], arm_chunks[x][req[order]])
        if not all(len(vals[x][0]) for x in (a, b)):
            continue
        block_of_chunk = {x: np.repeat(np.arange(k), arm_counts[x]) for x in (a, b)}
        labels = {x: block_of_chunk[x][vals[x][1]] for x in (a, b)}
        n_min = min(int(np.bincount(labels[x], minlength=k).min()) for x in (a, b))
        stats = []
        for stat in STATS:
            need = max(MIN_BLOCK_N, tail_min_n(stat))
            if n_min < need:
                left_out[f"{metric}.{stat}"] = (
                    f"blocks hold ≥ {n_min} values per arm; {stat.upper()} needs ≥ {need} per block"
                )
            else:
                stats.append(stat)
        if not stats:
            continue
        obs = {x: _block_stats(vals[x][0], labels[x], k, stats) for x in (a, b)}
        d = _log_d(obs[a], obs[b])  # stats × k
        n_perm = _permutations(sum(len(vals[x][0]) for x in (a, b)))
        null = np.empty((n_perm, len(stats)))
        for p in range(n_perm):
            perm = {}
            for x in (a, b):
                boc = np.empty_like(block_of_chunk[x])
                boc[rng.permutation(len(boc))] = block_of_chunk[x]
                perm[x] = _block_stats(vals[x][0], boc[vals[x][1]], k, stats)
            null[p] = np.nanvar(_log_d(perm[a], perm[b]), axis=1, ddof=1)
        for i, st in enumerate(stats):
            key = f"{metric}.{st}"
            pa, pb = _stat(vals[a][0], st), _stat(vals[b][0], st)
            ref = null[:, i][np.isfinite(null[:, i])]
            if not (np.isfinite(d[i]).all() and pa > 0 and pb > 0 and len(ref)):
                left_out[key] = "a block's statistic is zero or undefined (no log ratio)"
                continue
            s2 = float(np.var(d[i], ddof=1))
            v_bar = float(ref.mean())
            q_p = float((1 + (ref >= s2).sum()) / (len(ref) + 1))
            tau_raw = math.sqrt(max(0.0, s2 - v_bar))
            tau = tau_raw if q_p < HETEROGENEITY_ALPHA else 0.0
            bias = math.log(pb / pa)
            found[key] = FloorRow(
                bias=bias,
                bias_se=math.sqrt(s2 / k),
                tau=tau,
                tau_raw=tau_raw,
                floor=abs(bias) + Z * tau,
                blocks=k,
                within_sd=math.sqrt(v_bar),
                q_p=q_p,
                tau_detectable=math.sqrt(max(0.0, float(np.quantile(ref, crit_q)) - v_bar)),
            )
    left_out.setdefault(
        "rates, cost", "not measured per block: later A/Bs use the default δ for them"
    )
    return NoiseFloor(found, left_out, k, notes=tuple(notes))


def _permutations(n_values: int) -> int:
    """Permutations for a metric of ``n_values`` values: :data:`PERMUTATIONS`, fewer (≥ 50) for
    very large samples (pooled ITL gaps), where each permutation costs a sort."""
    return int(min(PERMUTATIONS, max(50, 40_000_000 // max(n_values, 1))))


def _chunk_len(t: RequestTable, blk: np.ndarray, k: int) -> int:
    """Requests kept together when permuting: the mean number in flight (Little's law: Σ E2E /
    busy time, per block), at least 1. Requests in flight together share engine steps, so they
    are not exchangeable one by one."""
    e2e = request_metrics.e2e_s(t)
    busy = 0.0
    for j in range(k):
        m = blk == j
        if m.any():
            busy += (int(t.done_ns[m].max()) - int(t.dispatched_ns[m].min())) / 1e9
    total = float(np.nansum(e2e))
    return max(1, math.ceil(total / busy - 1e-9)) if busy > 0 else 1


def measure_aa(table: RequestTable, n_arms: int, *, seed: int = 0) -> NoiseFloor:
    """Every copy against the first (``n_arms`` identical arms): per row, the largest floor."""
    present = set(np.unique(table.arm).tolist())
    out: NoiseFloor | None = None
    for b in range(1, n_arms):
        if 0 not in present or b not in present:
            continue
        nf = measure(table, 0, b, seed=seed)
        if out is None:
            out = nf
            continue
        rows = dict(out.rows)
        for k, r in nf.rows.items():
            if k not in rows or r.floor > rows[k].floor:
                rows[k] = r
        left = dict(out.left_out)
        left.update({k: v for k, v in nf.left_out.items() if k not in rows})
        notes = out.notes + tuple(n for n in nf.notes if n not in out.notes)
        out = replace(out, rows=rows, left_out=left, notes=notes)
    return out or NoiseFloor(notes=("no copy has measured requests",))


def from_stored(result: dict) -> NoiseFloor | None:
    """The floor stored in a verdict row's result: the new form (``noise_floor_detail``), else
    a legacy ``noise_floor`` {key: value} (base keys only, ``method`` :data:`LEGACY_METHOD`);
    None when there is neither."""
    detail = result.get("noise_floor_detail")
    if isinstance(detail, dict) and detail.get("method") == METHOD:
        return NoiseFloor.from_dict(detail)
    floor = result.get("noise_floor")
    if isinstance(floor, dict) and floor:
        values = {k: float(v) for k, v in floor.items() if "@" not in k and v is not None}
        return NoiseFloor(method=LEGACY_METHOD, legacy_values=values)
    return None
