"""The verdict's distribution figures without scipy.stats, held to scipy's and to exact
arithmetic (decimal to 60–80 digits, rational sums): abtui.stats.distributions and the rank
tests and Fisher test of abtui.stats.classical that use them."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import special
from scipy import stats as sps

from abtui.stats import classical
from abtui.stats import distributions as dist
from abtui.stats.bootstrap import expansion

LEVELS = (0.5, 0.8, 0.9, 0.95, 0.99, 0.999)


def _close(got: float, ref: float, rel: float) -> bool:
    return got == ref or abs(got - ref) <= rel * max(abs(got), abs(ref))


def _ulps(got: float, ref: float) -> float:
    return abs(got - ref) / math.ulp(ref)


PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494459")


def _t_within_exact(t: Decimal, nu: int) -> Decimal:
    """``P(|T| ≤ t)`` in the current decimal context (A&S 26.7.3 and 26.7.4)."""
    c2 = nu / (nu + t * t)
    s = t / (nu + t * t).sqrt()
    term = total = Decimal(1)
    if nu % 2 == 0:
        for k in range(1, nu // 2):
            term = term * c2 * (2 * k - 1) / (2 * k)
            total += term
        return s * total
    y, halvings = t / Decimal(nu).sqrt(), 0  # θ = atan(t / √ν): halve, then the series
    while y > Decimal("0.05"):
        y, halvings = y / (1 + (1 + y * y).sqrt()), halvings + 1
    theta, add, k = y, y, 0
    while abs(add) > Decimal(10) ** -90:
        k += 1
        add = add * -y * y * (2 * k - 1) / (2 * k + 1)
        theta += add
    theta *= 2**halvings
    for k in range(1, (nu - 1) // 2):
        term = term * c2 * (2 * k) / (2 * k + 1)
        total += term
    return 2 * (theta + s * c2.sqrt() * total) / PI if nu > 1 else 2 * theta / PI


def test_t_quantile_within_1e_14_of_scipy_and_a_few_ulps_of_the_root():
    dfs = [*range(1, 130), 255, 499, 500, 999, 5000, 99_999, 100_000, 100_001, 10**6]
    for level in LEVELS:
        q = (1 + level) / 2
        for df in dfs:
            got = dist.t_ppf(q, df)
            assert _close(got, float(sps.t.ppf(q, df)), 1e-14), (q, df)
            assert dist.t_ppf(1 - q, df) == pytest.approx(-got, rel=1e-14)
    # the root, in 80 digits, lies within 64 ulps of the result (floats: the sums' rounding
    # grows with ν; ≤ 47 ulps seen up to ν = 2,000, ~6e-15)
    for df, q in itertools.product((1, 2, 3, 7, 12, 40, 77, 499, 1999), (0.975, 0.9995, 0.75)):
        got = dist.t_ppf(q, df)
        lo, hi = got - 64 * math.ulp(got), got + 64 * math.ulp(got)
        with localcontext() as ctx:
            ctx.prec = 80
            level = 2 * Decimal(q) - 1
            a_lo, a_hi = (_t_within_exact(Decimal(x), df) for x in (lo, hi))
        assert a_lo < level < a_hi, (df, q)
    assert dist.t_ppf(0.5, 9) == 0.0
    assert dist.t_ppf(0.975, 1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-15)


def test_normal_quantile_and_tail_within_a_few_ulps():
    rng = np.random.default_rng(1)
    for q in [0.975, 0.95, 0.995, 0.6, 0.025, 1e-10, 1 - 1e-15, 1e-300, *rng.uniform(0, 1, 300)]:
        assert _close(dist.norm_ppf(float(q)), float(special.ndtri(q)), 1e-14), q
    # Q(x) in the far tail: scipy's float arithmetic loses ~x² ulps there, this not
    for x in [0.0, 0.5, 1.0, 1.96, 3.0, 8.0, -2.5, 20.0, 37.5, *rng.normal(0, 5, 300)]:
        assert _close(dist.norm_sf(float(x)), float(special.ndtr(-x)), 1e-12), x
    assert dist.norm_sf(39.5) == 0.0 and dist.norm_sf(-39.5) == 1.0
    # an independent reference: Laplace's continued fraction Q(x) = φ(x) / (x + 1/(x + 2/(x + …)))
    for x in (2.0, 3.5, 6.25, 30.0):
        with localcontext() as ctx:
            ctx.prec = 60
            f = Decimal(0)
            for k in range(4000, 0, -1):
                f = k / (Decimal(x) + f)
            ref = (-(Decimal(x) ** 2) / 2).exp() / (2 * PI).sqrt() / (Decimal(x) + f)
        assert _ulps(dist.norm_sf(x), float(ref)) <= 2, x
    # the quantile of the float 0.975 (0.97499999999999997779…), not of the decimal 0.975
    assert dist.norm_ppf(0.975) == 1.9599639845400538


def test_expansion_factor_is_scipys_within_1e_14():
    for level in (0.9, 0.95, 0.99):
        q = (1 + level) / 2
        for b in (2, 3, 5, 13, 25, 100, 501, 4000):
            ref = math.sqrt(b / (b - 1)) * float(sps.t.ppf(q, b - 1)) / float(sps.norm.ppf(q))
            assert _close(expansion(b, level), ref, 1e-14), (b, level)


def _hypergeom_exact(x: int, total: int, good: int, draws: int) -> float:
    lo = max(0, draws - (total - good))
    num = sum(math.comb(good, y) * math.comb(total - good, draws - y) for y in range(lo, x + 1))
    return float(Fraction(num, math.comb(total, draws)))


def test_hypergeometric_cdf_is_the_exact_sum_within_1e_13():
    """Against exact rational sums (small populations) and, far in the tails of large ones,
    scipy's (boost's float arithmetic there is good to ~1e-10)."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        total = int(rng.integers(1, 300))
        good, draws = int(rng.integers(0, total + 1)), int(rng.integers(0, total + 1))
        lo, hi = max(0, draws - (total - good)), min(good, draws)
        for x in {lo - 1, lo, (lo + hi) // 2, int(rng.integers(lo, hi + 1)), hi}:
            got = dist.hypergeom_cdf(x, total, good, draws)
            assert _close(got, _hypergeom_exact(x, total, good, draws) if x >= lo else 0.0, 1e-13)
    for x, total, good, draws in (
        (3, 200_000, 100_000, 20),
        (5_000, 200_000, 100_000, 10_300),
        (49_800, 200_000, 100_000, 100_000),
        (0, 10**6, 5, 500_000),
    ):
        got, ref = (
            dist.hypergeom_cdf(x, total, good, draws),
            sps.hypergeom.cdf(x, total, good, draws),
        )
        assert _close(got, float(ref), 1e-9), (x, total, good, draws)


def _fisher_exact_greater(table) -> float:
    """P(B's errors ≥ observed | all margins), as an exact fraction: the errors' tail."""
    (eb, okb), (ea, oka) = table
    sb, sa, errors = eb + okb, ea + oka, eb + ea
    if min(sb, sa, errors, okb + oka) == 0:
        return 1.0
    num = sum(math.comb(sb, y) * math.comb(sa, errors - y) for y in range(eb, min(sb, errors) + 1))
    return float(Fraction(num, math.comb(sa + sb, errors)))


def test_fisher_one_sided_is_the_exact_sum_and_scipys():
    """The rational sum's within 1e-13; scipy's within 1e-12 on small tables, 1e-9 on large
    ones (boost's float arithmetic: 3.6e-11 off at 200,000 requests)."""
    rng = np.random.default_rng(3)
    tables = [
        [[0, 100], [0, 100]],
        [[3, 97], [0, 100]],
        [[0, 100], [5, 95]],
        [[40, 60], [35, 65]],
        [[1, 0], [0, 1]],
        [[0, 0], [1, 1]],
        [[120, 99_880], [80, 99_920]],
    ]
    for _ in range(200):
        sa, sb = int(rng.integers(1, 5000)), int(rng.integers(1, 5000))
        eb, ea = int(rng.integers(0, sb // 10 + 1)), int(rng.integers(0, sa // 10 + 1))
        tables.append([[eb, sb - eb], [ea, sa - ea]])
    for t in tables:
        got = dist.fisher_greater(t)
        assert _close(got, _fisher_exact_greater(t), 1e-13), t
        ref = float(sps.fisher_exact(t, alternative="greater").pvalue)
        assert _close(got, ref, 1e-12 if sum(map(sum, t)) < 2000 else 1e-9), t
    got = classical.error_rate_higher_p(5, 1000, 9, 1000)
    assert _close(got, _fisher_exact_greater([[9, 991], [5, 995]]), 1e-13)
    assert math.isnan(classical.error_rate_higher_p(0, 0, 1, 10))


def _samples(rng, n: int, digits: int) -> np.ndarray:
    x = rng.lognormal(0, 1, n)
    return np.maximum(np.round(x, digits), 0.01) if digits else x


def test_mann_whitney_is_scipys():
    """scipy's statistic by its own arithmetic, its p to 1e-12 (the normal tail correctly
    rounded: scipy's loses up to ~z² ulps far out); small untied samples use scipy's exact
    distribution, the rest never import scipy.stats."""
    rng = np.random.default_rng(0)
    equal = 0
    for _ in range(200):
        n1, n2 = (int(rng.choice([2, 8, 9, 30, 400, 5000])) for _ in range(2))
        digits = int(rng.choice([0, 1, 2]))
        a, b = _samples(rng, n1, digits), _samples(rng, n2, digits) * math.exp(rng.normal(0, 0.1))
        ref = float(sps.mannwhitneyu(b, a, alternative="two-sided").pvalue)
        got = classical._mann_whitney_p(b, a)
        if got is None:
            assert min(n1, n2) <= 8 and len(np.unique(np.concatenate([a, b]))) == n1 + n2
            continue
        assert _close(got, ref, 1e-12), (n1, n2, digits, got, ref)
        equal += got == ref
        assert classical.mann_whitney(a, b).p == got
    assert equal > 20  # many are bit-equal: the tail is the only difference
    assert classical._mann_whitney_p(np.ones(10), np.ones(12)) == 1.0  # all tied: scipy's 1


def test_wilcoxon_is_scipys():
    rng = np.random.default_rng(1)
    for _ in range(300):
        m = int(rng.choice([2, 5, 13, 14, 30, 50, 51, 200, 5000]))
        digits = int(rng.choice([0, 2, 3]))
        x = _samples(rng, m, digits)
        y = x * np.exp(rng.normal(0.02, 0.1, m))
        if digits:
            y = np.maximum(np.round(y, digits), 0.01)
        d = np.log(y / x)
        if len(d) < 2 or not np.any(d != 0):
            continue
        got = classical._wilcoxon_p(d)
        if got is None:  # scipy's permutation test (1.4 s each): ≤ 13 pairs with ties or zeros
            assert m <= 13 and (np.any(d == 0) or len(np.unique(np.abs(d))) < m)
            continue
        ref = float(sps.wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)
        assert _close(got, ref, 1e-12), (m, digits, got, ref)
        if m <= 50 and len(np.unique(np.abs(d))) == m and np.all(d != 0):
            assert got == ref  # the exact distribution: whole-number counts, bit for bit
