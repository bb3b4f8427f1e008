"""What an endpoint sends is data, never markup or terminal control: a hostile server on
127.0.0.1 answers with a model name, error messages and token text full of terminal escape
sequences, Rich markup and HTML; `abtui run --headless` and every `abtui report` format must
show them inert (no raw control character, no live tag, no crash on broken markup)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import threading

import pytest

from abtui.cli import main
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader

EVIL = "\x1b]0;pwned\x07\x1b[2J\x1b[31m[/][bold]<script>alert(1)</script>\u202e\x9b"
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")


class HostileServer:
    """A minimal OpenAI-compatible endpoint that lies in every string it returns."""

    def __init__(self) -> None:
        self.n = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

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

    def __enter__(self) -> HostileServer:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


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
                ["run", "--baseline", sim.url, "--candidate", evil.url, "--requests", "12",
                 "--rate", "30", "--input-tokens", "8", "--output-tokens", "4", "--warmup", "0",
                 "--name", "evil", "--sessions-dir", str(tmp), "--headless"]
            )  # fmt: skip
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
