"""``--until-decided``: the run looks at its paired latencies as they come and stops when the
anytime-valid verdict (:mod:`abtui.stats.seqdecide`) is decided.

The main process keeps, per measured record, only its pairing key and its latencies (not the
records: those go to the file), so a look costs a concatenation and one
:func:`~abtui.stats.seqdecide.evaluate_sequential` over the pairs so far. Looks are spaced
geometrically: one when at least :data:`LOOK_MIN_PAIRS` and :data:`LOOK_GROWTH` of the pairs
so far are new, and :data:`LOOK_MIN_S` after the last. The confidence sequences are valid at
every look whatever the spacing, so the spacing only trades the main process's time (a look
over 5,000 pairs takes about 10 ms) against how late a decision is seen (at most 10 % more
pairs than needed, or a second).

A run that also profiles (``--profile``) leaves out of every look the items any of whose
requests ran while its arm's server profiled, as the stored verdict does
(:mod:`abtui.store.profiled`): the windows only grow until they close, so an item left out
at one look is left out at every later one.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from abtui.client import records
from abtui.client.records import RequestRecord
from abtui.metrics import request as rm
from abtui.metrics.table import RequestTable
from abtui.metrics.tails import tail_min_n
from abtui.runner.observer import SeqLook
from abtui.spec import Spec
from abtui.stats import seqdecide as sd

LOOK_MIN_PAIRS = 25
LOOK_GROWTH = 0.10
LOOK_MIN_S = 1.0
METRICS = sd.SEQ_METRICS  # ttft, ttft_user, ttfo, tpot, e2e
_FN = {m: rm.PER_REQUEST[m] for m in METRICS}
NEVER = (1 << 63) - 1  # a window still open ends after any request so far

Window = tuple[int, int, int]  # (arm, start_ns, end_ns): a server profiling then


def design_of(spec: Spec) -> sd.Design:
    """The sequential design from the spec's policy: its primary, guardrails, α, and δ per
    row (``delta_tail`` for P90…P99, ``delta`` for the rest). A primary shown unable to
    improve by δ (NO-GAIN) does not stop the run: a regression beyond δ would show later as
    NO-GO, and NO-GAIN first would hide it."""
    pol = spec.policy
    keys = [pol.primary, *pol.guardrails]
    deltas = {
        k: pol.delta_tail if k.partition(".")[2] in ("p90", "p95", "p99") else pol.delta
        for k in keys
    }
    return sd.Design(
        primary=pol.primary,
        guardrails=tuple(pol.guardrails),
        alpha=pol.alpha,
        deltas=deltas,
        stop_on_no_gain=False,  # a run stops on GO or NO-GO only; else it spends its budget
    )


class UntilDecided:
    """The run's sequential monitor: :meth:`add` each batch of records, :meth:`due` says when
    to :meth:`look`; :meth:`record` is the session's ``sequential`` meta key."""

    def __init__(self, spec: Spec, budget_pairs: int) -> None:
        self.monitor = sd.Monitor(design_of(spec))
        self.budget_pairs = budget_pairs
        self._keys: list[np.ndarray] = []
        self._arm: list[np.ndarray] = []
        self._ok: list[np.ndarray] = []
        self._span: list[np.ndarray] = []  # per record: (sent or scheduled, done) in ns
        self._vals: dict[str, list[np.ndarray]] = {m: [] for m in METRICS}
        self._rows = 0  # measured records kept, both arms
        self._looked_pairs = 0
        self._looked_at = 0.0
        self._t0: float | None = None  # first measured record seen
        self._rate = math.nan  # pairs per second at the last look
        self.pairs_seen = 0  # pairs at the last look
        self.look_s = 0.0  # time spent looking, all looks together
        self.stop_reason: str | None = None  # decided / budget / interrupted

    def add(self, recs: list[RequestRecord]) -> None:
        recs = [
            r
            for r in recs
            if not r.warmup and r.status in (records.OK, records.ERROR)  # cancelled: not sent
        ]
        if not recs:
            return
        if self._t0 is None:
            self._t0 = time.monotonic()
        t = RequestTable.from_records(recs)
        key = np.array([(r.run, r.level, r.block, r.item) for r in recs], dtype=np.int64)
        self._keys.append(key)
        self._rows += len(recs)
        self._arm.append(np.asarray(t.arm, np.int64))
        self._ok.append(np.asarray(t.ok, bool))
        span = [(r.dispatched_ns or r.scheduled_ns, r.done_ns or NEVER) for r in recs]
        self._span.append(np.array(span, dtype=np.int64).reshape(-1, 2))
        for m in METRICS:
            self._vals[m].append(_FN[m](t))

    def budget_note(self) -> str | None:
        """What the budget cannot decide: a tail row needs about ``tail_min_n`` pairs before
        its interval can be bounded (None: the budget leaves room for every row)."""
        need = {k: tail_min_n(k.partition(".")[2]) for k, _ in self.monitor.design.rows()}
        short = [k for k, n in need.items() if n > self.budget_pairs]
        if not short:
            return None
        most = max(need[k] for k in short)
        return (
            f"note: a budget of {self.budget_pairs:,} pairs cannot decide {', '.join(short)} "
            f"(about {most:,} pairs needed), so it cannot end GO; give --requests {most} or "
            "more, or guardrails without tails"
        )

    def due(self) -> bool:
        new = self._rows / 2 - self._looked_pairs  # about: both arms' rows
        enough = new >= max(LOOK_MIN_PAIRS, LOOK_GROWTH * self._looked_pairs)
        return enough and time.monotonic() - self._looked_at >= LOOK_MIN_S

    def series(self, windows: list[Window] = ()) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per metric, the baseline's and candidate's values on the items both sent, aligned
        in schedule order (NaN where a request failed), less the items a profiling window
        touched on either arm."""
        if not self._arm:
            empty = np.zeros(0)
            return {m: (empty, empty) for m in METRICS}
        key = np.concatenate(self._keys)
        arm = np.concatenate(self._arm)
        ok = np.concatenate(self._ok)
        span = np.concatenate(self._span)
        # one array each from now on
        self._keys, self._arm, self._ok, self._span = [key], [arm], [ok], [span]
        vals = {m: np.concatenate(self._vals[m]) for m in METRICS}
        self._vals = {m: [v] for m, v in vals.items()}
        flat = np.zeros(len(key), np.int64)
        for c in range(4):
            col = key[:, c]
            flat = flat * (int(col.max(initial=0)) + 1) + col
        keep = ~np.isin(flat, flat[_in_windows(arm, span, windows)])
        ia_rows = np.flatnonzero((arm == 0) & keep)
        ib_rows = np.flatnonzero((arm == 1) & keep)
        _, ia, ib = np.intersect1d(flat[ia_rows], flat[ib_rows], return_indices=True)
        ra, rb = ia_rows[ia], ib_rows[ib]
        out = {}
        for m in METRICS:
            v = vals[m]
            va, vb = v[ra].astype(float), v[rb].astype(float)
            va[~ok[ra]] = np.nan
            vb[~ok[rb]] = np.nan
            out[m] = (va, vb)
        return out

    def look(self, windows: list[Window] = ()) -> sd.SeqVerdict:
        """The anytime-valid verdict on the pairs so far, less those ``windows`` touched."""
        t = time.perf_counter()
        v = self.monitor.look(self.series(windows))
        self.look_s += time.perf_counter() - t
        self._looked_pairs = v.pairs
        self._looked_at = time.monotonic()
        self.pairs_seen = v.pairs
        if self._t0 is not None and v.pairs:  # the pace while measuring, not after it
            self._rate = v.pairs / max(self._looked_at - self._t0, 1e-3)
        return v

    def pairs_per_s(self) -> float:
        """Pairs completed per second, measured at the last look (NaN before one)."""
        return self._rate

    def remaining_s(self) -> float | None:
        last = self.monitor.last
        return None if last is None else sd.remaining_seconds(last.more, self.pairs_per_s())

    def seq_look(self) -> SeqLook | None:
        """The last look for the live strip (None before the first)."""
        last = self.monitor.last
        if last is None:
            return None
        return SeqLook(last, self.remaining_s(), self.budget_pairs, self.stop_reason)

    def record(self) -> sd.SequentialRun:
        """The session's ``sequential`` meta key as a record: the looks, the last verdict and
        how the run ended."""
        rate = self.pairs_per_s()
        rem = self.remaining_s()
        end = sd.RunEnd(
            stop_reason=self.stop_reason,
            budget_pairs=self.budget_pairs,
            pairs_per_s=round(rate, 3) if math.isfinite(rate) else None,
            remaining_s=None if rem is None else round(rem, 1),
            look_s=round(self.look_s, 3),
        )
        return replace(self.monitor.record(), end=end)


def _in_windows(arm: np.ndarray, span: np.ndarray, windows: list[Window]) -> np.ndarray:
    """The rows whose request ran, at least in part, inside its own arm's window."""
    hit = np.zeros(len(arm), bool)
    for a, lo, hi in windows:
        hit |= (arm == a) & (span[:, 0] <= hi) & (span[:, 1] >= lo)
    return hit


def status_line(v: sd.SeqVerdict, remaining_s: float | None) -> str:
    """One line for the progress output: the decision so far and what is left."""
    if v.stop:
        return f"decided {v.decision} at {v.pairs:,} pairs: {v.reason}"
    left = ""
    if v.more is not None:
        left = f"; about {v.more:,} more pairs"
        if remaining_s is not None:
            left += f" (~{duration_text(remaining_s)})"
    return f"anytime-valid at {v.pairs:,} pairs: {v.reason}{left}"


def duration_text(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"
