"""The replay behind ``abtui open``'s timeline (abtui.runner.live_replay), on a real session: a
short run against two simulated GPUs over loopback, one of them failing some requests. The
figures at any t must be those of a LiveArm fed, one by one, the requests completed by t (what
the live run's observer did), and must not depend on where the playhead was before."""

from __future__ import annotations

import numpy as np
import pytest

from abtui.client.records import RequestRecord
from abtui.metrics.live import LiveArm
from abtui.metrics.table import NA
from abtui.runner.live_replay import SPEEDS, Playhead, Replay, completion_ns, default_speed
from abtui.runner.session import run_session
from abtui.sim.engine import SimConfig
from abtui.sim.faults import FaultConfig
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.process import SimProcess
from abtui.spec import ArmSpec, Spec, TelemetrySpec, validate
from abtui.store.reader import SessionReader


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replay")
    a = SimProcess(SimConfig(preset=PresetOptions("h100:llama-3-8b:bf16", time_scale=10), seed=1))
    b = SimProcess(
        SimConfig(
            preset=PresetOptions("h100:llama-3-8b:fp8", time_scale=10),
            seed=2,
            faults=FaultConfig(fail={500: 0.1, 429: 0.05}),
        )
    )
    with a, b:
        spec = Spec(
            name="replay",
            arms=[ArmSpec(name="bf16", url=a.url, role="baseline"), ArmSpec(name="fp8", url=b.url)],
        )
        spec.workload.requests = 80
        spec.workload.input_tokens = 128
        spec.workload.output_tokens = 24
        spec.load.rate = 40.0
        spec.slo = {"ttft": 0.05, "tpot": 0.002}
        spec.store.dir = str(tmp)
        spec.telemetry = TelemetrySpec(interval_s=0.2)
        res = run_session(validate(spec))
    assert res.status == "complete"
    return res.path


def oracle(path, t_ns: int | None) -> list[dict]:
    """Each arm's figures the slow, obvious way: a LiveArm fed the stored requests completed by
    ``t_ns`` (all when None) in completion order, and plain counts."""
    with SessionReader(path) as rd:
        arms, table, slo = rd.arms(), rd.request_table(), rd.meta()["spec"]["slo"]
    out = []
    for a in arms:
        at = table.for_arm(a["arm"])
        done = completion_ns(at)
        live = LiveArm(slo=dict(slo))
        counts = {"done": 0, "ok": 0, "cancelled": 0, "errors": {}}
        for k in np.argsort(done, kind="stable"):
            if t_ns is not None and done[k] > t_ns:
                break
            status = str(at.status[k])
            counts["done"] += 1
            if status in ("ok", "cancelled"):
                counts[status] += 1
            else:
                cls = at.error_class[k] or "other"
                counts["errors"][cls] = counts["errors"].get(cls, 0) + 1
            first, last = int(at.first_token_ns[k]), int(at.last_token_ns[k])
            live.add(
                RequestRecord(
                    arm=a["arm"],
                    item=int(at.item[k]),
                    scheduled_ns=int(at.scheduled_ns[k]),
                    dispatched_ns=int(at.dispatched_ns[k]),
                    done_ns=int(done[k]),
                    connect_ns=int(at.connect_ns[k]),
                    chunk_ns=[first, last] if NA not in (first, last) else [],
                    status=status,
                    n_output=int(at.n_output[k]) if at.n_output[k] != NA else None,
                )
            )
        out.append({**counts, "view": live.view()})
    return out


def same_view(got, want) -> None:
    for h in ("ttft", "tpot"):
        g, w = getattr(got, h), getattr(want, h)
        assert g.n == w.n and np.array_equal(g.counts, w.counts), h
        assert np.allclose([g.p50, g.p99], [w.p50, w.p99], equal_nan=True), h
    assert got.throughput == want.throughput
    assert got.goodput == want.goodput
    for f in ("out_tok_s", "good_tok_s", "ttft_mean_s", "decode_mean_s", "lag_mean_s"):
        assert np.isclose(getattr(got, f), getattr(want, f), equal_nan=True, rtol=1e-12), f


def same_arm(p, want) -> None:
    assert (p.done, p.ok, p.cancelled, p.errors) == (
        want["done"],
        want["ok"],
        want["cancelled"],
        want["errors"],
    )
    same_view(p.live.view(), want["view"])


def test_end_state_is_every_request_fed_in_completion_order(session):
    rp = Replay(session)
    want = oracle(session, None)
    arms = rp.end_state()
    assert [p.name for p in arms] == ["bf16", "fp8"] and rp.info.arm_names == ["bf16", "fp8"]
    for p, w in zip(arms, want, strict=True):
        same_arm(p, w)
        assert p.finished and p.in_flight == 0 and p.done == p.planned == 80
    assert sum(arms[1].errors.values()) > 0  # the failing arm's errors are in it, by class
    assert arms[0].live.view().goodput is not None  # the spec's SLO is used
    # the end state's gauges are the session's means (the simulator exports DCGM and vLLM)
    assert any(k.startswith("dcgm:gpu.") for k in arms[0].telemetry)


