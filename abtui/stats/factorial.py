"""Factorial ablation: 2^k arms (k = 2 or 3 factors), each factor's main effect and the
interactions, on the log-ratio scale, with block-bootstrap CIs (docs/ablation.md).

Arms are named by the factors they switch on (``[ablation] factors = ["fp8", "spec"]``: arms
``base`` (the baseline, every factor off), ``fp8``, ``spec`` and ``fp8+spec``). Every arm plays
the same schedule, so all 2^k arms are paired item by item.

**Terms.** For a statistic ``m_x`` of arm ``x`` (``x`` a 0/1 level per factor) and a set ``T``
of factors, the term is the signed sum

    E_T = Σ_x  Π_{j∈T} (2 x_j − 1) · log m_x  /  2^(k − |T|)

— a main effect (``|T| = 1``) is the mean over the other factors' levels of ``log(m_on /
m_off)``; the two-factor interaction of a 2×2 is ``I = log m_AB − log m_A − log m_B + log
m_base`` (0: the two gains multiply as if independent); with three factors a two-factor term is
averaged over the third factor's levels and the three-factor term is the difference of the
two-factor interaction between the third factor's levels. Reported as ratios ``exp(E_T) − 1``:
for an interaction, how far the combination's value lies from the value its parts predict when
their gains multiply (a latency ``+9%``: the combination is 9% slower than the product of its
single gains predicts).

**CIs.** The units are the pair comparisons' (:mod:`abtui.stats.effects`: items of the schedule
grouped into at most 500 units, or the alternation blocks); one weight matrix resamples every arm
at once, so the CI of ``E_T`` accounts for the correlation between arms that shared items and
instants. Block length: the pair rule (Politis–White, at least one generation in flight) on the
term's own per-unit contrast ``Σ c_x log(unit mean_x)``, the longest over the terms. Rates
(throughput, goodput, SLO attainment) use the pair comparisons' paired windows (or blocks);
cost is ``usd/h ÷ rate``, so its terms are ``Σ c_x log usd_x`` minus the rate's.

**Families** (docs/methods.md §3). Interaction terms form their own families: Holm over the
interactions of the policy's primary and guardrail metrics (``interaction``), Benjamini–Hochberg
over those of the other rows (``interaction-breakdown``); main effects likewise (``main``,
``main-breakdown``). They do not join the pair verdicts' primary family: an interaction does not
decide GO for any arm (each arm's GO is its own pair test against the baseline, unchanged by the
design), so adding it there would only spend the pairs' α on a different question; the
combination's NO-GO (below) is a set of pair tests of its own.

**Outcomes** of an interaction (:func:`abtui.stats.decide.decide`, with the metric's δ):
``ANTAGONISTIC`` (the combination gains less than its parts multiplied: significant after
correction and the CI beyond δ on the worse side), ``SYNERGISTIC`` (beyond δ on the better
side), ``INDEPENDENT`` (the CI inside ±δ: the gains compose), ``INCONCLUSIVE``.

**The combination worse than the best single factor** (:func:`combination_worse`): the full
combination against each single-factor arm (the verdict's ladder steps); when the primary
objective REGRESSED against *every* one of them, it is worse than the best of them — an
intersection–union test, valid at α without a correction and without picking the "best" arm
from the data — and the combination's pair verdict is NO-GO with that reason.

Beyond three factors the 2^k arms (16 for k = 4) each need their own endpoint and schedule: not
offered. A fractional 2^(k−p) design would alias each interaction with another, which is the
question an ablation asks, so it is not offered either.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from abtui.jsonable import json_ready
from abtui.metrics import catalogue as cat
from abtui.metrics.summary import summarize
from abtui.stats import bootstrap, decide
from abtui.stats.effects import (
    _arm_values,
    _column,
    _in_flight,
    _schedule_key,
    _Weights,
)
from abtui.stats.itl import itl_sketches
from abtui.stats.multiple import benjamini_hochberg, holm
from abtui.stats.rates import _COUNTS, COST_ROWS, RATE_ROWS, _blocks, _windows, windows_of

MIN_FACTORS, MAX_FACTORS = 2, 3
# ITL is left out: it is per streamed chunk, and a speculative-decoding arm streams several
# tokens a chunk (docs/methods.md §1), so its gaps are not comparable across the arms of an ablation
LATENCY_METRICS = cat.PER_REQUEST_KEYS
SEP = "+"
BASE_NAME = "base"


class Interplay(StrEnum):
    """How two factors' effects combine (an interaction term's reading)."""

    ANTAGONISTIC = "ANTAGONISTIC"
    SYNERGISTIC = "SYNERGISTIC"
    INDEPENDENT = "INDEPENDENT"


ANTAGONISTIC, SYNERGISTIC, INDEPENDENT = Interplay
INCONCLUSIVE = decide.INCONCLUSIVE
_OUTCOME = {
    decide.IMPROVED: SYNERGISTIC,
    decide.REGRESSED: ANTAGONISTIC,
    decide.EQUIVALENT: INDEPENDENT,
    decide.INCONCLUSIVE: INCONCLUSIVE,
}


# ----------------------------------------------------------------------- the design


def combo_name(factors: list[str], levels: tuple[int, ...]) -> str:
    """``("fp8", "spec"), (1, 1)`` → ``fp8+spec``; all off → ``base``."""
    on = [f for f, x in zip(factors, levels, strict=True) if x]
    return SEP.join(on) if on else BASE_NAME


def levels_of(name: str, factors: list[str]) -> tuple[int, ...] | None:
    """The levels an arm's name stands for (``spec+fp8`` → ``(1, 1)``: any order), or None when
    the name is not a combination of ``factors``."""
    parts = [p.strip() for p in name.split(SEP)]
    if not parts or any(p not in factors for p in parts) or len(set(parts)) != len(parts):
        return None
    return tuple(int(f in parts) for f in factors)


@dataclass
class Design:
    factors: list[str]
    arm_of: dict[tuple[int, ...], int]  # levels → arm index (the baseline: all 0)

    @property
    def k(self) -> int:
        return len(self.factors)

    def terms(self) -> list[tuple[int, ...]]:
        """Non-empty factor subsets (indices): mains first, then interactions by order."""
        k = self.k
        return [t for r in range(1, k + 1) for t in itertools.combinations(range(k), r)]

    def coefficients(self, term: tuple[int, ...]) -> dict[int, float]:
        """Arm index → coefficient of ``log m`` in the term (module docstring)."""
        scale = 2.0 ** (self.k - len(term))
        return {
            arm: math.prod(2 * lv[j] - 1 for j in term) / scale for lv, arm in self.arm_of.items()
        }

    def term_name(self, term: tuple[int, ...]) -> str:
        return "×".join(self.factors[j] for j in term)

    def singles(self) -> list[int]:
        return [self.arm_of[tuple(int(i == j) for i in range(self.k))] for j in range(self.k)]

    @property
    def full(self) -> int:
        return self.arm_of[(1,) * self.k]


def design_of(names: list[str], factors: list[str]) -> tuple[Design | None, str | None]:
    """The design of a session's arms (index 0 = the baseline = every factor off, whatever its
    name), or ``(None, why)`` when the arms are not a full 2^k factorial of ``factors``."""
    factors = list(factors or [])
    if not MIN_FACTORS <= len(factors) <= MAX_FACTORS:
        return None, f"{len(factors)} factors: a factorial ablation takes 2 or 3"
    arm_of: dict[tuple[int, ...], int] = {(0,) * len(factors): 0}
    for i, name in enumerate(names[1:], start=1):
        lv = levels_of(name, factors)
        if lv is None or not any(lv):
            return None, f"arm {name!r} is not a combination of the factors {factors}"
        if lv in arm_of:
            return None, f"arm {name!r} repeats the combination of arm {names[arm_of[lv]]!r}"
        arm_of[lv] = i
    missing = [
        combo_name(factors, lv)
        for lv in itertools.product((0, 1), repeat=len(factors))
        if lv not in arm_of
    ]
    if missing:
        return None, f"missing arms for {', '.join(missing)}"
    return Design(factors, arm_of), None


# ----------------------------------------------------------------------- the estimator


@dataclass
class Term:
    """One term of one metric row: a main effect or an interaction."""

    key: str  # the metric row (``tpot.p50``)
    term: str  # ``fp8`` or ``fp8×spec``
    order: int  # 1: main effect; 2, 3: interaction
    stat: str
    lower_is_better: bool
    log: float  # E_T
    log_lo: float
    log_hi: float
    ratio: float  # exp(E_T) − 1
    lo: float
    hi: float
    p: float
    n: int  # the smallest arm's sample
    block_len: int
    n_eff: float = math.nan
    p_adj: float = math.nan
    family: str = ""
    delta: float = math.nan
    outcome: str = INCONCLUSIVE
    significant: bool = False
    note: str = ""

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return json_ready(asdict(self))


def _term_row(key, stat, lib, term_name, order, centre, reps, widen, level, n, ell, n_eff) -> Term:
    if math.isfinite(centre):
        with np.errstate(invalid="ignore"):
            reps = centre + widen * (reps - centre)
    lo, hi = bootstrap.percentile_ci(reps, level)
    ex = lambda v: math.expm1(v) if math.isfinite(v) else math.nan  # noqa: E731
    return Term(
        key=key,
        term=term_name,
        order=order,
        stat=stat,
        lower_is_better=lib,
        log=centre,
        log_lo=lo,
        log_hi=hi,
        ratio=ex(centre),
        lo=ex(lo),
        hi=ex(hi),
        p=bootstrap.bootstrap_p(reps),
        n=n,
        block_len=ell,
        n_eff=n_eff,
    )


def _log(x) -> np.ndarray | float:
    with np.errstate(invalid="ignore", divide="ignore"):
        if isinstance(x, np.ndarray):
            return np.where(x > 0, np.log(np.where(x > 0, x, 1.0)), np.nan)
        return math.log(x) if (math.isfinite(x) and x > 0) else math.nan


def estimate(
    table,
    design: Design,
    slo: dict | None = None,
    *,
    resamples: int = bootstrap.DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = 0.95,
    usd: list[float] | None = None,
    metrics: tuple[str, ...] | None = None,
) -> tuple[list[Term], dict[str, dict[int, float]]]:
    """Every term of every metric row (module docstring) and the arms' point values
    ``{key: {arm: value}}``. ``usd``: USD/hour per arm index, for the cost rows. ``metrics``
    (default :data:`LATENCY_METRICS`, TTFO only where it is not TTFT)."""
    arms = sorted(design.arm_of.values())
    keep = np.isin(table.arm, arms) & ~table.warmup
    t = table if keep.all() else table.select(keep)
    if metrics is None:
        shown = cat.latency_keys(t)
        metrics = tuple(k for k in LATENCY_METRICS if k in shown)
    key, segment = _schedule_key(t)
    alternating = len(np.unique(_column(t, "block"))) > 1
    if alternating:
        unit, n_units, _ = bootstrap.unit_index(segment, max_units=np.iinfo(np.int32).max)
        unit_size = max(1, len(np.unique(key)) // max(n_units, 1))
    else:
        unit, n_units, unit_size = bootstrap.unit_index(key, segments=segment)
    weights = _Weights(resamples, seed)
    sent_all = t.ok | (t.status == "error")
    values, units, windows, sums = {}, {}, {}, {}
    ok_masks = {x: (t.arm == x) & t.ok for x in arms}
    itl = None
    if "itl" in metrics:  # per chunk gap: sketched from a stream of the chunks, none held
        itl = itl_sketches(t, [ok_masks[x] for x in arms], unit, n_units)
    for i, x in enumerate(arms):
        rows = t.arm == x
        ok_mask = ok_masks[x]
        wanted = tuple(dict.fromkeys(metrics + ("e2e",)))
        values[x] = _arm_values(t, np.flatnonzero(ok_mask), wanted)
        units[x] = unit[ok_mask]
        windows[x] = windows_of(t, rows & sent_all, ok_mask, slo)
        sums[x] = summarize(t, x, slo, dists={"itl": itl.dists[i]} if itl else None)
    in_flight = max(_in_flight(values[x]["e2e"], sums[x].duration_s) for x in arms)
    terms = design.terms()
    coef = {tm: design.coefficients(tm) for tm in terms}
    out: list[Term] = []
    point: dict[str, dict[int, float]] = {}
    for metric in metrics:
        if metric == "itl":
            sk = dict(zip(arms, itl.sketches, strict=True))
        else:
            grid = bootstrap.Grid.covering(*(values[x][metric] for x in arms))
            sk = {x: bootstrap.Sketch.of(values[x][metric], units[x], n_units, grid) for x in arms}
        both = np.logical_and.reduce([sk[x].count > 0 for x in arms])
        with np.errstate(invalid="ignore", divide="ignore"):  # (an empty unit: −inf, dropped)
            logm = {x: np.log(sk[x].total[both] / sk[x].count[both]) for x in arms}
            series = [sum(c * logm[x] for x, c in coef[tm].items()) for tm in terms]
        series = [s[np.isfinite(s)] for s in series]
        ell = 1 if alternating else bootstrap.block_length(series, in_flight, unit_size)
        n_eff = math.nan if alternating else min(bootstrap.effective_size(s) for s in series)
        w = weights.get(n_units, ell, "latency")
        widen = bootstrap.expansion(math.ceil(n_units / ell), level)
        # each term's own contrast: what its blocks cannot see of its dependence widens it
        # (abtui.stats.bootstrap.block_shortfall, as the pairs' latency rows)
        short = {
            tm: 1.0 if alternating else bootstrap.block_shortfall(s, ell)
            for tm, s in zip(terms, series, strict=True)
        }
        reps = {
            x: {s: _log(r) for s, r in sk[x].resampled(w, bootstrap.STATS).items()} for x in arms
        }
        del w  # not held while the next matrix is drawn
        n = min(sk[x].n for x in arms)
        for stat in bootstrap.STATS:
            k = f"{metric}.{stat}"
            point[k] = {x: sk[x].exact[stat] for x in arms}
            for tm in terms:
                centre = sum(c * _log(sk[x].exact[stat]) for x, c in coef[tm].items())
                r = sum(c * reps[x][stat] for x, c in coef[tm].items())
                out.append(
                    _term_row(
                        k,
                        stat,
                        True,
                        design.term_name(tm),
                        len(tm),
                        centre,
                        r,
                        widen * short[tm],
                        level,
                        n,
                        ell,
                        n_eff,
                    )
                )
    out += _rate_terms(design, windows, sums, slo, weights, level, usd, alternating, point)
    return out, point


def _rate_terms(design, windows, sums, slo, weights, level, usd, alternating, point) -> list[Term]:
    arms = sorted(design.arm_of.values())
    if any(windows[x] is None or not windows[x].duration > 0 for x in arms):
        return []
    if alternating:
        segments = np.unique(np.concatenate([windows[x].segments for x in arms]))
        u = {x: _blocks(windows[x], segments) for x in arms}
    else:
        k = int(min(bootstrap.MAX_UNITS, max(10, min(sums[x].sent for x in arms) // 10)))
        u = {x: _windows(windows[x], k) for x in arms}
    n_units = len(u[arms[0]]["sent"])
    terms = design.terms()
    coef = {tm: design.coefficients(tm) for tm in terms}
    n = min(sums[x].sent for x in arms)
    out, log_reps, meta = [], {}, {}
    for key, fld, needs_slo in RATE_ROWS:
        if needs_slo and not slo:
            continue
        num, den = _COUNTS[fld]
        if alternating:
            ell = 1
        else:  # the influence of each term's log-rate contrast, per window
            infl = []
            for tm in terms:
                s = np.zeros(n_units)
                for x, c in coef[tm].items():
                    for col, sign in ((num, 1.0), (den, -1.0)):
                        m = u[x][col].mean()
                        if m > 0:
                            s += c * sign * u[x][col] / m
                infl.append(s)
            ell = bootstrap.block_length(infl + [u[x]["ok"] for x in arms], 1.0, 1)
        w = weights.get(n_units, ell, "rates")
        widen = bootstrap.expansion(math.ceil(n_units / ell), level)
        with np.errstate(invalid="ignore", divide="ignore"):
            reps = {
                x: _log(bootstrap.wdot(w, u[x][num]) / bootstrap.wdot(w, u[x][den])) for x in arms
            }
        del w  # not held while the next matrix is drawn
        exact = {x: float(getattr(sums[x], fld)) for x in arms}
        point[key] = exact
        log_reps[key], meta[key] = reps, (ell, widen, exact)
        out += _terms_of(
            design, key, cat.ROWS[key].lower_is_better, reps, exact, coef, widen, level, n, ell
        )
    if usd:
        for key, rate_key, _fld in COST_ROWS:
            if not slo:
                rate_key = rate_key.replace("goodput.", "throughput.")
            if rate_key not in log_reps:
                continue
            ell, widen, exact_rate = meta[rate_key]
            scale = 1e3 if key.endswith("requests") else 1e6
            exact = {
                x: (usd[x] * scale / (3600.0 * exact_rate[x]) if exact_rate[x] > 0 else math.inf)
                for x in arms
            }
            point[key] = exact
            reps = {x: math.log(max(usd[x], 1e-300)) - log_reps[rate_key][x] for x in arms}
            out += _terms_of(
                design, key, cat.ROWS[key].lower_is_better, reps, exact, coef, widen, level, n, ell
            )
    return out


def _terms_of(design, key, lib, reps, exact, coef, widen, level, n, ell) -> list[Term]:
    stat = key.split(".")[1]
    out = []
    for tm, cs in coef.items():
        centre = sum(c * _log(exact[x]) for x, c in cs.items())
        r = sum(c * reps[x] for x, c in cs.items())
        out.append(
            _term_row(
                key,
                stat,
                lib,
                design.term_name(tm),
                len(tm),
                centre,
                r,
                widen,
                level,
                n,
                ell,
                math.nan,
            )
        )
    return out


# ----------------------------------------------------------------------- decisions


def interaction_outcome(outcome: str) -> str:
    """An interaction's outcome from :func:`abtui.stats.decide.decide`'s (better → synergistic)."""
    return _OUTCOME[outcome]


def decide_terms(
    terms: list[Term], policy, noise_floor: dict | None = None, extra: list = ()
) -> None:
    """δ, family, corrected p and outcome of every term (in place; module docstring), under
    ``policy`` (the verdict's resolved :class:`abtui.verdict.policy.Policy`: its primary,
    guardrails, α, δ and tail δ).

    ``extra``: other members of the families, decided by their owners — the accuracy terms of
    :mod:`abtui.quality.factorial` (objects with ``family``, ``p``, ``callable``): they enter
    the correction of their family, and their ``p_adj`` is set here."""
    primary = {policy.primary, *policy.guardrails}
    alpha = policy.alpha
    callable_ = []
    for t in terms:
        base = policy.delta_tail if t.stat in decide.TAIL_Q else policy.delta
        t.delta = max(base, (noise_floor or {}).get(t.key, 0.0))
        kind = "main" if t.order == 1 else "interaction"
        t.family = kind if t.key in primary else f"{kind}-breakdown"
        if decide.callable_row(t.n, t.stat, t.n_eff) and math.isfinite(t.p):
            callable_.append(t)
    for fam in ("main", "interaction", "main-breakdown", "interaction-breakdown"):
        rows = [t for t in callable_ if t.family == fam]
        rows += [x for x in extra if x.family == fam and x.callable]
        adjust = holm if fam in ("main", "interaction") else benjamini_hochberg
        for t, p in zip(rows, adjust([t.p for t in rows]), strict=True):
            t.p_adj = float(p)
    for t in terms:
        d = decide.decide(
            t.ratio,
            t.lo,
            t.hi,
            t.p_adj if math.isfinite(t.p_adj) else None,
            t.delta,
            lower_is_better=t.lower_is_better,
            n=t.n,
            stat=t.stat,
            alpha=alpha,
            n_eff=t.n_eff,
        )
        t.significant, t.note = d.significant, d.note
        t.outcome = _OUTCOME[d.outcome] if t.order > 1 else d.outcome


def combination_worse(design: Design, ladder: list, names: list[str], primary: str) -> str | None:
    """A NO-GO reason for the full combination when its primary objective REGRESSED against
    every single-factor arm (``ladder``: the pair verdicts single → combination), else None."""
    from abtui.stats.labels import describe

    steps = {p.baseline: p for p in ladder if p.b == design.full}
    singles = [names[i] for i in design.singles()]
    effects = [steps[s].comparison.get(primary) if s in steps else None for s in singles]
    if not effects or any(e is None or e.outcome != decide.REGRESSED for e in effects):
        return None
    best = min(zip(singles, effects, strict=True), key=lambda se: abs(se[1].ratio))
    others = "; ".join(
        f"against {s}: {describe(e)}" for s, e in zip(singles, effects, strict=True) if s != best[0]
    )
    return (
        f"the combination {names[design.full]} is worse than the best single factor, "
        f"{best[0]}: {describe(best[1])} against it"
        + (f" ({others})" if others else "")
        + " — adding the other factors costs what the best one alone gains"
    )
