"""The items a profiling window slowed are left out of the request table on every arm (the
pairs stay whole), counted per arm; a window that never opened leaves nothing out."""

from __future__ import annotations

import numpy as np
from tui_fixtures import records, write_session

from abtui.store.reader import SessionReader


def _window(arms: list[dict]) -> dict:
    return {"profile_window": {"after_s": 1.0, "duration_s": 0.1, "steps": None, "arms": arms}}


def test_the_window_items_leave_both_arms(tmp_path):
    lo, hi = 10**12 + 1_000_000_000, 10**12 + 1_100_000_000
    arms = [
        {"arm": 0, "name": "baseline", "start_ns": lo, "end_ns": hi, "error": None},
        {"arm": 1, "name": "candidate", "start_ns": None, "end_ns": None, "error": "HTTP 404"},
    ]
    path = write_session(tmp_path, "w", n=60, verdict=False, meta=_window(arms))
    inside = {
        r.item for r in records(1, 60) if r.arm == 0 and r.dispatched_ns <= hi and r.done_ns >= lo
    }
    assert 0 < len(inside) < 60
    with SessionReader(path) as rd:
        table = rd.request_table()
        counts = rd.profiled_counts()
        every = rd.request_table(include_warmup=True)
    assert counts == {0: len(inside), 1: len(inside)}
    for arm in (0, 1):
        kept = set(table.item[table.arm == arm].tolist())
        assert kept == set(range(60)) - inside
    assert len(every.item) == 120  # the raw rows are all there


def test_a_window_that_never_opened_leaves_nothing_out(tmp_path):
    arms = [{"arm": 0, "name": "baseline", "start_ns": None, "end_ns": None, "error": "x"}]
    path = write_session(tmp_path, "n", n=20, verdict=False, meta=_window(arms))
    with SessionReader(path) as rd:
        assert rd.profiled_counts() == {}
        assert np.array_equal(np.sort(rd.request_table().item[:20]), np.arange(20))
