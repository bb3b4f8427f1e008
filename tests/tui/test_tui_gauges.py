"""Gauges with a history: the runner keeps each gauge's recent readings
(bounded), ``abtui open`` rebuilds them from the stored series (up to the playhead; the measured
run at the end state), and the panes draw them on a fixed scale — as rows at 160×48, as a short
utilisation history on the GPU line at 80×24."""

from __future__ import annotations

import asyncio

import numpy as np
from test_tui_snapshots import fixed_screen, fixed_session

from abtui.metrics.live import GAUGE_HISTORY, GaugeHistory
from abtui.runner.live_replay import Replay
from abtui.runner.observer import ArmProgress
from abtui.tui.app import AbtuiApp
from abtui.tui.widgets.gauges import BLOCKS, bars, gauge_rows
from abtui.tui.widgets.pane import gpu_line


def test_the_runner_keeps_a_bounded_history_of_each_gauge():
    p = ArmProgress(name="a", planned=1)
    for k in range(GAUGE_HISTORY + 50):
        p.gauge("nvml:gpu.busy", k / 1000)
    assert p.telemetry["nvml:gpu.busy"] == (GAUGE_HISTORY + 49) / 1000  # the latest
    got = p.history.series()["nvml:gpu.busy"]
    assert (
        len(got) == GAUGE_HISTORY
        and got[0] == 50 / 1000
        and got[-1] == p.telemetry["nvml:gpu.busy"]
    )
    got.append(9.0)  # a copy: the UI cannot change the runner's history
    assert len(p.history.series()["nvml:gpu.busy"]) == GAUGE_HISTORY


def test_bars_are_on_a_fixed_scale_not_the_series_maximum():
    assert bars([0.97] * 5, 5, 1.0) == "█████"  # steady 97 %: full, not noise
    assert bars([0.0, 0.5, 1.0], 3, 1.0) == " ▄█"  # idle is blank
    assert bars([0.1, 0.2, 0.3], 2, 1.0) == bars([0.2, 0.3], 2, 1.0)  # the newest that fit
    assert bars([2.0, -1.0, float("nan")], 3, 1.0) == "█  "  # clipped, NaN blank
    mem = {"nvml:gpu.mem_total_bytes": 80 * 2**30, "nvml:gpu.mem_used_bytes": 40 * 2**30}
    rows = gauge_rows(mem, {"nvml:gpu.mem_used_bytes": [40 * 2**30] * 4}, 40).plain.splitlines()
    assert rows[2].startswith("mem         40.0G ") and rows[2].endswith(
        BLOCKS[4] * 4
    )  # half of 80G
    assert rows[0].startswith("util") and "not reported" in rows[0]  # no busy, no SM: says so
    assert len(rows) == 4 and all(len(r) <= 40 for r in rows)


def test_the_gpu_line_carries_a_short_utilisation_history_where_it_has_room():
    tel = {
        "nvml:gpu.busy": 0.97,
        "nvml:gpu.mem_used_bytes": 71.5 * 2**30,
        "nvml:gpu.mem_total_bytes": 80 * 2**30,
        "nvml:gpu.power_w": 612.0,
    }
    util = ("gpu.busy", [0.2, 0.5, 0.97, 0.97])
    line = gpu_line(tel, 36, util).plain
    assert line == "GPU mem 71.5G/80G util 97% ▂▄██ 612W", line  # after its own figure
    assert len(gpu_line(tel, 200, util).plain) <= 200
    assert "▂" not in gpu_line(tel, 31, util).plain  # no room: the figures only
    sm = {"dcgm:gpu.sm_active": 0.5, "dcgm:gpu.mem_used_bytes": 2**30}
    assert "SM 50% ████" in gpu_line(sm, 36, ("gpu.sm_active", [1.0] * 4)).plain


def test_replay_rebuilds_the_histories_up_to_the_playhead(tmp_path):
    rp = Replay(fixed_session(tmp_path / "s.duckdb"))  # one reading a second, rising
    arms = rp.at(5.0)
    busy = arms[0].history.series()["nvml:gpu.busy"]
    # the readings at or before t = 5 s of the run (stored every second from 0)
    t_ns = rp.t0_ns + 5_000_000_000
    want = [0.5 + 0.03 * s for s in range(16) if s * 1_000_000_000 <= t_ns]
    assert np.allclose(busy, want) and busy[-1] == arms[0].telemetry["nvml:gpu.busy"]
    end = rp.end_state()[0].history.series()["nvml:gpu.busy"]
    every = [0.5 + 0.03 * s for s in range(16)]
    k = int(np.argmin([abs(v - end[0]) for v in every]))  # the measured windows' readings:
    assert len(end) > len(busy) and np.allclose(end, every[k : k + len(end)])  # a stretch
    assert rp.end_state()[0].telemetry["nvml:gpu.busy"] == np.mean(end)  # the session mean
    h = GaugeHistory({"k": list(range(GAUGE_HISTORY + 5))})
    assert len(h.series()["k"]) == GAUGE_HISTORY


def _render(size):
    async def drive():
        app = AbtuiApp()
        async with app.run_test(size=size) as pilot:
            await app.push_screen(fixed_screen())
            await pilot.pause()
            await pilot.pause()
            lines = [s.text for s in app.screen._compositor.render_strips()]
            await pilot.press("q")
        return lines

    return asyncio.run(drive())


def test_the_panes_show_the_histories_at_160x48_and_the_short_one_at_80x24():
    lines = _render((160, 48))
    rows = {k: [ln for ln in lines if f"│ {k} " in ln] for k in ("util", "DRAM", "mem", "KV")}
    assert all(len(v) == 1 for v in rows.values()), rows  # one row each, both arms on it
    left = {k: v[0].split("││")[0] for k, v in rows.items()}
    assert "97%" in left["util"] and "█" in left["util"]  # bf16's readings rise to 97 %
    assert "71.5G" in left["mem"] and "42%" in left["KV"]
    assert "not reported" in left["DRAM"]  # the fixed telemetry has no DRAM figure
    assert all("not reported" in v[0].split("││")[1] for v in rows.values())  # fp8 has none
    small = _render((80, 24))
    gpu = next(ln for ln in small if "GPU mem" in ln)
    assert "util 97% ▇▇██ 612W" in gpu, gpu  # the last readings, after the figure
    assert not any("│ DRAM " in ln for ln in small)  # no room for the rows at 80×24
