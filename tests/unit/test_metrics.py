"""Per-request formulas and arm summaries on hand-built records with known times."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from abtui.client.records import CANCELLED, E_CANCELLED, E_HTTP, E_TIMEOUT, ERROR, RequestRecord
from abtui.metrics import request as request_metrics
from abtui.metrics.summary import (
    LAG_MAX_LIMIT_S,
    ArmSummary,
    Dist,
    ratio,
    summarize,
    summarize_all,
)
from abtui.metrics.table import NA, RequestTable
from abtui.store.reader import SessionReader
from abtui.store.writer import SessionWriter

MS = 1_000_000
T0 = 5 * 10**12


def make(
    offsets_ms: list[float],
    *,
    arm: int = 0,
    item: int = 0,
    start_ms: float = 0.0,
    lag_ms: float = 1.0,
    tokens: list[int] | None = None,
    done_ms: float | None = None,
    n_output: int | None = None,
    **kw,
) -> RequestRecord:
    """A request scheduled at ``start_ms``, dispatched ``lag_ms`` later, chunks at dispatch +
    ``offsets_ms``, done at ``done_ms`` after dispatch (default: 5 ms after the last chunk)."""
    sched = T0 + int(start_ms * MS)
    disp = sched + int(lag_ms * MS)
    chunks = [disp + int(o * MS) for o in offsets_ms]
    tokens = tokens if tokens is not None else [1] * len(chunks)
    done = disp + int((done_ms if done_ms is not None else (offsets_ms or [0])[-1] + 5) * MS)
    return RequestRecord(
        arm=arm,
        item=item,
        scheduled_ns=sched,
        dispatched_ns=disp,
        first_byte_ns=disp + MS,
        done_ns=done,
        chunk_ns=chunks,
        chunk_tokens=tokens,
        n_input=kw.pop("n_input", 10),
        n_output=sum(tokens) if n_output is None else n_output,
        **kw,
    )


def error(
    arm: int = 0, start_ms: float = 0.0, cls: str = E_TIMEOUT, item: int = 0, **kw
) -> RequestRecord:
    disp = T0 + int(start_ms * MS) + MS
    return RequestRecord(
        arm=arm,
        item=item,
        scheduled_ns=disp - MS,
        dispatched_ns=disp,
        done_ns=disp + 30 * MS,
        status=ERROR,
        error_class=cls,
        n_output=None,
        **kw,
    )


def test_request_formulas_exact():
    t = RequestTable.from_records([make([100, 120, 150], lag_ms=1)])
    assert request_metrics.ttft_s(t)[0] == pytest.approx(0.100, abs=1e-12)
    assert request_metrics.ttft_user_s(t)[0] == pytest.approx(0.101, abs=1e-12)
    assert request_metrics.e2e_s(t)[0] == pytest.approx(0.150, abs=1e-12)
    assert request_metrics.tpot_s(t)[0] == pytest.approx(0.025, abs=1e-12)  # (150 - 100) / (3 - 1)
    assert request_metrics.itl_s(t) == pytest.approx([0.020, 0.030], abs=1e-12)
    assert request_metrics.itl_max_s(t)[0] == pytest.approx(0.030, abs=1e-12)
    assert request_metrics.schedule_lag_s(t)[0] == pytest.approx(0.001, abs=1e-12)


def test_usage_chunk_does_not_move_e2e():
    # The trailing usage-only chunk / [DONE] arrives 2 s later: done_ns moves, E2E must not.
    a = RequestTable.from_records([make([100, 120, 150])])
    b = RequestTable.from_records([make([100, 120, 150], done_ms=2150)])
    assert (
        request_metrics.e2e_s(a)[0]
        == request_metrics.e2e_s(b)[0]
        == pytest.approx(0.150, abs=1e-12)
    )
    assert request_metrics.tpot_s(a)[0] == request_metrics.tpot_s(b)[0]
    assert summarize(b, 0).e2e.p50 == pytest.approx(0.150, abs=1e-12)


def test_multi_token_chunks_tpot_uses_token_count():
    # Speculative decoding: 3 chunks carrying 1 + 4 + 3 tokens.
    t = RequestTable.from_records([make([100, 120, 150], tokens=[1, 4, 3])])
    assert request_metrics.tpot_s(t)[0] == pytest.approx(0.050 / 7, abs=1e-12)
    assert len(request_metrics.itl_s(t)) == 2  # ITL stays per chunk


def test_single_token_output():
    t = RequestTable.from_records([make([80])])
    assert request_metrics.ttft_s(t)[0] == pytest.approx(0.080, abs=1e-12)
    assert math.isnan(request_metrics.tpot_s(t)[0])
    assert math.isnan(request_metrics.itl_max_s(t)[0]) and len(request_metrics.itl_s(t)) == 0
    s = summarize(t, 0, {"tpot": 0.01, "itl": 0.01, "ttft": 0.1})
    assert s.ttft.n == 1 and s.tpot.n == 0 and math.isnan(s.tpot.p50)
    assert s.good == 1 and s.slo_attainment == 1.0  # NaN TPOT/ITL are not misses


def test_percentiles_linear_interpolation():
    recs = [make([ttft], item=i, start_ms=i * 1000) for i, ttft in enumerate([10, 20, 30, 40])]
    s = summarize(RequestTable.from_records(recs), 0)
    assert s.ttft.n == 4
    assert s.ttft.mean == pytest.approx(0.025, abs=1e-12)
    assert s.ttft.p50 == pytest.approx(0.025, abs=1e-12)
    assert s.ttft.p90 == pytest.approx(0.037, abs=1e-12)  # 30 + 0.7 * 10
    assert s.ttft.p95 == pytest.approx(0.0385, abs=1e-12)
    assert s.ttft.p99 == pytest.approx(0.0397, abs=1e-12)
    recs = [make([float(i + 1)], item=i, start_ms=i) for i in range(101)]  # 1..101 ms
    s = summarize(RequestTable.from_records(recs), 0)
    assert (s.ttft.p50, s.ttft.p90, s.ttft.p99) == pytest.approx((0.051, 0.091, 0.100), abs=1e-12)


def test_counts_throughput_and_slo_attainment():
    recs = [
        make([100, 120, 140], item=0, start_ms=0),  # good
        make([100, 110, 120], item=1, start_ms=100),  # good
        make([400, 420, 440], item=2, start_ms=200),  # TTFT 0.4 > 0.2: ok but not good
        error(start_ms=300, cls=E_TIMEOUT),  # a miss
        error(start_ms=310, cls=E_HTTP, http_status=500),
        RequestRecord(
            arm=0,
            item=5,
            scheduled_ns=T0,
            dispatched_ns=T0 + MS,
            status=CANCELLED,
            error_class=E_CANCELLED,
        ),
        make([10, 20], item=6, start_ms=0, warmup=True),  # warm-up: ignored entirely
        make([10, 20], arm=1, item=0, start_ms=0),  # other arm
    ]
    s = summarize(RequestTable.from_records(recs), 0, {"ttft": 0.2, "e2e": 1.0})
    assert (s.sent, s.ok, s.n_errors, s.cancelled) == (5, 3, 2, 1)
    assert s.errors == {E_TIMEOUT: 1, E_HTTP: 1}
    # T: first dispatch (0 + 1 ms) → last completion (item 2 done at 201 + 445 ms).
    assert s.duration_s == pytest.approx(0.645, abs=1e-12)
    assert s.requests_per_s == pytest.approx(3 / 0.645)
    assert s.output_tokens == 9 and s.input_tokens == 30
    assert s.output_tokens_per_s == pytest.approx(9 / 0.645)
    assert s.total_tokens_per_s == pytest.approx(39 / 0.645)
    assert s.good == 2 and s.slo_attainment == pytest.approx(2 / 5)  # errors are misses
    assert s.goodput_requests_per_s == pytest.approx(2 / 0.645)
    assert s.goodput_output_tokens_per_s == pytest.approx(6 / 0.645)
    assert s.ttft.n == 3 and s.e2e.n == 3 and s.itl.n == 6
    no_slo = summarize(RequestTable.from_records(recs), 0)
    assert no_slo.good == 3 and no_slo.slo_attainment == pytest.approx(3 / 5)


def test_itl_slo_is_the_largest_gap():
    recs = [make([100, 110, 120, 130], item=0), make([100, 110, 300, 310], item=1, start_ms=1)]
    s = summarize(RequestTable.from_records(recs), 0, {"itl": 0.05})
    assert s.good == 1
    assert s.itl.n == 6
    with pytest.raises(ValueError, match="unknown SLO"):
        summarize(RequestTable.from_records(recs), 0, {"latency": 1.0})


def test_ok_without_tokens_misses_ttft_slo():
    t = RequestTable.from_records([make([], n_output=0)])
    assert t.first_token_ns[0] == NA and math.isnan(request_metrics.ttft_s(t)[0])
    assert summarize(t, 0, {"ttft": 1.0}).good == 0
    assert summarize(t, 0).good == 1


def test_schedule_lag_and_generator_flag():
    fine = [make([10], item=i, start_ms=i, lag_ms=0.5) for i in range(200)]
    s = summarize(RequestTable.from_records(fine), 0)
    assert s.lag_p50_s == pytest.approx(0.0005, abs=1e-12) and not s.generator_behind
    late = fine + [make([10], item=999, lag_ms=LAG_MAX_LIMIT_S * 1000 + 50)]
    s = summarize(RequestTable.from_records(late), 0)
    assert s.lag_max_s == pytest.approx(0.150, abs=1e-12) and s.generator_behind
    behind = [make([10], item=i, start_ms=i, lag_ms=20) for i in range(10)]
    assert summarize(RequestTable.from_records(behind), 0).generator_behind


def test_select_and_for_arm_keep_chunks():
    recs = [make([10, 20], arm=0), make([30, 40, 50], arm=1), make([60], arm=0, item=2)]
    t = RequestTable.from_records(recs)
    b = t.for_arm(1)
    assert len(b) == 1 and b.chunk_req_idx.tolist() == [0, 0, 0]
    assert request_metrics.itl_s(b) == pytest.approx([0.01, 0.01], abs=1e-12)
    a = t.for_arm(0)
    assert len(a) == 2 and a.chunk_req_idx.tolist() == [0, 0, 1]
    assert a.select(np.array([1])).n_chunk_rows == 1
    c = RequestTable.concat([t.select(np.array([True, False, False])), b])
    assert len(c) == 2 and c.chunk_req_idx.tolist() == [0, 0, 1, 1, 1]
    assert request_metrics.itl_s(c) == pytest.approx([0.01, 0.01, 0.01], abs=1e-12)


def test_empty_and_serialisation():
    s = summarize(RequestTable.empty(), 0, {"ttft": 0.5})
    assert s.sent == 0 and math.isnan(s.slo_attainment) and math.isnan(s.ttft.p99)
    d = s.to_dict()
    json.dumps(d, allow_nan=False)  # strict JSON
    assert d["ttft"]["p99"] is None
    recs = [make([100, 120, 150], item=i, start_ms=i * 10) for i in range(5)] + [error()]
    full = summarize(RequestTable.from_records(recs), 0, {"ttft": 0.2})
    again = ArmSummary.from_dict(json.loads(json.dumps(full.to_dict(), allow_nan=False)))
    assert again.to_dict() == full.to_dict()
    assert isinstance(again.ttft, Dist) and again.errors == {E_TIMEOUT: 1}


def test_ratio():
    assert ratio(3.0, 2.0) == 1.5
    for b, a in ((1.0, 0.0), (math.nan, 1.0), (1.0, math.nan), (None, 1.0), (1.0, None)):
        assert math.isnan(ratio(b, a))


def test_reader_table_gives_identical_metrics(tmp_path):
    rng = np.random.default_rng(7)
    recs = []
    for i in range(300):
        arm = i % 2
        n = int(rng.integers(1, 12))
        offsets = np.cumsum(rng.uniform(5, 40, n)).round(3).tolist()
        recs.append(make(offsets, arm=arm, item=i // 2, start_ms=i * 7.3, lag_ms=rng.uniform(0, 3)))
    recs += [error(arm=1, start_ms=5), make([5, 6], item=0, warmup=True)]
    recs.append(make([10, 20, 30], item=3, done_ms=900, tokens=[2, 1, 3]))
    slo = {"ttft": 0.03, "tpot": 0.02, "itl": 0.035, "e2e": 0.3, "ttft_user": 0.032}
    with SessionWriter(tmp_path / "s.duckdb") as w:
        for k in range(0, len(recs), 64):
            w.add_records(recs[k : k + 64])
            w.flush()
    live = summarize_all(RequestTable.from_records(recs), slo)
    with SessionReader(tmp_path / "s.duckdb") as r:
        stored = summarize_all(r.request_table(), slo)
    assert set(live) == set(stored) == {0, 1}
    for arm in live:
        assert live[arm].to_dict() == stored[arm].to_dict()
        assert 0 < live[arm].good < live[arm].sent
