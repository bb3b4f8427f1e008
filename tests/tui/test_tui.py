"""The TUI (Textual, through ``App.run_test``/Pilot) driving real runs against the simulator:
the live panes fill from the run, the verdict screen shows the stored verdict, reports export,
``q`` asks before stopping a running session and the stopped session keeps its samples."""

from __future__ import annotations

import asyncio
import io
import re
import time

import pytest
from rich.console import Console
from tui_fixtures import drawn, shows

from abtui.demo import DemoOptions, run_demo
from abtui.runner.session import run_session
from abtui.stats.labels import pct
from abtui.store.reader import SessionReader
from abtui.tui.app import AbtuiApp, ConfirmQuit, HelpScreen
from abtui.tui.keys import EVERYWHERE, OPEN, START, VERDICT
from abtui.tui.screens.live import LiveScreen
from abtui.tui.screens.verdict import VerdictScreen


def text_of(widget) -> str:
    """What a Static shows, as plain text."""
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(widget.content)
    return buf.getvalue()


def demo_job(tmp, name: str, **kw):
    opts = DemoOptions(seed=3, name=name, sessions_dir=str(tmp), **kw)

    def job(obs, stop):
        return run_demo(
            opts, lambda spec, items: run_session(spec, "", obs, items=items, stop_request=stop)
        )

    return job


def verdict_shown(app) -> bool:
    """The verdict screen is up *and* composed (it is pushed before its widgets mount)."""
    return isinstance(app.screen, VerdictScreen) and bool(app.screen.query("#banner"))


async def wait_for(pilot, cond, timeout_s: float = 120.0) -> None:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout_s, "timed out waiting for the app"
        await pilot.pause(0.2)


@pytest.fixture(scope="module")
def demo_in_tui(tmp_path_factory):
    """One short demo under the TUI, from start to the verdict; what each screen showed."""
    tmp = tmp_path_factory.mktemp("tui")
    seen: dict = {"tmp": tmp}

    async def drive():
        app = AbtuiApp(job=demo_job(tmp, "tui-demo", requests=40, rate=10, time_scale=2))
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: verdict_shown(app) or app.error)
            assert app.error is None, app.error
            v = app.screen
            seen["banner"] = text_of(v.query_one("#banner"))
            seen["metrics"] = text_of(v.query_one("#metrics-0"))
            seen["slo"] = text_of(v.query_one("#slo"))
            seen["diagnosis"] = text_of(v.query_one("#diagnosis"))
            seen["config"] = text_of(v.query_one("#config"))
            seen["verdict_result"] = app.verdict.sv.result
            seen["tpot_p50"] = pct(app.verdict.sv.verdict.pairs[0].comparison.get("tpot.p50").ratio)
            await pilot.press("m")
            await pilot.pause()
            seen["exported"] = text_of(v.query_one("#exported"))
            await pilot.press("l")
            await pilot.pause()
            live = app.screen
            seen["back_to"] = type(live)
            seen["header"] = text_of(live.query_one("#header"))
            seen["delta"] = text_of(live.query_one("#delta"))
            seen["arms"] = [
                {
                    c: text_of(pane.query_one(f".{c}"))
                    for c in (
                        "title",
                        "counts",
                        "ttft",
                        "tpot",
                        "spark",
                        "gpu",
                        "gauges",
                        "engine",
                        "phase",
                        "errors",
                    )
                }
                for pane in live.query(".arm")
            ]
            await pilot.press("v")
            await pilot.pause()
            seen["v_again"] = type(app.screen)
            await pilot.press("q")  # the run is over: quits without asking
        seen["result"] = app.return_value

    asyncio.run(drive())
    return seen


