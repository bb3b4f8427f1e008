"""ITL read from a stream of chunks is numpy's ITL on every gap.

The verdict and the summary no longer hold every chunk gap: :mod:`abtui.metrics.gaps` streams
them (from a table's chunk arrays or from the session file) and finds exact order statistics in
passes, :mod:`abtui.stats.itl` builds the sketches from the same stream. These tests hold the
results to what numpy gives on the full array of gaps — percentiles, grid, per-unit counts,
sums and histograms bit for bit; the mean to the last bits (it is now an exact integer sum)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from abtui.client.records import OK, RequestRecord
from abtui.metrics import gaps
from abtui.metrics import request as request_metrics
from abtui.metrics.summary import Dist, itl_dist, summarize
from abtui.metrics.table import RequestTable
from abtui.stats import bootstrap
from abtui.stats.effects import compare
from abtui.stats.itl import itl_sketches
from abtui.store.reader import SessionReader
from abtui.store.writer import SessionWriter
from tests.synthetic import ArmTruth, synthetic_table

QS = [0.0, 1e-5, 0.25, 0.5, 0.9, 0.95, 0.99, 1 - 1e-5, 1.0]


def _tables() -> dict[str, RequestTable]:
    base = synthetic_table(600, [ArmTruth(), ArmTruth(tpot_scale=0.9, ar=0.4)], n_output=40, seed=3)
    ties = synthetic_table(400, [ArmTruth(), ArmTruth()], n_output=30, seed=4)
    ties.chunk_t_ns[:] = ties.chunk_t_ns // 2_000_000 * 2_000_000  # 2 ms clock: many equal gaps
    bursts = synthetic_table(400, [ArmTruth(), ArmTruth()], n_output=30, seed=5)
    bursts.chunk_t_ns[::3] = bursts.chunk_t_ns[1::3][: len(bursts.chunk_t_ns[::3])]  # zeros
    bursts.chunk_t_ns[5::7] -= 50_000_000  # and negative gaps (a clock that stepped back)
    return {"plain": base, "ties": ties, "bursts-and-negative": bursts}


def test_linear_quantile_is_numpys_to_the_bit():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 5, 10, 101, 1000, 20_001):
        v = np.sort(np.exp(rng.normal(-5, 2, n)))
        for q in QS + [0.3333, 0.7071]:
            assert gaps.linear_quantile(n, q, v.__getitem__) == np.quantile(v, q), (n, q)
        for p in (50, 90, 95, 99):  # np.percentile's own fractions
            assert gaps.linear_quantile(n, p / 100, v.__getitem__) == np.percentile(v, p)
    assert math.isnan(gaps.linear_quantile(0, 0.5, v.__getitem__))


@pytest.mark.parametrize("batch,cap", [(gaps.BATCH, gaps.CAP), (997, 5)])
def test_gap_scan_quantiles_are_numpys_bit_for_bit(monkeypatch, batch, cap):
    """Batches that split requests, and buckets too full to collect (split in finer ones down
    to single values): the same floats as np.quantile on every gap."""
    monkeypatch.setattr(gaps, "BATCH", batch)
    monkeypatch.setattr(gaps, "CAP", cap)
    for name, t in _tables().items():
        masks = [t.arm == 0, t.arm == 1]
        scan = gaps.GapScan(t, masks, tail=3)
        for groups in ((0,), (1,), (0, 1)):
            m = np.logical_or.reduce([masks[g] for g in groups])
            v = request_metrics.itl_s(t.select(m))
            assert scan.n(groups) == len(v)
            got = gaps.quantiles_s(scan, groups, QS)
            assert got == [float(x) for x in np.quantile(v, QS)], (name, groups)
            assert scan.mean_s(groups) == pytest.approx(v.mean(), rel=1e-14, abs=0)
        # pass A, then one pass B per call (and one per finer level of a bucket split)
        assert scan.passes <= 1 + 3 * len(gaps.LEVELS)
        # all at once: one group's bucket may be the pooled groups' too (collected and split)
        together = gaps.quantiles_many(gaps.GapScan(t, masks), [((0,), QS), ((0, 1), QS)])
        assert together == [gaps.quantiles_s(scan, (0,), QS), gaps.quantiles_s(scan, (0, 1), QS)]


def test_per_request_gaps_and_itl_dist():
    for t in _tables().values():
        per_row = gaps.row_gaps(t)
        rows, v = request_metrics.chunk_gaps(t)
        assert (per_row.n == np.bincount(rows, minlength=len(t))).all()
        top = np.full(len(t), np.nan)
        np.fmax.at(top, rows, v)
        assert np.array_equal(request_metrics.itl_max_s(t), top, equal_nan=True)
        d, ref = itl_dist(t), Dist.of(v)
        assert (d.n, d.p50, d.p90, d.p95, d.p99) == (ref.n, ref.p50, ref.p90, ref.p95, ref.p99)


@pytest.mark.parametrize("n,tokens", [(300, 20), (2000, 30)])  # < and > 20,000 gaps pooled
def test_itl_sketches_are_sketch_of_on_every_gap(n, tokens):
    t = synthetic_table(n, [ArmTruth(), ArmTruth(tpot_scale=0.93)], n_output=tokens, seed=n)
    t.chunk_t_ns[:] = t.chunk_t_ns // 4_000_000 * 4_000_000  # a coarse clock: zero gaps too
    unit, n_units, _ = bootstrap.unit_index(t.item)
    ok = [t.arm == 0, t.arm == 1]
    got = itl_sketches(t, ok, unit, n_units, unit, n_units)
    vals, units = [], []
    for m in ok:
        rows, v = request_metrics.chunk_gaps(t.select(m))
        vals.append(v)
        units.append(unit[np.flatnonzero(m)][rows])
    grid = bootstrap.Grid.covering(*vals)
    assert (got.sketches[0].grid.lo, got.sketches[0].grid.width) == (grid.lo, grid.width)
    for g in (0, 1):
        ref, sk = bootstrap.Sketch.of(vals[g], units[g], n_units, grid), got.sketches[g]
        assert np.array_equal(sk.count, ref.count)
        assert np.array_equal(sk.total, ref.total)  # same additions in the same order
        assert np.array_equal(sk.hist, ref.hist)
        assert {k: v for k, v in sk.exact.items() if k != "mean"} == {
            k: v for k, v in ref.exact.items() if k != "mean"
        }
        assert sk.exact["mean"] == pytest.approx(ref.exact["mean"], rel=1e-14, abs=0)
        count, total = got.item_sums[g]
        assert np.array_equal(count, ref.count) and np.array_equal(total, ref.total)


def _records(n: int, k: int) -> list[RequestRecord]:
    rng = np.random.default_rng(n * k)
    out = []
    for i in range(n):
        t0 = 10**12 + i * 20_000_000
        steps = (rng.exponential(4e6, k) * (1.0 if i % 2 == 0 else 0.9)).astype(np.int64)
        steps[rng.random(k) < 0.1] = 0  # chunks read together
        chunks = (t0 + 30_000_000 + np.cumsum(steps)).tolist()
        out.append(
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
                n_input=32,
                n_output=k,
                finish_reason="length",
            )
        )
    return out


def _write(path, records) -> None:
    with SessionWriter(path) as w:
        for j in range(0, len(records), 97):
            w.add_records(records[j : j + 97])
            w.flush()


def _same_itl(a: RequestTable, b: RequestTable) -> None:
    assert np.array_equal(
        request_metrics.itl_max_s(a), request_metrics.itl_max_s(b), equal_nan=True
    )
    for arm in (0, 1):
        sa, sb = summarize(a, arm, {"itl": 0.01}), summarize(b, arm, {"itl": 0.01})
        assert sa.to_dict() == sb.to_dict()
    ca, cb = (
        compare(a, 0, 1, {"itl": 0.01}, resamples=300),
        compare(b, 0, 1, {"itl": 0.01}, resamples=300),
    )
    assert [e.to_dict() for e in ca.effects] == [e.to_dict() for e in cb.effects]


def test_a_table_read_without_chunks_streams_them_from_the_file(tmp_path):
    path = tmp_path / "s.duckdb"
    records = _records(400, 50)
    _write(path, records)
    with SessionReader(path) as rd:
        lean, full = rd.request_table(), rd.request_table(chunks=True)
    assert lean.n_chunk_rows == full.n_chunk_rows == 400 * 50 and len(lean.chunk_t_ns) == 0
    assert lean.chunk_source.ranges is None  # read in storage order, checked
    assert np.array_equal(lean.itl_n, np.full(400, 49))
    _same_itl(lean, full)
    _same_itl(lean, RequestTable.from_records(records))
    # the reader is closed: each pass opened the file again, and the file is free to write
    assert lean.chunk_source.passes > 3
    with SessionWriter(tmp_path / "s.duckdb", overwrite=True):
        pass


def test_chunks_stored_out_of_order_are_read_sorted(tmp_path):
    path = tmp_path / "s.duckdb"
    _write(path, _records(300, 20))
    import duckdb

    con = duckdb.connect(str(path))  # another writer's order: chunks shuffled
    con.execute("CREATE TABLE c2 AS SELECT * FROM chunks ORDER BY hash(req * 31 + seq)")
    con.execute("DELETE FROM chunks")
    con.execute("INSERT INTO chunks SELECT * FROM c2")
    con.execute("DROP TABLE c2")
    con.close()
    with SessionReader(path) as rd:
        lean, full = rd.request_table(), rd.request_table(chunks=True)
    assert lean.chunk_source.ranges is not None  # the storage-order check refused it
    _same_itl(lean, full)


def test_the_lag_bound_of_an_itl_row_reads_the_stream():
    """The generator rule's bound for an ITL row (:func:`abtui.stats.lagguard.flattery`) takes
    its quantiles from the stream: the same factor as from every gap held."""
    from abtui.stats import lagguard

    t = _tables()["plain"].select(_tables()["plain"].arm == 0)
    v = request_metrics.itl_s(t)
    lag = np.abs(np.random.default_rng(1).normal(0, 0.002, len(t)))
    for stat, q in lagguard._QUANTILE.items():
        measured = float(np.quantile(v, q))
        low = lagguard._lower_quantile(lambda x: float(np.quantile(v, x)), q, lag, 1.0)
        want = math.inf if low <= 0 else max(1.0, measured / low)
        assert lagguard.flattery(t, f"itl.{stat}", lag) == want, stat
    got = lagguard.flattery(t, "itl.mean", lag)
    assert got == pytest.approx(max(1.0, v.mean() / (v.mean() - lag.mean())), rel=1e-13)
