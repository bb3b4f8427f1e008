"""The few distribution figures a verdict needs, in float arithmetic, without scipy.stats.

Importing ``scipy.stats`` costs a process ~72 MB of RSS and ~0.8 s of CPU (``scipy.special``
alone 26 MB and 0.3 s); a verdict needs only the normal quantile and upper tail, Student's t
quantile at a whole number of degrees of freedom (the expanded percentile interval,
:func:`abtui.stats.bootstrap.expansion`), and a hypergeometric tail (the one-sided Fisher test
of error rates). Each is a few lines of floats here, within a few ulps of the exact value
(``tests/calibration/test_distributions.py`` holds them to exact references and to scipy's):

- :func:`norm_sf` ``Q(x) = erfc(x/√2)/2``, with the rounding of ``x/√2`` corrected to first
  order (without it ``Q`` loses ~``x²`` ulps far in the tail, as scipy's ``ndtr`` does).
- :func:`norm_ppf`: the standard library's estimate (a few ulps off), then Newton steps on ``Q``.
- :func:`t_ppf`: Newton's method on the two-sided t distribution function ``A(t | ν)``, the
  finite sums of Abramowitz & Stegun 26.7.3 (odd ν) and 26.7.4 (even ν), whose terms are all
  positive; above :data:`T_SERIES_MAX` degrees of freedom the Cornish–Fisher expansion to
  ``ν⁻⁴`` (A&S 26.7.5), within a few ulps there.
- :func:`hypergeom_cdf`: the terms relative to the mode's, by their ratio recurrence outward
  from it (no cancellation, no underflow near the mode), until they no longer change the sum.
"""

from __future__ import annotations

import math
import sys
from functools import lru_cache
from statistics import NormalDist

T_SERIES_MAX = 2_000  # degrees of freedom up to which t's distribution is summed
NORM_SF_ZERO = 39.0  # Q(x) < 2⁻¹⁰⁷⁴ (the smallest float) beyond this
_INV_SQRT2 = 0.7071067811865476  # 1/√2 rounded; _INV_SQRT2_LO the rest
_INV_SQRT2_LO = -4.833646656726457e-17
_TWO_OVER_SQRT_PI = 1.1283791670955126
_SPLIT = 134217729.0  # 2²⁷ + 1: Veltkamp's split of a float into two 26-bit halves


def _product_error(a: float, b: float, p: float) -> float:
    """``a·b − p`` exactly, for ``p`` the rounded product (Dekker's two-product)."""
    ca, cb = _SPLIT * a, _SPLIT * b
    a_hi, b_hi = ca - (ca - a), cb - (cb - b)
    a_lo, b_lo = a - a_hi, b - b_hi
    return ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo


def norm_sf(x: float) -> float:
    """``P(Z > x)`` of the standard normal."""
    if math.isnan(x):
        return math.nan
    if x >= NORM_SF_ZERO:
        return 0.0
    if x <= -NORM_SF_ZERO:
        return 1.0
    u = x * _INV_SQRT2
    du = _product_error(x, _INV_SQRT2, u) + x * _INV_SQRT2_LO  # x/√2 = u + du
    return 0.5 * (math.erfc(u) - du * _TWO_OVER_SQRT_PI * math.exp(-u * u))


def _norm_pdf(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


@lru_cache(maxsize=256)
def norm_ppf(q: float) -> float:
    """The standard normal quantile at ``q`` (``0 < q < 1``)."""
    if not 0.0 < q < 1.0:
        return -math.inf if q == 0.0 else math.inf if q == 1.0 else math.nan
    if q == 0.5:
        return 0.0
    tail = min(q, 1.0 - q)  # exact for q ≥ ½ (Sterbenz)
    x = -NormalDist().inv_cdf(tail)  # > 0
    for _ in range(3):
        step = (norm_sf(x) - tail) / _norm_pdf(x)
        x += step
        if abs(step) <= 1e-17 * x:
            break
    return x if q > 0.5 else -x


# ----------------------------------------------------------------------- Student's t


def _cos2(t: float, nu: int) -> tuple[float, float]:
    """``cos²θ = ν / (ν + t²)`` as a float and its rounding error's ratio to it: the sums below
    hold its k-th power, whose relative error k times that would be (a shift of t by ~ν/t²
    ulps), so each sum also collects ``Σ k·term`` to correct it to first order."""
    p = t * t
    p_err = _product_error(t, t, p)
    d = nu + p
    d_err = (nu - (d - (d - nu))) + (p - (d - nu)) + p_err  # ν + t² = d + d_err
    c2 = nu / d
    q = c2 * d
    rest = ((nu - q) - _product_error(c2, d, q)) - c2 * d_err  # ν − c2 (d + d_err)
    return c2, rest / d / c2


def _t_prob(t: float, nu: int, beyond: bool) -> float:
    """``P(|T| > t)`` (``beyond``) or ``P(|T| ≤ t)`` for ``t ≥ 0`` and ``ν ≥ 2``: A&S 26.7.3
    (odd ν) and 26.7.4 (even ν) sum ``P(|T| ≤ t)`` over the terms below ``m``; the same
    series carried on from ``m`` sums to ``P(|T| > t)`` (positive terms: no cancellation)."""
    c2, rel = _cos2(t, nu)
    odd = nu % 2
    m = (nu - 1) // 2 if odd else nu // 2
    total, moment = (0.0, 0.0) if beyond else (1.0, 0.0)  # Σ term_k, Σ k·term_k so far
    term, k = 1.0, 1
    while k < m or beyond:
        term *= c2 * ((2 * k) / (2 * k + 1) if odd else (2 * k - 1) / (2 * k))
        if (k >= m) == beyond:  # within: the terms below m; beyond: those from m on
            total += term
            moment += k * term
            if beyond and term < 2.0**-60 * (1.0 - c2) * total:
                break  # the rest, below term / sin²θ, is negligible
        k += 1
    total += rel * moment
    sin = t / math.sqrt(nu + t * t)
    if not odd:
        return sin * total
    part = sin * math.sqrt(c2) * total
    return 2.0 * (part if beyond else math.atan(t / math.sqrt(nu)) + part) / math.pi


def _t_pdf(t: float, nu: int) -> float:
    return math.exp(
        math.lgamma((nu + 1) / 2)
        - math.lgamma(nu / 2)
        - 0.5 * math.log(nu * math.pi)
        - (nu + 1) / 2 * math.log1p(t * t / nu)
    )


def _cornish_fisher(z: float, nu: int) -> float:
    """The t quantile from the normal one, to ``ν⁻⁴`` (A&S 26.7.5)."""
    z2 = z * z
    g1 = (z2 + 1) * z / 4
    g2 = ((5 * z2 + 16) * z2 + 3) * z / 96
    g3 = (((3 * z2 + 19) * z2 + 17) * z2 - 15) * z / 384
    g4 = ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) * z / 92160
    return z + (g1 + (g2 + (g3 + g4 / nu) / nu) / nu) / nu


