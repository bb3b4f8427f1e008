"""The verdict's ITL rows from the chunks, without holding them (docs/reliability.md, Memory).

ITL is per chunk gap, pooled: 10⁶ requests × 4 chunks is 3 × 10⁶ gaps per arm. For a pair of
arms :func:`itl_sketches` gives what :func:`abtui.stats.effects.compare` builds for every other
latency metric from its values — per arm the exact statistics, and per unit a count, a sum and
a histogram on the grid both arms share (:class:`~abtui.stats.bootstrap.Sketch`) — in two
passes over the chunks (:class:`abtui.metrics.gaps.GapScan`), holding per-unit arrays, the
grid's tails and the few buckets that hold the quantiles, never the gaps.

The result is that of :meth:`Sketch.of` on every gap: the grid spans the same order statistics
(its 10⁻⁵ quantiles are among each arm's smallest and largest gaps, kept by pass A); each gap
gets its bin by the same numpy expression, its unit's count and sum by the same additions in the
same order (``np.add.at`` runs ``np.bincount``'s loop); the quantiles are numpy's. Only the exact
mean differs from numpy's float sum, in the last bits (integer nanoseconds,
:mod:`abtui.metrics.gaps`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from abtui.metrics import gaps
from abtui.metrics.summary import DIST_PERCENTILES, Dist
from abtui.stats import bootstrap


@dataclass
class ItlSketches:
    sketches: list[bootstrap.Sketch]  # per arm
    dists: list[Dist]  # each arm's ITL summary (abtui.metrics.summary.summarize)
    # per item unit (count, sum) of each arm's gaps, for the alternation design's contrast
    item_sums: list[tuple[np.ndarray, np.ndarray]] | None
    passes: int


def grid_of(
    scan: gaps.GapScan, groups: tuple[int, ...], bins: int = bootstrap.N_BINS
) -> bootstrap.Grid:
    """:meth:`Grid.covering` of the pooled gaps of ``groups`` (in seconds), from the order
    statistics pass A kept."""
    n = scan.n(groups)
    if not n:
        return bootstrap.Grid(0.0, 1.0, bins)

    def log_of(k: int) -> float:  # the value Grid.covering sorts: log(v + EPS), by numpy
        v = max(scan.order_stats([(groups, k)])[0] / gaps.NS_PER_S, 0.0)  # as Grid.covering
        return float(np.log(np.array([v]) + bootstrap.EPS_S)[0])

    if n > bootstrap.GRID_TRIM_N:
        lo, hi = (gaps.linear_quantile(n, q, log_of) for q in bootstrap.GRID_TRIM)
    else:
        lo, hi = log_of(0), log_of(n - 1)
    return bootstrap.Grid.spanning(lo, hi, bins)


def itl_sketches(
    t,
    ok: list[np.ndarray],
    unit: np.ndarray,
    n_units: int,
    item_unit: np.ndarray | None = None,
    n_item_units: int = 0,
) -> ItlSketches:
    """The ITL sketches of the arms whose ok rows of ``t`` are the masks ``ok`` (``unit``: the
    resampling unit of every row of ``t``) on one grid, their summaries and, with
    ``item_unit``, the count and sum of each arm's gaps per item unit."""
    k = len(ok)
    scan = gaps.GapScan(t, ok, tail=gaps.trim_tail)  # the grid's trimmed quantiles
    grid = grid_of(scan, tuple(range(k)))
    count = [np.zeros(n_units, dtype=np.int64) for _ in range(k)]
    total = [np.zeros(n_units) for _ in range(k)]
    hist = [np.zeros(n_units * grid.bins, dtype=np.int64) for _ in range(k)]
    icount = [np.zeros(n_item_units, dtype=np.int64) for _ in range(k)]
    itotal = [np.zeros(n_item_units) for _ in range(k)]

    def feed(rows: np.ndarray, gap_ns: np.ndarray) -> None:
        grp = scan.group_of[rows]
        v = gap_ns / gaps.NS_PER_S  # the float chunk_gaps gives
        b = grid.index(v)
        u = unit[rows]
        iu = item_unit[rows] if item_unit is not None else None
        for g in range(k):
            m = grp == g
            if not m.any():
                continue
            ug, vg = u[m], v[m]
            count[g] += np.bincount(ug, minlength=n_units)
            np.add.at(total[g], ug, vg)
            hist[g] += np.bincount(ug * grid.bins + b[m], minlength=n_units * grid.bins)
            if iu is not None:
                icount[g] += np.bincount(iu[m], minlength=n_item_units)
                np.add.at(itotal[g], iu[m], vg)

    sketch_qs = [(100 * q) / 100 for q in bootstrap.QUANTILES.values()]  # as Sketch.of asks numpy
    dist_qs = [p / 100 for p in DIST_PERCENTILES]
    got = gaps.quantiles_many(
        scan, [((g,), qs) for g in range(k) for qs in (sketch_qs, dist_qs)], feed
    )
    sketches, dists = [], []
    for g in range(k):
        sq, dq = got[2 * g], got[2 * g + 1]
        mean = scan.mean_s((g,))
        exact = {"mean": mean, **dict(zip(bootstrap.QUANTILES, sq, strict=True))}
        sketches.append(
            bootstrap.Sketch(
                count[g].astype(np.float64),
                total[g],
                hist[g].reshape(n_units, grid.bins).astype(np.float32),
                grid,
                exact,
            )
        )
        n = scan.n((g,))
        dists.append(Dist(n, mean, *dq) if n else Dist())
    item_sums = None
    if item_unit is not None:
        item_sums = [(icount[g].astype(np.float64), itotal[g]) for g in range(k)]
    return ItlSketches(sketches, dists, item_sums, scan.passes)
