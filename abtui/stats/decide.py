"""Decision per metric (docs/methods.md §3): IMPROVED / REGRESSED / EQUIVALENT / INCONCLUSIVE.

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
- **Too few paired units** (:func:`too_few`): no row is called — IMPROVED, REGRESSED,
  EQUIVALENT, or shown non-inferior — from fewer than :data:`MIN_PAIRED` paired units (items
  both arms measured), whatever its interval says: below that the bootstrap's interval is not
  an interval (2 requests per arm gave p = 0.0004 and zero-width CIs between identical servers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from abtui.metrics import catalogue as cat
from abtui.metrics.tails import MIN_TAIL, TAIL_Q, tail_min_n
from abtui.stats.reasons import Code, Reason


class Outcome(StrEnum):
    """One row's call (a ``str``: the verdict's JSON holds the same words)."""

    IMPROVED = "IMPROVED"
    REGRESSED = "REGRESSED"
    EQUIVALENT = "EQUIVALENT"
    INCONCLUSIVE = "INCONCLUSIVE"


IMPROVED, REGRESSED, EQUIVALENT, INCONCLUSIVE = Outcome
OUTCOMES = tuple(Outcome)

DEFAULT_ALPHA = 0.05
DELTA_CENTRAL = 0.02  # means, medians, throughput, goodput
DELTA_TAIL = 0.05  # P90 / P95 / P99
MAX_SAMPLES_HINT = 10**9
MIN_EFFECTIVE = 20  # effectively independent paired units a widened row needs to be called
MIN_EFFECTIVE_UNWIDENED = 50  # ... a row whose interval cannot be widened for it
# Paired units (schedule items both arms measured; groups of items past 500) any call needs.
# The percentile bootstrap of n units behaves like a normal interval with z for Student's t and
# the spread shrunk by √((n−1)/n): its coverage of a nominal 95 % is P(|t_{n−1}| < 1.96 √((n−1)/n))
# = 60 % at n = 2, 85 % at 5, 90 % at 10, 93 % at 20, 94 % at 50 (normal data; skewed latencies
# fare worse). From 20 units a call misses no more often than ~1.5 α, and 20 is the least a
# dependent series must hold (MIN_EFFECTIVE): an independent one may not need less.
MIN_PAIRED = MIN_EFFECTIVE
NO_ESTIMATE = Reason(Code.NO_ESTIMATE, "no estimate (missing data in an arm)")


def default_delta(stat: str) -> float:
    """Default noise threshold of a statistic (``mean``, ``p50``… or a rate)."""
    return DELTA_TAIL if stat in TAIL_Q else DELTA_CENTRAL


@dataclass
class Decision:
    outcome: Outcome
    significant: bool
    samples_needed: int | None  # per arm, when INCONCLUSIVE and estimable
    note: Reason | str  # why, in words and a code ("" when nothing to add)

    @property
    def code(self) -> Code | None:
        return getattr(self.note, "code", None)


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
    n_eff: float | None = None,
    min_eff: float = MIN_EFFECTIVE,
    paired: int | None = None,
    min_paired: int = MIN_PAIRED,
) -> Decision:
    """One metric's outcome; ``n`` = the smaller arm's sample size; ``n_eff`` = effectively
    independent paired units, ``min_eff`` the least a call needs (:func:`too_dependent`; None or
    NaN: no such rule); ``paired`` = paired units (None: ``n``), ``min_paired`` the least any
    call needs (:func:`too_few`)."""
    few = too_few(n, paired, min_paired)
    if few is not None:
        return few
    need_tail = tail_min_n(stat)
    if need_tail and n < need_tail:
        q = TAIL_Q[stat]
        beyond = int(n * (1 - q))
        return Decision(
            INCONCLUSIVE,
            False,
            need_tail,
            Reason(
                Code.TOO_FEW_TAIL,
                f"too few samples for {stat.upper()}: {beyond} beyond it (need ≥ {MIN_TAIL}, "
                f"i.e. n ≥ {need_tail} per arm); no significance call",
            ),
        )
    dep = too_dependent(n, n_eff, min_eff)
    if dep is not None:
        return dep
    if not all(math.isfinite(v) for v in (r, lo, hi)):
        return Decision(INCONCLUSIVE, False, None, NO_ESTIMATE)
    significant = p_adj is not None and math.isfinite(p_adj) and p_adj < alpha
    if significant and (hi < -delta or lo > delta):
        better = (hi < -delta) == lower_is_better
        return Decision(IMPROVED if better else REGRESSED, True, None, "")
    if -delta <= lo and hi <= delta:
        return Decision(EQUIVALENT, significant, None, "")
    need = samples_needed(n, r, lo, hi, delta)
    if need is None:
        note = Reason(
            Code.AT_THRESHOLD,
            "the effect sits at the noise threshold δ; more samples will not settle it quickly",
        )
    else:
        note = Reason(Code.UNDERPOWERED, f"about {need:,} requests per arm would decide")
    return Decision(INCONCLUSIVE, significant, need, note)


def too_few(n: int, paired: int | None = None, minimum: int = MIN_PAIRED) -> Decision | None:
    """INCONCLUSIVE when a row rests on fewer than ``minimum`` paired units (``paired``; None:
    ``n``, the smaller arm's count): no call in any direction (module docstring). The samples
    needed scale ``n`` by ``minimum / paired``."""
    units = n if paired is None else paired
    if units >= minimum:
        return None
    need = int(min(MAX_SAMPLES_HINT, math.ceil(max(n, 1) * minimum / max(units, 1))))
    return Decision(
        INCONCLUSIVE,
        False,
        need,
        Reason(
            Code.TOO_FEW_PAIRED,
            f"too few samples: {units} paired (need ≥ {minimum} for the bootstrap interval to "
            f"hold); no call, about {need:,} requests per arm would decide",
        ),
    )


def callable_row(
    n: int,
    stat: str,
    n_eff: float | None,
    min_eff: float = MIN_EFFECTIVE,
    paired: int | None = None,
) -> bool:
    """Whether a row may be called at all (and so joins its family's correction): enough
    paired units, enough tail samples, not too dependent."""
    return (
        too_few(n, paired) is None
        and n >= tail_min_n(stat)
        and too_dependent(n, n_eff, min_eff) is None
    )


def too_dependent(n: int, n_eff: float | None, minimum: float = MIN_EFFECTIVE) -> Decision | None:
    """INCONCLUSIVE when the paired series holds fewer than ``minimum`` effectively independent
    units, and fewer than half its values (``n`` per arm: the units, up to 500)
    (:func:`abtui.stats.bootstrap.effective_size`). The samples needed scale ``n`` by
    ``minimum / n_eff``.

    Two minimums. A parallel run's latency rows are widened by what their blocks cannot see of
    the dependence (:func:`abtui.stats.bootstrap.block_shortfall`), so they need only
    :data:`MIN_EFFECTIVE`: below it ``τ̂`` itself is too uncertain for that widening to be
    trusted (AR(1) ρ = 0.9 at 200 requests per arm, ≈ 10 effective pairs: 3 % false calls with
    a minimum of 15, 0 % at 20; the bare block bootstrap, 15 %). Rows whose resampling units the
    data cannot check for independence — whole alternation blocks (8 or so), the SLO rows'
    completion-time windows — are not widened and keep :data:`MIN_EFFECTIVE_UNWIDENED`, the
    rule their calibration was measured with (docs/verdict.md §4)."""
    # only dependence refuses a call: a short independent series (n_eff ≈ its length, 60 pairs
    # say) is what the bootstrap handles; the rule needs the autocorrelation time above 2
    if n_eff is None or not math.isfinite(n_eff) or n_eff >= minimum or n_eff >= n / 2:
        return None
    need = int(min(MAX_SAMPLES_HINT, math.ceil(n * minimum / max(n_eff, 1.0))))
    return Decision(
        INCONCLUSIVE,
        False,
        need,
        Reason(
            Code.TOO_DEPENDENT,
            f"the paired series is strongly autocorrelated: about {n_eff:.0f} effectively "
            f"independent samples (need ≥ {minimum:.0f}); no significance call, about {need:,} "
            "requests per arm would decide",
        ),
    )


def non_inferiority(
    r: float,
    lo: float,
    hi: float,
    delta: float,
    *,
    lower_is_better: bool,
    n: int,
    stat: str = "p50",
    n_eff: float | None = None,
    min_eff: float = MIN_EFFECTIVE,
    paired: int | None = None,
) -> Decision:
    """Is the metric shown **non-inferior**: does the CI's bound on the worse side stay inside
    ``δ`` (latency: ``hi < +δ``; throughput: ``lo > −δ``)? A guardrail must be, for GO.

    This is the one-sided test of "worse by δ or more" at level (1 − CI level) / 2 (2.5 % for
    a 95 % CI). Several guardrails are an intersection–union test (GO needs every one shown), so
    no multiplicity correction applies to them. ``outcome`` is ``EQUIVALENT`` when shown (the
    metric may have improved) and ``INCONCLUSIVE`` otherwise, with the per-arm ``n`` at which the
    worse-side bound would clear ``δ`` (``None`` when the estimate itself is at or past ``δ``:
    no sample size shows it) and the reason in words; a tail statistic below its small-sample
    minimum (:func:`tail_min_n`) is never shown, whatever its CI says; nor is a row on too few
    paired units (:func:`too_few`).
    """
    few = too_few(n, paired)
    if few is not None:
        return few
    need_tail = tail_min_n(stat)
    if need_tail and n < need_tail:
        return Decision(
            INCONCLUSIVE,
            False,
            need_tail,
            Reason(
                Code.TOO_FEW_TAIL, f"cannot be called below n = {need_tail:,} per arm (has {n:,})"
            ),
        )
    dep = too_dependent(n, n_eff, min_eff)
    if dep is not None:
        return dep
    if not all(math.isfinite(v) for v in (r, lo, hi)):
        return Decision(INCONCLUSIVE, False, None, NO_ESTIMATE)
    worse = r if lower_is_better else -r  # the effect measured towards "worse"
    bound = hi if lower_is_better else -lo  # the CI's bound on the worse side
    if bound < delta:
        return Decision(EQUIVALENT, True, None, "")
    if worse >= delta:
        return Decision(
            INCONCLUSIVE,
            False,
            None,
            Reason(
                Code.PAST_DELTA,
                f"its estimate is {pct_words(worse)} worse, at or past δ {delta:.0%}: "
                "more samples will not show it non-inferior",
            ),
        )
    h, target = bound - worse, delta - worse
    need = int(min(MAX_SAMPLES_HINT, math.ceil(n * (h / target) ** 2))) if h > target else n
    return Decision(
        INCONCLUSIVE,
        False,
        need,
        Reason(
            Code.CI_PAST_DELTA,
            f"its CI reaches {pct_words(bound)} worse, past δ {delta:.0%}; "
            f"about {need:,} requests per arm would decide",
        ),
    )


def pct_words(x: float) -> str:
    return f"{x * 100:.1f}%"


# ----------------------------------------------------------------------- the rows' names

LATENCY_KEYS = cat.LATENCY_ROW_KEYS
RATE_KEYS = cat.RATE_KEYS
COST_KEYS = cat.COST_KEYS
METRIC_KEYS = cat.ROW_KEYS
"""Every effect row a verdict can have (policy primary/guardrails name one of these)."""