def test_figures_at_t_are_the_requests_completed_by_t(session):
    rp = Replay(session)
    with SessionReader(session) as rd:
        t = rd.request_table()
    ends = np.sort(completion_ns(t))
    probes = [ends[0] - 1, ends[0], ends[len(ends) // 3], ends[len(ends) // 2] + 1, ends[-2]]
    for t_ns in probes:  # exact completion instants included: "by t" counts t itself
        arms = rp.at((int(t_ns) - rp.t0_ns) / 1e9)
        want = oracle(session, int(t_ns))
        for p, w in zip(arms, want, strict=True):
            same_arm(p, w)
        assert sum(p.done for p in arms) == int((ends <= t_ns).sum())


def test_counts_grow_with_t_and_in_flight_is_dispatched_not_done(session):
    rp = Replay(session)
    with SessionReader(session) as rd:
        t = rd.request_table()
    done, disp = completion_ns(t), t.dispatched_ns
    prev = None
    for ts in np.linspace(-1.0, rp.duration_s + 1.0, 57):
        arms = rp.at(float(ts))
        t_ns = rp.t0_ns + round(max(ts, 0) * 1e9) if ts < rp.duration_s else rp.end_ns
        for i, p in enumerate(arms):
            mine = t.arm == i
            assert p.done == int((done[mine] <= t_ns).sum())
            assert p.in_flight == int(((disp[mine] <= t_ns) & (done[mine] > t_ns)).sum())
        got = [
            (p.done, p.ok, p.output_tokens, p.live.ttft.n, sum(p.live.view().throughput))
            for p in arms
        ]
        if prev is not None:
            assert all(
                g >= q
                for ga, pa in zip(got, prev, strict=True)
                for g, q in zip(ga, pa, strict=True)
            ), (ts, got, prev)
        prev = got
    assert prev[0][0] == 80 and rp.at(-1.0)[0].done == 0


def test_seeking_back_and_forth_gives_identical_snapshots(session):
    rp = Replay(session)
    ts = [
        0.3 * rp.duration_s,
        rp.duration_s,
        0.0,
        0.7 * rp.duration_s,
        0.3 * rp.duration_s,
        0.7 * rp.duration_s,
        0.0,
        rp.duration_s,
    ]
    seen: dict[float, list] = {}
    for t in ts:
        snap = [
            (
                p.done,
                p.ok,
                p.errors,
                p.in_flight,
                p.telemetry,
                p.schedule_lag_max_s,
                p.live.ttft.counts.tolist(),
                p.live.view().throughput,
            )
            for p in rp.at(t)
        ]
        assert seen.setdefault(t, snap) == snap, t


def test_gauges_at_t_are_the_last_reading_before_t(session):
    rp = Replay(session)
    with SessionReader(session) as rd:
        tel = rd.telemetry()
    key_src, key_metric = "dcgm", "gpu.power_w"
    sel = (tel["arm"] == 0) & (tel["source"] == key_src) & (tel["metric"] == key_metric)
    ts, vs = tel["t_ns"][sel], tel["value"][sel]
    assert len(ts) >= 3
    mid = int(ts[len(ts) // 2])
    assert mid > rp.t0_ns
    for t_ns, want in ((mid, vs[len(ts) // 2]), (mid - 1, vs[len(ts) // 2 - 1])):
        got = rp.at((t_ns - rp.t0_ns) / 1e9)[0].telemetry
        assert got[f"{key_src}:{key_metric}"] == want
    assert not any(k.endswith(".delta") for k in rp.at(rp.duration_s / 2)[0].telemetry)


def test_playhead_moves_pauses_and_stops_at_the_end():
    ph = Playhead.at_end(120.0)
    assert (ph.t_s, ph.speed, ph.playing) == (120.0, 8, False)  # 8x: 15 s for a 2-minute run
    assert ph.label() == "t = 120.0 s / 120.0 s ⏸ 8×"
    ph.toggle()  # play from the end starts again from the start
    assert ph.playing and ph.t_s == 0.0
    assert ph.advance(0.5) and ph.t_s == 4.0
    ph.faster()
    ph.advance(1.0)
    assert ph.speed == 16 and ph.t_s == 20.0 and ph.label().endswith("▶ 16×")
    ph.seek(-0.05)
    assert ph.t_s == 14.0
    ph.seek(-1.0)
    assert ph.t_s == 0.0
    for _ in range(10):
        ph.faster()
    assert ph.speed == SPEEDS[-1]
    for _ in range(10):
        ph.slower()
    assert ph.speed == SPEEDS[0]
    ph.jump(119.0)
    ph.advance(5.0)  # runs into the end: stops there, paused
    assert ph.t_s == 120.0 and not ph.playing and not ph.advance(1.0)
    ph.toggle()
    ph.toggle()
    assert not ph.playing and ph.t_s == 0.0
    assert [default_speed(d) for d in (5, 20, 21, 120, 600, 3600)] == [1, 1, 2, 8, 32, 64]
    empty = Playhead.at_end(0.0)
    empty.toggle()
    assert not empty.playing  # nothing to play


def test_a_session_with_no_measured_request_replays_empty(tmp_path):
    from abtui.store.writer import SessionWriter

    path = tmp_path / "empty.duckdb"
    with SessionWriter(path) as w:
        w.write_meta(session_name="empty")
        w.write_arms([{"arm": 0, "name": "a", "role": "baseline", "url": "http://127.0.0.1:1/v1"}])
    rp = Replay(path)
    assert rp.duration_s == 0.0 and rp.status == "complete"
    (p,) = rp.at(0.0)
    assert p.done == 0 and p.live.view().ttft.n == 0 and p.telemetry == {}


def synthetic_session(path, n: int, span_s: float, seed: int = 0):
    """A session file written through the store from seeded records (no endpoint): ``n``
    requests per arm over ``span_s`` seconds, a few errors and cancellations among them."""
    from abtui.store.writer import SessionWriter

    rng = np.random.default_rng(seed)
    with SessionWriter(path) as w:
        w.write_meta(session_name=path.stem, spec={"slo": {"ttft": 0.08}}, status="running")
        w.write_arms(
            [
                {"arm": i, "name": nm, "role": None, "url": "http://127.0.0.1:1/v1"}
                for i, nm in enumerate(("a", "b"))
            ]
        )
        for arm in (0, 1):
            recs = []
            for item, s in enumerate(np.sort(rng.uniform(0, span_s, n))):
                sched = int(s * 1e9)
                disp = sched + int(rng.integers(0, 2_000_000))
                first = disp + int(rng.lognormal(np.log(0.05 + 0.02 * arm), 0.5) * 1e9)
                last = first + int(rng.uniform(0.1, 3.0) * 1e9)
                u = rng.uniform()
                status = "ok" if u > 0.05 else "error" if u > 0.02 else "cancelled"
                recs.append(
                    RequestRecord(
                        arm=arm,
                        item=item,
                        scheduled_ns=sched,
                        dispatched_ns=disp,
                        done_ns=last,
                        chunk_ns=[first, last] if status == "ok" else [],
                        chunk_tokens=[1, 1] if status == "ok" else [],
                        status=status,
                        error_class="http" if status == "error" else None,
                        n_output=int(rng.integers(2, 300)) if status == "ok" else None,
                    )
                )
            w.add_records(recs)
        w.flush()
        w.close(status="running")  # as a killed run leaves it
    return path


def test_a_run_longer_than_the_series_keeps_its_last_two_minutes(tmp_path):
    path = synthetic_session(tmp_path / "long.duckdb", 600, 300.0)
    rp = Replay(path)
    assert rp.status == "running" and rp.duration_s > 300
    for t in (0.2 * rp.duration_s, 0.5 * rp.duration_s, rp.duration_s):
        t_ns = rp.t0_ns + round(t * 1e9) if t < rp.duration_s else rp.end_ns
        for p, w in zip(rp.at(t), oracle(path, t_ns), strict=True):
            same_arm(p, w)
        if t > 150:
            assert len(rp.at(t)[0].live.view().throughput) == 120


def test_vectorised_bins_are_the_live_histograms_bins_even_on_the_edges():
    from abtui.metrics.live import EDGES, LogHistogram
    from abtui.runner.live_replay import _bins

    rng = np.random.default_rng(0)
    vals = np.concatenate(
        [
            EDGES,
            np.nextafter(EDGES, 0),
            np.nextafter(EDGES, np.inf),
            rng.lognormal(np.log(0.02), 2.0, 20_000),
            [0.0, -1.0, np.nan, np.inf, 1e-9, 1e6],
        ]
    )
    got = _bins(vals)
    for v, k in zip(vals.tolist(), got.tolist(), strict=True):
        h = LogHistogram()
        h.add(v)
        want = int(np.flatnonzero(h.counts)[0]) if h.n else -1
        assert k == want, (v, k, want)


def test_end_state_means_are_over_the_measured_windows_only(tmp_path):
    from window_fixtures import IDLE_W, alternating_session, quality_phase_session

    rp = Replay(quality_phase_session(tmp_path / "q.duckdb"))
    (p,) = rp.end_state()
    # 400 W while the measured requests ran; 60 W in the warm-up, quality phase and idle tail
    # (the mean of all 41 rows: 159.5 W)
    assert p.telemetry["nvml:gpu.power_w"] == pytest.approx(400.0)
    assert p.telemetry["nvml:gpu.energy_j.delta"] == pytest.approx(400.0)
    assert p.telemetry["nvml:gpu.dram_active"] == pytest.approx(0.8)
    assert p.telemetry["vllm:kv_usage"] == pytest.approx(0.5)
    # the playhead's series stays whole: every reading, idle ones included
    ts, vs = rp.gauges[0].series["nvml:gpu.power_w"]
    assert len(ts) == 41 and (vs == IDLE_W).sum() == 29

    a, b = Replay(alternating_session(tmp_path / "alt.duckdb")).end_state()
    assert a.telemetry["nvml:gpu.power_w"] == pytest.approx(400.0)  # A's turns only
    assert b.telemetry["nvml:gpu.power_w"] == pytest.approx(250.0)  # B's turns only
