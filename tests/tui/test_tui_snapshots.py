"""Text snapshots of the live panes at 80×24 and 160×48 with fixed data (seeded samples, fixed
telemetry), so a layout change shows up as a diff. Regenerate after an intended change with
``ABTUI_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/tui/test_tui_snapshots.py``."""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from abtui.client.records import OK, RequestRecord
from abtui.runner.observer import ArmProgress, RunInfo
from abtui.tui.app import AbtuiApp
from abtui.tui.messages import RunProgress
from abtui.tui.observer import arm_state
from abtui.tui.screens.live import LiveScreen

SNAP = Path(__file__).parents[1] / "snapshots"


def fixed_arm(name: str, seed: int, ttft_s: float, tpot_s: float, telemetry: dict) -> ArmProgress:
    rng = np.random.default_rng(seed)
    p = ArmProgress(
        name=name, planned=200, done=180, ok=177, errors={"timeout": 2, "http": 1}, in_flight=20
    )
    for s in range(40):  # 40 readings a second apart, rising to the given values (the last)
        for key, v in telemetry.items():
            p.gauge(key, v * (0.3 + 0.7 * (s + 1) / 40) if s < 39 else v)
    p.live.slo = {"ttft": 0.2, "tpot": 0.01}
    for k in range(177):
        t0 = k * 50_000_000
        ttft = float(rng.lognormal(np.log(ttft_s), 0.6))
        tpot = float(rng.lognormal(np.log(tpot_s), 0.2))
        n = int(rng.integers(20, 200))
        first = t0 + int(ttft * 1e9)
        last = first + int(tpot * (n - 1) * 1e9)
        p.live.add(
            RequestRecord(
                arm=0,
                item=k,
                scheduled_ns=t0,
                dispatched_ns=t0 + 200_000,
                chunk_ns=[first, last],
                done_ns=last,
                status=OK,
                n_output=n,
            )
        )
    return p


def fixed_screen() -> LiveScreen:
    gpu = {
        "nvml:gpu.mem_used_bytes": 71.5 * 2**30,
        "nvml:gpu.mem_total_bytes": 80 * 2**30,
        "nvml:gpu.busy": 0.97,
        "nvml:gpu.power_w": 612.0,
        "vllm:running": 31.0,
        "vllm:waiting": 4.0,
        "vllm:kv_usage": 0.42,
    }
    arms = [fixed_arm("bf16", 1, 0.05, 0.012, gpu), fixed_arm("fp8", 2, 0.035, 0.007, {})]
    info = RunInfo(
        "snapshot",
        "sessions/snapshot.duckdb",
        ["bf16", "fp8"],
        ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"],
        ["llama-3-8b-bf16", "llama-3-8b-fp8"],
        200,
        "poisson 20 req/s",
    )
    return LiveScreen(info, RunProgress(9.0, "measuring", [arm_state(a) for a in arms]))


async def render(size: tuple[int, int]) -> str:
    app = AbtuiApp()
    async with app.run_test(size=size) as pilot:
        await app.push_screen(fixed_screen())
        await pilot.pause()
        await pilot.pause()
        text = "\n".join(s.text.rstrip() for s in app.screen._compositor.render_strips())
        await pilot.press("q")
    return text + "\n"


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_live_panes_snapshot(size):
    got = asyncio.run(render(size))
    path = SNAP / f"live_{size[0]}x{size[1]}.txt"
    if os.environ.get("ABTUI_UPDATE_SNAPSHOTS") or not path.exists():
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8")
    # what must be on screen at any size, in words
    for needle in ("bf16", "fp8", "TTFT", "▲P50", "△P99", "provisional", "snapshot"):
        assert needle in got, needle
    assert size[0] < 160 or "GPU (nvml)" in got  # the source where it fits
    # the counts keep their numbers at any width (80 columns cut the in-flight count once),
    # the errors' total among them (the by-class line is below the fold at 80×24)
    assert re.search(
        r"180/200( done)? · (ok 177 · )?err(ors)? 3 · (20 in flight|in flight 20)", got
    )


