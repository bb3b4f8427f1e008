"""Anytime-valid intervals for a paired A/B: confidence sequences for ratios of means and of
quantiles, valid at every look and under optional stopping (docs/verdict.md §11).

A *confidence sequence* (CS) at level ``1 − α`` is a sequence of intervals ``C_1, C_2, …``
with ``P(∃ t: θ ∉ C_t) ≤ α``: a run may look after every request, stop when it likes, and the
interval it stops on still covers with ``1 − α``. A fixed-n interval recomputed at every look
does not (an A/A looked at every 20 pairs up to 1,000 misses Δ = 0 in 35 % of streams,
``tests/calibration/test_sequential.py``).

Two boundaries of Howard, Ramdas, McAuliffe & Sekhon (2021, "Time-uniform, nonparametric,
nonasymptotic confidence sequences"), written from the paper's formulas:

- :func:`normal_mixture`, the two-sided normal-mixture boundary for a process ``S_t`` whose
  increments are (asymptotically) Gaussian with intrinsic time ``V_t`` (the summed variance):
  ``|S_t| ≤ √((V + ρ) (log(1 + V/ρ) + 2 log(1/α)))`` for every ``t`` with probability
  ``≥ 1 − α``; ``ρ`` is fixed in advance to make it tightest at ``V = v_opt``. Used on the
  paired influence of a ratio of means or of central quantiles (:func:`paired_quantile_cs`),
  with the variance estimated (the asymptotic CS of Waudby-Smith, Arbour, Sinha, Kennedy &
  Ramdas 2024).
- :func:`stitched`, the polynomial stitched boundary for a sub-gamma process with scale ``c``:
  ``S_t ≤ √(k₁² V ℓ(V) + (k₂ c ℓ(V))²) + k₂ c ℓ(V)``, ``ℓ(V) = s log log(η V / m) +
  log(ζ(s) / (α log^s η))``; no asymptotics. Used on the empirical CDF at the true quantile
  (Howard & Ramdas 2022, "Sequential estimation of quantiles with applications to A/B-testing
  and best-arm identification"): ``N_t(q) − t p`` is a sum of centred Bernoulli increments,
  bounded by ``1 − p`` above and ``p`` below, hence sub-gamma with ``c = (1 − p)/3`` upwards and
  ``c = p/3`` downwards (Bernstein); its bounds become order statistics of the arm. Used for
  tail quantiles before the paired interval may be (:mod:`abtui.stats.seqdecide`).

Dependence. Latencies under load are autocorrelated, and a boundary on independent increments
would be too narrow. As the fixed verdict does (:func:`abtui.stats.bootstrap.block_shortfall`),
the variance is the long-run one, ``τ̂ γ(0)``, ``τ̂`` the integrated autocorrelation time of the
series the interval is about (:func:`abtui.stats.bootstrap.autocorrelation_time`: the larger of
the flat-top and ARMA(1,1) estimates, floored where that series is a few distinct values:
:func:`quantile_tau`, :func:`_paired_tau`): the partial sums of a weakly dependent series
behave like a Brownian motion with that variance.
A quantile's sub-gamma scale grows by ``τ̂`` too (a block of ``τ̂`` dependent indicators moves
the count by up to ``τ̂`` at once). No row is called from fewer than
:data:`abtui.stats.decide.MIN_EFFECTIVE` effectively independent units (``n / τ̂``), the fixed
verdict's rule: below it ``τ̂`` itself cannot be trusted.

Everything is on the log-ratio scale ``log(stat_B / stat_A)``; a bound is reported as a ratio −
1. Each side of an interval has its own level (``alpha_lo`` for the lower bound, ``alpha_hi``
for the upper), which is how the decision rule splits α (:mod:`abtui.stats.seqdecide`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from abtui.stats.bootstrap import autocorrelation_time

STITCH_S = 1.4  # the stitching's polynomial exponent and geometric spacing (the paper's defaults)
STITCH_ETA = 2.0
T_OPT = 500  # pairs at which the normal mixture is tightest (within 10 % from 100 to 10⁴)
NO_BOUND = math.inf
MAX_UNITS_HINT = 10**9  # the most units an estimate of what would decide may say


def _zeta(s: float) -> float:
    """Riemann ζ(s) for s > 1: 19 terms, then Euler–Maclaurin (error < 1e-13 for s ≤ 3)."""
    n = 20
    head = sum(k**-s for k in range(1, n))
    tail = n ** (1 - s) / (s - 1) + 0.5 * n**-s + s * n ** (-s - 1) / 12
    tail -= s * (s + 1) * (s + 2) * n ** (-s - 3) / 720
    tail += s * (s + 1) * (s + 2) * (s + 3) * (s + 4) * n ** (-s - 5) / 30240
    return head + tail


def best_rho(v_opt: float, alpha: float) -> float:
    """The normal mixture's precision ``ρ`` that makes its two-sided boundary at level ``α``
    narrowest near intrinsic time ``v_opt``, the choice of the authors' confseq library:
    ``v_opt / (2 log(1/α) + log(1 + 2 log(1/α)))``."""
    la = math.log(1.0 / alpha)
    return v_opt / (2.0 * la + math.log(1.0 + 2.0 * la))


def normal_mixture(v: float, alpha: float, v_opt: float = T_OPT) -> float:
    """Two-sided normal-mixture boundary at intrinsic time ``v``: with probability ``≥ 1 − α``
    no ``t`` has ``|S_t| > normal_mixture(V_t)``. Each side alone is crossed with probability
    ``≤ α`` (the mixture is at least its one-sided half on that side), so one side at level
    ``α`` uses this boundary at ``α``. ``ρ`` depends only on ``v_opt`` and ``α``: fixed in
    advance, never on the data."""
    if not v > 0:
        return 0.0
    rho = best_rho(v_opt, alpha)
    return math.sqrt((v + rho) * (math.log1p(v / rho) + 2.0 * math.log(1.0 / alpha)))


def stitched(
    v: float,
    alpha: float,
    v_min: float,
    c: float = 0.0,
    s: float = STITCH_S,
    eta: float = STITCH_ETA,
) -> float:
    """One-sided polynomial stitched boundary for a sub-gamma process of scale ``c`` (``c = 0``:
    sub-Gaussian): with probability ``≥ 1 − α`` no ``t`` has ``S_t`` above it at ``V_t``. Below
    ``v_min`` it stays at its value at ``v_min`` (the boundary holds for every ``V ≥ 0``)."""
    use_v = max(v, v_min)
    k1 = (eta**0.25 + eta**-0.25) / math.sqrt(2.0)
    k2 = (math.sqrt(eta) + 1.0) / 2.0
    ell = (
        s * math.log(math.log(eta * use_v / v_min))
        + math.log(_zeta(s) / math.log(eta) ** s)
        + math.log(1.0 / alpha)
    )
    term2 = k2 * c * ell
    return math.sqrt(k1 * k1 * use_v * ell + term2 * term2) + term2


@dataclass
class Interval:
    """An anytime-valid interval of ``log(stat_B / stat_A)`` (``est``, ``lo``, ``hi``; ±inf
    when the data cannot bound a side yet), its units and their dependence."""

    est: float
    lo: float
    hi: float
    n: int  # paired units (means) or the smaller arm's values (quantiles)
    tau: float  # the larger arm's (or the contrast's) autocorrelation time
    n_eff: float  # n / τ̂
    shape: str  # "mean" or "quantile": how the width falls with n (samples_to_clear)

    @property
    def lo_hi(self) -> tuple[float, float]:
        return self.lo, self.hi

    @property
    def ratio(self) -> tuple[float, float, float]:
        """(effect, lo, hi) as ratio − 1."""
        return tuple(_expm1(x) for x in (self.est, self.lo, self.hi))


def _expm1(x: float) -> float:
    """``exp(x) − 1``, ``+inf`` past what a float holds (a bound far out on the log scale)."""
    if not math.isfinite(x) or x > 700.0:
        return math.inf if x > 0 else x
    return math.expm1(x)


def _tau(x: np.ndarray) -> float:
    t = autocorrelation_time(x)
    return 1.0 if not math.isfinite(t) else max(1.0, t)


def _around(est: float, sd_long: float, n: int, alpha_lo: float, alpha_hi: float, v_opt: float):
    """``est ∓ σ_∞ · normal_mixture(n) / n``: the partial sums standardised by the long-run
    spread ``σ_∞ = σ̂ √τ̂`` run in intrinsic time ``n``, for which ``ρ`` was fixed in advance."""
    lo = est - sd_long * normal_mixture(n, alpha_lo, v_opt) / n
    hi = est + sd_long * normal_mixture(n, alpha_hi, v_opt) / n
    return lo, hi


def mean_ratio_cs(
    a: np.ndarray,
    b: np.ndarray,
    alpha_lo: float,
    alpha_hi: float,
    v_opt: float = T_OPT,
    tau: float | None = None,
) -> Interval:
    """CS for ``log(mean_B / mean_A)`` from paired values ``a[i]``, ``b[i]`` (the same item, in
    the order they were measured; pairs with a NaN are left out).

    The estimate's influence per pair is ``ψ_i = b_i / μ_B − a_i / μ_A`` (the linearised log
    ratio), ``S_n = Σ ψ_i`` with long-run variance ``σ̂² τ̂`` per pair, so the half-width is
    ``σ̂ √τ̂ · normal_mixture(n) / n`` (:func:`_around`). Pairing is kept: a load
    both arms see cancels in ψ. ``tau`` overrides ``τ̂`` (1: as if independent; for
    validation)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    n = len(a)
    if n < 2 or not (a.mean() > 0 and b.mean() > 0):
        return Interval(math.nan, -NO_BOUND, NO_BOUND, n, math.nan, 0.0, "mean")
    ma, mb = float(a.mean()), float(b.mean())
    psi = b / mb - a / ma
    sd = float(psi.std(ddof=1))
    tau = _tau(psi) if tau is None else tau
    est = math.log(mb / ma)
    lo, hi = _around(est, sd * math.sqrt(tau), n, alpha_lo, alpha_hi, v_opt)
    return Interval(est, lo, hi, n, tau, n / tau, "mean")


