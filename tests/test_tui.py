"""The TUI (Textual, through ``App.run_test``/Pilot) driving real runs against the simulator:
the live panes fill from the run, the verdict screen shows the stored verdict, reports export,
``q`` asks before stopping a running session and the stopped session keeps its samples."""

from __future__ import annotations

import asyncio
import io
import time

import pytest
from rich.console import Console

from abtui.demo import DemoOptions, run_demo
from abtui.runner.session import run_session
from abtui.store.reader import SessionReader
from abtui.tui.app import KEYS, AbtuiApp, ConfirmQuit, HelpScreen
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
                        "engine",
                        "phase",
                        "errors",
                    )
                }  # fmt: skip
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
        assert "server (vllm)" in arm["engine"] and "waiting" in arm["engine"]
        assert "decode" in arm["phase"] and "TTFT" in arm["phase"]
        assert "errors: none" in arm["errors"]
    # one shared axis for both arms: the same end labels under each arm's histogram
    assert [a["ttft"].splitlines()[-1] for a in s["arms"]].count(
        s["arms"][0]["ttft"].splitlines()[-1]
    ) == 2
    assert "fp8 vs bf16:" in s["delta"] and "provisional" in s["delta"]
    # FP8 decodes faster in the simulator: the strip says so in words, not only in colour
    tpot = s["delta"].split("TPOT P50")[1].split("TPOT P99")[0]
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
            hists = [(text_of(p.query_one(".ttft")), text_of(p.query_one(".tpot")))
                     for p in app.screen.query(".arm")]  # fmt: skip
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
    bound = set()
    for cls in (AbtuiApp, LiveScreen, VerdictScreen):
        for b in cls.BINDINGS:
            bound.add(b.key if hasattr(b, "key") else b[0])
    shown = {k.strip() for row, _ in KEYS for k in row.split("/")}
    names = {"question_mark": "?", "escape": "Esc"}
    for key in bound:
        assert names.get(key, key) in shown, key
    for row, what in KEYS:
        assert row in keys and what in keys


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