def fixed_session(path: Path) -> Path:
    """A stored session from seeded records (two arms, 120 requests each over ~12 s, a few
    errors, GPU telemetry once a second), written through the store as a run would."""
    from abtui.store.writer import SessionWriter

    rng = np.random.default_rng(7)
    with SessionWriter(path) as w:
        w.write_meta(
            session_name="snapshot",
            load="poisson 20 req/s",
            spec={"slo": {"ttft": 0.2, "tpot": 0.01}},
        )
        w.write_arms(
            [
                {
                    "arm": i,
                    "name": n,
                    "role": None,
                    "url": f"http://127.0.0.1:800{i}/v1",
                    "model": f"llama-3-8b-{n}",
                }
                for i, n in enumerate(("bf16", "fp8"))
            ]
        )
        for arm, (ttft_s, tpot_s) in enumerate(((0.05, 0.012), (0.035, 0.007))):
            recs = []
            for k in range(120):
                t0 = k * 100_000_000
                n = int(rng.integers(20, 200))
                first = t0 + 200_000 + int(rng.lognormal(np.log(ttft_s), 0.6) * 1e9)
                last = first + int(rng.lognormal(np.log(tpot_s), 0.2) * (n - 1) * 1e9)
                err = k % 40 == 39
                recs.append(
                    RequestRecord(
                        arm=arm,
                        item=k,
                        scheduled_ns=t0,
                        dispatched_ns=t0 + 200_000,
                        chunk_ns=[] if err else [first, last],
                        chunk_tokens=[] if err else [1, n - 1],
                        done_ns=last,
                        status="error" if err else OK,
                        error_class="timeout" if err else None,
                        n_output=None if err else n,
                    )
                )
            w.add_records(recs)
            w.add_telemetry(
                [
                    (arm, "nvml", s * 1_000_000_000, m, v)
                    for s in range(16)
                    for m, v in (
                        ("gpu.mem_used_bytes", (60 + s) * 2**30),
                        ("gpu.mem_total_bytes", 80 * 2**30),
                        ("gpu.busy", 0.5 + 0.03 * s),
                        ("gpu.power_w", 300.0 + 20 * s),
                    )
                ]
            )
    return path


async def render_open(path: Path, size: tuple[int, int]) -> str:
    from abtui.runner.live_replay import Replay
    from abtui.tui.screens.open import OpenScreen

    app = AbtuiApp()
    async with app.run_test(size=size) as pilot:
        await app.push_screen(OpenScreen(Replay(path), "stored session, complete"))
        await pilot.pause()
        await pilot.press("home")
        for _ in range(8):  # 40% into the run
            await pilot.press("right")
        await pilot.pause()
        await pilot.pause()
        text = "\n".join(s.text.rstrip() for s in app.screen._compositor.render_strips())
        await pilot.press("q")
    return text + "\n"


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_open_timeline_snapshot(size, tmp_path):
    got = asyncio.run(render_open(fixed_session(tmp_path / "snapshot.duckdb"), size))
    path = SNAP / f"open_{size[0]}x{size[1]}.txt"
    if os.environ.get("ABTUI_UPDATE_SNAPSHOTS") or not path.exists():
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8")
    for needle in (
        "bf16",
        "fp8",
        "TTFT",
        "t = 5.6 s / 13.9 s ⏸",
        "gauges at t",
        "GPU ",
        "85/240 req",
        "in flight",
    ):
        assert needle in got, needle


@pytest.fixture(scope="module")
def start_folder(tmp_path_factory):
    from tui_fixtures import session_folder

    root = tmp_path_factory.mktemp("start")
    session_folder(root / "sessions")
    return root


async def render_start(size: tuple[int, int]) -> str:
    from abtui.tui.screens.start import StartScreen

    app = AbtuiApp(start=StartScreen(Path("sessions")))  # relative: the same text anywhere
    async with app.run_test(size=size) as pilot:
        for _ in range(300):
            if isinstance(app.screen, StartScreen) and app.screen.rows:
                break
            await pilot.pause(0.1)
        await pilot.pause()
        await pilot.pause()
        text = "\n".join(s.text.rstrip() for s in app.screen._compositor.render_strips())
        await pilot.press("q")
    return text + "\n"


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_start_screen_snapshot(size, start_folder, monkeypatch):
    monkeypatch.chdir(start_folder)
    monkeypatch.setenv("TZ", "UTC")  # the corrupt file's row shows its modification time
    time.tzset()
    got = asyncio.run(render_start(size))
    path = SNAP / f"start_{size[0]}x{size[1]}.txt"
    if os.environ.get("ABTUI_UPDATE_SNAPSHOTS") or not path.exists():
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8")
    for needle in (
        "ab-finished",
        "finished",
        "interrupted",
        "killed",
        "unreadable",
        "GO",
        "bf16 vs fp8",
        "not a DuckDB file",
        "d demo",
        "r run a spec",
    ):
        assert needle in got, needle


