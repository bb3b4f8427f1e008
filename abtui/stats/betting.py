"""A confidence sequence for the mean of bounded independent values, by betting
(Waudby-Smith & Ramdas 2023, "Estimating means of bounded random variables by betting", the
capital process with predictable, approximately growth-rate-optimal bets).

For values ``x_i`` in ``[low, high]`` rescaled to ``z_i`` in ``[0, 1]`` and a candidate mean
``m``, the capital ``K⁺_t(m) = ∏ (1 + λ_i (z_i − m))`` of a gambler who bets that the mean is
above ``m`` is a nonnegative martingale when the mean is ``m`` (each ``λ_i`` chosen from the
values before ``i`` only), so by Ville's inequality it ever reaches ``1/α`` with probability at
most ``α``: the ``m`` it has reached are excluded below, at every look at once. ``K⁻`` bets the
other way. The interval is the candidate means neither has excluded at any look so far (the
running intersection). It needs no asymptotics and no variance bound: it adapts to the values'
spread (a paired quality item that never flips has none, and the interval closes around 0 as
the fixed score interval does, at about 1.5 times its items: ±1 pp at about 550 against 380).

Used by the sequential quality gate (:mod:`abtui.quality.seqgate`), whose units are clusters
of paired items (the haystacks of one document) with the mean of ``correct_B − correct_A``
over the cluster's items, in ``[−1, 1]``.
"""

from __future__ import annotations

import math

import numpy as np

COARSE = 201  # candidate means over [0, 1], then each end refined
FINE = 21  # points between two coarse ones: 0.1 pp steps on a [−1, 1] scale
TRUNCATE = 0.75  # bets at most this fraction of the capital that keeps it positive


def _plug_ins(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean and variance of the values before each ``i`` (predictable), each shrunk by one
    pseudo-value (1/2, variance 1/4) so the first bets are small."""
    i = np.arange(1, len(z) + 1, dtype=float)
    before = np.concatenate(([0.0], np.cumsum(z)[:-1]))
    mu = (0.5 + before) / i
    mu_upto = (0.5 + np.cumsum(z)) / (i + 1)
    sq = np.concatenate(([0.0], np.cumsum((z - mu_upto) ** 2)[:-1]))
    return mu, (0.25 + sq) / i


def _wealth_reached(z: np.ndarray, m: np.ndarray, alpha_lo: float, alpha_hi: float):
    """Per candidate mean ``m``: (excluded from below, excluded from above) at some look. The
    bet on each ``m`` is the approximate growth-rate-optimal one (aGRAPA), ``λ = (μ̂ − m) /
    (σ̂² + (μ̂ − m)²)`` from the values before, truncated so the capital stays positive; the
    upward gambler takes its positive part, the downward one its negative part."""
    mu, var = _plug_ins(z)
    gap = mu[:, None] - m[None, :]
    lam = gap / (var[:, None] + gap**2)
    up = np.minimum(np.maximum(lam, 0.0), TRUNCATE / np.maximum(m, 1e-12)[None, :])
    down = np.minimum(np.maximum(-lam, 0.0), TRUNCATE / np.maximum(1.0 - m, 1e-12)[None, :])
    dev = z[:, None] - m[None, :]
    w_up = np.cumsum(np.log1p(up * dev), axis=0)
    w_down = np.cumsum(np.log1p(-down * dev), axis=0)
    return (
        (w_up >= math.log(1.0 / alpha_lo)).any(axis=0),
        (w_down >= math.log(1.0 / alpha_hi)).any(axis=0),
    )


def _kept_range(z: np.ndarray, alpha_lo: float, alpha_hi: float):
    """The smallest and largest candidate mean neither gambler excluded, rounded outwards to
    the fine grid (each end searched between the coarse points around it); None if none."""
    coarse = np.linspace(0.0, 1.0, COARSE)
    out_lo, out_hi = _wealth_reached(z, coarse, alpha_lo, alpha_hi)
    kept = np.flatnonzero(~(out_lo | out_hi))
    if len(kept) == 0:
        return None, None
    step = 1.0 / (COARSE - 1)
    ends = []
    for i, side in ((kept[0], 0), (kept[-1], 1)):
        a, b = (coarse[i] - step, coarse[i]) if side == 0 else (coarse[i], coarse[i] + step)
        fine = np.linspace(max(a, 0.0), min(b, 1.0), FINE)
        f_lo, f_hi = _wealth_reached(z, fine, alpha_lo, alpha_hi)
        ok = np.flatnonzero(~(f_lo | f_hi))
        fstep = (fine[-1] - fine[0]) / (FINE - 1)
        if side == 0:
            ends.append(max(0.0, fine[ok[0]] - fstep))  # the excluded point next to it
        else:
            ends.append(min(1.0, fine[ok[-1]] + fstep))
    return ends[0], ends[1]


def bounded_mean_cs(
    x,
    alpha_lo: float,
    alpha_hi: float,
    low: float = -1.0,
    high: float = 1.0,
) -> tuple[float, float]:
    """The anytime-valid interval of the mean of ``x`` (independent values in ``[low, high]``
    with a common mean, in the order observed): its lower bound at error ``alpha_lo``, its
    upper at ``alpha_hi``; ``(low, high)`` with no values. Bounds are rounded outwards to the
    grid."""
    z = (np.asarray(x, dtype=float) - low) / (high - low)
    z = np.clip(z[np.isfinite(z)], 0.0, 1.0)
    if len(z) == 0:
        return low, high
    lo_m, hi_m = _kept_range(z, alpha_lo, alpha_hi)
    if lo_m is None:  # every mean excluded (only by a chance of α): the estimate alone
        est = float(z.mean())
        return low + (high - low) * est, low + (high - low) * est
    return low + (high - low) * lo_m, low + (high - low) * hi_m
