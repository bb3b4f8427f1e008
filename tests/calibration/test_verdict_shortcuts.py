"""The verdict's shortcuts give the numbers of the straightforward computations they replaced
(for the memory and CPU of a large verdict). Each is held to a reference written the way
the code read before, on inputs that reach its edges; and the whole verdict of a session file
reads the chunks twice, not three times."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from abtui.metrics import gaps
from abtui.metrics.keys import unique_ints
from abtui.metrics.summary import run_duration_s, summarize
from abtui.stats import bootstrap, lagguard
from abtui.stats.effects import compare
from abtui.stats.rates import _windows, windows_of
from abtui.store.reader import SessionReader
from abtui.store.writer import SessionWriter
from tests.synthetic import ArmTruth, synthetic_table


def _grid_reference(*values: np.ndarray) -> bootstrap.Grid:
    v = np.concatenate([np.asarray(x, dtype=np.float64) for x in values])
    v = np.log(np.maximum(v[np.isfinite(v)], 0.0) + bootstrap.EPS_S)
    if not len(v):
        return bootstrap.Grid(0.0, 1.0)
    lo, hi = float(v.min()), float(v.max())
    if len(v) > bootstrap.GRID_TRIM_N:
        lo, hi = (float(q) for q in np.quantile(v, bootstrap.GRID_TRIM))
    return bootstrap.Grid.spanning(lo, hi)


def test_the_grid_is_numpys_quantiles_of_the_logs():
    rng = np.random.default_rng(0)
    for n in (
        0,
        1,
        7,
        bootstrap.GRID_TRIM_N - 1,
        bootstrap.GRID_TRIM_N,
        bootstrap.GRID_TRIM_N + 1,
        60_001,
    ):
        a = rng.lognormal(-4, 1.5, n)
        b = rng.lognormal(-4, 1.5, n // 2 + 6)
        a[: n // 50] = 0.0  # zeros, negatives (clock trouble), NaN and ∞ where there is room
        b[:3] = (-0.002, np.nan, np.inf)
        b[3:6] = np.round(b[3:6], 3)  # ties
        assert bootstrap.Grid.covering(a, b) == _grid_reference(a, b), n
        assert bootstrap.Grid.covering(a) == _grid_reference(a), n


def test_distinct_keys_are_np_unique():
    rng = np.random.default_rng(1)
    for dtype in (np.int64, np.int32, np.int8, np.uint8, np.uint64):
        for n in (0, 1, 9, 5000):
            for span in (1, 3, 120, 10**9):
                x = rng.integers(0, min(span, np.iinfo(dtype).max), n).astype(dtype)
                if np.issubdtype(dtype, np.signedinteger) and n:
                    x = x - dtype(min(span, 100) // 2)
                got, want = unique_ints(x), np.unique(x)
                assert got.dtype == want.dtype and np.array_equal(got, want)
                (g, gi), (w, wi) = unique_ints(x, True), np.unique(x, return_inverse=True)
                assert np.array_equal(g, w) and gi.dtype == wi.dtype and np.array_equal(gi, wi)


def _mean_gap_reference(t, rows) -> float:
    sched = t.scheduled_ns[rows]
    keys = np.stack([t.run[rows], t.level[rows], t.block[rows]])
    order = np.lexsort((sched, *keys[::-1]))
    k, s = keys[:, order], sched[order]
    same = (k[:, 1:] == k[:, :-1]).all(axis=0)
    n = int(same.sum())
    return float(np.diff(s)[same].sum() / 1e9 / n) if n else math.nan


def _table(n: int = 3000, blocks: int = 1, seed: int = 3):
    t = synthetic_table(
        n,
        [ArmTruth(lag_s=0.004), ArmTruth(tpot_scale=0.9)],
        n_output=6,
        rate=50,
        seed=seed,
        vary_input=True,
    )
    rng = np.random.default_rng(seed)
    t.scheduled_ns = t.scheduled_ns + rng.integers(0, 10**6, len(t))  # not in order
    if blocks > 1:
        t.block = (t.item * blocks // n).astype(np.int64)
    return t


def test_one_segments_mean_gap_needs_no_sort():
    for blocks in (1, 4):
        t = _table(blocks=blocks)
        for arm in (0, 1):
            rows = t.arm == arm
            assert lagguard.mean_gap_s(t, rows) == _mean_gap_reference(t, rows)


def test_the_generator_rules_bounds_share_what_they_can():
    t = _table()
    rows = np.flatnonzero((t.arm == 0) & t.ok)
    lag = (t.dispatched_ns[t.arm == 0] - t.scheduled_ns[t.arm == 0]) / 1e9
    keys = [
        "e2e.p50",
        "ttft.p50",
        "ttft.p99",
        "tpot.p50",
        "tpot.p99",
        "e2e.p99",
        "e2e.mean",
        "ttft_user.p95",
        "throughput.requests",
    ]
    shared: dict = {}
    for key in keys:
        alone = lagguard.flattery(t.select(rows), key, lag)  # a copy of the rows, nothing shared
        assert lagguard.flattery(t, key, lag, rows, shared) == alone, key
        assert alone is not None and alone > 1.0, key  # the lag did bound each row


def test_an_arms_duration_from_its_windows_spans_is_run_duration():
    for blocks in (1, 4):
        t = _table(blocks=blocks)
        for arm in (0, 1):
            sent = (t.arm == arm) & (t.status != "cancelled")
            w = windows_of(t, sent, (t.arm == arm) & t.ok, None)
            got = summarize(t, arm, spans=(w.first_ns, w.last_ns)).duration_s
            assert got == run_duration_s(t, np.flatnonzero(sent)) == summarize(t, arm).duration_s


def test_one_segments_windows_are_a_view_with_the_same_counts():
    t = _table()
    sent, ok = t.arm == 1, (t.arm == 1) & t.ok
    w = windows_of(t, sent, ok, {"ttft": 0.5})
    assert w.sent_seg.strides == (0,) and len(w.ok_seg) == int(ok.sum())
    full = replace(w, sent_seg=np.array(w.sent_seg), ok_seg=np.array(w.ok_seg))
    for k in (10, 37, 500):
        got, want = _windows(w, k), _windows(full, k)
        assert all(np.array_equal(got[c], want[c]) for c in want)


def _file(tmp_path, n: int = 400, k: int = 30):
    from abtui.client.records import OK, RequestRecord

    rng = np.random.default_rng(5)
    path = tmp_path / "s.duckdb"
    with SessionWriter(path) as w:
        w.write_meta(spec={"slo": {"itl": 0.02}, "policy": {"resamples": 200}})
        w.write_arms(
            [
                {"arm": 0, "name": "a", "url": "http://a/v1"},
                {"arm": 1, "name": "b", "url": "http://b/v1"},
            ]
        )
        recs = []
        for i in range(n):
            t0 = 10**12 + i * 20_000_000
            chunks = (t0 + 10**7 + np.cumsum(rng.integers(1, 9 * 10**6, k))).tolist()
            recs.append(
                RequestRecord(
                    arm=i % 2,
                    item=i // 2,
                    scheduled_ns=t0,
                    dispatched_ns=t0,
                    first_byte_ns=chunks[0],
                    done_ns=chunks[-1],
                    chunk_ns=chunks,
                    chunk_tokens=[1] * k,
                    status=OK,
                    n_input=64,
                    n_output=k,
                )
            )
        w.add_records(recs)
    return path


def test_a_verdict_reads_the_chunks_twice_with_the_numbers_of_three_passes(tmp_path, monkeypatch):
    """The reader's pass also does each arm's first ITL pass (gaps.first_pass), so compare's
    ITL reads the chunks once more (it read them twice). Its figures are those of a scan that
    does its own first pass."""
    monkeypatch.setattr(gaps, "BATCH", 997)  # many batches: requests cut across them
    path = _file(tmp_path)
    with SessionReader(path) as rd:
        t = rd.request_table()
    assert t.chunk_source.passes == 1 and t.gap_first_pass is not None
    c = compare(t, 0, 1, {"itl": 0.02}, resamples=200)
    assert t.chunk_source.passes == 2  # three before
    with SessionReader(path) as rd:
        fresh = rd.request_table()
    del fresh.gap_first_pass  # the scan does its own pass A
    ref = compare(fresh, 0, 1, {"itl": 0.02}, resamples=200)
    assert fresh.chunk_source.passes == 3
    got = {e.key: (e.a, e.b, e.lo, e.hi, e.p) for e in c.effects}
    assert got == {e.key: (e.a, e.b, e.lo, e.hi, e.p) for e in ref.effects}
    assert c.summaries[0].itl == ref.summaries[0].itl


@pytest.mark.parametrize("tail", [0, 1, 5, 40])
def test_a_scan_from_the_first_pass_keeps_the_same_tails(tmp_path, tail):
    path = _file(tmp_path, n=200, k=20)
    with SessionReader(path) as rd:
        t = rd.request_table()
    ok = [(t.arm == a) & t.ok for a in (0, 1)]
    kept = t.gap_first_pass.tail  # 1: the file's 4,000 chunks need no trimmed grid
    cached = gaps.GapScan(t, ok, tail=tail)
    assert cached.passes == (0 if tail <= kept else 1)  # longer tails: a pass of its own
    del t.gap_first_pass
    fresh = gaps.GapScan(t, ok, tail=tail)
    assert fresh.passes == 1
    for gs in ((0,), (1,), (0, 1)):
        n = fresh.n(gs)
        for k in (0, 1, tail - 1, tail, n // 2, n - tail, n - 1):
            if 0 <= k < n:
                assert cached.tail_value(gs, k) == fresh.tail_value(gs, k), (gs, k)
        qs = [0.0, 0.01, 0.5, 0.99, 1.0]
        assert gaps.quantiles_s(cached, gs, qs) == gaps.quantiles_s(fresh, gs, qs)
