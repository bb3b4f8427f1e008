"""Distinct values of an integer key column (arm, segment, sweep level, block), found by
counting when their range is small, as it is for these: ``np.unique`` sorts every row (a
verdict of 10⁶ requests per arm asked it for a handful of values ~10 times, ~0.3 s of CPU).
The results are ``np.unique``'s: the distinct values ascending and, if asked, the index of each
row's value among them."""

from __future__ import annotations

import numpy as np

DENSE = 4  # count when the range is at most this many times the rows (+ 1024)


def unique_ints(
    x: np.ndarray, return_inverse: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """``np.unique(x)`` (``return_inverse``: and ``inverse``) of an integer array."""
    x = np.asarray(x)
    if not len(x) or x.dtype.kind not in "iu":
        return np.unique(x, return_inverse=return_inverse)
    lo, hi = int(x.min()), int(x.max())
    if hi - lo > DENSE * len(x) + 1024:
        return np.unique(x, return_inverse=return_inverse)
    offset = (x - lo if lo else x).astype(np.intp, copy=False)
    present = np.bincount(offset, minlength=hi - lo + 1) > 0
    values = np.flatnonzero(present)
    values = (values + lo).astype(x.dtype, copy=False)
    if not return_inverse:
        return values
    rank = np.cumsum(present) - 1
    return values, rank[offset]
