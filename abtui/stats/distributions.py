"""The few distribution figures a verdict needs, without scipy.stats (issue 19.2).

Importing ``scipy.stats`` costs a process ~72 MB of RSS and ~0.8 s of CPU (``scipy.special``
alone 26 MB and 0.3 s); a verdict needs only the normal quantile and upper tail, Student's t
quantile at a whole number of degrees of freedom (the expanded percentile interval,
:func:`abtui.stats.bootstrap.expansion`), and a hypergeometric tail (the one-sided Fisher test
of error rates). Each is computed here in decimal arithmetic to 40 or more significant digits
and rounded to a float once, so the result is the correctly rounded value: scipy's own where
scipy's is correctly rounded (``tests/calibration/test_distributions.py`` holds them to scipy's).

- :func:`norm_sf` ``Q(x) = P(Z > x)``: the Maclaurin series of ``erf`` (alternating; the
  working precision grows with ``x²`` to absorb its cancellation); 0 beyond ``x = 39``, where
  the float underflows.
- :func:`norm_ppf`: Newton's method on ``Q`` from the standard library's estimate (a few ulps
  off), each step in decimal.
- :func:`t_ppf`: Newton's method on the two-sided t distribution function ``A(t | ν)``, the
  finite sums of Abramowitz & Stegun 26.7.3 (odd ν) and 26.7.4 (even ν) in decimal; the slope
  is the float density (an approximate slope costs only a few more steps: the error shrinks by
  the slope's relative error each step). From the right of the root or the left, Newton's
  method on an increasing concave function ends on the left and climbs, so it always
  converges. Above :data:`T_SERIES_MAX` degrees of freedom the Cornish–Fisher expansion to
  ``ν⁻⁴`` (A&S 26.7.5), whose remainder is below 10⁻²⁰ there.
- :func:`hypergeom_cdf`: the terms summed outward from the mode by their ratio recurrence, in
  decimal (no cancellation, no underflow), until they no longer change the sum.
"""

from __future__ import annotations

import math
from decimal import Decimal, getcontext, localcontext
from functools import lru_cache
from statistics import NormalDist

PREC = 50  # decimal digits of the working precision (more where cancellation needs it)
T_SERIES_MAX = 100_000  # degrees of freedom up to which t's distribution is summed exactly
NORM_SF_ZERO = 39.0  # Q(x) < 2⁻¹⁰⁷⁴ (the smallest float) beyond this


@lru_cache(maxsize=16)
def _pi_at(prec: int) -> Decimal:
    """π to ``prec`` digits (Gauss–Legendre: the digits double each step)."""
    with localcontext() as ctx:
        ctx.prec = prec + 10
        a, b, t, p = Decimal(1), Decimal(1) / Decimal(2).sqrt(), Decimal("0.25"), Decimal(1)
        while True:
            an = (a + b) / 2
            b = (a * b).sqrt()
            t -= p * (a - an) ** 2
            a, p = an, 2 * p
            if abs(a - b) < Decimal(10) ** -(prec + 5):
                break
        pi = (a + b) ** 2 / (4 * t)
    return +pi


def _pi() -> Decimal:
    return _pi_at(getcontext().prec)


def _sqrt_2pi() -> Decimal:
    return (2 * _pi()).sqrt()


def _norm_sf_dec(x: Decimal) -> Decimal:
    """``Q(x)`` for ``x ≥ 0`` in the current context, computed with enough extra digits for
    the series' cancellation (its largest term is about ``e^{x²/2}``)."""
    extra = int(float(x) ** 2 * 0.4343) + 10
    with localcontext() as ctx:
        ctx.prec += extra
        x = +x
        x2 = x * x / 2
        term = x  # (−1)ⁿ x^{2n+1} / (2ⁿ n!): the series Σ term / (2n + 1) is √(2π) (Φ(x) − ½)
        total = x
        n = 0
        eps = Decimal(10) ** (-(ctx.prec + 5))
        while True:
            n += 1
            term = -term * x2 / n
            add = term / (2 * n + 1)
            total += add
            if abs(add) < eps:
                break
        q = Decimal("0.5") - total / _sqrt_2pi()
    return +q


