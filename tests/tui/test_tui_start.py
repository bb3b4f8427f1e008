"""The start screen (``abtui`` with no arguments), driven with Pilot: the recent sessions of a
folder of real session files (newest first, a corrupt file listed, not fatal), Enter opens one,
``r`` checks a spec with the spec loader and shows its error, ``d`` runs the demo (simulated
GPUs on 127.0.0.1, fast time scale) to the verdict; leaving what was opened or run (``q``, Esc
on the panes) comes back to the list, read again, and a running session is not left without
asking; and the listing itself."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time

import pytest
from test_tui import text_of, verdict_shown, wait_for
from tui_fixtures import session_folder, shows, write_session

from abtui.demo import DemoOptions
from abtui.store.listing import list_sessions, read_row
from abtui.store.reader import SessionReader
from abtui.tui.app import AbtuiApp, ConfirmQuit, HelpScreen
from abtui.tui.keys import EVERYWHERE, LIVE, OPEN, START, VERDICT
from abtui.tui.screens.live import LiveScreen
from abtui.tui.screens.open import OpenScreen
from abtui.tui.screens.start import StartScreen


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("sessions")
    session_folder(d)
    return d


def rows_loaded(app) -> bool:
    return isinstance(app.screen, StartScreen) and bool(app.screen.rows)


def table_text(app) -> list[str]:
    table = app.screen.query_one("#sessions")
    return [" ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]


def test_listing_newest_first_with_status_and_verdict(folder):
    rows = list_sessions(folder)
    assert [r.name for r in rows] == ["garbage", "ab-killed", "ab-stopped", "ab-finished"]
    bad, killed, stopped, done = rows
    assert bad.status == "unreadable" and "not a DuckDB file" in bad.error and not bad.openable
    assert killed.status == "killed" and killed.verdict is None  # "running", no writer left
    assert stopped.status == "interrupted" and stopped.verdict in ("GO", "NO-GO", "INCONCLUSIVE")
    assert done.status == "finished" and done.arms == ["bf16", "fp8"]
    assert done.requests == 120 and stopped.requests == 60  # measured requests, both arms
    assert done.verdict == "GO" and done.created.startswith("2026-01-02")
    assert list_sessions(folder / "missing") == []


def test_a_file_being_written_is_listed_as_running_without_copying(tmp_path):
    path = tmp_path / "live.duckdb"
    code = (
        "import sys; from abtui.store.writer import SessionWriter\n"
        f"w = SessionWriter({str(path)!r}); print('ready', flush=True); sys.stdin.readline()\n"
        "w.close()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        row = read_row(path)
        assert row.status == "running" and row.openable
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert read_row(path).status == "finished"


def test_start_screen_lists_and_enter_opens_the_selected_session(folder):
    async def drive():
        app = AbtuiApp(start=StartScreen(folder))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: rows_loaded(app), 30)
            await pilot.pause()
            listed = table_text(app)
            detail_bad = text_of(app.screen.query_one("#detail"))
            await pilot.press("enter")  # the corrupt file: says why, stays here
            await pilot.pause()
            stayed = isinstance(app.screen, StartScreen)
            detail_enter = text_of(app.screen.query_one("#detail"))
            await pilot.press("down", "down", "down")  # ab-finished
            await pilot.press("enter")
            await wait_for(pilot, lambda: verdict_shown(app) or app.error is not None, 60)
            assert app.error is None, app.error
            opened = (app.launched, app.session.name)
            banner = text_of(app.screen.query_one("#banner"))
            footer_keys = {b.binding.description for b in app.screen.active_bindings.values()}
            await pilot.press("q")  # back to the list (read again), the session left selected
            await wait_for(pilot, lambda: rows_loaded(app), 30)
            await pilot.pause()
            back = app.screen.query_one("#sessions").cursor_row, app.launched, app.is_running
            await pilot.press("enter")  # again, then Esc, Esc: verdict → panes → the list
            await wait_for(pilot, lambda: verdict_shown(app), 60)
            await pilot.press("escape")
            await pilot.pause()
            panes = isinstance(app.screen, OpenScreen)
            await pilot.press("escape")
            await wait_for(pilot, lambda: rows_loaded(app), 30)
            await pilot.pause()
            back_esc = app.screen.query_one("#sessions").cursor_row
            await pilot.press("q")  # from the list: quits
            await wait_for(pilot, lambda: not app.is_running, 10)
        return (
            app,
            listed,
            detail_bad,
            stayed,
            detail_enter,
            banner,
            (opened, footer_keys, back, panes, back_esc),
        )

    app, listed, detail_bad, stayed, detail_enter, banner, left = asyncio.run(drive())
    opened, footer_keys, back, panes, back_esc = left
    assert [ln.split()[0] for ln in listed] == ["garbage", "ab-killed", "ab-stopped", "ab-finished"]
    assert "unreadable" in listed[0] and "killed" in listed[1] and "interrupted" in listed[2]
    assert "finished" in listed[3] and "GO" in listed[3] and "bf16 vs fp8" in listed[3]
    assert "not a DuckDB file" in detail_bad
    assert stayed and "cannot open" in detail_enter
    assert opened == ("open", "ab-finished.duckdb")
    assert "Verdict: ✓ GO" in banner
    assert "list" in footer_keys and "quit" not in footer_keys  # q says where it goes
    assert back == (3, None, True) and panes and back_esc == 3
    assert app.ran == []  # opened, not run


def test_r_with_a_bad_spec_shows_the_loaders_error_naming_the_field(folder, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[[arms]]\nname = "a"\nurl = "http://127.0.0.1:9/v1"\n'
        '[[arms]]\nname = "b"\nurl = "http://127.0.0.1:9/v1"\n'
        "[workload]\nrequests = 10\nbogus_field = 3\n"
    )

    async def drive():
        app = AbtuiApp(start=StartScreen(folder))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: rows_loaded(app), 30)
            await pilot.press("r")
            await pilot.pause()
            await pilot.press(*str(bad), "enter")  # "q" and "?" in a path are typed, not keys
            await pilot.pause()
            shown = text_of(app.screen.query_one("#spec-error"))
            still = isinstance(app.screen, StartScreen) and app.launched is None
            await pilot.press("escape")  # the prompt closes; the list has the keys again
            await pilot.pause()
            await pilot.press("question_mark")
            await pilot.pause()
            help_shown = isinstance(app.screen, HelpScreen)
            keys = text_of(app.screen.query_one("#keys"))
            await pilot.press("escape", "q")
            await pilot.pause()
        return shown, still, help_shown, keys, app

    shown, still, help_shown, keys, app = asyncio.run(drive())
    assert str(bad) in shown and "bogus_field" in shown, shown
    assert still
    assert help_shown
    for k, what in START + EVERYWHERE:  # this screen's keys, and no other screen's
        assert k in keys and what.split()[0] in keys
    for _k, what in OPEN + LIVE + VERDICT:
        assert (_k, what) in START or not shows(keys, _k, what), what
    assert not app.is_running  # q quit from the start screen


def test_d_runs_the_demo_to_the_verdict(tmp_path):
    demo = DemoOptions(requests=16, rate=10, time_scale=4, seed=5, name="start-demo")

    async def drive():
        app = AbtuiApp(start=StartScreen(tmp_path, demo))
        async with app.run_test(size=(80, 24)) as pilot:

            def detail() -> str:
                return text_of(app.screen.query_one("#detail"))

            await wait_for(pilot, lambda: isinstance(app.screen, StartScreen), 30)
            await wait_for(pilot, lambda: "reading" not in detail(), 30)
            empty = detail()
            await pilot.press("d")
            await wait_for(pilot, lambda: verdict_shown(app) or app.error is not None, 180)
            assert app.error is None, app.error
            launched = app.launched
            assert isinstance(app.verdict.sv.verdict.result, str)
            banner = text_of(app.screen.query_one("#banner"))
            await pilot.press("q")  # the run is over: back to the list, which now has it
            await wait_for(pilot, lambda: rows_loaded(app), 30)
            await pilot.pause()
            listed = table_text(app)
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running, 10)
        return app, empty, banner, launched, listed

    app, empty, banner, launched, listed = asyncio.run(drive())
    assert "no session files" in empty
    assert launched == "demo"
    assert "Verdict: " in banner and "fp8 vs bf16" in banner
    path = tmp_path / "start-demo.duckdb"  # written in the start screen's folder
    with SessionReader(path) as rd:
        assert rd.complete and len(rd.request_table()) == 32
    assert len(listed) == 1 and listed[0].startswith("start-demo") and "finished" in listed[0]
    assert [(k, r.path) for k, r in app.ran] == [("demo", path)]


def test_a_running_session_from_the_list_asks_before_going_back(tmp_path):
    """q, Esc on the panes and ctrl+q all ask while the demo runs (n keeps it running); y stops
    it, keeps its samples and comes back to the list with the interrupted session on it."""
    demo = DemoOptions(requests=2000, rate=10, time_scale=1, seed=5, name="long")

    async def drive():
        app = AbtuiApp(start=StartScreen(tmp_path, demo))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, StartScreen), 30)
            await pilot.press("d")

            def some_done() -> bool:
                live = app.live
                return (
                    live is not None
                    and live.last is not None
                    and all(a.progress.done >= 3 for a in live.last.arms)
                )

            await wait_for(pilot, some_done, 120)
            asked = []
            for key in ("q", "escape", "ctrl+q"):
                await pilot.press(key)
                await pilot.pause()
                asked.append(
                    (
                        key,
                        isinstance(app.screen, ConfirmQuit)
                        and text_of(app.screen.query_one("#question")),
                    )
                )
                await pilot.press("n")
                await pilot.pause()
            still = app.running and isinstance(app.screen, LiveScreen)
            await pilot.press("q")
            await pilot.pause()
            await pilot.press("y")
            await wait_for(pilot, lambda: rows_loaded(app), 90)
            await pilot.pause()
            listed = table_text(app)
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running, 10)
        return app, asked, still, listed

    app, asked, still, listed = asyncio.run(drive())
    for key, question in asked:
        assert question, key
    assert "go back to the list" in asked[0][1] and "go back to the list" in asked[1][1]
    assert "Stop it and quit?" in asked[2][1]  # ctrl+q quits abtui, and asks too
    assert still
    assert len(listed) == 1 and listed[0].startswith("long")
    # its status cell: "interrupted", or "degraded" when the loaded machine made the generators
    # lag (the stored status, checked below, is then in the row's detail)
    assert "interrupted" in listed[0] or "degraded" in listed[0]
    ((kind, result),) = app.ran
    assert kind == "demo" and result.status == "interrupted"
    with SessionReader(result.path) as rd:
        t = rd.request_table()
    assert (t.status == "ok").sum() >= 6 and len(t) < 4000  # kept what was measured


def test_a_run_that_cannot_start_says_why_under_the_list(folder, tmp_path):
    spec = tmp_path / "down.toml"
    spec.write_text(
        '[[arms]]\nname = "a"\nurl = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
        '[[arms]]\nname = "b"\nurl = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
        f'[workload]\nrequests = 4\n[load]\nconcurrency = 2\n[store]\ndir = "{tmp_path}"\n'
    )

    async def drive():
        app = AbtuiApp(start=StartScreen(folder))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: rows_loaded(app), 30)
            first = app.screen
            await pilot.press("r")
            await pilot.pause()
            await pilot.press(*str(spec), "enter")  # the run starts, fails, and comes back
            await wait_for(pilot, lambda: app.screen is not first and rows_loaded(app), 120)
            await pilot.pause()
            notice = text_of(app.screen.query_one("#spec-error"))
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running, 10)
        return app, notice

    app, notice = asyncio.run(drive())
    assert "127.0.0.1:9" in notice and notice.startswith("error:"), notice
    assert app.error is None and app.ran == []  # shown, not raised when abtui closes


def test_abtui_without_a_terminal_prints_the_usage(capsys):
    from abtui.cli import main

    assert main([]) == 0  # pytest's stdin is not a terminal: no start screen (it would hang)
    out = capsys.readouterr().out
    assert "usage: abtui" in out and "open" in out


def test_row_of_a_session_without_a_verdict(tmp_path):
    path = write_session(tmp_path, "nov", seed=4, n=10, verdict=False)
    row = read_row(path)
    assert row.status == "finished" and row.verdict is None and row.requests == 20


def _has_textual_serve() -> bool:
    import importlib.util

    return importlib.util.find_spec("textual_serve") is not None


def test_open_web_without_the_extra_says_how_to_install(folder, capsys, monkeypatch):
    from abtui.cli import main

    # None in sys.modules makes the import fail as it does where the extra is not installed
    monkeypatch.setitem(sys.modules, "textual_serve", None)
    monkeypatch.setitem(sys.modules, "textual_serve.server", None)

    assert main(["open", str(folder / "ab-finished.duckdb"), "--web"]) == 2
    err = capsys.readouterr().err
    assert "textual-serve" in err and "abtui[web]" in err and "Traceback" not in err


def test_open_web_serves_the_app_on_loopback(folder, tmp_path):
    if not _has_textual_serve():
        why = "needs the web extra (textual-serve)"
        if os.environ.get("ABTUI_REQUIRE_WEB") == "1":
            pytest.fail(f"{why}; ABTUI_REQUIRE_WEB=1 says it must be there", pytrace=False)
        pytest.skip(why)
    import socket

    import aiohttp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err_log = tmp_path / "web-stderr.txt"
    with err_log.open("wb") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "abtui",
                "open",
                str(folder / "ab-finished.duckdb"),
                "--web",
                "--port",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )

    async def browse() -> tuple[int, str, bytes]:
        url = f"http://127.0.0.1:{port}"
        # the server's password, printed once on its terminal (docs/security.md)
        jar = aiohttp.CookieJar(unsafe=True)  # keeps the cookie of a numeric host
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            deadline = time.monotonic() + 60  # the server starts (~1 s quiet, more when loaded)
            while True:
                try:
                    token = re.search(r"\?token=([\w-]+)", err_log.read_text())
                    if token is None:
                        raise aiohttp.ClientConnectionError("not started")
                    async with http.get(f"{url}/?token={token[1]}") as r:
                        status, page = r.status, await r.text()
                    break
                except aiohttp.ClientConnectionError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(
                            f"abtui open --web never answered on port {port} (exit code "
                            f"{proc.poll()}): {err_log.read_text()[-2000:]}",
                            pytrace=False,
                        )
                    await asyncio.sleep(0.1)
            got = b""
            async with http.ws_connect(url + "/ws?width=80&height=24", origin=url) as ws:
                while b"Verdict" not in got:
                    m = await asyncio.wait_for(ws.receive(), 60)
                    if m.type != aiohttp.WSMsgType.BINARY:
                        break
                    got += m.data
                await ws.send_json(["stdin", "q"])
        return status, page, got

    try:
        status, page, screen = asyncio.run(browse())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert status == 200 and f"ws://127.0.0.1:{port}/ws" in page
    assert b"Verdict" in screen and b"GO" in screen  # the app ran and drew the verdict
