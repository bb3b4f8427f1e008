"""Measured windows (abtui.metrics.windows): per arm and segment, first dispatch to last
completion of the measured requests; telemetry belongs when start <= t <= end + slack."""

import duckdb
import numpy as np
import pytest
from window_fixtures import S, alternating_session, quality_phase_session

from abtui.client.records import RequestRecord
from abtui.metrics.table import NA, RequestTable
from abtui.metrics.windows import MeasuredWindows, completion_ns, segment_spans
from abtui.store.reader import SessionReader


def test_completion_is_done_else_last_token_else_dispatch():
    t = RequestTable.from_records(
        [
            RequestRecord(arm=0, item=0, dispatched_ns=1, done_ns=9, chunk_ns=[5, 7]),
            RequestRecord(arm=0, item=1, dispatched_ns=2, chunk_ns=[5, 8]),
            RequestRecord(arm=0, item=2, dispatched_ns=3),
        ]
    )
    assert t.done_ns[2] == NA
    assert completion_ns(t).tolist() == [9, 8, 3]


def test_one_span_per_segment_the_arm_played_sorted_by_start():
    arm = np.array([0, 0, 0, 1, 1, 0])
    run = np.zeros(6)
    level = np.zeros(6)
    block = np.array([1, 1, 0, 0, 0, 0])
    start = np.array([50, 55, 10, 20, 22, 12])
    end = np.array([60, 58, 15, 30, 40, 19])
    spans = segment_spans(arm, (run, level, block), start, end)
    assert spans[0].tolist() == [[10, 19], [50, 60]]
    assert spans[1].tolist() == [[20, 40]]
    assert segment_spans(np.array([]), (), np.array([]), np.array([])) == {}


def test_contains_is_start_to_end_plus_slack_and_t0_for_an_arm_without_requests():
    w = MeasuredWindows({0: np.array([[10, 20], [18, 25], [40, 50]])}, slack_ns=2, t0_ns=5)
    t = np.array([9, 10, 26, 27, 28, 39, 40, 52, 53])
    assert w.contains(0, t).tolist() == [0, 1, 1, 1, 0, 0, 1, 1, 0]
    assert w.contains(1, t).tolist() == [1] * len(t)  # no window: at or after t0
    assert not w.contains(1, np.array([4])).any()


def test_a_session_file_gives_each_arm_its_own_turns_and_leaves_warm_up_out(tmp_path):
    with SessionReader(quality_phase_session(tmp_path / "q.duckdb", interval_s=0.5)) as rd:
        w = MeasuredWindows.read(rd)
        same = MeasuredWindows.from_table(rd.request_table(include_warmup=True), 0.5)
    assert w.of(0).tolist() == [[10 * S, int(20.5 * S)]]  # the warm-up at 5-7 s is not in it
    assert w.slack_ns == S // 2 and w.t0_ns == 0
    assert same.of(0).tolist() == w.of(0).tolist()

    with SessionReader(alternating_session(tmp_path / "alt.duckdb")) as rd:
        w = MeasuredWindows.read(rd)
    assert w.of(0).tolist() == [[10 * S, int(20.5 * S)], [52 * S, int(62.5 * S)]]
    assert w.of(1).tolist() == [[24 * S, int(34.5 * S)], [38 * S, int(48.5 * S)]]
    assert w.contains(0, np.array([30 * S])).tolist() == [False]  # B's turn


def test_an_old_file_without_level_and_block_columns_reads_them_as_0(tmp_path):
    path = alternating_session(tmp_path / "old.duckdb")
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE requests DROP COLUMN level")
    con.execute("ALTER TABLE requests DROP COLUMN block")
    con.close()
    with SessionReader(path) as rd:
        w = MeasuredWindows.read(rd)
    # one segment per arm: first dispatch to last completion over both turns
    assert w.of(0).tolist() == [[10 * S, int(62.5 * S)]]
    assert w.of(1).tolist() == [[24 * S, int(48.5 * S)]]
    assert w.slack_ns == S


@pytest.mark.parametrize("interval", [0, -1, "x", True, float("nan")])
def test_a_stored_interval_that_is_not_a_positive_number_gives_the_default_slack(
    tmp_path, interval
):
    with SessionReader(quality_phase_session(tmp_path / "s.duckdb", interval_s=interval)) as rd:
        assert MeasuredWindows.read(rd).slack_ns == S
