"""One arm of a run, summarised (docs/methods.md §2) as plain, JSON-ready numbers.

Definitions used by :func:`summarize` (warm-up requests are always left out):

- **Outcomes.** ``sent`` = ok + error requests. Cancelled requests (abtui stopped them: Ctrl-C,
  end of run) are counted in ``cancelled`` but are *not* sent: they say nothing about the
  endpoint. ``errors`` counts error requests by error class (``"other"`` when unset).
- **Latency distributions** (TTFT, TTFT_user, TTFO, TPOT, reasoning and answer TPOT, E2E per
  request; ITL per chunk gap, pooled) are over *ok* requests only, NaN values dropped.
  Percentiles are ``numpy.percentile(..., method="linear")`` (numpy's default, linear
  interpolation between the two closest ranks, the common choice). All in seconds. ITL's are
  read from the chunks in passes that never hold them (:mod:`abtui.metrics.gaps`: the same
  floats numpy gives on every gap), and its mean is exact (Σ gap ns / n, where numpy's float
  sum may differ in the last bits).
- **Duration** ``T`` = the arm's own active time: the sum, over the segments it played
  (segment = one ``(run, level, block)``), of first dispatch → last completion of its ok + error
  requests in that segment, where a request completes at ``done_ns`` (else its last token, else
  its dispatch). With one segment (a plain parallel run) that is first dispatch → last
  completion; under ``schedule = "alternate"`` it leaves out the other arms' turns (and, with
  several runs or levels, the pauses between segments).
- **Throughput**: ok requests / T, Σ n_output (ok) / T, Σ (n_input + n_output) (ok) / T; NULL
  token counts count as 0.
- **SLOs** (``slo`` maps a key to a limit in seconds; keys :data:`SLO_KEYS`): ``"ttft"``,
  ``"ttft_user"``, ``"ttfo"`` (to the answer's first token), ``"tpot"``, ``"tpot_reasoning"``,
  ``"tpot_answer"``, ``"e2e"``, and ``"itl"`` = the request's *largest* gap between token chunks
  (a stall the user sees). A request is *good* when it is ok and meets every configured limit
  (``value <= limit``). A missing TTFT / TTFT_user / TTFO / E2E (an ok request with no token,
  or no answer after its reasoning) is a miss; a missing TPOT (≤ 1 output token), reasoning TPOT
  (no reasoning), answer TPOT (≤ 1 answer token) or ITL (< 2 chunks) is not applicable and
  passes. Errors and timeouts are misses. ``slo_attainment = good / sent``; goodput = good / T
  (requests) and Σ n_output (good) / T (tokens).
- **Load-generator health**: schedule lag (dispatched − scheduled) P50 / P99 / max over every
  non-warm-up request of the arm; ``generator_behind`` when P99 > :data:`LAG_P99_LIMIT_S` or
  max > :data:`LAG_MAX_LIMIT_S`.

When nothing qualifies, figures are NaN (``to_dict`` writes them as ``None``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from types import SimpleNamespace
from typing import Any

import numpy as np

from abtui.client.records import CANCELLED, E_OTHER, ERROR, OK
from abtui.jsonable import json_ready
from abtui.metrics import catalogue as cat
from abtui.metrics import gaps
from abtui.metrics import request as request_metrics
from abtui.metrics.table import NA, RequestTable
from abtui.metrics.windows import SEGMENT_KEYS, completion_ns, segment_spans

PERCENTILE_METHOD = "linear"
LAG_P99_LIMIT_S = 0.010  # schedule lag P99 above this: the generator fell behind
LAG_MAX_LIMIT_S = 0.100  # ... or any single request this late
SLO_KEYS = (*cat.PER_REQUEST_KEYS, "itl")  # itl here: the request's largest gap
# NaN = not applicable, not a miss
_NAN_PASSES = frozenset({"tpot", "tpot_reasoning", "tpot_answer", "itl"})


@dataclass
class Dist:
    """Distribution of one latency metric (seconds): count, mean and percentiles."""

    n: int = 0
    mean: float = math.nan
    p50: float = math.nan
    p90: float = math.nan
    p95: float = math.nan
    p99: float = math.nan

    @classmethod
    def of(cls, values: np.ndarray) -> Dist:
        v = np.asarray(values, dtype=np.float64)
        v = v[np.isfinite(v)]
        if not len(v):
            return cls()
        p50, p90, p95, p99 = np.percentile(v, DIST_PERCENTILES, method=PERCENTILE_METHOD)
        return cls(len(v), float(v.mean()), float(p50), float(p90), float(p95), float(p99))

    def exact(self) -> dict[str, float]:
        """The figures :class:`abtui.stats.bootstrap.Sketch` calls exact: mean and percentiles."""
        return {s: getattr(self, s) for s in cat.STAT_KEYS}

    @classmethod
    def of_gaps(cls, scan: gaps.GapScan, groups: tuple[int, ...]) -> Dist:
        """The pooled chunk gaps of ``groups`` of ``scan`` (ITL), without holding them: the same
        percentiles as :meth:`of` on every gap; the mean exact (integer ns)."""
        n = scan.n(groups)
        if not n:
            return cls()
        qs = [p / 100 for p in DIST_PERCENTILES]  # as np.percentile turns them into fractions
        p50, p90, p95, p99 = gaps.quantiles_s(scan, groups, qs)
        return cls(n, scan.mean_s(groups), p50, p90, p95, p99)


DIST_PERCENTILES = tuple(round(100 * q) for q in cat.QUANTILES.values())  # 50, 90, 95, 99


def itl_dist(t: RequestTable, rows=None) -> Dist:
    """ITL of the rows of ``t`` (or of its rows ``rows``, a mask or positions): every gap
    between consecutive token chunks of one request, pooled (:meth:`Dist.of_gaps`; two passes
    over the chunks, none of them held)."""
    mask = np.ones(len(t), dtype=bool)
    if rows is not None:
        mask[:] = False
        mask[rows] = True
    return Dist.of_gaps(gaps.GapScan(t, [mask]), (0,))


@dataclass
class ArmSummary:
    """Everything one arm did in a run; see the module docstring for definitions."""

    arm: int
    sent: int = 0
    ok: int = 0
    n_errors: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    cancelled: int = 0
    duration_s: float = math.nan
    ttft: Dist = field(default_factory=Dist)
    ttft_user: Dist = field(default_factory=Dist)
    ttfo: Dist = field(default_factory=Dist)  # to the answer's first token (after reasoning)
    tpot: Dist = field(default_factory=Dist)
    # after reasoning: the thinking's and the answer's time per token (to_dict leaves both out
    # for an arm without reasoning TPOT: the answer's is then TPOT)
    tpot_reasoning: Dist = field(default_factory=Dist)
    tpot_answer: Dist = field(default_factory=Dist)
    itl: Dist = field(default_factory=Dist)
    e2e: Dist = field(default_factory=Dist)
    input_tokens: int = 0  # Σ n_input over ok requests
    output_tokens: int = 0  # Σ n_output over ok requests
    reasoning_tokens: int = 0  # Σ reasoning tokens over ok requests that said (or streamed) any
    # prefix cache, over the ok requests whose usage said its cached prompt tokens
    cache_prompt_tokens: int = 0  # Σ n_input of those requests
    cached_tokens: int = 0  # Σ cached prompt tokens
    requests_per_s: float = math.nan
    output_tokens_per_s: float = math.nan
    total_tokens_per_s: float = math.nan
    slo: dict[str, float] = field(default_factory=dict)
    good: int = 0
    slo_attainment: float = math.nan
    goodput_requests_per_s: float = math.nan
    goodput_output_tokens_per_s: float = math.nan
    lag_p50_s: float = math.nan
    lag_p99_s: float = math.nan
    lag_max_s: float = math.nan
    generator_behind: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON (strict: NaN and ±inf become None)."""
        d = asdict(self)
        if not self.tpot_reasoning.n:
            del d["tpot_reasoning"], d["tpot_answer"]
        return json_ready(d)

    @property
    def prefix_hit_rate(self) -> float:
        """Cached / prompt tokens over the ok requests whose usage said (NaN: none said)."""
        return _rate(self.cached_tokens, self.cache_prompt_tokens)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ArmSummary:
        """Inverse of :meth:`to_dict` (None → NaN for float fields)."""
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in d:
                continue
            v = d[f.name]
            if f.type == "Dist":
                v = Dist(**{k: (math.nan if x is None else x) for k, x in (v or {}).items()})
            elif f.type == "float" and v is None:
                v = math.nan
            kw[f.name] = v
        return cls(**kw)


