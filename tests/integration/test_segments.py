"""Sweeps, repeated runs and arm scheduling end to end: real generator processes against the
simulator on 127.0.0.1 (the batching engine on a simulated H100, time-scaled), real session
files; the segment plan on its own."""

from __future__ import annotations

import numpy as np
import pytest

from abtui.cli import main
from abtui.client.items import Item
from abtui.sim.engine import SimConfig
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader
from abtui.workload.segments import Level, alternate_order, plan_segments

TIME_SCALE = 20.0  # the simulated GPU runs 20× faster than real time


def _gpu(seed: int) -> SimConfig:
    po = PresetOptions("h100:llama-3-8b:fp8", time_scale=TIME_SCALE)
    return SimConfig(port=0, seed=seed, preset=po)


@pytest.fixture(scope="module")
def gpus():
    with SimProcess(_gpu(1)) as a, SimProcess(_gpu(2)) as b:
        yield a, b


def _common(tmp_path, name, output_tokens: int = 16):
    return [
        "--input-tokens",
        "64",
        "--output-tokens",
        str(output_tokens),
        "--warmup",
        "1",
        "--name",
        name,
        "--sessions-dir",
        str(tmp_path),
        "--headless",
    ]


def test_plan_alternates_abba_and_every_arm_plays_every_block():
    items = [Item(index=i, id=str(i), arrival_s=i * 0.1) for i in range(8)]
    segs = plan_segments(
        [Level(10.0, None, items)], runs=2, schedule="alternate", blocks=4, n_arms=2, open_loop=True
    )
    assert [s.arms[0] for s in segs[:8]] == [0, 1, 1, 0, 0, 1, 1, 0]
    assert [s.block for s in segs[:8]] == [0, 0, 1, 1, 2, 2, 3, 3] and segs[8].run == 1
    assert [it.index for it in segs[2].items] == [2, 3]
    assert [it.arrival_s for it in segs[2].items] == pytest.approx([0.0, 0.1])  # rebased
    assert alternate_order(1, 3) == [2, 1, 0]
    par = plan_segments(
        [Level(1.0, None, items), Level(2.0, None, items)],
        runs=1,
        schedule="parallel",
        blocks=4,
        n_arms=2,
        open_loop=True,
    )
    assert [(s.level, s.arms) for s in par] == [(0, None), (1, None)]


def test_rate_sweep_stores_one_segment_per_level(gpus, tmp_path):
    a, b = gpus
    # 16 requests per level (the 4 req/s level is most of the run's 5 s); the rates are 4× apart
    # so that the ±60% band of one level's measured rate never admits the next level's rate
    rc = main(
        [
            "run",
            "--baseline",
            a.url,
            "--candidate",
            b.url,
            "--sweep-rate",
            "4,16,40",
            "--requests",
            "16",
            *_common(tmp_path, "sweep"),
        ]
    )
    assert rc in (0, 3, 4)
    with SessionReader(tmp_path / "sweep.duckdb") as rd:
        meta = rd.meta()
        t = rd.request_table()
        items = rd.items()
    assert [lv["rate"] for lv in meta["levels"]] == [4.0, 16.0, 40.0]
    segs = meta["segments"]
    assert [(s["level"], s["rate"], s["requests"]) for s in segs] == [
        (0, 4.0, 16),
        (1, 16.0, 16),
        (2, 40.0, 16),
    ]
    assert all(s["t0_ns"] < s["end_ns"] <= n["t0_ns"] for s, n in zip(segs, segs[1:], strict=False))
    assert len(t) == 96 and set(t.status) == {"ok"}
    for lv, seg in enumerate(segs):
        rows = t.select(t.level == lv)
        assert len(rows) == 32 and set(np.unique(rows.arm)) == {0, 1}
        # every request of the level was sent inside its segment, at the level's rate
        assert rows.dispatched_ns.min() >= seg["t0_ns"] and rows.done_ns.max() <= seg["end_ns"]
        span = (rows.scheduled_ns.max() - rows.scheduled_ns.min()) / 1e9
        assert 15 / span == pytest.approx(seg["rate"], rel=0.6)
    # each level its own items: no prompt repeats across levels (prefix caches)
    measured = [it for it in items if "warmup" not in it.tags]
    assert len({it.prompt for it in measured}) == 48


