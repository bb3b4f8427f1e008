"""What an endpoint sends is data, never markup or terminal control: a hostile server on
127.0.0.1 answers with a model name, error messages and token text full of terminal escape
sequences, Rich markup and HTML; `abtui run --headless` and every `abtui report` format must
show them inert (no raw control character, no live tag, no crash on broken markup)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import time

import pytest
from loopback import LoopbackServer

from abtui.cli import main
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader

EVIL = "\x1b]0;pwned\x07\x1b[2J\x1b[31m[/][bold]<script>alert(1)</script>\u202e\x9b"
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")


class HostileServer(LoopbackServer):
    """A minimal OpenAI-compatible endpoint that lies in every string it returns."""

    def __init__(self) -> None:
        self.n = 0
        super().__init__()

    async def _handle(self, reader, writer) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            if b"/models" in head.split(b"\r\n")[0]:
                body = json.dumps({"object": "list", "data": [{"id": "m" + EVIL}]}).encode()
                writer.write(_response(200, "application/json", body))
            else:
                self.n += 1
                if self.n % 3 == 0:
                    err = {"error": {"message": "boom" + EVIL, "type": "server_error"}}
                    writer.write(_response(500, "application/json", json.dumps(err).encode()))
                else:
                    events = [
                        {"choices": [{"index": 0, "text": w, "finish_reason": None}]}
                        for w in (EVIL, " word", EVIL)
                    ]
                    events.append({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]})
                    sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                    writer.write(_response(200, "text/event-stream", sse.encode()))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _response(status: int, ctype: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    ).encode() + body


@pytest.fixture(scope="module")
def hostile_session(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    out, err = io.StringIO(), io.StringIO()
    with HostileServer() as evil, SimProcess(ttft_ms=2, itl_ms=1, seed=1) as sim:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(
                [
                    "run",
                    "--baseline",
                    sim.url,
                    "--candidate",
                    evil.url,
                    "--requests",
                    "12",
                    "--rate",
                    "30",
                    "--input-tokens",
                    "8",
                    "--output-tokens",
                    "4",
                    "--warmup",
                    "0",
                    "--name",
                    "evil",
                    "--sessions-dir",
                    str(tmp),
                    "--headless",
                ]
            )
    return rc, out.getvalue() + err.getvalue(), tmp / "evil.duckdb"


def test_the_hostile_strings_reached_the_session(hostile_session):
    rc, printed, path = hostile_session
    assert rc in (0, 3, 4), printed[-2000:]
    with SessionReader(path) as rd:
        t = rd.request_table()
        texts = rd.texts()
        msgs = [r[0] for r in rd.query("SELECT error_message FROM requests WHERE arm = 1")]
        models = [a["model"] for a in rd.arms()]
    # stored as data, unchanged (a session file keeps what was measured)
    assert any(m and EVIL in m for m in msgs) and any(EVIL in (x or "") for x in texts.values())
    assert models[1] == "m" + EVIL and (t.arm == 1).sum() == 12


def test_headless_run_prints_them_inert(hostile_session):
    _, printed, _ = hostile_session
    assert "boom" in printed and "Traceback" not in printed
    for c in RAW_CONTROLS:
        assert c not in printed, repr(c)


@pytest.mark.parametrize("fmt", ["text", "md", "html", "json"])
def test_every_report_format_shows_them_inert(hostile_session, fmt, capsys):
    _, _, path = hostile_session
    rc = main(["report", str(path), "--format", fmt])
    out, err = capsys.readouterr()
    assert rc in (0, 3, 4) and "Traceback" not in err, err[-2000:]
    for c in RAW_CONTROLS:
        assert c not in out, (fmt, repr(c))
    if fmt == "html":
        assert "<script>" not in out and "&lt;script&gt;" in out
    if fmt == "json":
        doc = json.loads(out)
        assert isinstance(doc, dict)


# ------------------------------------------------------------------ a crafted session file

MARKUP = "[red]R[/red][link=http://x]L[/link]"
CRAFT = "mdl\x1b]0;pwned\x07\x1b[2J" + MARKUP + "\x9b\u202e"
SGR = re.compile(r"\x1b\[[0-9;]*m")  # Rich's own colours: the only escapes a report may hold


def craft_session(folder, name: str = "crafted"):
    """A session file made by someone else: every string a reader shows holds terminal escapes
    and Rich markup: the session's name and load, the arms' names, models and URLs, the error
    messages, an event."""
    from tui_fixtures import SPEC, records

    from abtui.client.records import ERROR
    from abtui.store.writer import SessionWriter

    path = folder / f"{name}.duckdb"
    w = SessionWriter(path)
    w.write_meta(
        session_name="s" + CRAFT,
        spec=SPEC,
        load="poisson " + CRAFT,
        created="2026-01-01T10:00:00+00:00",
    )
    w.write_arms(
        [
            {
                "arm": 0,
                "name": "base" + CRAFT,
                "role": "baseline",
                "url": "http://127.0.0.1:1/v1",
                "model": "m" + CRAFT,
                "api": "completions",
                "config": {},
            },
            {
                "arm": 1,
                "name": "cand" + CRAFT,
                "role": "candidate",
                "url": "http://127.0.0.1:2/v1",
                "model": CRAFT,
                "api": "completions",
                "config": {},
            },
        ]
    )
    recs = records(1, 60)
    for r in recs[::7]:
        r.status, r.error_class, r.error_message = ERROR, "http_5xx", "boom" + CRAFT
    w.add_records(recs)
    w.event("degraded", "event " + CRAFT, arm=1)
    w.close()
    return path


def assert_inert(out: str, where: str) -> None:
    rest = SGR.sub("", out)
    for c in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert c not in rest, (where, repr(c), out[max(0, rest.find(c) - 80) :][:200])


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    return craft_session(tmp_path_factory.mktemp("crafted"))


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_report_of_a_crafted_file_is_inert(crafted, fmt, capsys, monkeypatch):
    """On a colour terminal (FORCE_COLOR): Rich's colours are the only escapes; a link tag or a
    colour tag in a name would have become an escape too (OSC 8, SGR 31) — it is shown as text."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    rc = main(["report", str(crafted), "--format", fmt])
    out, err = capsys.readouterr()
    assert rc in (0, 3, 4) and "Traceback" not in err, err[-2000:]
    assert_inert(out + err, fmt)
    assert "pwned" in out and "\\x1b" in out  # shown, as text
    if fmt == "text":
        plain = SGR.sub("", out)
        for shown in ("Session s", "load: poisson", "base", "boom", "cand"):
            line = next(x for x in plain.splitlines() if shown in x and "pwned" in x)
            assert MARKUP in line, (shown, line)  # every one of them, its markup as text


