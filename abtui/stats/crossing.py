"""Where each resample's cumulative histogram crosses a rank, without all of it.

A bootstrap quantile (:meth:`abtui.stats.bootstrap.Sketch.resampled`) needs, per resample
``r`` and quantile ``q``, the first occupied bin ``j`` whose resampled cumulative count exceeds
``⌊q·(n_r − 1)⌋`` and the counts at ``j − 1`` and ``j``. The counts are the product of the
resample weights ``w`` (R × U) with the units' cumulative histograms ``cum`` (U × B, B up to
512 bins). Most of those B columns are never looked at: the counts at every :data:`STRIDE`-th
bin (the ends of B / STRIDE blocks) say which block holds a resample's crossing, and only that
block's columns are multiplied out, for the resamples whose crossing is in it (one quantile's
crossings fall in a few blocks). Four quantiles take ~96 columns a resample instead of 512:
the verdict of 10⁶ requests per arm spent ~0.8 s of its 5 s in the full products. A small
product is taken whole (:func:`whole`): up to :data:`FULL_BINS` occupied bins and
:data:`FULL_CELLS` counts, one product and four searches cost less than the blocks' few dozen
numpy calls (the verdict of a 320-request A/B, 40–230 occupied bins: 0.50 → 0.35 s).

Exact: the counts are whole numbers whose every partial sum the caller's dtype holds exactly
(float32 below 2**24), so a count is the same whichever columns it is multiplied out with, and
``j``, the count before it and the count at it are those of the full product
(``tests/calibration/test_stats.py`` checks them against it).
"""

from __future__ import annotations

import numpy as np

STRIDE = 16  # bins a block
FULL_BINS = 256  # the whole product up to this many bins (always up to 2 × STRIDE) …
FULL_CELLS = 131_072  # … and this many counts (resamples × bins: 512 KB of float32)


def whole(n_rows: int, n_bins: int) -> bool:
    """Whether :func:`crossings` takes the product of ``n_rows`` resamples whole."""
    return n_bins <= 2 * STRIDE or (n_bins <= FULL_BINS and n_rows * n_bins <= FULL_CELLS)


def crossings(
    w: np.ndarray, cum: np.ndarray, fractions: list[float]
) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]]:
    """The totals ``n`` (R,) of ``w @ cum`` and, per fraction ``q``, ``(rank, j, before, at)``:
    the 0-based fractional rank ``q·(n − 1)`` (numpy's "linear"), the first column whose count
    exceeds ``⌊rank⌋`` (at most B − 1), and the counts at ``j − 1`` (0 for ``j = 0``) and ``j``,
    float64. ``w`` and ``cum`` in the product's dtype."""
    n_bins = cum.shape[1]
    if whole(len(w), n_bins):
        full = w @ cum
        n = full[:, -1].astype(np.float64)
        return n, [(q * (n - 1), *_in_block(full, q * (n - 1), 0, 0)) for q in fractions]
    ends = np.minimum(np.arange(STRIDE - 1, n_bins + STRIDE - 1, STRIDE), n_bins - 1)
    coarse = w @ cum[:, ends]  # the counts at each block's last bin; the last is the total
    n = coarse[:, -1].astype(np.float64)
    out = []
    for q in fractions:
        rank = q * (n - 1)
        # blocks whose every count is ≤ ⌊rank⌋ (counts only grow): the crossing is in the next
        block, _, _ = _in_block(coarse, rank, 0, 0)
        j = np.empty(len(n), dtype=np.int64)
        before, at = np.empty(len(n)), np.empty(len(n))
        for b in np.unique(block):
            rows = np.flatnonzero(block == b)
            lo = int(b) * STRIDE
            fine = w[rows] @ cum[:, lo : min(lo + STRIDE, n_bins)]
            prior = coarse[rows, b - 1] if b > 0 else 0  # the count at lo − 1
            j[rows], before[rows], at[rows] = _in_block(fine, rank[rows], lo, prior)
        out.append((rank, j, before, at))
    return n, out


def _in_block(counts, rank, lo, prior):
    """``(j, before, at)`` for the rows of ``counts``, cumulative counts at columns ``lo``,
    ``lo + 1``, …: ``j`` the first column whose count exceeds ``⌊rank⌋`` (the last, if none
    does), the counts at ``j − 1`` and ``j`` as float64; ``prior``: the count at ``lo − 1``,
    a scalar or one a row. Counts are whole, so "≤ rank" is "≤ ⌊rank⌋", exact in their dtype."""
    floor = np.floor(rank).astype(counts.dtype)
    k = np.minimum(np.count_nonzero(counts <= floor[:, None], axis=1), counts.shape[1] - 1)
    rows = np.arange(len(k))
    at = counts[rows, k].astype(np.float64)
    before = np.where(k > 0, counts[rows, np.maximum(k - 1, 0)], prior).astype(np.float64)
    return lo + k, before, at