def test_alternate_arms_sharing_one_gpu_never_overlap(gpus, tmp_path):
    """Both arms are served by ONE simulated GPU (one engine, one batch): with `alternate` the
    arms take turns A B B A and no request of one arm is in flight during the other's."""
    shared = gpus[0].url
    rc = main(
        [
            "run",
            "--baseline",
            shared,
            "--candidate",
            shared,
            "--rate",
            "30",
            "--requests",
            "24",
            "--schedule",
            "alternate",
            "--blocks",
            "4",
            "--runs",
            "2",
            *_common(tmp_path, "alt"),
        ]
    )
    assert rc in (0, 3, 4)
    with SessionReader(tmp_path / "alt.duckdb") as rd:
        meta = rd.meta()
        t = rd.request_table()
    assert meta["mode"] == "alternate"
    segs = meta["segments"]
    assert len(segs) == 2 * 4 * 2
    assert [s["arms"][0] for s in segs[:4]] == ["baseline", "candidate", "candidate", "baseline"]
    assert len(t) == 96 and set(t.status) == {"ok"}
    assert set(np.unique(t.run)) == {0, 1} and set(np.unique(t.block)) == {0, 1, 2, 3}
    # the same items, each arm, each run
    for arm in (0, 1):
        for run in (0, 1):
            rows = t.select((t.arm == arm) & (t.run == run))
            assert sorted(rows.item) == list(range(24))
    _assert_no_overlap(t)


def _assert_no_overlap(t) -> None:
    """No request of one arm is in flight while one of the other arm is."""
    a, b = t.select(t.arm == 0), t.select(t.arm == 1)
    a_start, a_end = a.dispatched_ns.min(), a.done_ns.max()
    assert a_start < a_end
    # interval sweep: sort all (start, end, arm) and check no overlap across arms
    ev = sorted(
        [(s, e, 0) for s, e in zip(a.dispatched_ns, a.done_ns, strict=True)]
        + [(s, e, 1) for s, e in zip(b.dispatched_ns, b.done_ns, strict=True)]
    )
    open_until = {0: -1, 1: -1}
    for s, e, arm in ev:
        assert s >= open_until[1 - arm], "arms overlapped in time"
        open_until[arm] = max(open_until[arm], e)


def test_parallel_arms_on_one_gpu_do_overlap(gpus, tmp_path):
    """The control: the same shared GPU in `parallel` mode has the arms in flight together
    (what `alternate` exists to avoid), so the overlap check above can fail."""
    shared = gpus[0].url
    rc = main(
        [
            "run",
            "--baseline",
            shared,
            "--candidate",
            shared,
            "--rate",
            "30",
            "--requests",
            "20",
            *_common(tmp_path, "par"),
        ]
    )
    assert rc in (0, 3, 4)
    with SessionReader(tmp_path / "par.duckdb") as rd:
        t = rd.request_table()
    with pytest.raises(AssertionError, match="overlapped"):
        _assert_no_overlap(t)


def test_concurrency_sweep_is_closed_loop_per_level(gpus, tmp_path):
    a, b = gpus
    # 64 output tokens: each request lasts ~20 ms. At 16 (4-10 ms; the one dispatched first in a
    # wave 4-6 ms) the fourth dispatch came ~2 ms after the first on a quiet box, a thin margin
    # for all four to be in flight together when the generator is starved of CPU
    rc = main(
        [
            "run",
            "--baseline",
            a.url,
            "--candidate",
            b.url,
            "--sweep-concurrency",
            "1,4",
            "--requests",
            "12",
            *_common(tmp_path, "csweep", output_tokens=64),
        ]
    )
    assert rc in (0, 3, 4)
    with SessionReader(tmp_path / "csweep.duckdb") as rd:
        segs = rd.meta()["segments"]
        t = rd.request_table()
    assert [(s["concurrency"], s["rate"]) for s in segs] == [(1, None), (4, None)]
    for lv, seg in enumerate(segs):  # a closed loop starts at its t0 too, on every arm
        rows = t.select(t.level == lv)
        assert rows.dispatched_ns.min() >= seg["t0_ns"], (
            lv,
            rows.dispatched_ns.min() - seg["t0_ns"],
        )
    for lv, conc in ((0, 1), (1, 4)):
        rows = t.select((t.level == lv) & (t.arm == 0))
        starts, ends = np.sort(rows.dispatched_ns), np.sort(rows.done_ns)
        in_flight = np.searchsorted(starts, starts, side="right") - np.searchsorted(ends, starts)
        assert in_flight.max() == conc