def _tui_screens(path, folder):
    """The text of every screen `abtui open` shows the session on (its verdict, then its
    panes) and of the start screen listing its folder."""
    from tui_fixtures import screen_text

    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.open import OpenScreen
    from abtui.tui.screens.start import StartScreen
    from abtui.tui.screens.verdict import VerdictScreen

    async def until(pilot, cond, timeout_s=60.0):
        t0 = time.monotonic()
        while not cond():
            assert time.monotonic() - t0 < timeout_s, "timed out waiting for the app"
            await pilot.pause(0.1)

    async def drive():
        shown = {}
        app = AbtuiApp(session=path)
        async with app.run_test(size=(160, 50)) as pilot:
            await until(
                pilot,
                lambda: isinstance(app.screen, VerdictScreen) and bool(app.screen.query("#banner")),
            )
            await pilot.pause(0.5)
            shown["verdict"] = screen_text(app)
            await pilot.press("v")
            await until(pilot, lambda: isinstance(app.screen, OpenScreen))
            await pilot.pause(0.5)
            shown["panes"] = screen_text(app)
            await pilot.press("q")
        assert app.error is None, app.error
        app = AbtuiApp(start=StartScreen(folder))
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, StartScreen) and app.screen.rows)
            await pilot.pause(0.5)
            shown["start"] = screen_text(app)
            await pilot.press("q")
        return shown

    return asyncio.run(drive())