@lru_cache(maxsize=1024)
def t_ppf(q: float, df: int) -> float:
    """Student's t quantile at ``q`` with ``df`` (a whole number ≥ 1) degrees of freedom."""
    df = int(df)
    if df < 1:
        raise ValueError(f"degrees of freedom must be ≥ 1, not {df}")
    if not 0.0 < q < 1.0:
        return -math.inf if q == 0.0 else math.inf if q == 1.0 else math.nan
    if q == 0.5:
        return 0.0
    upper = q > 0.5
    if df > T_SERIES_MAX:
        t = _cornish_fisher(norm_ppf(q if upper else 1.0 - q), df)
    else:
        t = _t_newton(2.0 * q - 1.0 if upper else 1.0 - 2.0 * q, df)  # exact for q > ½
    return t if upper else -t


def _t_newton(level: float, nu: int) -> float:
    """The ``t`` where ``P(|T| ≤ t) = level``: Newton's method on ``P(|T| > t)`` from a level
    of 0.9 (where ``P(|T| ≤ t)`` would lose the digits of ``1 − level``), else on
    ``P(|T| ≤ t)``."""
    if nu == 1:  # P(|T| > t) = 1 − 2 atan(t)/π
        return 1.0 / math.tan(math.pi * (1.0 - level) / 2)
    if nu == 2:
        return level * math.sqrt(2.0 / ((1.0 - level) * (1.0 + level)))
    beyond = level >= 0.9
    goal = 1.0 - level if beyond else level  # exact from 0.5
    sign = -1.0 if beyond else 1.0  # P(|T| > t) falls as t grows
    t = _cornish_fisher(-NormalDist().inv_cdf((1.0 - level) / 2), nu)
    for _ in range(50):
        step = sign * (_t_prob(t, nu, beyond) - goal) / (2.0 * _t_pdf(t, nu))
        if step >= t:  # Newton would cross zero (far right of the root): halve instead
            t /= 2
            continue
        t -= step
        if abs(step) <= 1e-15 * t:
            break
    return t


# ----------------------------------------------------------------------- hypergeometric


def hypergeom_cdf(x: int, total: int, good: int, draws: int) -> float:
    """``P(X ≤ x)`` for ``X`` the number of ``good`` items among ``draws`` taken without
    replacement from ``total`` (scipy's ``hypergeom.cdf(x, total, good, draws)``)."""
    lo, hi = max(0, draws - (total - good)), min(good, draws)
    if x < lo:
        return 0.0
    if x >= hi:
        return 1.0
    bad = total - good
    mode = min(max((draws + 1) * (good + 1) // (total + 2), lo), hi)
    tiny, floor = 2.0**-60, sys.float_info.min  # a tail below floor (× the mode's term): 0
    below_x = above_x = 0.0  # Σ T(y) for y ≤ x and for y > x, relative to T(mode) = 1
    if mode <= x:
        below_x += 1.0
    else:
        above_x += 1.0
    # downward: T(y) = T(y + 1) (y + 1)(bad − draws + y + 1) / ((good − y)(draws − y))
    term, y = 1.0, mode - 1
    while y >= lo:
        term *= (y + 1) * (bad - draws + y + 1) / ((good - y) * (draws - y))
        if y <= x:
            below_x += term
            if term < tiny * below_x:
                break
        elif term < floor:  # P(X ≤ x) negligible
            break
        else:
            above_x += term
        y -= 1
    # upward: T(y) = T(y − 1) (good − y + 1)(draws − y + 1) / (y (bad − draws + y))
    term, y = 1.0, mode + 1
    while y <= hi:
        term *= (good - y + 1) * (draws - y + 1) / (y * (bad - draws + y))
        if y > x:
            above_x += term
            if term < tiny * above_x:
                break
        elif term < floor:  # P(X > x) negligible
            break
        else:
            below_x += term
        y += 1
    return below_x / (below_x + above_x)


def fisher_greater(table: list[list[int]]) -> float:
    """One-sided (``greater``) Fisher exact p of a 2×2 table, as scipy's ``fisher_exact``:
    1 when a row or a column is empty, else ``hypergeom.cdf(c01, n, r0, c01 + c11)``."""
    (c00, c01), (c10, c11) = table
    if min(c00 + c01, c10 + c11, c00 + c10, c01 + c11) == 0:
        return 1.0
    n = c00 + c01 + c10 + c11
    return min(hypergeom_cdf(c01, n, c00 + c01, c01 + c11), 1.0)
