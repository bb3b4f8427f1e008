"""Classical tests: paired Wilcoxon on log ratios with Hodges–Lehmann, Mann–Whitney, McNemar,
and the one-sided comparison of error rates. Thin, documented wrappers over scipy.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

HL_EXACT_MAX = 2000  # above this many values, Walsh averages / pair differences are sampled
HL_SAMPLE = 1_000_000


@dataclass
class RankTest:
    """One rank test of B against A on one metric."""

    test: str  # "wilcoxon" (paired, on log(B/A)) or "mann-whitney"
    n: int  # pairs (wilcoxon) or n_A + n_B (mann-whitney)
    p: float
    shift: float  # Hodges–Lehmann location as a ratio effect: exp(HL of log values) − 1

    def to_dict(self) -> dict:
        return {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in asdict(self).items()
        }


def _positive(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x[np.isfinite(x) & (x > 0)]


def hodges_lehmann_one(d: np.ndarray, seed: int = 0) -> float:
    """Median of the Walsh averages ``(d_i + d_j)/2, i ≤ j`` (one-sample HL estimator)."""
    d = np.asarray(d, dtype=np.float64)
    n = len(d)
    if not n:
        return math.nan
    if n <= HL_EXACT_MAX:
        i, j = np.triu_indices(n)
        walsh = d[i] + d[j]
        del i, j
        walsh /= 2
        return float(np.median(walsh, overwrite_input=True))  # no copy of 2 M values
    rng = np.random.default_rng(seed)  # drawn a slice at a time: the same stream, less memory
    walsh = np.empty(HL_SAMPLE)
    for lo, hi in _slices(HL_SAMPLE):
        walsh[lo:hi] = d[rng.integers(0, n, hi - lo)]
    for lo, hi in _slices(HL_SAMPLE):
        walsh[lo:hi] += d[rng.integers(0, n, hi - lo)]
    walsh /= 2
    return float(np.median(walsh, overwrite_input=True))


def hodges_lehmann_two(a: np.ndarray, b: np.ndarray, seed: int = 0) -> float:
    """Median of all differences ``b_j − a_i`` (two-sample HL shift)."""
    if not len(a) or not len(b):
        return math.nan
    if len(a) * len(b) <= HL_EXACT_MAX**2:  # the median sorts its input in place: no copy
        return float(np.median(np.subtract.outer(b, a), overwrite_input=True))
    rng = np.random.default_rng(seed)  # the pairs are drawn a slice at a time (the same stream)
    diff = np.empty(HL_SAMPLE)
    for lo, hi in _slices(HL_SAMPLE):
        diff[lo:hi] = b[rng.integers(0, len(b), hi - lo)]
    for lo, hi in _slices(HL_SAMPLE):
        diff[lo:hi] -= a[rng.integers(0, len(a), hi - lo)]
    return float(np.median(diff, overwrite_input=True))


def _slices(n: int, size: int = 1 << 16) -> list[tuple[int, int]]:
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def wilcoxon_log_ratio(a: np.ndarray, b: np.ndarray) -> RankTest:
    """Paired: ``a[i]`` and ``b[i]`` are the same item. Wilcoxon signed-rank (two-sided, scipy's
    automatic exact/normal choice, zeros dropped) on ``log(b/a)``; HL location of the log ratios."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    d = np.log(b[keep] / a[keep])
    if len(d) < 2 or not np.any(d != 0):
        return RankTest(
            "wilcoxon", len(d), 1.0 if len(d) else math.nan, 0.0 if len(d) else math.nan
        )
    from scipy import stats as sps  # imported when needed: ~50 MB of RSS

    res = sps.wilcoxon(d, zero_method="wilcox", alternative="two-sided")
    return RankTest("wilcoxon", len(d), float(res.pvalue), math.expm1(hodges_lehmann_one(d)))


