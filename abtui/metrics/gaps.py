"""The chunk gaps (ITL) of a request table, exact, in memory that does not grow with them.

ITL is a per-gap metric: a run of 5,000 requests × 256 tokens has 1.3 M gaps per arm, one of
10⁶ requests × 4 chunks 3 M. Holding them (and numpy's copies of them) was most of a verdict's
memory (docs/reliability.md, Memory). Here they are *streamed*: :func:`gap_batches` yields
``(row, gap_ns)`` a batch of at most :data:`BATCH` chunks at a time, from the table's chunk
arrays or, for a table read back without its chunks, from the session file
(:class:`ChunkSource`, ``abtui.store.chunks``). On top of that stream:

- :func:`row_gaps`: per request, the number of gaps, their sum and the largest (the ITL SLO);
- :class:`GapScan`: exact order statistics of the pooled gaps of groups of rows (an arm's ok
  rows), in a few passes: pass A counts the gaps per group in buckets of their float64 value
  12 mantissa bits wide (:data:`LEVELS`, :func:`_keys`) and keeps each group's ``tail``
  smallest and largest; pass B collects the values of the buckets that hold the ranks asked for (at most
  :data:`CAP` per bucket; a fuller bucket is split by finer buckets in one more pass), sorts
  them and reads the ranks. Memory: the bucket counts (≤ ~1 MB per group), the tails and the
  collected buckets; never the gaps.
- :func:`linear_quantile`: numpy's ``method="linear"`` (``np.percentile`` / ``np.quantile``,
  the definition :mod:`abtui.metrics.summary` states) from order statistics, with numpy's own
  index and interpolation arithmetic, so the result is the same float as numpy's on the full
  array (``tests/unit/test_bounded_memory.py`` checks it bit for bit).

Gaps are int64 nanoseconds (``t_j − t_{j−1}``, exact); in seconds they are ``gap_ns / 1e9``,
the same float :func:`abtui.metrics.request.chunk_gaps` gives. The mean is exact:
``Σ gap_ns / n / 1e9`` (numpy's pairwise float sum of the seconds differs from it in the last
bits).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from abtui.metrics.table import NA

NS_PER_S = 1e9
TAIL_FROM = 20_000  # pooled gaps above which the ITL sketches' grid is trimmed
TAIL_FRACTION = 1e-5  # … to these quantiles (abtui.stats.bootstrap.GRID_TRIM)
BATCH = 1 << 16  # chunks per batch of the stream (as abtui.store.chunks.SLICE)
LEVELS = (40, 20, 0)  # bucket = float64 bits >> shift: 12, then 32 mantissa bits, then exact
CAP = 1 << 18  # values collected per bucket at most (2 MB); a fuller one is split first


class ChunkSource(Protocol):
    """Where the chunks of a table read without them come from (``abtui.store.chunks``)."""

    def batches(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(req, t_ns)`` int64 arrays in an order where each request's chunks are
        consecutive and in sequence order (a request may continue into the next batch)."""
        ...


# ----------------------------------------------------------------------------- the stream