def _rate(count: float, duration_s: float) -> float:
    return count / duration_s if duration_s > 0 else math.nan


def _sum(col: np.ndarray) -> int:
    return int(col[col != NA].sum())


def segment_ids(t: RequestTable) -> np.ndarray:
    """Per row: its segment ``(run, level, block)`` as one integer, ascending in that order
    (``level`` and ``block`` are 0 where the table has none)."""
    key = np.zeros(len(t), dtype=np.int64)
    for name in SEGMENT_KEYS:
        col = getattr(t, name, None)
        col = np.zeros(len(t), dtype=np.int64) if col is None else np.asarray(col, np.int64)
        key = key * (int(col.max(initial=0)) + 1) + col
    return key


def run_duration_s(t: RequestTable, rows=None) -> float:
    """Active time of the rows of ``t`` (or of its rows ``rows``: a mask or positions): Σ over
    segments (run, level, block) of first dispatch → last completion in that segment (NaN when
    empty). One segment: first dispatch → last completion."""
    pick = slice(None) if rows is None else rows
    dispatched = t.dispatched_ns[pick]
    if not len(dispatched):
        return math.nan
    cols = [getattr(t, k, None) for k in SEGMENT_KEYS]
    seg = tuple(np.zeros(len(dispatched), np.int64) if c is None else c[pick] for c in cols)
    done = completion_ns(
        SimpleNamespace(
            done_ns=t.done_ns[pick], dispatched_ns=dispatched, last_token_ns=t.last_token_ns[pick]
        )
    )
    spans = segment_spans(np.zeros(len(dispatched), np.int64), seg, dispatched, done)[0]
    return float((spans[:, 1] - spans[:, 0]).sum()) / request_metrics.NS_PER_S