def test_spec_file_keys_for_load_shape_and_workload(tmp_path):
    from abtui.errors import SpecError
    from abtui.spec import spec_from_dict, validate

    arms = [
        {"name": "a", "url": "http://127.0.0.1:1/v1"},
        {"name": "b", "url": "http://127.0.0.1:2/v1"},
    ]
    spec = validate(
        spec_from_dict(
            {
                "arms": arms,
                "workload": {
                    "input_dist": "lognormal:256:0.5",
                    "prefix_groups": 2,
                    "prefix_tokens": 32,
                },
                "load": {
                    "sweep_rate": [5, 10.5],
                    "schedule": "alternate",
                    "blocks": 2,
                    "runs": 3,
                    "arrival": "gamma",
                    "burstiness": 2.0,
                    "duration": "30s",
                    "generators": 2,
                },
            },
            "x.toml",
        )
    )
    ld = spec.load
    assert ld.sweep_rate == [5.0, 10.5] and ld.rate == 5.0 and ld.duration_s == 30.0
    assert (ld.schedule, ld.blocks, ld.runs, ld.generators) == ("alternate", 2, 3, 2)
    for load, says in (
        ({"sweep_rate": ["fast"]}, "x.toml: load.sweep_rate must be"),
        ({"rate": 5, "schedule": "zigzag"}, "load.schedule must be one of parallel, alternate"),
        ({"sweep_concurrency": [2, 4], "rate": 3}, "a concurrency sweep is closed loop"),
        (
            {"rate": 5, "burstiness": 0},
            "load.burstiness = 0.0 is out of range: a finite number > 0",
        ),
    ):
        with pytest.raises(SpecError, match=says):
            validate(spec_from_dict({"arms": [dict(a) for a in arms], "load": load}, "x.toml"))


