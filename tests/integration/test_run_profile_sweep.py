"""``abtui run --profile`` with a load sweep against two simulators over loopback: one window
per level (placed within the level as a plain run's is within the measured phase), each
level's window and analysed profile stored, each window's requests left out, and every report
showing a profile block per level from the session file alone."""

from __future__ import annotations

import json
import shutil

import pytest
from profiled_sims import profiled_sim_configs

from abtui.cli import main
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """Two levels of 45 requests per arm (30 then 45 req/s); each level's window 0.3 s into
    it, asked for 10 s (so it closes when its level ends), at most 200 steps recorded."""
    tmp = tmp_path_factory.mktemp("swept")
    cfgs = profiled_sim_configs(tmp)
    from abtui.runner.session import SessionRun

    seen: list[tuple[str, bool]] = []  # (phase, profiling) of each snapshot the UI was sent
    snap = SessionRun.snap

    def watched(self):
        s = snap(self)
        seen.append((s.phase, getattr(s, "profiling", None)))
        return s

    with SimProcess(cfgs[0]) as a, SimProcess(cfgs[1]) as b, pytest.MonkeyPatch.context() as mp:
        mp.setattr(SessionRun, "snap", watched)
        spec = tmp / "spec.toml"
        spec.write_text(
            f'name = "sweep"\n[[arms]]\nname = "bf16"\nurl = "{a.url}"\n'
            f'[[arms]]\nname = "fp8"\nurl = "{b.url}"\n'
            "[workload]\nrequests = 45\ninput_tokens = 256\noutput_tokens = 32\n"
            '[profile]\nafter = "0.3s"\nduration = "10s"\nsteps = 200\noptimises = ["gemm"]\n'
            # bf16's traces found in its folder (each level its own file), fp8's as answered
            f'traces = {{ bf16 = "{tmp / "traces" / "bf16"}" }}\n'
        )
        argv = ["run", str(spec), "--sweep-rate", "30,45", "--headless"]
        rc = main([*argv, "--sessions-dir", str(tmp / "s")])
    assert rc in (0, 3, 4)
    return tmp, tmp / "s" / "sweep.duckdb", seen


def test_one_window_and_one_profile_per_level(swept):
    _, path, _ = swept
    with SessionReader(path) as rd:
        meta = rd.meta()
        total = rd.profiled_counts()
        kept = rd.request_table()
        every = rd.request_table(include_warmup=True)
    assert "profile_window" not in meta and "profile" not in meta
    wins, docs, segs = meta["profile_windows"], meta["profiles"], meta["segments"]
    assert [(w["level"], w["rate"]) for w in wins] == [(0, 30.0), (1, 45.0)]
    assert [(d["level"], d["rate"]) for d in docs] == [(0, 30.0), (1, 45.0)]
    for w, seg in zip(wins, segs, strict=True):
        for a in w["arms"]:  # opened 0.3 s into its own level, closed once the level ended
            assert a["error"] is None
            assert seg["t0_ns"] + 0.3e9 <= a["start_ns"] < seg["end_ns"] <= a["end_ns"]
    # one window at a time: level 2's opened once level 1's had stopped on every arm
    assert min(a["start_ns"] for a in wins[1]["arms"]) > max(a["end_ns"] for a in wins[0]["arms"])
    traces = [a["traces"] for d in docs for a in d["arms"]]
    assert all(len(t) == 1 for t in traces) and len({t[0] for t in traces}) == 4  # one each
    for d in docs:
        for a in d["arms"]:
            assert a["error"] is None and a["profile"]["phases"]["decode"]["steps"] > 0
    # the requests of both windows left out, on both arms alike
    assert total[0] == total[1] > 0
    assert len(kept.arm) == int((~every.warmup).sum()) - total[0] - total[1]
    assert 0 in set(kept.level)  # the requests before level 1's window are kept


def test_reports_show_a_profile_per_level(swept, capsys):
    tmp, path, _ = swept
    shutil.rmtree(tmp / "traces", ignore_errors=True)  # the reports read the session file
    out = tmp / "r.json"
    assert main(["report", str(path), "--format", "json", "-o", str(out)]) in (0, 3, 4)
    doc = json.loads(out.read_text())["profile"]
    assert [lv["level"] for lv in doc["levels"]] == [0, 1]
    per_level = [lv["excluded"]["bf16"] for lv in doc["levels"]]
    assert all(n > 0 for n in per_level) and sum(per_level) >= doc["excluded"]["bf16"]
    heads = ["Profile, level 1 (30 req/s): a window of", "Profile, level 2 (45 req/s): a window of"]
    html = tmp / "r.html"
    main(["report", str(path), "--format", "html", "-o", str(html)])
    page = html.read_text()
    assert '<svg id="profile-bars-0"' in page and '<svg id="profile-bars-1"' in page
    md = tmp / "r.md"
    main(["report", str(path), "--format", "md", "-o", str(md)])
    text = md.read_text()
    capsys.readouterr()
    main(["report", str(path)])
    printed = capsys.readouterr().out
    for head in heads:
        assert head in text and head in printed and head in page
        assert f"{head.split(':')[0]}" in " ".join(doc["lines"])
    assert "s into the level" in printed and "bf16 decode (" in printed
    assert "ran while the servers profiled (bf16" in printed


def test_the_replay_timeline_marks_each_window_at_80x24(swept):
    import asyncio
    import io

    from rich.console import Console

    from abtui.runner.live_replay import Replay
    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.open import OpenScreen

    _, path, _ = swept
    rp = Replay(path)
    assert len(rp.profiled) == 2  # the arms' windows merged: one span per level
    (a0, b0), (a1, b1) = rp.profiled
    assert 0 < a0 < b0 < a1 < b1 <= rp.duration_s

    def line(scr, which: str = "#timeline") -> str:
        buf = io.StringIO()
        Console(file=buf, width=300, color_system=None).print(scr.query_one(which).content)
        return buf.getvalue()

    async def go() -> tuple[str, str, str, str]:
        app = AbtuiApp()
        async with app.run_test(size=(80, 24)) as pilot:
            scr = OpenScreen(rp, "stored session, complete")
            await app.push_screen(scr)
            await pilot.pause()
            at_end = line(scr)
            header_end = line(scr, "#header")
            scr.playhead.t_s = (a1 + b1) / 2  # inside the second level's window
            scr._render_now()  # what a key moving the playhead draws
            await pilot.pause()
            inside = line(scr)
            header = line(scr, "#header")
            await pilot.press("q")
        return at_end, inside, header_end, header

    at_end, inside, header_end, header = asyncio.run(go())
    assert "▒" in at_end and "▒ profiled" in at_end
    assert "▒ profiling now" in inside
    assert "▒ profiling" in header and "▒ profiling" not in header_end  # the live header's
    assert inside.count("▒") >= 3  # the legend and a cell of each window


def test_the_live_snapshots_say_when_the_servers_profile(swept):
    seen = swept[2]
    flags = [p for _, p in seen]
    assert any(flags) and not flags[-1]  # said while a window was open, not after
    assert not any(p for ph, p in seen if ph == "warmup")