def mann_whitney(a: np.ndarray, b: np.ndarray) -> RankTest:
    """Unpaired: Mann–Whitney U (two-sided, scipy's automatic method) and the two-sample HL
    shift of the log values as a ratio."""
    a, b = _positive(a), _positive(b)
    if len(a) < 1 or len(b) < 1:
        return RankTest("mann-whitney", len(a) + len(b), math.nan, math.nan)
    from scipy import stats as sps  # imported when needed: ~50 MB of RSS

    res = sps.mannwhitneyu(b, a, alternative="two-sided")
    shift = math.expm1(hodges_lehmann_two(np.log(a), np.log(b)))
    return RankTest("mann-whitney", len(a) + len(b), float(res.pvalue), shift)


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for discordant counts ``b`` (A right, B wrong) and ``c``
    (A wrong, B right): ``min(1, 2 · P(X ≤ min(b, c)))``, X ~ Binomial(b + c, ½)."""
    if b < 0 or c < 0:
        raise ValueError("discordant counts must be ≥ 0")
    n = b + c
    if n == 0:
        return 1.0
    from scipy import stats as sps  # imported when needed: ~50 MB of RSS

    return float(min(1.0, 2.0 * sps.binom.cdf(min(b, c), n, 0.5)))


def error_rate_higher_p(errors_a: int, sent_a: int, errors_b: int, sent_b: int) -> float:
    """One-sided Fisher exact p-value that B's error rate is higher than A's."""
    if sent_a <= 0 or sent_b <= 0:
        return math.nan
    table = [[errors_b, sent_b - errors_b], [errors_a, sent_a - errors_a]]
    from scipy import stats as sps  # imported when needed: ~50 MB of RSS

    return float(sps.fisher_exact(table, alternative="greater").pvalue)


def _tango_score(d: float, b: float, c: float, n: float) -> float:
    """Tango's score statistic for ``Δ = (c − b)/n = d`` (decreasing in ``d``)."""
    # restricted MLE of P(A right, B wrong) under Δ = d: the root of
    # 2n q² + (−b − c + (2n − c + b) d) q − b d (1 − d) = 0 that lies in [0, 1]
    pb = -b - c + (2 * n - c + b) * d
    pc = -b * d * (1 - d)
    q = (math.sqrt(max(pb * pb - 8 * n * pc, 0.0)) - pb) / (4 * n)
    var = n * (2 * q + d * (1 - d))
    diff = c - b - n * d
    if var <= 0:
        return 0.0 if diff == 0 else math.copysign(math.inf, diff)
    return diff / math.sqrt(var)


def paired_difference_ci(b: float, c: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """Tango's (1998) asymptotic score interval for the difference of paired proportions
    ``Δ = p(B right) − p(A right) = (c − b) / n`` (``b``: A right and B wrong, ``c``: the reverse).

    Unlike a bootstrap or Wald interval it has width when no pair is discordant (``b = c = 0``
    gives ``±z² / (n + z²)``: 12 items ±24 pp, 400 items ±1 pp), and its coverage stays near
    nominal for few discordant pairs (Tango 1998; Newcombe 1998 compared it with ten others).
    Counts may be fractional (a design-effect adjustment divides them). NaN when ``n = 0``.
    """
    if not n > 0:
        return math.nan, math.nan
    from scipy import stats as sps  # imported when needed: ~50 MB of RSS
    from scipy.optimize import brentq

    z = float(sps.norm.ppf(1 - (1 - level) / 2))
    est = (c - b) / n
    eps = 1e-12

    def bound(lo: float, hi: float, target: float) -> float:
        f = lambda d: _tango_score(d, b, c, n) - target  # noqa: E731
        if f(lo) * f(hi) > 0:  # no crossing inside: the interval reaches the end
            return hi if target < 0 else lo
        return float(brentq(f, lo, hi, xtol=1e-10))

    lower = bound(-1 + eps, min(est, 1 - eps), z) if est > -1 + eps else -1.0
    upper = bound(max(est, -1 + eps), 1 - eps, -z) if est < 1 - eps else 1.0
    return max(-1.0, lower), min(1.0, upper)