def test_demo_in_tui_fills_the_live_panes(demo_in_tui):
    s = demo_in_tui
    assert s["back_to"] is LiveScreen
    assert "tui-demo" in s["header"] and "complete" in s["header"]
    assert "80/80 req" in s["header"]
    assert [a["title"].split()[0] for a in s["arms"]] == ["bf16", "fp8"]
    for arm in s["arms"]:
        assert "40/40 done" in arm["counts"] and "ok 40" in arm["counts"]
        for hist in ("ttft", "tpot"):
            assert "n=40" in arm[hist] and "▲" in arm[hist] and "█" in arm[hist]
            assert "log" in arm[hist]
        assert "tok/s" in arm["spark"] and "good" in arm["spark"]  # the demo has an SLO
        assert "GPU (dcgm)" in arm["gpu"] and "mem" in arm["gpu"]  # the simulator's exporter
        # at 160×48 each gauge has its history: SM activity (the exporter has no busy share),
        # DRAM and memory drawn from the run's readings; KV-cache use on its own row
        rows = {ln.split()[0]: ln for ln in arm["gauges"].splitlines() if ln.strip()}
        assert list(rows) == ["SM", "DRAM", "mem", "KV"], arm["gauges"]
        for g in ("SM", "DRAM", "mem"):
            assert any(c in rows[g] for c in "▁▂▃▄▅▆▇█"), rows[g]
            assert "not reported" not in rows[g]
        assert "server (vllm)" in arm["engine"] and "waiting" in arm["engine"]
        assert "decode" in arm["phase"] and "TTFT" in arm["phase"]
        assert "errors: none" in arm["errors"]
    # one shared axis for both arms: the same end labels under each arm's histogram
    assert [a["ttft"].splitlines()[-1] for a in s["arms"]].count(
        s["arms"][0]["ttft"].splitlines()[-1]
    ) == 2
    # the run is over and its verdict computed: the strip shows the verdict's own figures
    assert "fp8 vs bf16:" in s["delta"] and "the verdict's figures" in s["delta"]
    assert "provisional" not in s["delta"]
    tpot = s["delta"].split("TPOT P50")[1].split("TPOT P99")[0]
    assert s["tpot_p50"] in tpot, (s["tpot_p50"], tpot)
    # FP8 decodes faster in the simulator: the strip says so in words, not only in colour
    assert "-" in tpot and "✓" in tpot


def test_demo_in_tui_ends_on_the_stored_verdict(demo_in_tui):
    s = demo_in_tui
    result = s["result"]
    assert result.status == "complete"
    with SessionReader(result.path) as rd:
        assert rd.complete
    # the banner shows the verdict computed from the session file, with its reasons
    assert s["verdict_result"] in ("GO", "NO-GO", "INCONCLUSIVE")
    assert "Verdict: " in s["banner"] and s["verdict_result"] in s["banner"]
    assert "fp8 vs bf16" in s["banner"] and "  - " in s["banner"]
    for col in ("bf16", "fp8", "95% CI", "p (adj)", "outcome", "P50 TTFT"):
        assert col in s["metrics"], col
    assert "attainment" in s["slo"] and "goodput" in s["slo"]
    assert "Diagnosis" in s["diagnosis"] and "decode" in s["diagnosis"]
    assert "model" in s["config"] and "llama-3-8b:fp8" in s["config"]
    md = result.path.with_suffix(".md")
    assert md.exists() and s["verdict_result"] in md.read_text()
    assert str(md) in s["exported"]
    assert s["v_again"] is VerdictScreen


