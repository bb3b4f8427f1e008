"""Effects of arm B against arm A, with bootstrap CIs, for every metric of a session.

Rows (``key`` = ``metric.stat``):

- latency, lower is better: ``ttft``, ``ttft_user``, ``tpot``, ``e2e`` (per ok request) and
  ``itl`` (per chunk gap, pooled) at ``mean``, ``p50``, ``p90``, ``p95``, ``p99``; after
  reasoning also ``ttfo``, ``tpot_reasoning`` and ``tpot_answer`` (where both arms have values);
- rates, higher is better: ``throughput.requests``, ``throughput.output_tokens`` and, with SLOs,
  ``goodput.requests``, ``goodput.output_tokens``, ``slo.attainment``;
- breakdowns by input length (``ttft.p50@in512-1023``, ``e2e.p50@in…``): the pooled quartiles
  of ``n_input`` as buckets, when at least two buckets hold ≥ 50 ok requests in each arm; and by
  sweep level (``e2e.p50@level2``) when the table has a ``level`` column with two or more.

ITL's sketches are built from a stream of the chunks (:mod:`abtui.stats.itl`), never holding
its gaps; the other metrics' values are read from the table's columns at each arm's ok rows,
without copying the table.

Point estimates are exact (the same numbers as :func:`abtui.metrics.summary.summarize`); the effect
is ``r = B / A − 1``. CIs: :mod:`abtui.stats.bootstrap`. Latency units are items of the schedule
(keyed by ``(run, level, block, item)``; a unit never spans two runs, levels or blocks); when the
arms took turns (``schedule = "alternate"``: more than one block) the units are the alternation
blocks themselves, resampled whole (block length 1, widened for few blocks), resampled
jointly for both arms. Otherwise the block length comes from the paired contrast the CI is
about: Politis–White on ``log(mean_B / mean_A)`` per unit (units where both arms have values),
at least one generation of requests in flight (:func:`abtui.stats.bootstrap.block_length`).
In both designs each latency row carries ``n_eff``, the effectively independent units of that
contrast over items in schedule order (:func:`abtui.stats.bootstrap.effective_size`), for the
rule that refuses a call on a too dependent series (:func:`abtui.stats.decide.too_dependent`):
whole alternation blocks are independent only when the contrast's dependence is short against
a block.
Rates (:mod:`abtui.stats.rates`) are over each arm's own active time, resampled over paired
time windows of it (``K = clamp(sent / 10, 10, MAX_UNITS)``) or, under alternation, over the
alternation blocks; a rate is ``Σ w·count / Σ w·duration``.

Each latency metric also gets a rank test: paired Wilcoxon on ``log(B/A)`` per item with the
Hodges–Lehmann location when the load is light (mean requests in flight ≤ 1 in both arms, so
requests are independent), Mann–Whitney otherwise. Under load the rank test assumes independence
that does not hold; it is reported, and the decisions use the block-bootstrap p-values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from abtui.jsonable import json_ready
from abtui.metrics import catalogue as cat
from abtui.metrics.keys import unique_ints
from abtui.metrics.summary import ArmSummary, Dist, segment_ids, summarize
from abtui.metrics.table import NA, RequestTable
from abtui.metrics.windows import completion_ns
from abtui.stats import bootstrap, decide
from abtui.stats.classical import RankTest, mann_whitney, wilcoxon_log_ratio
from abtui.stats.itl import itl_sketches
from abtui.stats.rates import COST_ROWS, RATE_ROWS, rate_effects, windows_of
from abtui.stats.rows import Effect, ratio_effect

__all__ = ["COST_ROWS", "RATE_ROWS", "Comparison", "ComparisonDesign", "Effect", "compare"]

LATENCY_METRICS = cat.LATENCY_KEYS
RANK_TESTED = cat.PER_REQUEST_KEYS  # one value per request: ITL's gaps are not paired
LIGHT_LOAD_IN_FLIGHT = 1.0
RANK_MAX = 20_000
BREAKDOWN_METRICS = ("ttft", "e2e")  # by input-length bucket, P50 (Benjamini–Hochberg family)
BUCKET_MIN = 50


@dataclass(frozen=True, slots=True)
class ComparisonDesign:
    """How a comparison was computed: its units, their resampling, the rank test, the level."""

    paired_units: bool
    resampling: str  # "alternation blocks" or "circular blocks of items"
    light_load: bool  # mean requests in flight ≤ LIGHT_LOAD_IN_FLIGHT in both arms
    rank_test: str  # "wilcoxon" (light load) or "mann-whitney"
    in_flight: tuple[float, float]  # mean requests in flight, per arm
    units: int
    unit_size: int  # items per unit
    resamples: int
    seed: int
    ci_level: float
    bins: int  # the bootstrap sketches' bins

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__slots__} | {"in_flight": list(self.in_flight)}

    @classmethod
    def from_dict(cls, d: dict) -> ComparisonDesign:
        return cls(**dict(d, in_flight=tuple(d["in_flight"])))


@dataclass
class Comparison:
    """Arm ``b`` against arm ``a``: every effect row, rank tests and how they were computed."""

    a: int
    b: int
    effects: list[Effect]
    rank_tests: dict[str, RankTest]
    design: ComparisonDesign
    summaries: tuple[ArmSummary, ArmSummary]
    # rows that are no metric of speed but say whether the speed rows compare like with like:
    # ``output_tokens.mean``, B's mean output length against A's over the same units
    checks: list[Effect] = field(default_factory=list)
    by_key: dict[str, Effect] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_key = {e.key: e for e in self.effects}

    def get(self, key: str) -> Effect | None:
        return self.by_key.get(key)

    def to_dict(self) -> dict:
        return json_ready(
            {
                "a": self.a,
                "b": self.b,
                "design": self.design.to_dict(),
                "effects": [e.to_dict() for e in self.effects],
                "checks": [e.to_dict() for e in self.checks],
                "rank_tests": {k: v.to_dict() for k, v in self.rank_tests.items()},
            }
        )


def _in_flight(e2e: np.ndarray, duration: float) -> float:
    """Mean requests in flight (Little's law): Σ E2E of ok requests / the run's duration."""
    e2e = e2e[np.isfinite(e2e)]
    if not len(e2e) or not duration > 0:
        return 0.0
    return float(e2e.sum() / duration)


class _Weights:
    """Resample weights, one matrix per (units, block length), from one seeded stream each.

    Only the last matrix is kept (20 MB at 10,000 resamples × 500 units): rows ask for them in
    runs (each metric's rows, then each rate's), and one is drawn again in ~0.05 s, while
    keeping every one a verdict asks for held 2–4 of them at once."""

    def __init__(self, resamples: int, seed: int) -> None:
        self.resamples, self.seed = resamples, seed
        self._key: tuple[int, int, str] | None = None
        self._last: np.ndarray | None = None
        self.drawn = 0

    def get(self, n_units: int, ell: int, purpose: str) -> np.ndarray:
        k = (n_units, ell, purpose)
        if k != self._key:
            self._key = self._last = None  # the old matrix goes before the new one is drawn
            rng = np.random.default_rng([self.seed, n_units, ell, len(purpose)])
            self._last = bootstrap.circular_block_weights(n_units, ell, self.resamples, rng)
            self._key = k
            self.drawn += 1
        return self._last


def _arm_values(t: RequestTable, ok: np.ndarray, metrics: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Per metric: its values at the rows ``ok`` of ``t`` (positions), in that order, each
    computed once from the columns it reads (the table is not copied). ITL is not among them:
    it is per chunk gap (:mod:`abtui.stats.itl`, never held)."""
    return {m: cat.per_request_values(t, m, ok) for m in metrics if m in cat.PER_REQUEST_KEYS}


def compare(
    table: RequestTable,
    a: int,
    b: int,
    slo: dict[str, float] | None = None,
    *,
    resamples: int = bootstrap.DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = 0.95,
    prices: tuple[float, float] | None = None,
    metrics: tuple[str, ...] | None = None,
    block_len: int | None = None,
    shortfall: bool = True,
) -> Comparison:
    """Effects of arm ``b`` against arm ``a`` (warm-up rows are left out).

    ``prices`` = (USD/hour of A, USD/hour of B) adds the cost rows (:data:`COST_ROWS`).
    ``metrics`` limits the latency metrics (default :func:`abtui.metrics.catalogue.latency_keys`:
    every one, TTFO and reasoning/answer TPOT only after reasoning); ``block_len`` overrides the
    block-length rule (1 = the i.i.d. bootstrap; for validation); ``shortfall=False`` leaves
    parallel latency rows unwidened by :func:`abtui.stats.bootstrap.block_shortfall` (for
    validation)."""
    keep = ((table.arm == a) | (table.arm == b)) & ~table.warmup
    t = table if keep.all() else table.select(keep)
    if metrics is None:
        metrics = cat.latency_keys(t)
    key, segment = _schedule_key(t)
    alternating = len(unique_ints(_column(t, "block"))) > 1
    # the paired contrast's own units (items in schedule order, at most MAX_UNITS): its block
    # length in parallel mode, and its dependence (the n_eff rule) in both modes
    item_unit, n_item_units, unit_size = bootstrap.unit_index(key, segments=segment)
    if alternating:  # arms took turns: resample whole alternation blocks (a cluster bootstrap)
        unit, n_units, _ = bootstrap.unit_index(segment, max_units=np.iinfo(np.int32).max)
        unit_size = max(1, len(unique_ints(key)) // max(n_units, 1))
        block_len = block_len or 1
    else:
        unit, n_units = item_unit, n_item_units
    del key, segment  # (8 bytes a request each; what follows holds the units)
    weights = _Weights(resamples, seed)
    ok_all = t.ok
    sent_all = ok_all | (t.status == "error")  # cancelled requests were not sent
    arm_rows = {x: t.arm == x for x in (a, b)}
    ok_mask = {x: arm_rows[x] & ok_all for x in (a, b)}
    units = {x: unit[ok_mask[x]] for x in (a, b)}
    item_units = {x: item_unit[ok_mask[x]] for x in (a, b)} if alternating else {}
    itl = None
    if "itl" in metrics:  # per chunk gap: sketched from a stream of the chunks, none held;
        # first, so that its passes' batches and DuckDB's reading are not on top of the arrays
        # below (a 100,000-request verdict's peak)
        itl = itl_sketches(
            t,
            [ok_mask[a], ok_mask[b]],
            unit,
            n_units,
            item_unit if alternating else None,
            n_item_units,
        )
    values, windows, n_in, levels, good = {}, {}, {}, {}, {}
    seg, done = segment_ids(t), completion_ns(t)  # both arms' windows read them
    level_col = _column(t, "level")
    swept = len(unique_ints(level_col)) > 1  # sweep levels to break the rows down by
    for x in (a, b):  # the columns each figure reads, at the arm's ok rows (no table copy)
        ok = np.flatnonzero(ok_mask[x])
        values[x] = _arm_values(t, ok, tuple(dict.fromkeys(metrics + ("e2e",))))
        n_in[x] = t.n_input[ok]
        if swept:
            levels[x] = level_col[ok]
        windows[x] = windows_of(
            t,
            arm_rows[x] & sent_all,
            ok_mask[x],
            slo,
            seg=seg,
            done=done,
            values=values[x],
        )
        if windows[x] is not None:  # the SLO rows' "good", over the arm's rows for its summary
            good[x] = np.zeros(int(arm_rows[x].sum()), dtype=bool)
            good[x][ok_mask[x][arm_rows[x]]] = windows[x].good
        del ok
    del seg, done
    # a metric only reasoning gives values (abtui.metrics.catalogue.ANSWER_KEYS) is no row where
    # an arm has none: there is nothing to compare
    metrics = tuple(
        m
        for m in metrics
        if m not in cat.ANSWER_KEYS or all(np.isfinite(values[x][m]).any() for x in (a, b))
    )
    # each latency distribution once: the summaries' and the sketches' exact figures
    dists = {x: {m: Dist.of(values[x][m]) for m in values[x]} for x in (a, b)}
    if itl:
        dists[a]["itl"], dists[b]["itl"] = itl.dists
    sums = tuple(
        summarize(
            t,
            x,
            slo,
            dists=dists[x],
            good=good.get(x),
            spans=(windows[x].first_ns, windows[x].last_ns) if windows[x] is not None else None,
        )
        for x in (a, b)
    )
    in_flight = {
        x: _in_flight(values[x]["e2e"], s.duration_s) for x, s in zip((a, b), sums, strict=True)
    }
    light = max(in_flight.values()) <= LIGHT_LOAD_IN_FLIGHT
    pair_keys = {x: None for x in (a, b)}  # items paired across the arms: light load only
    for x in (a, b) if light else ():
        ok = np.flatnonzero(ok_mask[x])
        pair_keys[x] = t.run[ok] * (1 << 32) + t.item[ok]
    effects: list[Effect] = []
    rank_tests: dict[str, RankTest] = {}

    ells: dict[str, int] = {}
    paired: dict[str, int] = {}  # units (items) where both arms have the metric's values
    n_eff: dict[str, float] = {}
    short: dict[str, float] = {}
    min_eff: dict[str, float] = {}
    for metric in metrics:
        vals = {}
        if metric == "itl":
            sk = dict(zip((a, b), itl.sketches, strict=True))
        else:
            for x in (a, b):
                vals[x] = values[x][metric]
            grid = bootstrap.Grid.covering(vals[a], vals[b])
            sk = {
                x: bootstrap.Sketch.of(
                    vals[x],
                    units[x],
                    n_units,
                    grid,
                    exact=dists[x][metric].exact(),
                )
                for x in (a, b)
            }
        ell = block_len or bootstrap.block_length(
            _block_series(sk[a], sk[b]), max(in_flight.values()), unit_size
        )
        ells[metric] = ell
        # How many effectively independent units the paired contrast holds, and what its
        # blocks cannot see of that dependence. In parallel mode the circular blocks see a
        # Bartlett window of the contrast's autocovariances, so the interval is widened by the
        # rest (bootstrap.block_shortfall) and a call needs decide.MIN_EFFECTIVE. Under
        # alternation the blocks are the schedule's whole turns (8 or so): whether neighbouring
        # turns are independent cannot be checked from so few, and a per-arm state that
        # outlasts them correlates them (AR(1) ρ = 0.98, 200 requests, 8 blocks: 11 % false
        # calls) — those rows keep the rule they were calibrated with: the flat-top n_eff on
        # the per-item contrast, MIN_EFFECTIVE_UNWIDENED. An explicit block_len (validation) is
        # bare.
        if alternating and metric == "itl":
            contrast = _contrast_of_sums(*itl.item_sums[0], *itl.item_sums[1])
            n_eff[metric] = bootstrap.effective_size(contrast, persistent=False)
            short[metric], min_eff[metric] = 1.0, decide.MIN_EFFECTIVE_UNWIDENED
        elif alternating:
            contrast = _item_contrast(vals[a], item_units[a], vals[b], item_units[b], n_item_units)
            n_eff[metric] = bootstrap.effective_size(contrast, persistent=False)
            short[metric], min_eff[metric] = 1.0, decide.MIN_EFFECTIVE_UNWIDENED
        else:
            contrast = _contrast(sk[a], sk[b])
            n_eff[metric] = bootstrap.effective_size(contrast)
            bare = not shortfall or block_len is not None
            short[metric] = 1.0 if bare else bootstrap.block_shortfall(contrast, ell)
            min_eff[metric] = decide.MIN_EFFECTIVE_UNWIDENED if bare else decide.MIN_EFFECTIVE
        paired[metric] = len(contrast)
        effects += _latency_rows(
            metric,
            sk[a],
            sk[b],
            weights.get(n_units, ell, "latency"),
            ell,
            bootstrap.STATS,
            level,
            "",
            n_eff[metric],
            short[metric],
            min_eff[metric],
            paired[metric],
        )
        if metric in RANK_TESTED:
            rank_tests[metric] = _rank_test(pair_keys[a], pair_keys[b], vals[a], vals[b], light)

    checks = _length_check(
        t,
        ok_mask,
        units,
        item_units,
        n_units,
        n_item_units,
        alternating,
        weights,
        ells.get("e2e") or block_len or 1,
        level,
        (a, b),
    )
    groups = [
        (f"@in{lo}-{hi}", {x: (n_in[x] >= lo) & (n_in[x] <= hi) for x in (a, b)})
        for lo, hi in _input_buckets(n_in[a], n_in[b])
    ]
    groups += [
        (f"@level{lv}", {x: levels[x] == lv for x in (a, b)})
        for lv in (_levels(levels[a], levels[b]) if swept else [])
    ]
    for suffix, member in groups:
        for metric in (m for m in BREAKDOWN_METRICS if m in ells):
            sk = {}
            grid = bootstrap.Grid.covering(values[a][metric], values[b][metric])
            for x in (a, b):
                inside = member[x]
                sk[x] = bootstrap.Sketch.of(
                    values[x][metric][inside], units[x][inside], n_units, grid
                )
            w = weights.get(n_units, ells[metric], "latency")
            effects += _latency_rows(
                metric,
                sk[a],
                sk[b],
                w,
                ells[metric],
                ("p50",),
                level,
                suffix,
                n_eff[metric],
                short[metric],
                min_eff[metric],
                paired[metric],
            )
            del w  # not held while the next matrix is drawn
    slo_n_eff = math.nan
    if slo and windows[a] is not None and windows[b] is not None:
        per_arm = []
        for x in (a, b):
            sent = arm_rows[x] & sent_all
            good = np.zeros(len(t), dtype=bool)
            good[np.flatnonzero(ok_mask[x])] = windows[x].good
            per_arm.append((item_unit[sent], good[sent]))
        # their windows are not widened: the rule they were calibrated with (decide.py)
        slo_n_eff = bootstrap.effective_size(
            _good_contrast(*per_arm, n_item_units), persistent=False
        )
    effects += rate_effects(
        windows[a],
        windows[b],
        sums,
        slo,
        weights,
        level,
        prices,
        alternating=alternating,
        slo_n_eff=slo_n_eff,
    )
    design = ComparisonDesign(
        paired_units=True,
        resampling="alternation blocks" if alternating else "circular blocks of items",
        light_load=light,
        rank_test="wilcoxon" if light else "mann-whitney",
        in_flight=(in_flight[a], in_flight[b]),
        units=n_units,
        unit_size=unit_size,
        resamples=resamples,
        seed=seed,
        ci_level=level,
        bins=bootstrap.N_BINS,
    )
    return Comparison(a, b, effects, rank_tests, design, sums, checks)


def _length_check(
    t, ok_mask, units, item_units, n_units, n_item_units, alternating, weights, ell, level, arms
) -> list[Effect]:
    """``output_tokens.mean``: B's mean output length over A's, on the same resampling as the
    latency rows. Not a speed: when the arms generate different lengths for the same items,
    E2E and the rates compare different work (:mod:`abtui.verdict.comparable`)."""
    a, b = arms
    vals, sk = {}, {}
    for x in arms:
        n = t.n_output[ok_mask[x]].astype(np.float64)
        n[t.n_output[ok_mask[x]] == NA] = np.nan
        vals[x] = n
    grid = bootstrap.Grid.covering(vals[a], vals[b])
    for x in arms:
        sk[x] = bootstrap.Sketch.of(vals[x], units[x], n_units, grid)
    if alternating:
        contrast = _item_contrast(vals[a], item_units[a], vals[b], item_units[b], n_item_units)
    else:
        contrast = _contrast(sk[a], sk[b])
    return _latency_rows(
        "output_tokens",
        sk[a],
        sk[b],
        weights.get(n_units, ell, "latency"),
        ell,
        ("mean",),
        level,
        "",
        math.nan,
        paired=len(contrast),
    )


def _contrast(ska: bootstrap.Sketch, skb: bootstrap.Sketch) -> np.ndarray:
    """The paired contrast the CI is about, per unit in schedule order: ``log(mean_B / mean_A)``
    over the units where both arms have values."""
    both = (ska.count > 0) & (skb.count > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.log(skb.total[both] / skb.count[both]) - np.log(ska.total[both] / ska.count[both])
    return d[np.isfinite(d)]


def _item_contrast(va, ua, vb, ub, n_units: int) -> np.ndarray:
    """:func:`_contrast` from raw values and their units (no sketch): ``log(mean_B / mean_A)``
    per unit in schedule order, over the units where both arms have values."""
    sums = []
    for v, u in ((va, ua), (vb, ub)):
        keep = np.isfinite(v)
        sums += [
            np.bincount(u[keep], minlength=n_units).astype(np.float64),
            np.bincount(u[keep], weights=v[keep], minlength=n_units),
        ]
    return _contrast_of_sums(*sums)


def _contrast_of_sums(ca, ta, cb, tb) -> np.ndarray:
    """:func:`_item_contrast` from each arm's count and sum per unit."""
    both = (ca > 0) & (cb > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.log(tb[both] / cb[both]) - np.log(ta[both] / ca[both])
    return d[np.isfinite(d)]


def _good_contrast(arm_a, arm_b, n_units: int) -> np.ndarray:
    """The paired contrast of the SLO rows, per unit in schedule order: the influence of
    ``log(attainment_B / attainment_A)``, ``(good_B/ḡ_B − sent_B/s̄_B) − (good_A/ḡ_A −
    sent_A/s̄_A)`` over the units where both arms sent requests; each arm is ``(unit of each
    sent request, whether it was good)``."""
    per = []
    for unit_of, good in (arm_a, arm_b):
        per.append(
            (
                np.bincount(unit_of, minlength=n_units).astype(np.float64),
                np.bincount(unit_of, weights=good.astype(np.float64), minlength=n_units),
            )
        )
    both = (per[0][0] > 0) & (per[1][0] > 0)
    out = np.zeros(int(both.sum()))
    for (sent, good), sign in zip(per, (-1.0, 1.0), strict=True):
        sent, good = sent[both], good[both]
        for col, s in ((good, 1.0), (sent, -1.0)):
            if col.mean() > 0:
                out += sign * s * col / col.mean()
    return out


def _block_series(ska: bootstrap.Sketch, skb: bootstrap.Sketch) -> list[np.ndarray]:
    """The series whose dependence sets a latency row's block length: the paired contrast."""
    return [_contrast(ska, skb)]


def _latency_rows(
    metric,
    ska,
    skb,
    w,
    ell,
    stats,
    level,
    suffix,
    n_eff,
    short=1.0,
    min_eff=decide.MIN_EFFECTIVE,
    paired=None,
) -> list[Effect]:
    widen = bootstrap.expansion(math.ceil(len(ska.count) / ell), level) * short
    rep_a, rep_b = ska.resampled(w, stats), skb.resampled(w, stats)
    out = []
    for stat in stats:
        ratio = ratio_effect(skb.exact[stat], ska.exact[stat])
        with np.errstate(invalid="ignore", divide="ignore"):
            reps = bootstrap.expand(rep_b[stat] / rep_a[stat] - 1.0, ratio, widen)
        lo, hi = bootstrap.percentile_ci(reps, level)
        out.append(
            Effect(
                key=f"{metric}.{stat}{suffix}",
                metric=metric,
                stat=stat,
                lower_is_better=True,
                a=ska.exact[stat],
                b=skb.exact[stat],
                n_a=ska.n,
                n_b=skb.n,
                ratio=ratio,
                lo=lo,
                hi=hi,
                p=bootstrap.bootstrap_p(reps),
                block_len=ell,
                n_eff=n_eff,
                min_eff=min_eff,
                paired=paired,
            )
        )
    return out


def _column(t: RequestTable, name: str) -> np.ndarray:
    """An optional integer column (``level``, ``block``: 0 where the table has none)."""
    col = getattr(t, name, None)
    return np.zeros(len(t), dtype=np.int64) if col is None else np.asarray(col, dtype=np.int64)


def _schedule_key(t: RequestTable) -> tuple[np.ndarray, np.ndarray]:
    """(schedule position, segment) of each row: positions ordered by (run, level, block, item);
    a segment is one (run, level, block), and no unit spans two segments."""
    segment = segment_ids(t)
    item = np.asarray(t.item, dtype=np.int64)
    return segment * (int(item.max(initial=0)) + 1) + item, segment


def _levels(la: np.ndarray, lb: np.ndarray) -> list[int]:
    """Sweep levels with ≥ BUCKET_MIN ok requests in both arms, when there are two or more."""
    common = [int(v) for v in np.intersect1d(unique_ints(la), unique_ints(lb))]
    keep = [v for v in common if min((la == v).sum(), (lb == v).sum()) >= BUCKET_MIN]
    return keep if len(keep) >= 2 else []


def _input_buckets(na: np.ndarray, nb: np.ndarray) -> list[tuple[int, int]]:
    """Input-length buckets for breakdowns: the pooled quartiles of ``n_input``, kept when
    there are at least two and each holds ≥ BUCKET_MIN ok requests in both arms."""
    na, nb = na[na != NA], nb[nb != NA]
    if not len(na) or not len(nb):
        return []
    edges = np.unique(np.quantile(np.concatenate([na, nb]), [0.25, 0.5, 0.75]).astype(np.int64))
    bounds = [
        int(min(na.min(), nb.min())),
        *[int(e) + 1 for e in edges],
        int(max(na.max(), nb.max())) + 1,
    ]
    buckets = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        if hi <= lo:
            continue
        if min(((x >= lo) & (x < hi)).sum() for x in (na, nb)) >= BUCKET_MIN:
            inside = np.concatenate([x[(x >= lo) & (x < hi)] for x in (na, nb)])
            buckets.append((int(inside.min()), int(inside.max())))  # the lengths present
    return buckets if len(buckets) >= 2 else []


def _rank_test(
    ka: np.ndarray, kb: np.ndarray, va: np.ndarray, vb: np.ndarray, light: bool
) -> RankTest:
    """Paired Wilcoxon (light load) or Mann–Whitney on at most RANK_MAX values per arm (an
    evenly spaced subsample in schedule order beyond that: at 10⁵+ values a rank test flags
    any shift, and the decision uses the bootstrap anyway)."""
    if not light:
        return mann_whitney(_thin(va), _thin(vb))
    _, ia, ib = np.intersect1d(ka, kb, assume_unique=False, return_indices=True)
    keep = _thin(np.arange(len(ia)))
    return wilcoxon_log_ratio(va[ia[keep]], vb[ib[keep]])


def _thin(v: np.ndarray) -> np.ndarray:
    if len(v) <= RANK_MAX:
        return v
    return v[np.linspace(0, len(v) - 1, RANK_MAX).astype(np.int64)]
