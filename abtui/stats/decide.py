"""Decision per metric (METHODS.md §3): IMPROVED / REGRESSED / EQUIVALENT / INCONCLUSIVE.

For an effect ``r = stat_B / stat_A − 1`` with CI ``[lo, hi]``, corrected p-value ``p_adj``,
noise threshold ``δ`` and a direction (latency: lower is better; throughput: higher is better):

- **IMPROVED / REGRESSED**: ``p_adj < α`` and the whole CI lies beyond ``δ`` on one side
  (``hi < −δ`` or ``lo > +δ``); which of the two depends on the direction.
- **EQUIVALENT**: the whole CI lies inside ``[−δ, +δ]``.
- **INCONCLUSIVE** otherwise, with :func:`samples_needed`: CI widths shrink like ``1/√n``, so
  the CI clears the threshold that decides when its relevant half-width ``h`` (from the point
  estimate to the bound facing the threshold) falls to ``h' = | |r| − δ |``:
  ``n' = n (h / h')²`` per arm. When ``|r| = δ`` no sample size decides (``None``).
- **Too few tail samples**: a percentile ``q`` needs at least :data:`MIN_TAIL` observations
  beyond it in each arm (``n (1 − q) ≥ 10``: P99 needs n ≥ 1000, P95 ≥ 200, P90 ≥ 100). Below
  that no significance call is made; the outcome is INCONCLUSIVE and says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

IMPROVED = "IMPROVED"
REGRESSED = "REGRESSED"
EQUIVALENT = "EQUIVALENT"
INCONCLUSIVE = "INCONCLUSIVE"
OUTCOMES = (IMPROVED, REGRESSED, EQUIVALENT, INCONCLUSIVE)

DEFAULT_ALPHA = 0.05
DELTA_CENTRAL = 0.02  # means, medians, throughput, goodput
DELTA_TAIL = 0.05  # P90 / P95 / P99
MIN_TAIL = 10
TAIL_Q = {"p90": 0.90, "p95": 0.95, "p99": 0.99}
MAX_SAMPLES_HINT = 10**9


def default_delta(stat: str) -> float:
    """Default noise threshold of a statistic (``mean``, ``p50``… or a rate)."""
    return DELTA_TAIL if stat in TAIL_Q else DELTA_CENTRAL


def tail_min_n(stat: str) -> int:
    """Smallest per-arm sample with ≥ MIN_TAIL observations beyond the quantile (0 if none)."""
    q = TAIL_Q.get(stat)
    return 0 if q is None else math.ceil(MIN_TAIL / (1 - q) - 1e-9)


@dataclass
class Decision:
    outcome: str
    significant: bool
    samples_needed: int | None  # per arm, when INCONCLUSIVE and estimable
    note: str  # why, in words ("" when nothing to add)


def samples_needed(n: int, r: float, lo: float, hi: float, delta: float) -> int | None:
    """Per-arm sample size at which the CI would clear the deciding threshold (module doc)."""
    if not all(math.isfinite(v) for v in (r, lo, hi)) or n <= 0:
        return None
    target = abs(abs(r) - delta)
    if target <= 0:
        return None
    if abs(r) > delta:  # must move the bound facing zero past ±δ
        h = (r - lo) if r > 0 else (hi - r)
    else:  # must pull both bounds inside ±δ
        h = max(hi - r, r - lo)
    if h <= target:
        return n
    return int(min(MAX_SAMPLES_HINT, math.ceil(n * (h / target) ** 2)))


def decide(
    r: float,
    lo: float,
    hi: float,
    p_adj: float | None,
    delta: float,
    *,
    lower_is_better: bool,
    n: int,
    stat: str = "p50",
    alpha: float = DEFAULT_ALPHA,
) -> Decision:
    """One metric's outcome; ``n`` = the smaller arm's sample size."""
    need_tail = tail_min_n(stat)
    if need_tail and n < need_tail:
        q = TAIL_Q[stat]
        beyond = int(n * (1 - q))
        return Decision(
            INCONCLUSIVE,
            False,
            need_tail,
            f"too few samples for {stat.upper()}: {beyond} beyond it (need ≥ {MIN_TAIL}, "
            f"i.e. n ≥ {need_tail} per arm); no significance call",
        )
    if not all(math.isfinite(v) for v in (r, lo, hi)):
        return Decision(INCONCLUSIVE, False, None, "no estimate (missing data in an arm)")
    significant = p_adj is not None and math.isfinite(p_adj) and p_adj < alpha
    if significant and (hi < -delta or lo > delta):
        better = (hi < -delta) == lower_is_better
        return Decision(IMPROVED if better else REGRESSED, True, None, "")
    if -delta <= lo and hi <= delta:
        return Decision(EQUIVALENT, significant, None, "")
    need = samples_needed(n, r, lo, hi, delta)
    if need is None:
        note = "the effect sits at the noise threshold δ; more samples will not settle it quickly"
    else:
        note = f"about {need:,} requests per arm would decide"
    return Decision(INCONCLUSIVE, significant, need, note)


# ----------------------------------------------------------------------- the rows' names

LATENCY_KEYS = tuple(
    f"{m}.{s}"
    for m in ("ttft", "ttft_user", "tpot", "itl", "e2e")
    for s in ("mean", "p50", "p90", "p95", "p99")
)
RATE_KEYS = (
    "throughput.requests",
    "throughput.output_tokens",
    "goodput.requests",
    "goodput.output_tokens",
    "slo.attainment",
)
COST_KEYS = ("cost.per_mtok_output", "cost.per_mtok_good", "cost.per_1k_good_requests")
METRIC_KEYS = LATENCY_KEYS + RATE_KEYS + COST_KEYS
"""Every effect row a verdict can have (policy primary/guardrails name one of these)."""