def test_quit_mid_run_asks_then_keeps_the_samples(tmp_path):
    async def drive():
        # long enough that it is still running when we quit (stopped long before its end)
        app = AbtuiApp(job=demo_job(tmp_path, "tui-quit", requests=2000, rate=10, time_scale=1))
        async with app.run_test(size=(80, 24)) as pilot:

            def some_done():
                live = app.live
                return (
                    live is not None
                    and live.last is not None
                    and all(a.progress.done >= 3 for a in live.last.arms)
                )

            await wait_for(pilot, some_done)
            await pilot.press("v")  # no verdict yet: says when it comes
            await pilot.pause()
            assert isinstance(app.screen, LiveScreen)
            assert "when the run has finished" in text_of(app.screen.query_one("#note"))
            await pilot.press("q")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmQuit)
            await pilot.press("n")  # keep running
            await pilot.pause(0.5)
            assert app.running and not isinstance(app.screen, ConfirmQuit)
            await pilot.press("ctrl+q")  # Textual's own quit asks too (it would leave the run
            await pilot.pause()  # going with no screen, the process waiting for it)
            assert isinstance(app.screen, ConfirmQuit)
            await pilot.press("escape")
            await pilot.pause()
            assert app.running and not isinstance(app.screen, ConfirmQuit)
            await pilot.press("q")
            await pilot.pause()
            await pilot.press("y")
            await wait_for(pilot, lambda: not app.is_running, 60)
        return app.return_value

    result = asyncio.run(drive())
    assert result is not None and result.status == "interrupted"
    with SessionReader(result.path) as rd:
        meta = rd.meta()
        t = rd.request_table()
    assert meta["status"] == "interrupted"
    assert (t.status == "ok").sum() >= 6 and len(t) < 4000  # kept what was measured, stopped early


def test_open_saved_session_shows_verdict_panes_and_every_key(demo_in_tui):
    path = demo_in_tui["result"].path

    async def drive():
        app = AbtuiApp(session=path)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: verdict_shown(app) or app.error)
            banner = text_of(app.screen.query_one("#banner"))
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            keys = text_of(app.screen.query_one("#keys"))
            await pilot.press("escape")
            await pilot.pause()
            assert isinstance(app.screen, VerdictScreen)
            await pilot.press("l")  # the panes, rebuilt from the stored samples
            await pilot.pause()
            assert isinstance(app.screen, LiveScreen)
            header = text_of(app.screen.query_one("#header"))
            hists = [
                (text_of(p.query_one(".ttft")), text_of(p.query_one(".tpot")))
                for p in app.screen.query(".arm")
            ]
            await pilot.press("q")
        return banner, keys, header, hists

    banner, keys, header, hists = asyncio.run(drive())
    assert demo_in_tui["verdict_result"] in banner
    assert "stored session, complete" in header and "80/80 req" in header
    # the same figures the live run ended on (same requests, same bins)
    for (ttft, tpot), live in zip(hists, demo_in_tui["arms"], strict=True):
        assert ttft.splitlines()[0] == live["ttft"].splitlines()[0]
        assert tpot.splitlines()[0] == live["tpot"].splitlines()[0]
        assert "n=40" in ttft
    # the help on the verdict lists the verdict's keys (and everywhere's), no other screen's
    for row, what in VERDICT + EVERYWHERE:
        assert row in keys and what in keys
    for _row, what in OPEN + START:
        assert (_row, what) in VERDICT or not shows(keys, _row, what), what


def test_open_without_a_terminal_or_file_is_one_line(demo_in_tui, capsys):
    from abtui.cli import main

    assert main(["open", str(demo_in_tui["tmp"] / "nope.duckdb")]) == 2
    err = capsys.readouterr().err
    assert "nope.duckdb" in err and "Traceback" not in err
    assert main(["open", str(demo_in_tui["result"].path)]) == 2  # pytest's stdin is no terminal
    err = capsys.readouterr().err
    assert "needs a terminal" in err and "abtui report" in err


def test_progress_messages_coalesce_to_the_newest():
    """A burst of snapshots while the app is busy is handled as (about) one: the newest."""
    from abtui.tui.messages import RunProgress

    class Counting(AbtuiApp):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[float] = []

        def on_run_progress(self, msg: RunProgress) -> None:
            self.seen.append(msg.elapsed_s)

    async def drive():
        app = Counting()
        async with app.run_test() as pilot:
            for k in range(100):  # queued faster than handled: nothing runs in between
                app.post_message(RunProgress(float(k), "measuring", []))
            await pilot.pause()
            await pilot.pause()
            await pilot.press("q")
        return app.seen

    seen = asyncio.run(drive())
    assert seen and seen[-1] == 99.0 and len(seen) <= 5, seen


# ------------------------------------------------- where the schedule is: sweep level, block, turn