def test_ctrl_c_in_the_middle_of_an_alternate_sweep_stops_cleanly(gpus, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    shared = gpus[0].url
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "abtui",
            "run",
            "--baseline",
            shared,
            "--candidate",
            shared,
            "--sweep-rate",
            "20,30",
            "--requests",
            "160",
            "--schedule",
            "alternate",
            *_common(tmp_path, "stop"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    path = tmp_path / "stop.duckdb"
    deadline = time.monotonic() + 30
    segs = 0
    while time.monotonic() < deadline and segs < 2:  # into the second segment (the other arm)
        time.sleep(0.3)
        try:
            with SessionReader(path) as rd:
                segs = len(rd.meta().get("segments") or [])
        except Exception:  # noqa: BLE001 - the file may be mid-creation
            segs = 0
    assert segs >= 2
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    with SessionReader(path) as rd:
        assert rd.status == "interrupted"
        meta = rd.meta()
        t = rd.request_table()
    assert 2 <= len(meta["segments"]) < 16 and "end_ns" in meta["segments"][-1]
    assert set(t.status) <= {"ok", "cancelled"} and len(t) < 640


def test_run_warns_about_items_the_context_window_cannot_hold(gpus, tmp_path, capsys):
    from abtui.workload.jsonl import write_jsonl

    wl = tmp_path / "long.jsonl"
    write_jsonl(
        wl,
        [
            {"id": "short", "arrival_s": 0.0, "input_tokens": 100, "max_tokens": 8},
            {"id": "huge", "arrival_s": 0.05, "input_tokens": 8190, "max_tokens": 64},
            {"id": "short2", "arrival_s": 0.1, "input_tokens": 50, "max_tokens": 8},
        ],
    )
    a, b = gpus
    rc = main(
        [
            "run",
            "--baseline",
            a.url,
            "--candidate",
            b.url,
            "--workload",
            str(wl),
            "--warmup",
            "0",
            "--name",
            "ctx",
            "--sessions-dir",
            str(tmp_path),
            "--headless",
        ]
    )
    assert rc in (0, 3, 4)
    err = capsys.readouterr().err
    assert "1 of 3 requests need more than baseline's 8192-token context window" in err
    assert ": huge;" in err
    with SessionReader(tmp_path / "ctx.duckdb") as rd:
        events = [e for e in rd.events() if e["kind"] == "context_window"]
    assert len(events) == 2  # one per arm


# ------------------------------------------------------------------ where the schedule is


def test_position_says_level_run_block_and_whose_turn_only_when_they_vary():
    from abtui.workload.segments import Shape, block_count

    items = [Item(index=i, id=str(i), arrival_s=i * 0.1) for i in range(5)]
    names = ["bf16", "fp8"]

    def labels(segs, squeeze=0):
        shape = Shape.of_plan(segs)
        return [
            (p.label(squeeze) if (p := shape.position(s.describe(names))) else None) for s in segs
        ]

    plain = plan_segments(
        [Level(8.0, None, items)], runs=1, schedule="parallel", blocks=4, n_arms=2, open_loop=True
    )
    assert labels(plain) == [None]  # one run, one level, parallel: nothing to say
    sweep = plan_segments(
        [Level(4.0, None, items), Level(8.0, None, items), Level(16.5, None, items)],
        runs=1,
        schedule="parallel",
        blocks=4,
        n_arms=2,
        open_loop=True,
    )
    assert labels(sweep) == ["level 1/3 · 4 req/s", "level 2/3 · 8 req/s", "level 3/3 · 16.5 req/s"]
    conc = plan_segments(
        [Level(None, 1, items), Level(None, 4, items)],
        runs=1,
        schedule="parallel",
        blocks=4,
        n_arms=2,
        open_loop=False,
    )
    assert labels(conc, 1) == ["lvl 1/2 conc 1", "lvl 2/2 conc 4"]
    # 5 items in 4 blocks: blocks of 2, 2, 1 (three, as planned), arms A B | B A | A B
    alt = plan_segments(
        [Level(8.0, None, items)], runs=2, schedule="alternate", blocks=4, n_arms=2, open_loop=True
    )
    assert block_count(5, 4) == 3 and len(alt) == 2 * 3 * 2
    got = labels(alt)
    assert got[:6] == [
        "run 1/2 · block 1/3 · bf16's turn",
        "run 1/2 · block 1/3 · fp8's turn",
        "run 1/2 · block 2/3 · fp8's turn",
        "run 1/2 · block 2/3 · bf16's turn",
        "run 1/2 · block 3/3 · bf16's turn",
        "run 1/2 · block 3/3 · fp8's turn",
    ]
    assert got[6] == "run 2/2 · block 1/3 · bf16's turn"
    both = plan_segments(
        [Level(4.0, None, items), Level(16.0, None, items)],
        runs=1,
        schedule="alternate",
        blocks=2,
        n_arms=2,
        open_loop=True,
    )
    assert labels(both)[2] == "level 1/2 · 4 req/s · block 2/2 · fp8's turn"
    assert labels(both, 1)[2] == "lvl 1/2 4 req/s · blk 2/2 fp8"
    assert labels(both, 2)[2] == "lvl 1/2 · blk 2/2 fp8"
    for n in range(0, 30):
        for b in range(1, 9):
            lv = [Level(1.0, None, [Item(index=i, id=str(i)) for i in range(n)])]
            segs = plan_segments(
                lv, runs=1, schedule="alternate", blocks=b, n_arms=2, open_loop=True
            )
            assert block_count(n, b) == len({s.block for s in segs}), (n, b)


def test_position_from_the_stored_log_matches_the_plan_and_survives_bad_meta():
    """``abtui open`` counts a stored session's place from its meta as the live run counted it
    from the plan; an interrupted session's log is cut short, a hand-edited one says anything."""
    from abtui.workload.segments import Shape, log_entries

    items = [Item(index=i, id=str(i), arrival_s=i * 0.1) for i in range(7)]
    levels = [Level(4.0, None, items), Level(16.0, None, items[:3])]
    segs = plan_segments(levels, runs=2, schedule="alternate", blocks=4, n_arms=2, open_loop=True)
    log = [
        {"segment": k, **s.describe(["a", "b"]), "t0_ns": 10**9 * (k + 1)}
        for k, s in enumerate(segs)
    ]
    meta = {
        "mode": "alternate",
        "spec": {"load": {"runs": 2, "blocks": 4}},
        "levels": [
            {"level": k, "rate": lv.rate, "concurrency": None, "requests": len(lv.items)}
            for k, lv in enumerate(levels)
        ],
        "segments": log[:3],
    }
    assert Shape.of_meta(meta) == Shape.of_plan(segs)  # counted from meta, not the cut log
    assert Shape.of_meta({**meta, "segments": log}) == Shape.of_plan(segs)
    # an older file without levels/spec: the log alone
    assert Shape.of_meta({"mode": "alternate", "segments": log}) == Shape.of_plan(segs)
    for bad in (
        {"levels": 3, "spec": "x", "segments": {"a": 1}},
        {"levels": [None, {"rate": "fast"}], "segments": [None, {"run": -1}, {"run": "0"}]},
        {
            "mode": "alternate",
            "segments": [{"run": 0, "level": 2, "block": 1, "t0_ns": 5, "arms": None}],
        },
    ):
        shape = Shape.of_meta(bad)
        for e in log_entries(bad):
            p = shape.position(e)
            assert p is None or isinstance(p.label(), str)
    assert log_entries({"segments": [{"run": True, "level": 0, "block": 0, "t0_ns": 1}]}) == []


class _Recorder:
    """The headless observer's lines, and each snapshot's segment with where the run was."""

    def __init__(self) -> None:
        import io

        from abtui.report.console import HeadlessObserver

        self.buf = io.StringIO()
        self.headless = HeadlessObserver(self.buf, every_s=0.0)
        self.seen: list = []  # (phase, segment)

    def started(self, info):
        self.headless.started(info)

    def progress(self, snap):
        self.seen.append((snap.phase, snap.segment))
        self.headless.progress(snap)

    def arm_finished(self, arm, progress):
        pass

    def message(self, text):
        pass

    def finished(self, snap, status):
        self.seen.append(("finished", snap.segment))


def test_snapshots_carry_the_segment_being_played(gpus, tmp_path):
    """A real sweep with alternating arms on one simulated GPU: every progress snapshot names
    the segment being played, in the stored log's order, and the headless lines say it."""
    from abtui.runner.session import run_session
    from abtui.spec import spec_from_dict, validate
    from abtui.workload.segments import Shape

    shared = gpus[0].url
    spec = validate(
        spec_from_dict(
            {
                "name": "where",
                "arms": [{"name": "bf16", "url": shared}, {"name": "fp8", "url": shared}],
                "workload": {"requests": 8, "input_tokens": 64, "output_tokens": 16},
                "load": {"sweep_rate": [8, 24], "schedule": "alternate", "blocks": 2, "warmup": 1},
                "store": {"dir": str(tmp_path)},
            },
            "t.toml",
        )
    )
    rec = _Recorder()
    res = run_session(spec, "", rec)
    assert res.status == "complete"
    with SessionReader(res.path) as rd:
        meta = rd.meta()
    shape = Shape.of_meta(meta)
    order = [shape.position(e) for e in meta["segments"]]
    assert len(order) == 2 * 2 * 2 and all(p is not None for p in order)
    during = [(ph, s) for ph, s in rec.seen if ph == "measuring"]
    while during and during[-1][1] is None:  # the last segment drained, the loop not yet left
        during.pop()
    assert all(s is not None for _, s in during) and len(during) >= 4
    idx = [order.index(s) for _, s in during]  # each a stored segment, never out of order
    assert idx == sorted(idx)
    assert {s.level for _, s in during} == {0, 1}  # both levels (each 1 s or more) seen
    assert {s.turn for _, s in during} == {"bf16", "fp8"}
    assert all(s is None for ph, s in rec.seen if ph == "warmup")
    assert rec.seen[-1] == ("finished", None)  # after the last segment: nothing to say
    lines = [ln for ln in rec.buf.getvalue().splitlines() if "measuring]" in ln]
    assert any("(level 1/2 · 8 req/s · block" in ln for ln in lines), lines
    assert any("(level 2/2 · 24 req/s · block" in ln for ln in lines), lines
