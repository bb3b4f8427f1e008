"""A score interval for the mean of a per-item contrast that takes a few values on a bounded
lattice — the accuracy terms of a factorial ablation (:mod:`abtui.quality.factorial`).

An item's contrast is ``I = Σ_x c_x y_x`` over the arms ``x`` (``y`` 1 when the arm answered it
right, 0 when wrong): the 2×2 interaction ``y_AB − y_A − y_B + y_base`` takes the values −2…2,
a main effect ``(y_A − y_base + y_AB − y_B) / 2`` the values −1…1 in halves. The items are a
sample from a discrete distribution on those values; the test of ``H0: E[I] = d`` is the
**score test** of that multinomial: with ``p̃(d)`` the maximum-likelihood cell probabilities
under the constraint ``Σ p_v v = d``,

    T(d) = (Σ I_i − N d) / √(N σ̃²(d)),   σ̃²(d) = Σ_v p̃_v (v − d)²

and the interval is ``{d : |T(d)| ≤ z}``. This is Tango's (1998) interval for paired proportions
(:func:`abtui.stats.classical.paired_difference_ci`, the quality gates' interval) generalised
from the three values −1, 0, 1 to any lattice: on those three values it gives Tango's interval
exactly (tests/unit/test_quality_factorial.py checks it). It keeps Tango's two virtues here: it has
width when every item's contrast is 0 (a lossless factor such as speculative decoding makes
most contrasts 0, where a bootstrap or a t interval collapses to [0, 0]), and the variance is
taken under the null, not from the few non-zero items.

The constrained MLE (Owen's empirical-likelihood form, extended to unobserved end values):
``p̃_v = n_v / (N + λ (v − d))`` over the observed values, ``λ`` the root of
``Σ n_v (v − d) / (N + λ (v − d)) = 0`` — unless the root lies beyond the point where the end
value on the far side (``vmin`` or ``vmax``, when not observed) would take mass: then ``λ``
stops there and that end value takes the remaining probability. So ``vmin`` and ``vmax`` say
how far an unobserved drop or gain reaches, and the interval's width with no non-zero item is
``±vmax z² / (N + z²)`` (``vmax = 1``: Tango's). The caller chooses them
(:func:`abtui.quality.factorial.reach_of`). Counts may be fractional: items that share a context
are divided by the design effect (Rao–Scott), as the gates do.
"""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.stats import norm

_EPS = 1e-12


def _has(vals: list[float], x: float) -> bool:
    return any(abs(v - x) < 1e-9 for v in vals)


def _lambda(
    vals: list[float], cnts: list[float], n: float, d: float, vmin: float, vmax: float
) -> tuple[float, float | None]:
    """``(λ, end)`` of the constrained MLE at mean ``d`` (module docstring); ``end``: the
    unobserved end value that takes the remaining mass, or None."""
    dv = [v - d for v in vals]

    def g(lam: float) -> float:
        return sum(c * x / (n + lam * x) for c, x in zip(cnts, dv, strict=True))

    lam_lo, lam_hi = -n / (vmax - d), n / (d - vmin)
    if not _has(vals, vmax) and g(lam_lo) <= 0:
        return lam_lo, vmax
    if not _has(vals, vmin) and g(lam_hi) >= 0:
        return lam_hi, vmin
    span = lam_hi - lam_lo
    a, b = lam_lo + _EPS * span, lam_hi - _EPS * span
    ga, gb = g(a), g(b)
    if ga <= 0:
        return a, None
    if gb >= 0:
        return b, None
    return brentq(g, a, b, xtol=1e-12 * max(1.0, abs(span)), rtol=1e-12), None


def _observed(vals, cnts) -> tuple[list[float], list[float]]:
    """The values with a positive count (an empty cell is not observed)."""
    kept = [(float(v), float(c)) for v, c in zip(vals, cnts, strict=True) if c > 0]
    return [v for v, _ in kept], [c for _, c in kept]


def score_stat(vals: list[float], cnts: list[float], d: float, vmin: float, vmax: float) -> float:
    """``T(d)``: the score statistic of ``H0: E[I] = d`` (decreasing in ``d``)."""
    vals, cnts = _observed(vals, cnts)
    n = float(sum(cnts))
    diff = sum(c * v for c, v in zip(cnts, vals, strict=True)) - n * d
    if not vmin < d < vmax:
        return math.copysign(math.inf, diff) if diff else 0.0
    lam, end = _lambda(vals, cnts, n, d, vmin, vmax)
    probs = [c / (n + lam * (v - d)) for c, v in zip(cnts, vals, strict=True)]
    var = sum(p * (v - d) ** 2 for p, v in zip(probs, vals, strict=True))
    if end is not None:
        var += max(0.0, 1.0 - sum(probs)) * (end - d) ** 2
    if not var > 0:
        return 0.0 if abs(diff) < 1e-12 * max(n, 1.0) else math.copysign(math.inf, diff)
    return diff / math.sqrt(n * var)


def score_p(
    vals: list[float], cnts: list[float], vmin: float, vmax: float, d: float = 0.0
) -> float:
    """Two-sided p-value of the score test of ``E[I] = d`` (NaN without items)."""
    if not sum(cnts) > 0:
        return math.nan
    t = score_stat(vals, cnts, d, vmin, vmax)
    return 1.0 if t == 0 else float(2 * norm.sf(abs(t)))


def score_interval(
    vals: list[float], cnts: list[float], vmin: float, vmax: float, level: float = 0.95
) -> tuple[float, float]:
    """The ``level`` score interval of ``E[I]`` from the counts ``cnts`` of the values ``vals``
    (``vmin`` < 0 < ``vmax``: how far an unobserved value reaches, at least the observed
    range); NaN without items."""
    vals, cnts = _observed(vals, cnts)
    n = float(sum(cnts))
    if not n > 0:
        return math.nan, math.nan
    z = float(norm.ppf(1 - (1 - level) / 2))
    est = sum(c * v for c, v in zip(cnts, vals, strict=True)) / n
    width = vmax - vmin
    a, b = vmin + _EPS * width, vmax - _EPS * width

    def bound(lo: float, hi: float, target: float) -> float:
        f = lambda d: score_stat(vals, cnts, d, vmin, vmax) - target  # noqa: E731
        if lo >= hi or f(lo) * f(hi) > 0:  # no crossing inside: the interval reaches the end
            return hi if target < 0 else lo
        return float(brentq(f, lo, hi, xtol=1e-10))

    lower = bound(a, min(est, b), z) if est > a else vmin
    upper = bound(max(est, a), b, -z) if est < b else vmax
    return max(vmin, lower), min(vmax, upper)


def lattice(values, cnt_scale: float = 1.0) -> tuple[list[float], list[float]]:
    """``(distinct values, their counts / cnt_scale)`` of a sequence of contrasts (rounded to
    1e-9, so that sums of halves and quarters compare equal)."""
    counts: dict[float, float] = {}
    for v in values:
        key = round(float(v), 9) + 0.0
        counts[key] = counts.get(key, 0.0) + 1.0
    keys = sorted(counts)
    return keys, [counts[k] / cnt_scale for k in keys]