def _row_lookup(req: np.ndarray) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """A function mapping request ids to ``(keep mask, row)`` for the rows of ``req``."""
    req = np.asarray(req, dtype=np.int64)
    if not len(req):
        return lambda ids: (np.zeros(len(ids), dtype=bool), np.zeros(0, dtype=np.int64))
    lo, hi = int(req.min()), int(req.max())
    if hi - lo <= 4 * len(req) + 1024:  # ids of a session file are dense: a direct table
        table = np.full(hi - lo + 1, -1, dtype=np.int64)
        table[req - lo] = np.arange(len(req))

        def dense(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            inside = (ids >= lo) & (ids <= hi)
            pos = np.full(len(ids), -1, dtype=np.int64)
            pos[inside] = table[ids[inside] - lo]
            keep = pos >= 0
            return keep, pos[keep]

        return dense
    order = np.argsort(req, kind="stable")
    sorted_req = req[order]

    def sparse(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = np.searchsorted(sorted_req, ids)
        keep = p < len(sorted_req)
        keep[keep] = sorted_req[p[keep]] == ids[keep]
        return keep, order[p[keep]]

    return sparse


def _source_gaps(t, source: ChunkSource) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(row of t, gap_ns)`` from a chunk source: gaps of consecutive chunks of one request,
    the one that spans two batches included; chunks of requests not in ``t`` are left out."""
    lookup = _row_lookup(t.req)
    prev_req = prev_t = None
    for req, t_ns in source.batches():
        if not len(req):
            continue
        same = req[1:] == req[:-1]
        ids, gaps = req[1:][same], np.diff(t_ns)[same]
        if prev_req is not None and req[0] == prev_req:  # the request went on from last batch
            ids = np.concatenate([req[:1], ids])
            gaps = np.concatenate([t_ns[:1] - prev_t, gaps])
        prev_req, prev_t = req[-1], t_ns[-1]
        keep, rows = lookup(ids)
        if len(rows):
            yield rows, gaps[keep]


def _array_gaps(t) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(row, gap_ns)`` from the table's own chunk arrays, :data:`BATCH` chunks at a time."""
    rows_all, t_all = t.chunk_req_idx, t.chunk_t_ns
    n = len(rows_all)
    for lo in range(0, max(n - 1, 0), BATCH):
        hi = min(lo + BATCH + 1, n)  # one chunk of overlap: the gap across the slice edge
        rows, t_ns = rows_all[lo:hi], t_all[lo:hi]
        same = rows[1:] == rows[:-1]
        if same.any():
            yield rows[1:][same], np.diff(t_ns)[same]


def gap_batches(t, rows: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every gap between consecutive token chunks of one request of ``t`` as ``(row, gap_ns)``
    batches: rows in table order (a session file: its storage order, which is request order for
    files abtui wrote), gaps in chunk order within a row. ``rows``: a boolean mask, only the gaps
    of those rows."""
    source = getattr(t, "chunk_source", None)
    it = _array_gaps(t) if source is None else _source_gaps(t, source)
    for r, g in it:
        if rows is not None:
            keep = rows[r]
            r, g = r[keep], g[keep]
        if len(r):
            yield r, g


# ----------------------------------------------------------------------------- per request


@dataclass
class RowGaps:
    """Per row of a table: how many gaps its chunks have, their sum and the largest (ns)."""

    n: np.ndarray  # int64
    sum_ns: np.ndarray  # int64
    max_ns: np.ndarray  # int64, NA where n == 0


class _RowSums:
    """:class:`RowGaps` accumulated a batch at a time."""

    def __init__(self, n_rows: int) -> None:
        self.count = np.zeros(n_rows, dtype=np.int64)
        self.total = np.zeros(n_rows, dtype=np.int64)
        self.top = np.full(n_rows, NA, dtype=np.int64)

    def add(self, rows: np.ndarray, gaps: np.ndarray) -> None:
        # each row's gaps are consecutive in the stream: sums and maxima are reduceat over runs
        # (a run continued from the previous batch is combined with it)
        starts = np.flatnonzero(np.concatenate([[True], rows[1:] != rows[:-1]]))
        r = rows[starts]
        self.count[r] += np.diff(np.append(starts, len(rows)))
        self.total[r] += np.add.reduceat(gaps, starts)
        self.top[r] = np.maximum(self.top[r], np.maximum.reduceat(gaps, starts))

    def done(self) -> RowGaps:
        return RowGaps(self.count, self.total, self.top)


def row_gaps(t) -> RowGaps:
    """:class:`RowGaps` of ``t``: its stored columns when it has them (a table read without its
    chunks), else one pass over its chunks."""
    if getattr(t, "itl_n", None) is not None:
        return RowGaps(t.itl_n, t.itl_sum_ns, t.itl_max_ns)
    acc = _RowSums(len(t))
    for rows, gaps in gap_batches(t):
        acc.add(rows, gaps)
    return acc.done()


def trim_tail(n: int) -> int:
    """Gaps to keep at each end of ``n`` pooled ones for the ITL grid: its trimmed quantiles
    (:data:`TAIL_FRACTION`, above :data:`TAIL_FROM` gaps) and the next rank; one below."""
    if n > TAIL_FROM:
        return math.floor((n - 1) * TAIL_FRACTION) + 2
    return 1


@dataclass
class FirstPass:
    """What :class:`GapScan`'s first pass learns of some groups of a table's rows, kept with the
    table by :func:`first_pass` (``table.gap_first_pass``) so that a later scan of the same
    groups starts from it instead of reading every chunk again."""

    groups: list[np.ndarray]  # boolean masks over the table's rows
    tail: int
    counts: list[_Counts]
    low: list[np.ndarray]
    high: list[np.ndarray]


def first_pass(t, groups: list[np.ndarray], n_bound: int) -> tuple[RowGaps, FirstPass]:
    """One pass over every chunk of ``t``: its :class:`RowGaps` and :class:`GapScan`'s pass A
    for ``groups`` (disjoint boolean masks: each arm's ok rows), keeping each group's
    :func:`trim_tail` ``(n_bound)`` smallest and largest gaps, ``n_bound`` at least the gaps
    of all groups (the table's chunks: then any scan of these groups for the ITL grid finds its
    tails here). The reader runs it (the per-row figures are needed anyway), and the verdict's
    ITL then reads the chunks once more instead of twice."""
    scan = GapScan(t, groups, tail=trim_tail(n_bound), run=False)
    acc = _RowSums(len(t))
    for rows, gaps in gap_batches(t):
        acc.add(rows, gaps)
        grouped = scan.in_groups[rows]
        if grouped.any():
            scan._count_batch(scan.group_of[rows[grouped]], gaps[grouped])
    per_row = acc.done()
    first = FirstPass(
        [np.asarray(g, dtype=bool) for g in groups], scan.tail, scan._counts, scan._low, scan._high
    )
    return per_row, first


# ----------------------------------------------------------------------------- quantiles


def linear_quantile(n: int, q: float, value: Callable[[int], float]) -> float:
    """numpy's ``method="linear"`` quantile ``q`` of ``n`` sorted values, ``value(k)`` the
    k-th smallest (0-based), with numpy's own arithmetic (``numpy.lib._function_base_impl``:
    virtual index ``(n − 1)·q``, its floor and the next, ``_lerp``), so the result is the same
    float as ``np.quantile`` on the full array. NaN when ``n`` is 0."""
    if n <= 0:
        return math.nan
    virtual = (n - 1) * q
    if virtual >= n - 1:  # numpy takes the last value
        return float(value(n - 1))
    prev = math.floor(virtual) if virtual >= 0 else 0
    gamma = virtual - prev
    a, b = float(value(prev)), float(value(prev + 1))
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


_ONE = int(np.array([1.0]).view(np.int64)[0])  # float64 bits of 1.0, the least gap above 0


def _keys(gap_ns: np.ndarray, shift: int) -> np.ndarray:
    """A bucket key per value, non-decreasing in the value: the float64 bits of ``|v|`` above
    those of 1.0 (gaps are whole nanoseconds: 0 or at least 1), shifted right, plus one; 0 for
    0; negated for negative values. Keys are dense: at the first level ~4,096 per octave."""
    bits = np.abs(gap_ns).astype(np.float64).view(np.int64)
    out = np.where(bits >= _ONE, ((bits - _ONE) >> shift) + 1, 0)
    neg = gap_ns < 0
    if neg.any():
        out[neg] = -out[neg]
    return out


def _float_of(bits: int) -> float:
    return float(np.array([bits], dtype=np.int64).view(np.float64)[0])


def _bucket_value(key: int, shift: int) -> int | None:
    """The one whole number a bucket can hold, if it can hold only one (gap 0; below 4,096 ns
    every first-level bucket is narrower than 1 ns), else None."""
    if key == 0:
        return 0
    first = ((abs(key) - 1) << shift) + _ONE
    lo, hi = math.ceil(_float_of(first)), math.floor(_float_of(first + (1 << shift) - 1))
    if lo != hi:
        return None
    return lo if key > 0 else -lo


class _Counts:
    """Counts per key over a growing dense key range (keys of one level are few)."""

    def __init__(self) -> None:
        self.lo = 0
        self.counts = np.zeros(0, dtype=np.int64)

    def add(self, keys: np.ndarray) -> None:
        if not len(keys):
            return
        kmin, kmax = int(keys.min()), int(keys.max())
        if not len(self.counts):
            self.lo = kmin
        new_lo = min(self.lo, kmin)
        new_len = max(self.lo + len(self.counts), kmax + 1) - new_lo
        if new_lo != self.lo or new_len != len(self.counts):
            grown = np.zeros(new_len, dtype=np.int64)
            grown[self.lo - new_lo : self.lo - new_lo + len(self.counts)] = self.counts
            self.lo, self.counts = new_lo, grown
        self.counts += np.bincount(keys - self.lo, minlength=len(self.counts))

    def merged(self, others: list[_Counts]) -> tuple[int, np.ndarray]:
        """(first key, counts) of this and ``others`` summed over the union of their ranges."""
        parts = [c for c in [self, *others] if len(c.counts)]
        if not parts:
            return 0, np.zeros(0, dtype=np.int64)
        lo = min(c.lo for c in parts)
        hi = max(c.lo + len(c.counts) for c in parts)
        out = np.zeros(hi - lo, dtype=np.int64)
        for c in parts:
            out[c.lo - lo : c.lo - lo + len(c.counts)] += c.counts
        return lo, out


def _keep_smallest(current: np.ndarray, new: np.ndarray, k: int) -> np.ndarray:
    both = np.concatenate([current, new])
    if len(both) > k:
        both = np.partition(both, k - 1)[:k]
    return both


@dataclass
class _Target:
    groups: tuple[int, ...]
    rank: int  # rank within the bucket (0-based)
    shift: int
    key: int
    count: int  # values of ``groups`` in the bucket
    value: int | None = None


class GapScan:
    """Exact order statistics of the pooled gaps of disjoint row groups of a table (module doc).

    ``groups``: boolean masks over the rows of ``t`` (disjoint: an arm's ok rows each).
    ``tail``: keep each group's ``tail`` smallest and largest gaps (enough for
    :meth:`tail_value` of ranks below ``tail`` from either end, e.g. the grid's 10⁻⁵ quantiles);
    a function of the number of gaps of all groups, to size it by that. Pass A runs here."""

    def __init__(
        self, t, groups: list[np.ndarray], tail: int | Callable[[int], int] = 0, run: bool = True
    ) -> None:
        self.t = t
        self.group_of = np.full(len(t), -1, dtype=np.int64)
        for g, mask in enumerate(groups):
            self.group_of[np.asarray(mask, dtype=bool)] = g
        self.in_groups = self.group_of >= 0
        self.n_groups = len(groups)
        self._counts = [_Counts() for _ in groups]
        self._low = [np.zeros(0, dtype=np.int64) for _ in groups]
        self._high = [np.zeros(0, dtype=np.int64) for _ in groups]  # negated: largest first
        self.passes = 0
        if not run:  # first_pass fills pass A while it reads the per-row figures
            self.tail = int(tail) if not callable(tail) else 0
            return
        per_row = row_gaps(t)
        self._n = [int(per_row.n[m].sum()) for m in groups]
        self._sum = [int(per_row.sum_ns[m].sum()) for m in groups]
        self.tail = int(tail(sum(self._n)) if callable(tail) else tail)
        if not self._from_first_pass(groups):
            self._pass(self._count_batch)

    def _from_first_pass(self, groups: list[np.ndarray]) -> bool:
        """Take pass A from the table's :class:`FirstPass` when it scanned these very groups
        with tails at least as long (the same counts and tails: the same order statistics)."""
        first = getattr(self.t, "gap_first_pass", None)
        if first is None or first.tail < self.tail:
            return False
        where = []
        for mask in groups:
            mask = np.asarray(mask, dtype=bool)
            k = next((i for i, g in enumerate(first.groups) if np.array_equal(g, mask)), None)
            if k is None:
                return False
            where.append(k)
        for g, k in enumerate(where):
            self._counts[g] = first.counts[k]
            if self.tail:
                self._low[g] = np.sort(first.low[k])[: self.tail]
                self._high[g] = np.sort(first.high[k])[: self.tail]
        return True

    def _pass(self, fn: Callable[[np.ndarray, np.ndarray], None]) -> None:
        self.passes += 1
        for rows, gaps in gap_batches(self.t, self.in_groups):
            fn(self.group_of[rows], gaps)

    def _count_batch(self, grp: np.ndarray, gaps: np.ndarray) -> None:
        keys = _keys(gaps, LEVELS[0])
        for g in range(self.n_groups):
            m = grp == g
            if not m.any():
                continue
            self._counts[g].add(keys[m])
            if self.tail:
                v = gaps[m]
                self._low[g] = _keep_smallest(self._low[g], v, self.tail)
                self._high[g] = _keep_smallest(self._high[g], -v, self.tail)

    # -- what pass A knows

    def n(self, groups: tuple[int, ...]) -> int:
        return sum(self._n[g] for g in groups)

    def mean_s(self, groups: tuple[int, ...]) -> float:
        """The exact mean gap in seconds (NaN when there is none)."""
        n = self.n(groups)
        return sum(self._sum[g] for g in groups) / n / NS_PER_S if n else math.nan

    def tail_value(self, groups: tuple[int, ...], k: int) -> int | None:
        """The k-th smallest gap (ns) of the groups pooled, when the tails hold it; else None."""
        n = self.n(groups)
        if k < self.tail:
            low = np.sort(np.concatenate([self._low[g] for g in groups]))
            return int(low[k]) if k < len(low) else None
        if n - 1 - k < self.tail:
            high = np.sort(np.concatenate([self._high[g] for g in groups]))
            j = n - 1 - k
            return int(-high[j]) if j < len(high) else None
        return None

    # -- ranks that need pass B

    def order_stats(
        self,
        asks: list[tuple[tuple[int, ...], int]],
        feed: Callable[[np.ndarray, np.ndarray], None] | None = None,
    ) -> list[int]:
        """The k-th smallest gap (ns) of each ``(groups, k)`` in ``asks``; ``feed(row, gap_ns)``
        is given every batch of the groups' gaps once (a pass is run for it when no rank needs
        one)."""
        out: list[int | None] = [self.tail_value(gs, k) for gs, k in asks]
        targets: dict[tuple, _Target] = {}
        for i, (gs, k) in enumerate(asks):
            if out[i] is not None:
                continue
            key = (gs, k)
            if key not in targets:
                targets[key] = self._locate(gs, k)
        pending = [x for x in targets.values() if x.value is None]
        first = True
        while pending or (first and feed is not None):
            self._resolve(pending, feed if first else None)
            first = False
            pending = [x for x in targets.values() if x.value is None]
        for i, (gs, k) in enumerate(asks):
            if out[i] is None:
                out[i] = targets[(gs, k)].value
        return [int(v) for v in out]  # type: ignore[arg-type]

    def _locate(self, gs: tuple[int, ...], k: int) -> _Target:
        lo, counts = self._counts[gs[0]].merged([self._counts[g] for g in gs[1:]])
        cum = np.cumsum(counts)
        j = int(np.searchsorted(cum, k, side="right"))  # first bucket whose cumulative count > k
        before = int(cum[j - 1]) if j else 0
        key = lo + j
        return _Target(
            gs, k - before, LEVELS[0], key, int(counts[j]), _bucket_value(key, LEVELS[0])
        )

    def _resolve(self, pending: list[_Target], feed) -> None:
        """One pass: collect the values of the buckets of ``pending`` targets that hold at most
        :data:`CAP`, count finer buckets inside the fuller ones (a last-level bucket is one
        float value: nothing to collect); ``feed`` sees every batch."""
        for x in pending:  # a bucket of one value (a last-level one is)
            value = _bucket_value(x.key, x.shift)
            if value is not None:
                x.value = value
        pending = [x for x in pending if x.value is None]
        split = {id(x) for x in pending if x.count > CAP}
        # per (level, bucket, group): its values collected, or its finer buckets counted
        bags = {(x.shift, x.key, g): [] for x in pending if id(x) not in split for g in x.groups}
        finer = {
            (x.shift, x.key, g): _Counts() for x in pending if id(x) in split for g in x.groups
        }
        shifts = sorted({x.shift for x in pending})
        wanted = {
            s: np.array(sorted({k for (sh, k, _) in [*bags, *finer] if sh == s}), dtype=np.int64)
            for s in shifts
        }
        if not pending and feed is None:
            return
        self.passes += 1
        for rows, gaps in gap_batches(self.t, self.in_groups):
            if feed is not None:
                feed(rows, gaps)
            for s in shifts:
                keys = _keys(gaps, s)
                hit = np.isin(keys, wanted[s])
                if not hit.any():
                    continue
                k_hit, g_hit, v_hit = keys[hit], self.group_of[rows[hit]], gaps[hit]
                for sh, key, g in {*bags, *finer}:
                    if sh != s:
                        continue
                    m = (k_hit == key) & (g_hit == g)
                    if not m.any():
                        continue
                    if (sh, key, g) in bags:
                        bags[(sh, key, g)].append(v_hit[m])
                    if (sh, key, g) in finer:
                        finer[(sh, key, g)].add(_keys(v_hit[m], _next(sh)))
        for x in pending:
            if id(x) not in split:
                bag = [v for g in x.groups for v in bags[(x.shift, x.key, g)]]
                vals = np.concatenate([np.zeros(0, np.int64), *bag])
                x.value = int(np.sort(vals)[x.rank])
                continue
            parts = [finer[(x.shift, x.key, g)] for g in x.groups]
            lo, counts = parts[0].merged(parts[1:])  # finer buckets inside the bucket
            cum = np.cumsum(counts)
            j = int(np.searchsorted(cum, x.rank, side="right"))
            x.rank -= int(cum[j - 1]) if j else 0
            x.shift, x.key, x.count = _next(x.shift), lo + j, int(counts[j])


def _next(shift: int) -> int:
    return LEVELS[LEVELS.index(shift) + 1]


def quantiles_s(scan: GapScan, groups: tuple[int, ...], qs: list[float], feed=None) -> list[float]:
    """numpy-``linear`` quantiles ``qs`` (fractions) of the pooled gaps of ``groups``, seconds."""
    return quantiles_many(scan, [(groups, qs)], feed)[0]


def quantiles_many(
    scan: GapScan, asks: list[tuple[tuple[int, ...], list[float]]], feed=None
) -> list[list[float]]:
    """:func:`quantiles_s` of several ``(groups, qs)`` at once: one pass B for all of them
    (``feed`` as in :meth:`GapScan.order_stats`)."""
    ranks: list[tuple[tuple[int, ...], int]] = []
    for gs, qs in asks:
        n = scan.n(gs)
        for q in qs if n else ():
            prev = min(max(math.floor((n - 1) * q), 0), n - 1)
            ranks += [(gs, prev), (gs, min(prev + 1, n - 1))]
    ranks = list(dict.fromkeys(ranks))
    stats = dict(zip(ranks, scan.order_stats(ranks, feed), strict=True))
    out = []
    for gs, qs in asks:
        n = scan.n(gs)
        out.append([linear_quantile(n, q, lambda k, gs=gs: stats[(gs, k)] / NS_PER_S) for q in qs])
    return out
