"""Small things a user trips on, at 80×24: the verdict's footer offers the
ablation key only for a session with an ablation, and the help's palette line promises no
start-screen command on a session's screens."""

from __future__ import annotations

import asyncio

from tui_fixtures import write_session

from abtui.tui.app import AbtuiApp
from abtui.tui.keys import keys_of
from abtui.tui.screens.live import LiveScreen
from abtui.tui.screens.verdict import VerdictScreen, load_verdict


def test_the_verdict_footer_has_no_ablation_key_without_an_ablation(tmp_path):
    data = load_verdict(write_session(tmp_path, "plain", n=40))
    assert not data.sv.verdict.factorial

    async def drive() -> str:
        app = AbtuiApp()
        async with app.run_test(size=(80, 24)) as pilot:
            await app.push_screen(VerdictScreen(data))
            await pilot.pause()
            await pilot.pause()
            footer = app.screen._compositor.render_strips()[-1].text
            await pilot.press("a")  # does nothing, says nothing
            await pilot.press("q")
        return footer

    footer = asyncio.run(drive())
    assert "export md" in footer and "ablation" not in footer, footer


def test_the_palette_line_of_a_sessions_help_promises_only_what_it_has():
    _, keys = keys_of(LiveScreen)
    palette = dict(keys)["ctrl+p"]
    assert "this screen's actions" in palette
    assert not palette.startswith("the command palette: open a session"), palette


def test_ctrl_c_stops_a_run_after_asking_not_a_toast():
    """ctrl+c in the TUI showed Textual's generic "press ctrl+q" toast over the strip; it now
    does what q does: asks while a session runs, then stops it."""
    from abtui.tui.app import ConfirmQuit

    def job(obs, stop):
        stop.wait(60)  # a run that goes on until it is stopped

    async def drive():
        app = AbtuiApp(job=job)
        async with app.run_test(size=(80, 24)) as pilot:
            while not app.running:
                await pilot.pause(0.05)
            await pilot.press("ctrl+c")
            await pilot.pause()
            asked = isinstance(app.screen, ConfirmQuit)
            toasts = len(app._notifications)
            await pilot.press("y")
            for _ in range(100):
                if app.stop.is_set() and not app.running:
                    break
                await pilot.pause(0.05)
            return asked, toasts, app.stop.is_set()

    asked, toasts, stopped = asyncio.run(drive())
    assert asked and toasts == 0 and stopped


def test_the_last_line_after_an_interrupted_run_gives_the_exit_code_it_returns(tmp_path, capsys):
    from types import SimpleNamespace

    from abtui.headless import report_run

    path = write_session(tmp_path, "stopped", n=40, status="interrupted", verdict=False)
    rc = report_run(SimpleNamespace(path=path, status="interrupted"))
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert rc == 130 and last.startswith("exit code 130: the run was interrupted"), last


def test_the_start_list_tells_two_demos_apart(tmp_path):
    """At 80×24 two demo sessions showed as two identical "demo-2026120…" rows: names are now
    cut in the middle, the timestamp's end kept."""
    from abtui.tui.screens.start import StartScreen

    write_session(tmp_path, "demo-20261206-101500", seed=1, n=20, mtime=1_700_000_100)
    write_session(tmp_path, "demo-20261206-101733", seed=2, n=20, mtime=1_700_000_900)

    async def drive() -> list[str]:
        app = AbtuiApp(start=StartScreen(tmp_path))
        async with app.run_test(size=(80, 24)) as pilot:
            for _ in range(100):
                await pilot.pause(0.1)
                if app.screen.shown:
                    break
            await pilot.pause()
            lines = [s.text for s in app.screen._compositor.render_strips()]
            await pilot.press("q")
        return lines

    lines = asyncio.run(drive())
    rows = [ln for ln in lines if ln.lstrip().startswith("demo")]  # the list's rows, not the detail
    assert len(rows) == 2 and rows[0] != rows[1], rows
    assert "101733" in rows[0] and "101500" in rows[1], rows  # the newest first


def test_the_80_column_header_keeps_the_load_figure():
    """At 80×24 the header dropped "poisson 13 req/s" whole; it keeps the figure now."""
    from abtui.tui.screens.live import header_text

    late = header_text("demo", "complete", 105.2, 2200, 2200, "poisson 13 req/s", None, 0.17, 80)
    assert "13 req/s" in late.plain and "gen LATE" in late.plain and len(late.plain) <= 80
    closed = header_text("ab", "measuring", 5.0, 10, 400, "closed loop, concurrency 8", None, 0, 80)
    assert "concurrency 8" in closed.plain or "conc 8" in closed.plain