def _norm_pdf_dec(x: Decimal) -> Decimal:
    return (-(x * x) / 2).exp() / _sqrt_2pi()


def norm_sf(x: float) -> float:
    """``P(Z > x)`` of the standard normal, correctly rounded (module docstring)."""
    if math.isnan(x):
        return math.nan
    if x >= NORM_SF_ZERO:
        return 0.0
    if x <= -NORM_SF_ZERO:
        return 1.0
    with localcontext() as ctx:
        ctx.prec = PREC
        d = Decimal(x)
        q = _norm_sf_dec(abs(d))
        return float(q if x >= 0 else 1 - q)


@lru_cache(maxsize=256)
def norm_ppf(q: float) -> float:
    """The standard normal quantile at ``q`` (``0 < q < 1``), correctly rounded."""
    if not 0.0 < q < 1.0:
        return -math.inf if q == 0.0 else math.inf if q == 1.0 else math.nan
    with localcontext() as ctx:
        ctx.prec = PREC
        return float(_norm_ppf_dec(Decimal(q)))


def _norm_ppf_dec(q: Decimal) -> Decimal:
    """The normal quantile at ``q`` in the current context."""
    upper = q > Decimal("0.5")
    tail = 1 - q if upper else q  # exact: q is a float's exact value
    x = Decimal(abs(NormalDist().inv_cdf(float(tail))))
    tol = Decimal(10) ** (-(getcontext().prec - 5))
    for _ in range(20):
        step = (_norm_sf_dec(x) - tail) / _norm_pdf_dec(x)
        x += step
        if abs(step) <= tol * x:
            break
    return x if upper else -x


# ----------------------------------------------------------------------- Student's t


def _atan_dec(y: Decimal) -> Decimal:
    """``atan(y)`` for ``y ≥ 0`` (argument halved until small, then its series)."""
    halvings = 0
    while y > Decimal("0.05"):
        y = y / (1 + (1 + y * y).sqrt())
        halvings += 1
    y2 = y * y
    term, total, k = y, y, 0
    eps = Decimal(10) ** (-(getcontext().prec + 5))
    while True:
        k += 1
        term = -term * y2
        add = term / (2 * k + 1)
        total += add
        if abs(add) < eps:
            break
    return total * (2**halvings)