def test_tui_shows_a_crafted_file_inert(tmp_path):
    """Through Textual's run_test: every line the verdict screen, the panes and the start
    screen would draw is inert, and the markup is shown as text."""
    path = craft_session(tmp_path)
    shown = _tui_screens(path, tmp_path)
    for where, text in shown.items():
        assert_inert(text, where)
        assert "\\x1b]0;pwned" in text, (where, text[:3000])
    assert MARKUP in shown["verdict"] and MARKUP in shown["panes"], shown["panes"][:3000]


def test_tui_live_run_against_a_hostile_endpoint_is_inert(tmp_path):
    """A run under the TUI whose candidate names its model with escapes and markup and answers
    with such error messages: every frame the live panes would draw is inert."""
    from tui_fixtures import screen_text

    from abtui.runner.session import run_session
    from abtui.spec import spec_from_dict, validate
    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.live import LiveScreen

    with HostileServer() as evil, SimProcess(ttft_ms=2, itl_ms=1, seed=1) as sim:
        spec = validate(
            spec_from_dict(
                {
                    "name": "live-evil",
                    "arms": [
                        {"name": "base", "url": sim.url},
                        {"name": "c\x1b]2;t\x07[b]", "url": evil.url},
                    ],
                    "workload": {"requests": 12, "input_tokens": 8, "output_tokens": 4},
                    "load": {"rate": 20, "warmup": 0},
                    "store": {"dir": str(tmp_path)},
                    "policy": {"resamples": 200},
                },
                "t.toml",
            )
        )

        async def drive():
            frames = []
            app = AbtuiApp(job=lambda obs, stop: run_session(spec, "", obs, stop_request=stop))
            async with app.run_test(size=(140, 40)) as pilot:
                t0 = time.monotonic()
                while app.running or app.status is None:
                    assert time.monotonic() - t0 < 120, "the run did not end"
                    if isinstance(app.screen, LiveScreen) and app.screen.last is not None:
                        frames.append(screen_text(app))
                    await pilot.pause(0.2)
                await pilot.pause(0.5)
                frames.append(screen_text(app))
                await pilot.press("q")
            return app, frames

        app, frames = asyncio.run(drive())
    assert app.error is None and frames, app.error
    for i, text in enumerate(frames):
        assert_inert(text, f"frame {i}")
    # the arm's name and the model name the endpoint gave, escapes shown and markup as text
    # (Rich drops a BEL from a Text: it is not shown, but was not obeyed either)
    title = re.compile(r"c\\x1b\]2;t(\\x07)?\[b\]  m\\x1b\]0;pwned.*\[/\]\[bold\]")
    assert any(title.search(f) for f in frames), frames[-1][:2000]


def test_every_terminal_path_goes_through_the_sanitiser():
    """The guarantee holds at the sinks, so it holds only while every sink is one of them: each
    Rich console the core and the UI print through is an InertConsole, and each TUI text widget
    is an inert one (abtui.tui.widgets.inert), not Textual's own."""
    from pathlib import Path

    import abtui

    root = Path(abtui.__file__).parent
    bad = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("sim/", "engine/")):  # the worlds print their own logs
            continue
        src = path.read_text(encoding="utf-8")
        if re.search(r"(?<![A-Za-z_])Console\(", src):
            bad.append(f"{rel}: a Rich Console that is not an InertConsole")
        widgets = re.findall(r"from textual\.widgets import ([^\n]+)", src)
        if rel != "tui/widgets/inert.py" and any(
            re.search(r"\b(Static|DataTable)\b", w) for w in widgets
        ):
            bad.append(f"{rel}: Textual's own Static/DataTable")
    assert not bad, bad