def slo_met(
    t: RequestTable,
    slo: dict[str, float] | None,
    rows=None,
    values: dict[str, np.ndarray] | None = None,
) -> np.ndarray:
    """Per row (of ``rows``, a mask or positions, when given): ok and every configured SLO met
    (see the module docstring). ``values``: per-request metrics of the same rows the caller
    already has (``request_metrics.PER_REQUEST[key](t, rows)``), not computed again."""
    good = t.ok if rows is None else t.status[rows] == OK
    good = good.copy()
    if not slo:
        return good
    unknown = set(slo) - set(SLO_KEYS)
    if unknown:
        raise ValueError(f"unknown SLO key(s) {sorted(unknown)}; known: {', '.join(SLO_KEYS)}")
    for key, limit in slo.items():
        v = (values or {}).get(key)
        v = request_metrics.PER_REQUEST[key](t, rows) if v is None else v
        met = v <= float(limit)  # NaN compares False
        if key in _NAN_PASSES:
            met |= np.isnan(v)
        good &= met
    return good


def summarize(
    table: RequestTable,
    arm: int,
    slo: dict[str, float] | None = None,
    *,
    dists: dict[str, Dist] | None = None,
    good: np.ndarray | None = None,
    spans: tuple[np.ndarray, np.ndarray] | None = None,
) -> ArmSummary:
    """Summary of ``arm`` in ``table`` (warm-up rows left out) under ``slo`` (seconds).
    ``dists``: latency distributions the caller already has (``Dist.of`` of the same values, or
    :func:`itl_dist` of the arm's ok rows: :func:`abtui.stats.effects.compare` computes them for
    its rows); ``good``: :func:`slo_met` of the arm's rows, likewise; ``spans``: the first
    dispatch and last completion (ns) of its sent rows in each segment it played. The table is
    not copied: each figure reads the columns it needs at the arm's rows."""
    rows = np.flatnonzero((table.arm == arm) & ~table.warmup)
    status = table.status[rows]
    is_ok, is_err = status == OK, status == ERROR
    s = ArmSummary(arm=int(arm), slo={k: float(v) for k, v in (slo or {}).items()})
    s.ok, s.n_errors = int(is_ok.sum()), int(is_err.sum())
    s.cancelled = int((status == CANCELLED).sum())
    s.sent = s.ok + s.n_errors
    classes, counts = np.unique(
        np.array([c or E_OTHER for c in table.error_class[rows[is_err]]], dtype=object).astype(str),
        return_counts=True,
    )
    s.errors = {str(c): int(k) for c, k in zip(classes, counts, strict=True)}

    if spans is None:
        s.duration_s = run_duration_s(table, rows[is_ok | is_err])
    else:  # run_duration_s's sum over the same spans
        s.duration_s = (
            float((spans[1] - spans[0]).sum()) / request_metrics.NS_PER_S
            if len(spans[0])
            else math.nan
        )
    T = s.duration_s

    ok = rows[is_ok]
    have = dists or {}
    for name in cat.PER_REQUEST_KEYS:
        setattr(
            s,
            name,
            have[name] if name in have else Dist.of(request_metrics.PER_REQUEST[name](table, ok)),
        )
    s.itl = have["itl"] if "itl" in have else itl_dist(table, ok)
    s.input_tokens, s.output_tokens = _sum(table.n_input[ok]), _sum(table.n_output[ok])
    s.reasoning_tokens = _sum(table.reasoning_tokens[ok])
    said = ok[(table.cached_tokens[ok] != NA) & (table.n_input[ok] != NA)]
    s.cache_prompt_tokens, s.cached_tokens = (
        _sum(table.n_input[said]),
        _sum(table.cached_tokens[said]),
    )
    s.requests_per_s = _rate(s.ok, T)
    s.output_tokens_per_s = _rate(s.output_tokens, T)
    s.total_tokens_per_s = _rate(s.input_tokens + s.output_tokens, T)

    good = slo_met(table, slo, rows) if good is None else good
    s.good = int(good.sum())
    s.slo_attainment = s.good / s.sent if s.sent else math.nan
    s.goodput_requests_per_s = _rate(s.good, T)
    s.goodput_output_tokens_per_s = _rate(_sum(table.n_output[rows[good]]), T)

    lag = request_metrics.schedule_lag_s(table, rows)
    lag = lag[np.isfinite(lag)]
    if len(lag):
        p50, p99 = np.percentile(lag, [50, 99], method=PERCENTILE_METHOD)
        s.lag_p50_s, s.lag_p99_s, s.lag_max_s = float(p50), float(p99), float(lag.max())
        s.generator_behind = bool(s.lag_p99_s > LAG_P99_LIMIT_S or s.lag_max_s > LAG_MAX_LIMIT_S)
    return s


def summarize_all(
    table: RequestTable, slo: dict[str, float] | None = None
) -> dict[int, ArmSummary]:
    """:func:`summarize` for every arm present in ``table``."""
    return {int(a): summarize(table, int(a), slo) for a in np.unique(table.arm)}


def ratio(b: float | None, a: float | None) -> float:
    """``b / a`` (B over A for one statistic); NaN if either is missing/NaN or ``a`` is 0."""
    if a is None or b is None:
        return math.nan
    a, b = float(a), float(b)
    if not (math.isfinite(a) and math.isfinite(b)) or a == 0:
        return math.nan
    return b / a