WHERE = re.compile(r"(?:level|lvl) (\d)/2\b.*?(?:block|blk) (\d)/2(?: ·)? (bf16|fp8)")


def where(header: str) -> tuple[int, int, str] | None:
    """(level, block, arm) counted from 0 as the session's log counts, from the header's text."""
    m = WHERE.search(header)
    return (int(m[1]) - 1, int(m[2]) - 1, m[3]) if m else None


@pytest.fixture(scope="module")
def sweep_in_tui(tmp_path_factory):
    """A rate sweep (2 levels) with the arms alternating over 2 blocks on ONE simulated GPU,
    live under the TUI at 80×24; each header it showed while measuring, and its height."""
    from abtui.sim.engine import SimConfig
    from abtui.sim.preset_cli import PresetOptions
    from abtui.sim.process import SimProcess
    from abtui.spec import spec_from_dict, validate

    tmp = tmp_path_factory.mktemp("where")
    po = PresetOptions("h100:llama-3-8b:fp8", time_scale=20.0)
    with SimProcess(SimConfig(port=0, seed=1, preset=po)) as gpu:
        spec = validate(
            spec_from_dict(
                {
                    "name": "tui-where",
                    "arms": [{"name": "bf16", "url": gpu.url}, {"name": "fp8", "url": gpu.url}],
                    "workload": {"requests": 8, "input_tokens": 64, "output_tokens": 16},
                    "load": {
                        "sweep_rate": [8, 24],
                        "schedule": "alternate",
                        "blocks": 2,
                        "warmup": 1,
                    },
                    "store": {"dir": str(tmp)},
                    "policy": {"resamples": 500},
                },
                "t.toml",
            )
        )

        async def drive():
            app = AbtuiApp(job=lambda obs, stop: run_session(spec, "", obs, stop_request=stop))
            seen = []
            async with app.run_test(size=(80, 24)) as pilot:
                while app.status is None:
                    assert app.error is None, app.error
                    live = app.live
                    if live is not None and live.last and live.last.phase == "measuring":
                        h = live.query_one("#header")
                        seen.append((text_of(h).strip(), h.size.height))
                    await pilot.pause(0.1)
                await wait_for(pilot, lambda: not app.running)
                await pilot.press("q")
            return app.return_value, seen

        result, seen = asyncio.run(drive())
    assert result is not None and result.status == "complete"
    with SessionReader(result.path) as rd:
        meta = rd.meta()
    return result.path, meta, seen


def test_live_header_says_the_sweep_level_block_and_whose_turn(sweep_in_tui):
    _, meta, seen = sweep_in_tui
    log = [(e["level"], e["block"], e["arms"][0]) for e in meta["segments"]]
    assert len(log) == 8  # 2 levels × 2 blocks × 2 arms, A B | B A
    assert all(height == 1 for _, height in seen), seen  # 80 columns: shortened, not wrapped
    got = [w for h, _ in seen if (w := where(h)) is not None]
    assert len(got) >= 4, seen
    idx = [log.index(w) for w in got]  # each a stored segment, in the order they were played
    assert idx == sorted(idx)
    assert {w[0] for w in got} == {0, 1} and {w[2] for w in got} == {"bf16", "fp8"}
    # the generator's health kept, whichever it was (a loaded box can make it late)
    assert all(re.search(r"\bgen(erator)? (ok|LATE)\b", h) for h, _ in seen), seen


