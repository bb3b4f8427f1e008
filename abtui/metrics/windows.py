"""An arm's **measured windows**: the stretches of time its measured requests were on the wire.

For every segment an arm played — one ``(run, level, block)``: a repetition, a sweep level, an
``alternate`` schedule's turn — its window is ``[first dispatch, last completion]`` of its
non-warm-up requests there (completion: ``done``, else the last token, else the dispatch; see
:func:`completion_ns`). Anything the session recorded outside them is not the measured load:
the warm-up, the idle gaps between segments, the other arm's turns under ``alternate``, the
quality suites sent after the load test (``quality.mode = "separate"``), the idle time before
the writer closes.

A telemetry sample at ``t`` belongs to an arm's windows when ``start <= t <= end + slack`` for
one of them, ``slack`` = the sampler's interval (``meta.telemetry.interval_s``, 1 s when not
stored): a counter's delta stamped just after the end covers the end of the run.

An arm with no stored measured request has no window; :meth:`MeasuredWindows.contains` then
keeps every sample at or after the session's ``t0`` (the ``start`` event; all of them when
there is none), which is what the diagnosis did before windows existed.

Core code: numpy only; it reads a session through the SessionReader it is given (no telemetry,
no UI).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from abtui.metrics.keys import unique_ints
from abtui.metrics.table import NA

SEGMENT_KEYS = ("run", "level", "block")  # what a segment is; a column a file lacks reads 0
DEFAULT_SLACK_S = 1.0  # the sampler's default interval
NO_T0 = -(1 << 62)


def completion_ns(t) -> np.ndarray:
    """When each request (rows of a RequestTable or the replay's rows: anything with
    ``done_ns``, ``last_token_ns``, ``dispatched_ns`` arrays, NULL as :data:`NA`) left the
    client: done, else its last token, else its dispatch."""
    out = np.where(t.done_ns != NA, t.done_ns, t.last_token_ns)
    return np.where(out != NA, out, t.dispatched_ns)


def segment_spans(
    arm: np.ndarray,
    segment: tuple[np.ndarray, ...],
    start_ns: np.ndarray,
    end_ns: np.ndarray,
) -> dict[int, np.ndarray]:
    """Per arm, one ``[min start, max end]`` row per segment it played (rows grouped by ``arm``
    and the ``segment`` key columns), as an ``(k, 2)`` int64 array sorted by start."""
    arm = np.asarray(arm, dtype=np.int64)
    if not len(arm):
        return {}
    # one integer per (arm, segment), ordered as the tuples are: a mixed-radix number of the
    # columns' offsets (np.unique of an (n, k) array sorted rows as structured values: 2.5 s
    # and three copies of the keys for 10⁶ requests)
    cols = [arm, *(np.asarray(c, dtype=np.int64) for c in segment)]
    lows = [int(c.min()) for c in cols]
    radix = [int(c.max()) - lo + 1 for c, lo in zip(cols, lows, strict=True)]
    key = np.zeros(len(arm), dtype=np.int64)
    for c, lo, r in zip(cols, lows, radix, strict=True):
        key *= r
        key += c - lo
    uniq, inv = unique_ints(key, return_inverse=True)
    del key
    lo = np.full(len(uniq), np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(len(uniq), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, inv, np.asarray(start_ns, dtype=np.int64))
    np.maximum.at(hi, inv, np.asarray(end_ns, dtype=np.int64))
    arm_of = uniq // int(np.prod(radix[1:], dtype=np.int64)) + lows[0]
    out = {}
    for a in unique_ints(arm_of):
        pick = arm_of == a
        spans = np.column_stack([lo[pick], hi[pick]])
        out[int(a)] = spans[np.argsort(spans[:, 0], kind="stable")]
    return out


def _merged(spans: np.ndarray, slack_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint ``[start, end + slack]`` intervals covering ``spans``, sorted."""
    s = spans[np.argsort(spans[:, 0], kind="stable")]
    starts, ends = [], []
    for lo, hi in zip(s[:, 0].tolist(), (s[:, 1] + slack_ns).tolist(), strict=True):
        if ends and lo <= ends[-1]:
            ends[-1] = max(ends[-1], hi)
        else:
            starts.append(lo)
            ends.append(hi)
    return np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)