def _t_within(t: Decimal, nu: int) -> Decimal:
    """``A(t | ν) = P(|T| ≤ t)`` for ``t ≥ 0`` (A&S 26.7.3 and 26.7.4)."""
    c2 = nu / (nu + t * t)  # cos²θ, θ = atan(t / √ν)
    s = t / (nu + t * t).sqrt()  # sin θ
    if nu % 2 == 0:
        term, total = Decimal(1), Decimal(1)
        for k in range(1, nu // 2):
            term = term * c2 * (2 * k - 1) / (2 * k)
            total += term
        return s * total
    theta = _atan_dec(t / Decimal(nu).sqrt())
    if nu == 1:
        return 2 * theta / _pi()
    term, total = Decimal(1), Decimal(1)
    for k in range(1, (nu - 1) // 2):
        term = term * c2 * (2 * k) / (2 * k + 1)
        total += term
    return 2 * (theta + s * c2.sqrt() * total) / _pi()


def _t_pdf(t: float, nu: int) -> float:
    """Student's t density (float: only Newton's slope)."""
    return math.exp(
        math.lgamma((nu + 1) / 2)
        - math.lgamma(nu / 2)
        - 0.5 * math.log(nu * math.pi)
        - (nu + 1) / 2 * math.log1p(t * t / nu)
    )


def _cornish_fisher(z: Decimal, nu: int) -> Decimal:
    """The t quantile from the normal one, to ``ν⁻⁴`` (A&S 26.7.5)."""
    z2 = z * z
    g1 = (z2 + 1) * z / 4
    g2 = ((5 * z2 + 16) * z2 + 3) * z / 96
    g3 = (((3 * z2 + 19) * z2 + 17) * z2 - 15) * z / 384
    g4 = ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) * z / 92160
    v = Decimal(nu)
    return z + g1 / v + g2 / v**2 + g3 / v**3 + g4 / v**4


@lru_cache(maxsize=1024)
def t_ppf(q: float, df: int) -> float:
    """Student's t quantile at ``q`` with ``df`` (a whole number ≥ 1) degrees of freedom,
    correctly rounded (module docstring)."""
    df = int(df)
    if df < 1:
        raise ValueError(f"degrees of freedom must be ≥ 1, not {df}")
    if not 0.0 < q < 1.0:
        return -math.inf if q == 0.0 else math.inf if q == 1.0 else math.nan
    if q == 0.5:
        return 0.0
    with localcontext() as ctx:
        ctx.prec = PREC
        qd = Decimal(q)
        upper = qd > Decimal("0.5")
        level = 2 * qd - 1 if upper else 1 - 2 * qd  # exact: P(|T| ≤ t) to reach
        if df > T_SERIES_MAX:
            t = _cornish_fisher(_norm_ppf_dec(qd if upper else 1 - qd), df)
        else:
            t = _t_newton(level, df)
        return float(t if upper else -t)


def _t_newton(level: Decimal, nu: int) -> Decimal:
    lv = float(level)
    if nu == 1:
        start = math.tan(math.pi * lv / 2)
    elif nu == 2:
        start = lv * math.sqrt(2 / (1 - lv * lv))
    else:
        start = float(_cornish_fisher(Decimal(NormalDist().inv_cdf((1 + lv) / 2)), nu))
    t = Decimal(start if math.isfinite(start) and start > 0 else 1.0)
    tol = Decimal(10) ** (-(PREC - 8))
    for _ in range(200):
        g = _t_within(t, nu) - level
        slope = 2 * _t_pdf(float(t), nu)
        step = g / Decimal(slope)
        if step >= t:  # Newton would cross zero (far right of the root): halve instead
            t = t / 2
            continue
        t -= step
        if abs(step) <= tol * t:
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
    with localcontext() as ctx:
        ctx.prec = PREC
        tiny = Decimal(10) ** -(PREC + 10)
        floor = Decimal(10) ** -400  # a tail this far below the mode's term rounds to 0.0
        below_x = Decimal(0)  # Σ T(y), y ≤ x
        above_x = Decimal(0)  # Σ T(y), y > x
        one = Decimal(1)  # T(mode) = 1: every term relative to it
        if mode <= x:
            below_x += one
        else:
            above_x += one
        # downward: T(y) = T(y + 1) (y + 1)(bad − draws + y + 1) / ((good − y)(draws − y))
        term, y = one, mode - 1
        while y >= lo:
            term = term * ((y + 1) * (bad - draws + y + 1)) / ((good - y) * (draws - y))
            if y <= x:
                below_x += term
                if term < tiny * below_x:
                    break
            elif term < floor:  # P(X ≤ x) is below 10⁻⁴⁰⁰ of the mode's term: 0
                break
            else:
                above_x += term
            y -= 1
        # upward: T(y) = T(y − 1) (good − y + 1)(draws − y + 1) / (y (bad − draws + y))
        term, y = one, mode + 1
        while y <= hi:
            term = term * ((good - y + 1) * (draws - y + 1)) / (y * (bad - draws + y))
            if y > x:
                above_x += term
                if term < tiny * above_x:
                    break
            elif term < floor:  # P(X > x) negligible
                break
            else:
                below_x += term
            y += 1
        return float(below_x / (below_x + above_x))


def fisher_greater(table: list[list[int]]) -> float:
    """One-sided (``greater``) Fisher exact p of a 2×2 table, as scipy's ``fisher_exact``:
    1 when a row or a column is empty, else ``hypergeom.cdf(c01, n, r0, c01 + c11)``."""
    (c00, c01), (c10, c11) = table
    if min(c00 + c01, c10 + c11, c00 + c10, c01 + c11) == 0:
        return 1.0
    n = c00 + c01 + c10 + c11
    return min(hypergeom_cdf(c01, n, c00 + c01, c01 + c11), 1.0)