def test_open_header_follows_the_playhead_through_the_stored_segments(sweep_in_tui):
    from abtui.runner.live_replay import Replay

    path, meta, _ = sweep_in_tui
    segs = sorted(meta["segments"], key=lambda e: e["t0_ns"])
    t0 = Replay(path).t0_ns

    def expected(t_s: float) -> tuple[int, int, str]:
        t_ns = t0 + round(t_s * 1e9)
        e = [s for s in segs if s["t0_ns"] <= t_ns][-1:] or segs[:1]
        return e[0]["level"], e[0]["block"], e[0]["arms"][0]

    async def drive():
        app = AbtuiApp(session=path)
        shown = []
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: verdict_shown(app) or app.error)
            await pilot.press("v")  # the panes, opened at the end state
            await pilot.pause()
            s = app.screen
            shown.append((None, text_of(s.query_one("#header"))))
            await pilot.press("home")
            for _ in range(22):  # 5% a step, through the end
                # the header is redrawn after the screen's next refresh (OpenScreen._changed),
                # late on a loaded box: wait until it shows the playhead's time
                await drawn(pilot, s)
                shown.append(
                    (
                        s.playhead.t_s if not s.playhead.at_end_state else None,
                        text_of(s.query_one("#header")),
                    )
                )
                assert s.query_one("#header").size.height == 1
                await pilot.press("right")
            await pilot.press("q")
        return shown

    shown = asyncio.run(drive())
    assert where(shown[0][1]) is None and "level" not in shown[0][1]  # end state: run over
    steps = [(t, h) for t, h in shown[1:] if t is not None]
    assert len(steps) >= 19
    for t, h in steps:
        assert where(h) == expected(t), (t, h)
    assert {where(h)[0] for _, h in steps} == {0, 1}
    assert {where(h)[2] for _, h in steps} == {"bf16", "fp8"}


def test_until_decided_strip_and_quit_give_the_anytime_valid_verdict(tmp_path):
    """A run --until-decided under the TUI at 80×24: the strip shows the anytime-valid rows
    as the looks come; quitting early ends the run ``interrupted`` with one last look, and the
    verdict is that sequential one (valid at any stop), the fixed-n one only descriptive."""
    from abtui.headless import load_checked_spec
    from abtui.sim.engine import SimConfig
    from abtui.sim.process import SimProcess
    from abtui.verdict.saved import session_verdict

    base = dict(ttft_ms=20.0, itl_ms=2.0, jitter_ms=1.0)
    with SimProcess(SimConfig(seed=1, **base)) as a, SimProcess(SimConfig(seed=2, **base)) as b:
        p = tmp_path / "seq.toml"
        p.write_text(
            f'name = "seq"\n[[arms]]\nname = "base"\nurl = "{a.url}"\n[[arms]]\nname = "cand"\n'
            f'url = "{b.url}"\n[workload]\nrequests = 4000\ninput_tokens = 16\n'
            f"output_tokens = 8\n[load]\nrate = 40\nuntil_decided = true\n[store]\n"
            f'dir = "{tmp_path}"\ntext = false\n'
        )
        spec, text = load_checked_spec(str(p))
        seen: dict = {}

        async def drive():
            app = AbtuiApp(job=lambda obs, stop: run_session(spec, text, obs, stop_request=stop))
            async with app.run_test(size=(80, 24)) as pilot:

                def looked() -> bool:
                    live = app.live
                    look = live.last.look if live is not None and live.last else None
                    return look is not None and look.verdict.pairs >= 100

                await wait_for(pilot, looked, 60)
                await pilot.pause()
                seen["strip"] = text_of(app.live.query_one("#delta"))
                await pilot.press("q")
                await pilot.pause()
                await pilot.press("y")
                await wait_for(pilot, lambda: not app.is_running, 60)
            return app.return_value

        result = asyncio.run(drive())
    strip = seen["strip"]
    assert "E2E P50" in strip and "TTFT P99" in strip and "anytime-valid" in strip
    assert "/4,000 pairs" in strip and "provisional" not in strip
    assert re.search(r"E2E P50 [+-]\d+\.\d% \[[+-]\d+\.\d,[+-]\d+\.\d\]", strip)  # an interval
    assert result is not None and result.status == "interrupted"
    sv = session_verdict(result.path)
    seq = sv.meta["sequential"]
    assert seq["stop_reason"] == "interrupted" and 100 <= seq["pairs"] < 2000
    reasons = sv.verdict.pairs[0].reasons
    assert reasons[0].startswith("anytime-valid verdict (stopped early by the user at")
    assert reasons[-1].startswith("fixed-n view (descriptive")
    assert sv.result == "INCONCLUSIVE"  # identical arms, stopped early: never GO