@dataclass
class MeasuredWindows:
    """Every arm's measured windows (see the module docstring) and the slack samples get."""

    spans: dict[int, np.ndarray] = field(default_factory=dict)  # arm -> (k, 2) [start, end] ns
    slack_ns: int = round(DEFAULT_SLACK_S * 1e9)
    t0_ns: int = NO_T0  # the fallback's bound, for an arm with no window

    @classmethod
    def from_table(cls, t, slack_s: float = DEFAULT_SLACK_S, t0_ns: int = NO_T0):
        """From a :class:`~abtui.metrics.table.RequestTable` (its warm-up rows are left out)."""
        keep = ~np.asarray(t.warmup, dtype=bool)
        n = len(keep)
        cols = [getattr(t, k, None) for k in SEGMENT_KEYS]  # level, block: None in old tables
        seg = tuple(np.zeros(n) if c is None else np.asarray(c) for c in cols)
        seg = tuple(c[keep] for c in seg)
        rows = SimpleNamespace(
            done_ns=t.done_ns[keep],
            last_token_ns=t.last_token_ns[keep],
            dispatched_ns=t.dispatched_ns[keep],
        )
        spans = segment_spans(t.arm[keep], seg, rows.dispatched_ns, completion_ns(rows))
        return cls(spans, round(slack_s * 1e9), t0_ns)

    @classmethod
    def read(cls, rd) -> MeasuredWindows:
        """From an open :class:`~abtui.store.reader.SessionReader`: its non-warm-up requests
        (a few columns, no chunks), ``meta.telemetry.interval_s`` and the ``start`` event."""
        have = {
            r[0]
            for r in rd.query(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = 'requests'"
            )
        }
        seg = ", ".join(f"COALESCE({k}, 0)" if k in have else "0" for k in SEGMENT_KEYS)
        rows = rd.query(
            f"SELECT arm, {seg}, dispatched_ns, COALESCE(done_ns, {NA}), "
            f"COALESCE(last_token_ns, {NA}) FROM requests "
            "WHERE NOT warmup AND dispatched_ns IS NOT NULL"
        )
        cols = (
            [np.array(c, dtype=np.int64) for c in zip(*rows, strict=True)]
            if rows
            else ([np.zeros(0, dtype=np.int64)] * 7)
        )
        arm, run, level, block, disp, done, last = cols
        ends = completion_ns(SimpleNamespace(done_ns=done, last_token_ns=last, dispatched_ns=disp))
        interval = (rd.meta().get("telemetry") or {}).get("interval_s")
        number = isinstance(interval, int | float) and not isinstance(interval, bool)
        slack_s = float(interval) if number and interval > 0 else DEFAULT_SLACK_S
        return cls(
            segment_spans(arm, (run, level, block), disp, ends),
            round(slack_s * 1e9),
            start_t0(rd.events()),
        )

    def of(self, arm: int) -> np.ndarray:
        """The arm's windows, ``(k, 2)`` [start, end] ns sorted by start (k = 0: none)."""
        return self.spans.get(int(arm), np.zeros((0, 2), dtype=np.int64))

    def contains(self, arm: int, t_ns: np.ndarray) -> np.ndarray:
        """Which of the times ``t_ns`` are in the arm's windows (``start <= t <= end +
        slack``); for an arm with no window, those at or after ``t0``."""
        t = np.asarray(t_ns, dtype=np.int64)
        spans = self.of(arm)
        if not len(spans):
            return t >= self.t0_ns
        starts, ends = _merged(spans, self.slack_ns)
        i = np.searchsorted(starts, t, side="right") - 1
        return (i >= 0) & (t <= ends[np.maximum(i, 0)])


def start_t0(events: list[dict]) -> int:
    """The measured run's origin from the ``start`` event (``t0=<ns>``); a very early time
    when there is none."""
    for e in events:
        if e["kind"] == "start" and str(e["message"]).startswith("t0="):
            try:
                return int(str(e["message"])[3:])
            except ValueError:
                pass
    return NO_T0