TAIL_TAU_LEVEL = 0.9  # a tail quantile's τ is at least the indicators' τ at this level
TAIL_TAU_SHARE = 0.5  # ... and this share of the values' (Gaussian AR(1): 0.5–0.6 at the P90)


def quantile_tau(x: np.ndarray, p: float, cache: dict | None = None) -> float:
    """``τ̂`` of the count of one arm's values below its ``p`` quantile (values in the order
    measured), at least 1: what the quantile's boundary must be widened by.

    A central quantile's indicators are about as dependent as the values (for a Gaussian
    process seen through any monotone map, a threshold indicator's correlation is at most the
    values', and near it at the median): the larger of the log values' ``τ̂`` and the
    indicators'. A tail's indicators are much less dependent than the values (AR(1) 0.9: τ 19
    for the values, 6.5 for the P99's indicators, 11 for the P90's), but their own ``τ̂`` rests
    on the few values beyond and is biased low (4.4 for that 6.5 over 5,000 values): the larger
    of it, the ``τ̂`` of the indicators at :data:`TAIL_TAU_LEVEL`, which are at least as
    dependent for such a process and are estimated from ten times the values (9.2 there), and
    :data:`TAIL_TAU_SHARE` of the values' (:func:`_paired_tau` says why).
    Bursts, whose tail values come in runs, raise the tail indicators' own ``τ̂``. ``cache``
    keeps the per-level estimates of one arm between its quantile rows."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x) & (x > 0)]
    if len(x) < 8:
        return 1.0
    cache = {} if cache is None else cache

    def ind(level: float) -> float:
        if level not in cache:
            q = np.quantile(x, level)
            cache[level] = _tau((x <= q).astype(np.float64))
        return cache[level]

    if "log" not in cache:
        cache["log"] = _tau(np.log(x))
    if max(p, 1.0 - p) >= TAIL_TAU_LEVEL:
        level = TAIL_TAU_LEVEL if p > 0.5 else 1.0 - TAIL_TAU_LEVEL
        return max(ind(p), ind(level), TAIL_TAU_SHARE * cache["log"])
    return max(cache["log"], ind(p))


def tail_start(p: float) -> float:
    """Where a quantile's stitching starts, in values: where the fixed verdict's tail rule
    starts calling it (10 values beyond it: 1,000 for a P99, 200 for a P95), and never below
    :data:`abtui.stats.decide.MIN_PAIRED`-like 20. The boundary is constant before it and
    tightest around it; the bounds are valid from the first value."""
    return max(20.0, 10.0 / min(p, 1.0 - p))


def finite_from(p: float, alpha: float, tau: float = 1.0, start: int = 2) -> int:
    """The fewest values (≥ ``start``) at which the ``p`` quantile's upper bound at level
    ``alpha`` is finite (for p ≥ 0.5; the lower bound's, mirrored, below): the P99's is about
    1,300 at the default levels, whatever the data."""
    q = max(p, 1.0 - p)
    var = q * (1.0 - q)

    def finite(t: int) -> bool:
        g = stitched(t * var * tau, alpha, var * tail_start(q), c=(1.0 - q) / 3.0 * tau)
        return math.floor(t * q + g) + 1 <= t

    lo = hi = max(start, 2)
    while not finite(hi):
        if hi >= MAX_UNITS_HINT:
            return MAX_UNITS_HINT
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if finite(mid) else (mid, hi)
    return hi


def quantile_bounds(
    x: np.ndarray, p: float, alpha_lo: float, alpha_hi: float, tau: float | None = None
) -> tuple[float, float, float]:
    """Anytime-valid ``(lo, hi, estimate)`` for the ``p`` quantile of one arm's values ``x`` (in the
    order measured; ``tau``: :func:`quantile_tau`, computed when not given). With ``N_t(q)`` the
    count of values ≤ the true quantile ``q``, the stitched boundaries ``g⁺`` (scale
    ``(1 − p)/3 · τ̂``) and ``g⁻`` (``p/3 · τ̂``) at intrinsic time ``V = t p (1 − p) τ̂`` hold
    ``t p − g⁻ ≤ N_t(q) ≤ t p + g⁺``, so ``q`` lies between the order statistics
    ``X_(⌈tp − g⁻⌉)`` and ``X_(⌊tp + g⁺⌋ + 1)``; a side the data cannot bound yet is 0 or +inf
    (a P99's upper bound needs 1,000–1,300 values at the usual levels: :func:`finite_from`)."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    t = len(x)
    if t < 2:
        return 0.0, NO_BOUND, math.nan
    xs = np.sort(x)
    h = (t - 1) * p  # numpy's "linear" percentile, the fixed verdict's point estimate
    f = int(math.floor(h))
    est = float(xs[f] + (h - f) * (xs[min(f + 1, t - 1)] - xs[f]))
    tau = quantile_tau(x, p) if tau is None else tau
    var = p * (1.0 - p)
    v = t * var * tau
    v_min = var * tail_start(p)
    g_up = stitched(v, alpha_hi, v_min, c=(1.0 - p) / 3.0 * tau)
    g_dn = stitched(v, alpha_lo, v_min, c=p / 3.0 * tau)
    k = math.ceil(t * p - g_dn)
    lo = float(xs[k - 1]) if k >= 1 else 0.0
    j = math.floor(t * p + g_up)
    hi = float(xs[j]) if j + 1 <= t else NO_BOUND
    return lo, hi, est


def quantile_ratio_cs(
    a: np.ndarray,
    b: np.ndarray,
    p: float,
    alpha_lo: float,
    alpha_hi: float,
    taus: tuple[float, float] | None = None,
) -> Interval:
    """CS for ``log(Q_B(p) / Q_A(p))`` from each arm's own quantile CS, each side of each arm
    at half its side's level (a union bound: ``lo = log L_B − log U_A`` is wrong only if one of
    ``L_B``, ``U_A`` is). The estimate is the ratio of the arms' linear-interpolation
    percentiles, as the fixed verdict's. Pairing is not used: a quantile of one arm is what is
    bounded, so a load both arms see widens both. ``taus``: each arm's :func:`quantile_tau`."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    n = min(len(a), len(b))
    if n < 2:
        return Interval(math.nan, -NO_BOUND, NO_BOUND, n, math.nan, 0.0, "quantile")
    ta, tb = taus if taus is not None else (quantile_tau(a, p), quantile_tau(b, p))
    la, ua, qa = quantile_bounds(a, p, alpha_hi / 2, alpha_lo / 2, ta)
    lb, ub, qb = quantile_bounds(b, p, alpha_lo / 2, alpha_hi / 2, tb)
    est = math.log(qb / qa) if qa > 0 and qb > 0 else math.nan
    lo = math.log(lb / ua) if lb > 0 and math.isfinite(ua) else -NO_BOUND
    hi = math.log(ub / la) if la > 0 and math.isfinite(ub) else NO_BOUND
    tau = max(ta, tb)
    return Interval(est, lo, hi, n, tau, n / tau, "quantile")


CENTRAL = 0.9  # quantiles strictly between 1 − CENTRAL and CENTRAL get the paired interval


def _log_density(v: np.ndarray, at: float) -> float:
    """Gaussian-kernel density of the values ``v`` at ``at`` (Silverman's bandwidth)."""
    n = len(v)
    iqr = float(np.subtract(*np.percentile(v, [75, 25])))
    spread = min(float(v.std(ddof=1)), iqr / 1.34) if iqr > 0 else float(v.std(ddof=1))
    h = 0.9 * spread * n**-0.2
    if not h > 0:
        return math.nan
    u = (v - at) / h
    return float(np.exp(-0.5 * u * u).sum() / (n * h * math.sqrt(2.0 * math.pi)))


def _paired_tau(la: np.ndarray, lb: np.ndarray, p: float) -> float:
    """A floor under the ``τ̂`` of the quantile contrast ψ, whose own estimate (a series of a
    few distinct values) is biased low. For a central quantile, the log-ratio's ``τ̂`` (the
    indicators are no more dependent than the values, and near it at the median: AR(1) 0.98
    over 5,000 pairs, ψ's own 47 for a true 82). A tail's indicators are much less dependent
    than the values (AR(1) 0.9: τ 19 for the values, 11 for the P90's indicators, 6.5 for the
    P99's; 0.98: 99, 50, 28.5), so the floor is the larger of the ``τ̂`` of the indicator
    contrast at :data:`TAIL_TAU_LEVEL` and :data:`TAIL_TAU_SHARE` of the log-ratio's: the
    first is biased low on short persistent series (at 1,000 pairs of AR(1) 0.98, when a P99's
    paired interval starts, it is about half the truth: P99 rows missed 0 in 11 % of A/As with
    it alone), the second rests on the ARMA estimate of a continuous series."""
    log_tau = _tau(lb - la)
    if max(p, 1.0 - p) < TAIL_TAU_LEVEL:
        return log_tau
    lvl = TAIL_TAU_LEVEL if p > 0.5 else 1.0 - TAIL_TAU_LEVEL
    ia = (la <= np.quantile(la, lvl)).astype(np.float64)
    ib = (lb <= np.quantile(lb, lvl)).astype(np.float64)
    return max(_tau(ia - ib), TAIL_TAU_SHARE * log_tau)


def paired_quantile_cs(
    a: np.ndarray,
    b: np.ndarray,
    p: float,
    alpha_lo: float,
    alpha_hi: float,
    v_opt: float = T_OPT,
) -> Interval:
    """CS for ``log(Q_B(p) / Q_A(p))`` of a central quantile that keeps the pairing: the
    asymptotic CS of the quantiles' joint linearisation (Bahadur), ``ψ_i = (1{log a_i ≤ q_A} −
    p) / g_A − (1{log b_i ≤ q_B} − p) / g_B`` with ``g`` each arm's density of log values at its
    quantile (a kernel estimate), half-width ``σ̂_ψ · normal_mixture(n τ̂_ψ) / n`` as for a mean.
    A load both arms see moves both indicators together and cancels in ψ, as in the fixed
    verdict's paired bootstrap; ``τ̂`` is the contrast's dependence, not an arm's: the larger of
    ψ's and :func:`_paired_tau`. Pairs with a NaN are left out."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    la, lb = np.log(a[keep]), np.log(b[keep])
    n = len(la)
    if n < 8:
        return Interval(math.nan, -NO_BOUND, NO_BOUND, n, math.nan, 0.0, "mean")
    qa, qb = float(np.quantile(la, p)), float(np.quantile(lb, p))
    ga, gb = _log_density(la, qa), _log_density(lb, qb)
    pa, pb = (float(np.percentile(v, 100 * p)) for v in (a[keep], b[keep]))
    if not (ga > 0 and gb > 0 and pa > 0 and pb > 0):
        return Interval(math.nan, -NO_BOUND, NO_BOUND, n, math.nan, 0.0, "mean")
    psi = ((la <= qa) - p) / ga - ((lb <= qb) - p) / gb
    sd = float(psi.std(ddof=1))
    tau = max(_tau(psi), _paired_tau(la, lb, p))
    est = math.log(pb / pa)
    lo, hi = _around(est, sd * math.sqrt(tau), n, alpha_lo, alpha_hi, v_opt)
    return Interval(est, lo, hi, n, tau, n / tau, "mean")


def width_shape(n: float, alpha: float, v_opt: float = T_OPT) -> float:
    """How a half-width scales with the pairs ``n``: ``normal_mixture(n) / n`` (the long-run
    spread staying as it is). The exact quantile bounds scale alike to first order."""
    return normal_mixture(n, alpha, v_opt) / n if n > 0 else math.inf


def units_to_clear(n: int, half_width: float, target: float, alpha: float) -> int | None:
    """Total units at which a half-width of ``half_width`` now (at ``n`` units) would shrink
    to ``target``, the long-run spread staying as it is; ``None`` when no number can
    (``target ≤ 0``) or a side is not bounded yet (an infinite half-width)."""
    if not (target > 0 and math.isfinite(half_width) and n > 0):
        return None
    if half_width <= target:
        return n
    now = width_shape(n, alpha)

    def width(m: int) -> float:
        return half_width * width_shape(m, alpha) / now

    hi = n
    while width(hi) > target:
        if hi >= MAX_UNITS_HINT:
            return MAX_UNITS_HINT
        hi *= 2
    lo = hi // 2 if hi > n else n
    while hi - lo > max(1, lo // 200):  # to 0.5 %: an estimate, not a promise
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if width(mid) <= target else (mid, hi)
    return int(hi)
