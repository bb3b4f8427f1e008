"""Vectorised circular block bootstrap over *units*, with per-unit sketches.

Why units and sketches. A verdict must be computed for up to ~10⁶ requests per arm with
10,000 resamples (10¹⁰ draws if done one request at a time). Instead, values are grouped into
at most :data:`MAX_UNITS` consecutive *units* (a unit is one item of the schedule when there are
few; ``m = ⌈n / MAX_UNITS⌉`` consecutive items otherwise; a future alternation block or run is a
unit boundary too). Each unit keeps a sketch: count, sum, and a histogram over a shared grid of
:data:`N_BINS` log-spaced bins. A resample is a weight per unit (how many times the circular
block bootstrap drew it); the resampled histogram is one matrix product ``weights @ hist`` for all
resamples at once. Means are exact (``weights @ sum / weights @ count``). Quantiles are read from
the resampled histogram by linear interpolation inside a bin, then multiplied by
``exact / histogram estimate`` of the full sample, which removes the grid's discretisation bias
(the correction is the same for every resample, so the spread is untouched).

The circular block bootstrap (Politis & Romano 1992): a resample is ``⌈U / ℓ⌉`` blocks of ``ℓ``
consecutive units, each starting at a uniformly drawn unit and wrapping around the end; the last
block is kept whole. ``ℓ = 1`` is the ordinary i.i.d. bootstrap of units. Arms compared together
are resampled with the *same* weights (their units are the same items at the same scheduled
instants), which is the paired bootstrap and is valid whether or not the arms are correlated.

Block length rule (:func:`block_length`): ``ℓ = max(ℓ_PW, ⌈L / m⌉)`` units, where ``ℓ_PW`` is the
automatic block length of Politis & White (2004, with the Patton–Politis–White 2009 correction)
computed on the series given (the larger over them); for a latency row that is the paired
contrast the CI is about, ``log(mean_B / mean_A)`` per unit in schedule order over the units
where both arms have values (:mod:`abtui.stats.effects`): a load both arms see alike makes each
arm's series dependent but cancels in the contrast, so it must not lengthen the blocks. ``L`` is
the mean number of requests in flight (Little's law: Σ E2E / duration): requests that share
batches are dependent, so a block spans at least one "generation" of concurrent requests. ``ℓ``
is capped at ``U / 3``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from abtui.metrics import catalogue as cat
from abtui.metrics.gaps import TAIL_FRACTION, TAIL_FROM, linear_quantile
from abtui.stats.crossing import STRIDE, crossings
from abtui.stats.distributions import norm_ppf, t_ppf

DEFAULT_RESAMPLES = 10_000
MAX_UNITS = 500
N_BINS = 512
EPS_S = 1e-6  # values are sketched as log(v + EPS_S): zero gaps are allowed
STATS = cat.STAT_KEYS
QUANTILES = cat.QUANTILES
GRID_TRIM_N = TAIL_FROM  # above this many values the grid spans the 10⁻⁵ … 1 − 10⁻⁵ quantiles
GRID_TRIM = (TAIL_FRACTION, 1 - TAIL_FRACTION)  # (defined with the gap scan that keeps them)
WEIGHT_ROWS_CELLS = 62_500  # (resample, unit) counted at once by circular_block_weights, and
RESAMPLE_ROWS = 256  # resamples at once in Sketch.resampled, wdot: ~500 KB temporaries (< 600 KB,
# above which a run maps each array afresh: abtui.hardware.memory). The same numbers at any size.
RESAMPLE_CELLS = RESAMPLE_ROWS * MAX_UNITS  # fewer units: more resamples at once, as many cells


# ----------------------------------------------------------------------- block length


def _flat_top(t: np.ndarray) -> np.ndarray:
    t = np.abs(t)
    return np.where(t <= 0.5, 1.0, np.where(t <= 1.0, 2.0 * (1.0 - t), 0.0))


def _lag_window(x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Autocovariances of ``x`` at lags −M…M and their flat-top weights, ``M = 2 m̂`` with ``m̂``
    the smallest lag after which ``K`` consecutive autocorrelations are insignificant (Politis
    & White 2004). None for fewer than 8 finite points or no variance."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    n = len(x)
    if n < 8:
        return None
    x = x - x.mean()
    if not float(x @ x) > 0:
        return None
    max_lag = min(n - 1, int(math.ceil(math.sqrt(n))) + 5)
    spec = np.fft.rfft(x, 2 * n)
    acov = np.fft.irfft(spec * np.conj(spec))[: max_lag + 1] / n
    rho = acov / acov[0]
    k_n = max(5, int(math.sqrt(math.log10(n))))
    crit = 2.0 * math.sqrt(math.log10(n) / n)
    insignificant = np.abs(rho[1:]) < crit
    m_hat = max_lag
    for m in range(0, max_lag - k_n + 1):
        if insignificant[m : m + k_n].all():
            m_hat = m
            break
    big_m = min(2 * max(m_hat, 1), max_lag)
    lags = np.arange(-big_m, big_m + 1)
    return lags, _flat_top(lags / big_m) * acov[np.abs(lags)]


def politis_white_length(x: np.ndarray) -> float:
    """Automatic block length for the circular block bootstrap of the mean of series ``x``.

    Politis & White (2004), corrected by Patton, Politis & White (2009): with the flat-top lag
    window of :func:`_lag_window`, estimate ``G = Σ |k| R(k)`` and ``g = Σ R(k)`` and return
    ``(2 G² / D)^{1/3} n^{1/3}`` with ``D = 4/3 g²``. Returns 1.0 for a series with no
    detectable dependence (or fewer than 8 points).
    """
    win = _lag_window(x)
    if win is None:
        return 1.0
    n = int(np.isfinite(np.asarray(x, dtype=np.float64)).sum())
    lags, wr = win
    g_hat = float((np.abs(lags) * wr).sum())
    d_hat = 4.0 / 3.0 * float(wr.sum()) ** 2
    if d_hat <= 0 or g_hat == 0:
        return 1.0
    b = (2.0 * g_hat**2 / d_hat) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    return float(min(max(b, 1.0), max(1.0, min(3.0 * math.sqrt(n), n / 3.0))))


def _arma_time(x: np.ndarray) -> float:
    """The integrated autocorrelation time of an ARMA(1,1) matched to ``x``'s first two
    autocorrelations: ``1 + 2 ρ₁ / (1 − φ)`` with ``φ = ρ₂ / ρ₁`` the geometric decay beyond lag
    1 (exact for an AR(1), where ``φ = ρ₁``, for an MA(1), where ``φ = 0``, and for the means of
    consecutive values of an AR(1) — the units of a long run — which an AR(1) fit overstates by
    a third). Each ρ̂ₖ is bias corrected as Kendall (1954) does for an AR(1): ``+ (1 + 3ρ̂ₖ)/n``.
    An autocorrelation within ``2/√n`` of 0 counts as 0 (else a ratio of two noises could make
    ``φ`` near 1 on an independent series): 1 when ρ̂₁ is that small, no geometric tail when ρ̂₂
    is."""
    n = len(x)
    d = x - x.mean()
    den = float(d @ d)
    if n < 8 or not den > 0:
        return 1.0
    r1, r2 = (float(d[k:] @ d[:-k]) / den for k in (1, 2))
    r1, r2 = (min(r + (1.0 + 3.0 * r) / n, 0.995) for r in (r1, r2))
    noise = 2.0 / math.sqrt(n)  # an autocorrelation this small is indistinguishable from 0
    if r1 <= noise:
        return 1.0
    phi = min(max(r2 / r1, 0.0), 0.995) if r2 > noise else 0.0
    return 1.0 + 2.0 * r1 / (1.0 - phi)


def autocorrelation_time(x: np.ndarray, persistent: bool = True) -> float:
    """``τ̂``: how many consecutive values of the series ``x`` carry the information of one
    independent value (the integrated autocorrelation time ``Σ_k ρ(k)``, at least 1); NaN for
    fewer than 8 finite points.

    Two estimates, and the larger is kept: the flat-top lag window of the block length (Politis
    & White) over the sample autocorrelations, ``Σ w(k) R(k) / R(0)``, which sees any shape of
    dependence but is biased low on short, strongly dependent series (AR(1) ρ = 0.9 over 200
    values: true τ 19, median 12; ρ = 0.98: 99 against 20), because it only sums lags whose
    sample correlation is still visibly non-zero; and the τ of an ARMA(1,1) matched to the first
    two autocorrelations (:func:`_arma_time`), nearly unbiased for a persistent state and for the
    unit means of a long run (medians 15.5 and 43 there; 9.9 for a true 10 over 500 units of two
    AR(1) values), exact in expectation for a short (MA-like) dependence. A persistent per-arm
    state — a cache filling, a clock throttling — is the dependence that makes a paired contrast
    hard to judge, so the larger estimate is kept. ``persistent=False``: the flat-top estimate
    alone (the rules calibrated on it: alternation blocks, SLO rows).
    """
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    n = len(x)
    if n < 8:
        return math.nan
    win = _lag_window(x)
    if win is None:
        return 1.0
    lags, wr = win
    tau = float(wr.sum()) / float(wr[lags == 0][0])
    if persistent:
        tau = max(tau, _arma_time(x))
    return float(max(tau, 1.0))


def effective_size(x: np.ndarray, persistent: bool = True) -> float:
    """How many effectively independent values the series ``x`` holds: ``n / τ̂``
    (:func:`autocorrelation_time`). The block bootstrap cannot see dependence longer than its
    series shows, so a verdict refuses a call below :data:`abtui.stats.decide.MIN_EFFECTIVE`, and
    widens its interval by :func:`block_shortfall` above it. NaN for fewer than 8 points."""
    x = np.asarray(x, dtype=np.float64)
    n = int(np.isfinite(x).sum())
    tau = autocorrelation_time(x, persistent)
    return math.nan if math.isnan(tau) else float(n / tau)


def block_shortfall(x: np.ndarray, ell: int) -> float:
    """How much wider than the circular block bootstrap's the spread of the mean of the series
    ``x`` is when it is resampled in blocks of ``ell`` values: ``√(σ²_∞ / σ²_ℓ)``, at least 1.
    ``σ²_∞ = τ̂ γ(0)`` is the long-run variance (:func:`autocorrelation_time`) and ``σ²_ℓ =
    Σ_{|k|<ℓ} (1 − |k|/ℓ) γ(k)`` what blocks of ``ℓ`` values see (Künsch 1989: the block
    bootstrap's variance of a mean is a Bartlett window of width ℓ). Dependence longer than the
    blocks makes the bootstrap's interval too narrow by this factor: an AR(1) with ρ = 0.81 in
    blocks of 20 hides 23 % of the variance (×1.14). Whole alternation blocks resampled as
    independent units are blocks of their items here. 1.0 for fewer than 8 points."""
    xs = np.asarray(x, dtype=np.float64)
    xs = xs[np.isfinite(xs)]
    n = len(xs)
    tau = autocorrelation_time(xs)
    if math.isnan(tau) or tau <= 1.0:
        return 1.0
    xs = xs - xs.mean()
    m = int(min(max(ell, 1), n))
    spec = np.fft.rfft(xs, 2 * n)
    acov = np.fft.irfft(spec * np.conj(spec))[:m] / n
    k = np.arange(-(m - 1), m)
    seen = float(((1.0 - np.abs(k) / m) * acov[np.abs(k)]).sum())
    full = tau * float(acov[0])
    if not (seen > 0 and full > 0):
        return 1.0
    return float(max(1.0, math.sqrt(full / seen)))


def block_length(unit_series: list[np.ndarray], in_flight: float = 1.0, unit_size: int = 1) -> int:
    """The block length in units (see the module docstring for the rule)."""
    n_units = max((len(s) for s in unit_series), default=0)
    if n_units < 3:
        return 1
    pw = max((politis_white_length(s) for s in unit_series), default=1.0)
    load = math.ceil(max(in_flight, 1.0) / max(unit_size, 1)) if in_flight > 1.0 else 1
    return int(max(1, min(max(math.ceil(pw), load), n_units // 3)))


# ----------------------------------------------------------------------- resample weights


def circular_block_weights(
    n_units: int, block_len: int, n_resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """``(n_resamples, n_units)``: how often each unit is drawn in each resample, as the
    smallest unsigned integer type that holds every count (``uint8`` unless a unit is drawn
    over 255 times in a resample: 5 MB for 10,000 resamples × 500 units, where float32 took 19);
    a product casts a block of rows at a time (:func:`wdot`, :meth:`Sketch.resampled`)."""
    if n_units <= 0:
        return np.zeros((n_resamples, 0), dtype=np.uint8)
    ell = int(min(max(block_len, 1), n_units))
    n_blocks = math.ceil(n_units / ell)
    out = np.empty((n_resamples, n_units), dtype=np.uint8)
    step = max(1, WEIGHT_ROWS_CELLS // n_units)  # resamples drawn at a time: bounded memory
    for r0 in range(0, n_resamples, step):
        k = min(step, n_resamples - r0)  # the same stream as one draw of every block start
        rows = rng.integers(0, n_units, size=(k, n_blocks))
        flat = (rows + (np.arange(k) * n_units)[:, None]).ravel()
        counts = np.bincount(flat, minlength=k * n_units).reshape(k, n_units)
        if ell > 1:  # unit j is covered by every block that starts at j-ℓ+1 … j (mod U)
            ext = np.concatenate([counts[:, n_units - ell + 1 :], counts], axis=1)
            cs = np.zeros((k, ext.shape[1] + 1), dtype=np.int64)
            np.cumsum(ext, axis=1, out=cs[:, 1:])
            counts = cs[:, ell:] - cs[:, :-ell]
        top = int(counts.max(initial=0))
        if top > np.iinfo(out.dtype).max:  # a rare heavy draw: a wider type from here on
            out = out.astype(np.uint16 if top <= np.iinfo(np.uint16).max else np.uint32)
        out[r0 : r0 + k] = counts
    return out


def resample_rows(n_units: int) -> int:
    """Resamples multiplied out at once (:func:`wdot`, :meth:`Sketch.resampled`): at least
    :data:`RESAMPLE_ROWS`, more when there are fewer than :data:`MAX_UNITS` units, for the same
    temporaries (the crossings' products are at most ``2 × STRIDE`` columns wide). Each block
    costs a few dozen numpy calls whatever its size: at 320 units, 25 blocks of a
    10,000-resample verdict instead of 40."""
    return max(RESAMPLE_ROWS, RESAMPLE_CELLS // max(n_units, 2 * STRIDE))


def wdot(weights: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``weights @ v`` in float64 for integer ``weights`` (:func:`circular_block_weights`),
    :func:`resample_rows` rows at a time: only a block is ever cast to float (the whole
    10,000 × 500 matrix in float64 would be 40 MB). Counts (whole ``v ≥ 0``) whose every partial
    sum stays below 2**24 are multiplied in float32, which is then exact: the same numbers,
    faster."""
    exact32 = bool(
        len(v)
        and len(weights)
        and v.min() >= 0
        and (v == np.floor(v)).all()
        and float(v.sum()) * float(weights.max()) < 2**24
    )
    dtype = np.float32 if exact32 else np.float64
    vv = v.astype(dtype)
    step = resample_rows(weights.shape[1])
    parts = [weights[r : r + step].astype(dtype) @ vv for r in range(0, len(weights), step)]
    return np.concatenate(parts).astype(np.float64) if parts else np.zeros(0)


# ----------------------------------------------------------------------- sketches


@dataclass
class Grid:
    """Shared histogram bins in ``log(v + EPS_S)`` space."""

    lo: float
    width: float
    bins: int = N_BINS

    @classmethod
    def covering(cls, *values: np.ndarray, bins: int = N_BINS) -> Grid:
        """The grid over ``log(v + EPS_S)`` of ``values`` (v < 0: as 0), from the least to the
        greatest or, above :data:`GRID_TRIM_N`, numpy's linear quantiles :data:`GRID_TRIM`
        (outliers must not stretch every bin), read from one partition of the values (the log
        is increasing) with numpy's arithmetic (``gaps.linear_quantile``): the same floats."""
        v = np.concatenate([np.asarray(x, dtype=np.float64) for x in values])
        v = v[np.isfinite(v)]
        n = len(v)
        if not n:
            return cls(0.0, 1.0, bins)

        def log_of(x: float) -> float:  # as numpy computes it over the whole array
            return float(np.log(np.array([max(x, 0.0)]) + EPS_S)[0])

        if n <= GRID_TRIM_N:
            return cls.spanning(log_of(float(v.min())), log_of(float(v.max())), bins)
        ranks = {min(math.floor((n - 1) * q) + d, n - 1) for q in GRID_TRIM for d in (0, 1)}
        v.partition(sorted(ranks))  # v is this function's own copy
        lo, hi = (linear_quantile(n, q, lambda k: log_of(float(v[k]))) for q in GRID_TRIM)
        return cls.spanning(lo, hi, bins)

    @classmethod
    def spanning(cls, lo: float, hi: float, bins: int = N_BINS) -> Grid:
        """The grid of ``bins`` bins from ``lo`` to ``hi`` (log space), widened by a hair."""
        span = max(hi - lo, 1e-9)
        return cls(lo - 1e-9 * span, span * (1 + 2e-9) / bins, bins)

    def index(self, values: np.ndarray) -> np.ndarray:
        """The bin of each value: below the grid (or negative) the first, above it the last."""
        with np.errstate(invalid="ignore", divide="ignore"):  # NaN (v < −EPS_S): the first bin
            k = np.nan_to_num(np.floor((np.log(values + EPS_S) - self.lo) / self.width), nan=0.0)
        return np.clip(k, 0, self.bins - 1).astype(np.int64)


@dataclass
class Sketch:
    """Per-unit count, sum and histogram of one series (one metric of one arm)."""

    count: np.ndarray  # (U,) float64
    total: np.ndarray  # (U,) float64
    hist: np.ndarray  # (U, bins) float32
    grid: Grid
    exact: dict[str, float]  # full-sample statistics, computed from the raw values

    @classmethod
    def of(
        cls,
        values: np.ndarray,
        units: np.ndarray,
        n_units: int,
        grid: Grid,
        exact: dict[str, float] | None = None,
    ) -> Sketch:
        """``values[i]`` belongs to unit ``units[i]``; NaNs are dropped. ``exact``: the mean and
        percentiles of the same values when the caller has them (``Dist.of``: the same numbers)."""
        values = np.asarray(values, dtype=np.float64)
        keep = np.isfinite(values)
        v, u = values[keep], np.asarray(units, dtype=np.int64)[keep]
        count = np.bincount(u, minlength=n_units).astype(np.float64)
        total = np.bincount(u, weights=v, minlength=n_units)
        hist = np.bincount(u * grid.bins + grid.index(v), minlength=n_units * grid.bins)
        hist = hist.reshape(n_units, grid.bins).astype(np.float32)
        if exact is not None:
            return cls(count, total, hist, grid, dict(exact))
        exact = {"mean": float(v.mean()) if len(v) else math.nan}
        if len(v):
            qs = np.percentile(v, [100 * q for q in QUANTILES.values()], method="linear")
            exact.update({k: float(q) for k, q in zip(QUANTILES, qs, strict=True)})
        else:
            exact.update({k: math.nan for k in QUANTILES})
        return cls(count, total, hist, grid, exact)

    @property
    def n(self) -> int:
        return int(self.count.sum())

    def unit_means(self) -> np.ndarray:
        """Mean per unit (units with no value: the overall mean), for the block-length rule."""
        with np.errstate(invalid="ignore", divide="ignore"):
            m = self.total / self.count
        return np.where(self.count > 0, m, self.exact["mean"])

    def resampled(
        self, weights: np.ndarray, stats: tuple[str, ...] = STATS
    ) -> dict[str, np.ndarray]:
        """Each statistic of each resample (rows of ``weights``), shape ``(R,)``. The products
        are taken :func:`resample_rows` resamples at a time, so their temporaries stay small
        (whole, a 10,000-resample product cast the weights to float64: 40 MB)."""
        out: dict[str, np.ndarray] = {}
        step = resample_rows(weights.shape[1])
        blocks = [slice(r, r + step) for r in range(0, len(weights), step)]
        with np.errstate(invalid="ignore", divide="ignore"):
            n_boot = wdot(weights, self.count)  # values in each resample
            if "mean" in stats:
                out["mean"] = wdot(weights, self.total) / n_boot
            qs = [s for s in stats if s in QUANTILES]
            if qs:
                # The resampled cumulative histogram is one product with the per-unit cumulative
                # histograms (the sum is linear), so no (R, bins) cumsum is needed; and only the
                # bins some unit occupies are kept (the cumulative count rises nowhere else), so
                # a small sample costs little. Counts are whole numbers: float32 holds every
                # partial sum exactly below 2**24, which each row's total bounds; past that the
                # product is done in float64. Whole numbers add up exactly in any order, so the
                # resamples can be taken a block at a time.
                exact32 = len(n_boot) == 0 or float(n_boot.max()) < 2**24
                dtype = np.float32 if exact32 else np.float64
                occupied = np.flatnonzero(self.hist.any(axis=0))
                if not len(occupied):
                    occupied = np.zeros(1, dtype=np.int64)
                cum_units = np.cumsum(self.hist[:, occupied], axis=1, dtype=np.float64)
                cum_units = cum_units.astype(dtype)
                # only the columns around each crossing are multiplied out (crossing.py)
                fr = [QUANTILES[s] for s in qs]
                total = cum_units.sum(axis=0, dtype=np.float64)[None, :]  # the sample itself:
                full = self._values(*crossings(np.ones((1, 1)), total, fr), occupied, qs)  # 1 × it
                parts = [
                    self._values(
                        *crossings(weights[b].astype(dtype, copy=False), cum_units, fr),
                        occupied,
                        qs,
                    )
                    for b in blocks
                ]
                for s in qs:
                    boot = np.concatenate([p[s] for p in parts]) if parts else np.zeros(0)
                    out[s] = boot * (self.exact[s] / full[s][0])
        return out

    def _values(self, n, found, occupied, qs: list[str]) -> dict[str, np.ndarray]:
        """The quantiles ``qs`` of each resample (totals ``n``; per quantile its crossing,
        :func:`abtui.stats.crossing.crossings`: rank, occupied bin, counts before and at it),
        interpolated within the bin on the log grid (NaN where a resample is empty)."""
        out = {}
        for s, (rank, j, before, at) in zip(qs, found, strict=True):
            in_bin = at - before
            frac = np.clip((rank - before + 0.5) / np.where(in_bin > 0, in_bin, 1.0), 0.0, 1.0)
            logv = self.grid.lo + (occupied[j] + frac) * self.grid.width
            out[s] = np.where(n > 0, np.exp(logv) - EPS_S, np.nan)
        return out


# ----------------------------------------------------------------------- ratio intervals


def expansion(n_blocks: int, level: float = 0.95) -> float:
    """Widening factor of the *expanded* percentile interval (Hesterberg 2015) for a resample
    of ``n_blocks`` independent blocks: ``√(b / (b − 1)) · t_{b−1, (1+level)/2} / z_{(1+level)/2}``.

    The plain percentile interval is too narrow when few independent units carry the
    information (it divides by b, not b − 1, and ignores that the spread itself is estimated);
    a long block length leaves few blocks. ≈ 1.08 for 25 blocks, 1.16 for 13, → 1 as b grows.
    The quantiles come from :mod:`abtui.stats.distributions` (floats, no scipy.stats).
    """
    b = max(int(n_blocks), 2)
    q = (1 + level) / 2
    return float(math.sqrt(b / (b - 1)) * t_ppf(q, b - 1) / norm_ppf(q))


def expand(ratio_reps: np.ndarray, ratio: float, factor: float) -> np.ndarray:
    """Replicates of a ratio effect ``r = B/A − 1`` spread ``factor`` times wider around the
    point estimate, in log space (``log(1 + r)``), so the interval stays a ratio interval."""
    if factor == 1.0 or not math.isfinite(ratio) or ratio <= -1:
        return ratio_reps
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = math.log1p(ratio)
        return np.expm1(centre + factor * (np.log1p(ratio_reps) - centre))


def percentile_ci(replicates: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the finite replicates (NaN, NaN when there are none)."""
    r = replicates[np.isfinite(replicates)]
    if not len(r):
        return math.nan, math.nan
    lo, hi = np.quantile(r, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def bootstrap_p(replicates: np.ndarray, null: float = 0.0) -> float:
    """Two-sided bootstrap p-value of ``effect = null`` (the CI-inversion p of the percentile
    interval): ``2 · min(P*(r ≤ null), P*(r ≥ null))``, with the +1 correction."""
    r = replicates[np.isfinite(replicates)]
    if not len(r):
        return math.nan
    below = (np.count_nonzero(r <= null) + 1) / (len(r) + 1)
    above = (np.count_nonzero(r >= null) + 1) / (len(r) + 1)
    return float(min(1.0, 2 * min(below, above)))


def _dense_rank(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Rank of each key among the distinct keys (ascending), and how many there are."""
    lo, hi = int(keys.min()), int(keys.max())
    if hi - lo <= 4 * len(keys):  # dense keys (schedule positions): rank by counting, O(n)
        present = np.zeros(hi - lo + 1, dtype=bool)
        present[keys - lo] = True
        rank = np.cumsum(present) - 1
        return rank[keys - lo], int(present.sum())
    uniq, inverse = np.unique(keys, return_inverse=True)
    return inverse, len(uniq)


def unit_index(
    keys: np.ndarray, max_units: int = MAX_UNITS, segments: np.ndarray | None = None
) -> tuple[np.ndarray, int, int]:
    """Units from ordered keys (e.g. schedule position): ``(unit of each row, U, m)``.

    Distinct keys in ascending order are grouped ``m = ⌈distinct / max_units⌉`` at a time. With
    ``segments`` (a segment id per row, ascending with the keys: run, sweep level, alternation
    block) a unit never spans two segments, so U may exceed ``max_units`` by the segment count.
    """
    keys = np.asarray(keys, dtype=np.int64)
    if not len(keys):
        return np.zeros(0, dtype=np.int64), 0, 1
    rank, n_distinct = _dense_rank(keys)
    m = max(1, math.ceil(n_distinct / max_units))
    if segments is None or m == 1:
        return (rank // m).astype(np.int64), int(math.ceil(n_distinct / m)), m
    seg, n_seg = _dense_rank(np.asarray(segments, dtype=np.int64))
    first = np.full(n_seg, np.iinfo(np.int64).max)
    np.minimum.at(first, seg, rank)  # first key rank of each segment
    last = np.full(n_seg, -1)
    np.maximum.at(last, seg, rank)
    per_seg = (last - first) // m + 1  # units in each segment
    offset = np.concatenate([[0], np.cumsum(per_seg)[:-1]])
    unit = offset[seg] + (rank - first[seg]) // m
    return unit.astype(np.int64), int(per_seg.sum()), m
