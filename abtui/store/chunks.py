"""A session file's chunks as a stream: what a table read without them computes ITL from.

:class:`FileChunks` is the :class:`abtui.metrics.gaps.ChunkSource` of a table that
:meth:`abtui.store.reader.SessionReader.request_table` read without its chunks. Each pass opens
its own connection to the file (``connect``, given by the reader: read-only, or the process's
own instance when it writes the file, or the reader's private copy) and closes it at the end,
so no connection outlives a pass (the verdict is stored in the same file right after) and
DuckDB's cache of the file's blocks goes with it.

Two ways to read, both :data:`SLICE` chunks per query:

- **storage order** (``rowid`` ranges, no sort): the writer appends each record's chunks
  together, in sequence order, so a request's chunks are consecutive. The first pass checks
  it on every row (a chunk continues its predecessor's request with the next ``seq``, or
  starts one at ``seq`` 0) and raises :class:`Unordered` on the first that does not;
- **sorted** (a file written otherwise): ranges of requests holding at most :data:`SLICE`
  chunks, each read ``ORDER BY req, seq`` (the slice's sort is the peak; the ranges come from
  one ``GROUP BY req`` at the switch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import duckdb
import numpy as np

from abtui.store.damage import times

Opener = Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]

SLICE = 1 << 16  # chunks per query: ~130 bytes each of transient memory (8 MB; 1 << 15 cost
# 0.4 s more CPU at 8 M chunks, 1 << 17 8 MB more for no less: docs/reliability.md)


class Unordered(Exception):
    """The file's chunks are not stored request by request in sequence order."""


class FileChunks:
    """The chunks of a session file, streamed (module docstring). ``keep``: an object whose
    life the source must extend (the reader's private copy of a locked file)."""

    def __init__(self, connect: Opener, keep: object = None, name: object = None):
        self._connect = connect
        self._keep = keep
        self._name = name  # the file, named by the error a time out of range raises
        self.verified = False  # storage order checked on every chunk
        self.ranges: list[tuple[int, int]] | None = None  # sorted reading: request ranges
        self.passes = 0

    def batches(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        self.passes += 1
        with self._connect() as con:
            if self.ranges is not None:
                yield from self._sorted(con)
            else:
                yield from self._stored(con)

    def use_sorted(self) -> None:
        """Read request ranges sorted from now on (after :class:`Unordered`)."""
        with self._connect() as con:
            counts = con.execute(
                "SELECT req, count(*) AS n FROM chunks GROUP BY req ORDER BY req"
            ).fetchnumpy()
        req, n = np.asarray(counts["req"], np.int64), np.asarray(counts["n"], np.int64)
        ends = np.cumsum(n)
        ranges, k = [], 0
        while k < len(req):  # requests k … j−1: at most SLICE chunks (or one request)
            start = int(ends[k - 1]) if k else 0
            j = max(k + 1, int(np.searchsorted(ends, start + SLICE, side="right")))
            ranges.append((int(req[k]), int(req[j - 1])))
            k = j
        self.ranges = ranges

    def _stored(self, con) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        end = con.execute("SELECT COALESCE(max(rowid), -1) + 1 FROM chunks").fetchone()[0]
        check = not self.verified
        cols = "req, seq, t_ns" if check else "req, t_ns"
        prev_req, prev_seq = None, 0
        for lo in range(0, int(end), SLICE):
            got = con.execute(
                f"SELECT {cols} FROM chunks WHERE rowid >= ? AND rowid < ?", [lo, lo + SLICE]
            ).fetchnumpy()
            req = np.asarray(got["req"], dtype=np.int64)
            if not len(req):
                continue
            if check:
                seq = np.asarray(got["seq"], dtype=np.int64)
                before_req = np.concatenate([[-1 if prev_req is None else prev_req], req[:-1]])
                before_seq = np.concatenate([[prev_seq], seq[:-1]])
                if prev_req is None:
                    before_req[0] = req[0] - 1  # nothing before the first chunk
                same = req == before_req
                if not np.where(same, seq == before_seq + 1, seq == 0).all():
                    raise Unordered
                prev_req, prev_seq = int(req[-1]), int(seq[-1])
            yield req, times(got["t_ns"], self._name, "a chunk's t_ns")
        if check:
            self.verified = True

    def _sorted(self, con) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for lo, hi in self.ranges or ():
            got = con.execute(
                "SELECT req, t_ns FROM chunks WHERE req BETWEEN ? AND ? ORDER BY req, seq", [lo, hi]
            ).fetchnumpy()
            yield (
                np.asarray(got["req"], dtype=np.int64),
                times(got["t_ns"], self._name, "a chunk's t_ns"),
            )
