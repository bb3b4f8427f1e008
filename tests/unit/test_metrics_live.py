"""The live panes' running figures (abtui.metrics.live): log-binned quantiles close to the
exact ones, one axis shared by the arms, a bounded throughput series, deltas with direction."""

from __future__ import annotations

import numpy as np

from abtui.client.records import ERROR, OK, RequestRecord
from abtui.metrics.catalogue import per_request_values
from abtui.metrics.live import (
    SERIES_S,
    SPLIT_BATCH,
    LiveArm,
    LogHistogram,
    deltas,
    rebin,
    shared_range,
)
from abtui.metrics.table import RequestTable


def rec(t0_ns: int, ttft_s: float, tpot_s: float, n: int, **kw) -> RequestRecord:
    first = t0_ns + int(ttft_s * 1e9)
    chunks = [first + int(k * tpot_s * 1e9) for k in range(n)]
    return RequestRecord(
        arm=0,
        item=0,
        scheduled_ns=t0_ns,
        dispatched_ns=t0_ns,
        chunk_ns=chunks,
        chunk_tokens=[1] * n,
        done_ns=chunks[-1],
        status=OK,
        n_output=n,
        **kw,
    )


def test_log_histogram_quantiles_within_a_few_percent():
    rng = np.random.default_rng(7)
    x = rng.lognormal(np.log(0.05), 0.8, 20_000)
    h = LogHistogram()
    for v in x:
        h.add(float(v))
    for q in (0.5, 0.9, 0.99):
        assert abs(h.quantile(q) / np.quantile(x, q) - 1) < 0.04, q
    assert h.n == len(x) and h.counts.sum() == len(x)
    h.add(float("nan"))
    h.add(-1.0)
    assert h.n == len(x)  # not a sample


def test_arms_share_one_axis_and_deltas_have_direction():
    fast, slow = LiveArm(slo={"ttft": 0.05}), LiveArm(slo={"ttft": 0.05})
    for k in range(50):
        t = k * 100_000_000
        fast.add(rec(t, 0.01, 0.002, 20))
        slow.add(rec(t, 0.08, 0.004, 20))
    slow.add(rec(0, 0.01, 0.002, 20, warmup=True))  # warm-up: not counted
    a, b = slow.view(), fast.view()
    assert a.ttft.n == 50 and b.ttft.n == 50
    rng = shared_range([a.ttft, b.ttft])
    assert rng[0] == b.ttft.nonzero_range()[0] and rng[1] == a.ttft.nonzero_range()[1]
    counts, edges = rebin(a.ttft.counts, *rng, 30)
    assert counts.sum() == 50 and edges[0] <= 0.01 <= edges[-1]
    assert a.goodput is not None and sum(a.goodput) == 0  # every slow request misses the SLO
    assert sum(b.goodput) == sum(b.throughput) == 50 * 20
    d = {x.label: x for x in deltas(a, b)}
    assert d["TTFT P50"].better is True and abs(d["TTFT P50"].ratio - (0.01 / 0.08 - 1)) < 0.08
    assert d["TPOT P50"].better is True and d["TPOT P50"].ratio < -0.4
    assert d["goodput"].ratio != d["goodput"].ratio  # NaN: baseline goodput is zero


def test_series_is_bounded_and_errors_are_not_throughput():
    arm = LiveArm()
    for s in range(SERIES_S * 3):
        arm.add(rec(s * 1_000_000_000, 0.01, 0.001, 5))
    arm.add(RequestRecord(arm=0, item=1, dispatched_ns=0, status=ERROR, error_class="http"))
    v = arm.view()
    assert len(v.throughput) == SERIES_S and v.goodput is None
    assert v.ttft.n == SERIES_S * 3


def test_reasoning_and_answer_tpot_are_the_catalogues():
    """More records than one batch (SPLIT_BATCH), reasoning or not, some ending while still
    thinking, one-token answers, an error and a warm-up: the live histograms hold exactly the
    catalogue's values over the same records (RequestTable.from_records), binned; without any
    reasoning neither is shown."""
    rng = np.random.default_rng(3)
    recs = []
    for k in range(SPLIT_BATCH + 57):
        n = int(rng.integers(1, 40))
        think = int(rng.integers(0, n + 1)) if k % 3 else 0
        r = rec(k * 10**7, 0.01, float(rng.uniform(0.002, 0.02)), n)
        r.reasoning_tokens = think if k % 5 else None  # unknown on some
        r.first_output_ns = r.chunk_ns[think] if think < n else None  # None: still thinking
        recs.append(r)
    recs.append(rec(0, 0.01, 0.01, 5, warmup=True, reasoning_tokens=2))
    recs.append(rec(0, 0.01, 0.01, 5, reasoning_tokens=2))
    recs[-1].status = ERROR
    live = LiveArm()
    for r in recs:
        live.add(r)
    v = live.view()
    kept = [r for r in recs if r.status == OK and not r.warmup]
    t = RequestTable.from_records(kept)
    for metric in ("tpot_reasoning", "tpot_answer"):
        want = LogHistogram()
        for x in per_request_values(t, metric):
            want.add(float(x))
        got = getattr(v, metric)
        assert got is not None and np.array_equal(got.counts, want.counts), metric
        assert got.n == want.n > 0
    plain = LiveArm()
    for r in recs[:10]:
        if not r.reasoning_tokens:
            r.first_output_ns = r.chunk_ns[0]
            plain.add(r)
    pv = plain.view()
    assert pv.ttft.n > 0 and pv.tpot_reasoning is None and pv.tpot_answer is None