def arms_screen(n: int) -> LiveScreen:
    """The fixed screen with ``n`` arms (a baseline and n - 1 candidates)."""
    names = ["bf16", "fp8", "int4", "awq", "gptq", "int4+awq", "fp8+spec", "all-three"][:n]
    arms = [
        fixed_arm(nm, k + 1, 0.05 / (1 + 0.3 * k), 0.012 / (1 + 0.4 * k), {})
        for k, nm in enumerate(names)
    ]
    info = RunInfo(
        "many",
        "sessions/many.duckdb",
        names,
        [f"http://127.0.0.1:80{k:02d}/v1" for k in range(n)],
        [f"llama-3-8b-{nm}" for nm in names],
        200,
        "poisson 20 req/s",
    )
    return LiveScreen(info, RunProgress(9.0, "measuring", [arm_state(a) for a in arms]))


def seq_look(n: int, factor: float, stop_reason=None):
    """A look of the default sequential design at ``n`` pairs of log-normal latencies, the
    candidate ``factor`` times the baseline."""
    from abtui.runner.observer import SeqLook
    from abtui.stats import seqdecide as sd

    rng = np.random.default_rng(7)
    series = {}
    for m in ("ttft", "tpot", "e2e"):
        shared = rng.normal(0, 0.18, n)
        a = 0.05 * np.exp(shared + rng.normal(0, 0.18, n))
        series[m] = (a, 0.05 * factor * np.exp(shared + rng.normal(0, 0.18, n)))
    v = sd.evaluate_sequential(series, sd.Design(stop_on_no_gain=False))
    return SeqLook(v, 19.0 if v.more else None, 2000, stop_reason)


async def render_look(size, look, line: str) -> str:
    app = AbtuiApp()
    async with app.run_test(size=size) as pilot:
        screen = fixed_screen()
        await app.push_screen(screen)
        await pilot.pause()
        msg = screen._initial[0]
        msg.sequential, msg.look = line, look
        screen.show_progress(msg)
        await pilot.pause()
        await pilot.pause()
        text = "\n".join(s.text.rstrip() for s in app.screen._compositor.render_strips())
        await pilot.press("q")
    return text


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_live_strip_shows_the_anytime_valid_intervals(size):
    """--until-decided: the strip shows, per primary/guardrail row, the anytime-valid interval
    the decision uses, its state and the pairs its decision needs; the line under it the pairs
    so far of the budget and the time left at the run's pace; the note, each look's status."""
    look = seq_look(400, 0.8)
    v = look.verdict
    assert [r.state for r in v.rows][:2] == ["IMPROVED", "SHOWN"]  # the P99s wait for 1,000
    line = "anytime-valid at 400 pairs: undecided: ttft.p99; about 600 more pairs (~19 s)"
    got = asyncio.run(render_look(size, look, line))
    assert "E2E P50" in got and "TTFT P99" in got and "E2E P99" in got  # all six rows
    assert "TTFT P50" in got and "TPOT P50" in got and "TPOT P99" in got
    prim = v.rows[0]
    assert f"{prim.lo * 100:+.1f}" in got and f"{prim.hi * 100:+.1f}" in got  # its interval
    assert "[-∞" in got  # a P99 not bounded yet says so, never a made-up interval
    assert "400/2,000 pairs" in got and "~600 more pairs (~19 s)" in got
    assert ("?600" in got) or ("? ~600 more pairs" in got)  # how far a P99's decision is
    assert "anytime-valid" in got and "provisional" not in got
    assert "about 600 more pairs (~19 s)" in got  # the note
    assert "▲P50" in got and "bf16" in got  # the panes keep their histograms at 80×24
    if size == (80, 24):
        assert max(len(x) for x in got.splitlines()) <= 80


def test_live_strip_says_where_a_decided_run_stopped():
    look = seq_look(1200, 0.8, stop_reason="decided")
    assert look.verdict.decision == "GO"
    got = asyncio.run(render_look((80, 24), look, "decided GO at 1,200 pairs: …"))
    assert "stopped: decided GO at 1,200 pairs" in got
    assert got.count("✓") == 6 and "?" not in got.split("TPOT P50")[-1].split("\n")[0]
    aa = seq_look(400, 1.0, stop_reason="budget")
    got = asyncio.run(render_look((80, 24), aa, "anytime-valid at 400 pairs: …"))
    assert "budget spent at 400 pairs: UNDECIDED" in got
