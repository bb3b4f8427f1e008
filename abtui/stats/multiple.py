"""Multiple comparisons: Holm (family-wise error) and Benjamini–Hochberg (false discovery rate).

Both take p-values in any order, ignore NaN/None entries (returned as NaN), and return adjusted
p-values in the input order, so that "significant" is ``p_adj < α`` for either.
"""

from __future__ import annotations

import math

import numpy as np


def _valid(p) -> tuple[np.ndarray, np.ndarray]:
    arr = np.array([math.nan if v is None else float(v) for v in p], dtype=np.float64)
    return arr, np.flatnonzero(np.isfinite(arr))


def holm(p) -> np.ndarray:
    """Holm's step-down adjustment: ``max_{j ≤ i} min(1, (m − j + 1) p_(j))``."""
    arr, idx = _valid(p)
    out = np.full(len(arr), np.nan)
    m = len(idx)
    if not m:
        return out
    order = idx[np.argsort(arr[idx], kind="stable")]
    adj = np.minimum(1.0, (m - np.arange(m)) * arr[order])
    out[order] = np.maximum.accumulate(adj)
    return out


def benjamini_hochberg(p) -> np.ndarray:
    """Benjamini–Hochberg step-up adjustment: ``min_{j ≥ i} min(1, m p_(j) / j)``."""
    arr, idx = _valid(p)
    out = np.full(len(arr), np.nan)
    m = len(idx)
    if not m:
        return out
    order = idx[np.argsort(arr[idx], kind="stable")]
    adj = arr[order] * m / np.arange(1, m + 1)
    adj = np.minimum.accumulate(adj[::-1])[::-1]
    out[order] = np.minimum(1.0, adj)
    return out
