"""``abtui open SESSION --web`` behind a tunnel (issue 23, item 10): with ``--public-url`` the
served page names its scripts, styles and websocket by the address the browser opened, not by
127.0.0.1:PORT; and a report exported from the verdict screen (``h``) reaches the browser as a
download. The server runs for real (textual-serve on loopback) and is browsed with aiohttp, as
a browser at the tunnel's end would: page from the server, websocket frames, the download URL."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest
from tui_fixtures import write_session

from abtui.cli import main
from abtui.tui.web import public_url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _need_web() -> None:
    import importlib.util

    if importlib.util.find_spec("textual_serve") is None:
        why = "needs the web extra (textual-serve)"
        if os.environ.get("ABTUI_REQUIRE_WEB") == "1":
            pytest.fail(f"{why}; ABTUI_REQUIRE_WEB=1 says it must be there", pytrace=False)
        pytest.skip(why)


def test_public_url_is_checked_before_anything_starts(tmp_path, capsys):
    assert public_url(None, 8000) == "http://127.0.0.1:8000"
    assert public_url("http://localhost:9000/", 8000) == "http://localhost:9000"
    assert public_url("https://gpu.example/abtui", 8000) == "https://gpu.example/abtui"
    session = write_session(tmp_path, "s", n=20)
    for bad in ("localhost:9000", "ftp://x", "http://:9000", "http://h:99999", "http://h/?a=1"):
        assert main(["open", str(session), "--web", "--public-url", bad]) == 2, bad
        err = capsys.readouterr().err
        assert "--public-url" in err and "Traceback" not in err, err
    assert main(["open", str(session), "--public-url", "http://localhost:9000"]) == 2
    assert "--public-url is for --web" in capsys.readouterr().err


def test_open_web_behind_a_tunnel_uses_the_public_url_and_downloads_reports(tmp_path):
    _need_web()
    import aiohttp

    session = write_session(tmp_path, "tunnelled", n=60)
    port, tunnel = _free_port(), _free_port()  # the server's port; the tunnel's other end
    public = f"http://localhost:{tunnel}"
    err_log = tmp_path / "web-stderr.txt"
    with err_log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "abtui", "open", str(session), "--web", "--port", str(port),
             "--public-url", public + "/"], stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip

    async def browse() -> tuple[str, bytes, str, str]:
        local = f"http://127.0.0.1:{port}"  # what `ssh -L tunnel:127.0.0.1:port` forwards to
        async with aiohttp.ClientSession() as http:
            deadline = time.monotonic() + 60
            while True:
                try:
                    async with http.get(local + "/") as r:
                        assert r.status == 200
                        page = await r.text()
                    break
                except aiohttp.ClientConnectionError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(f"abtui open --web never answered on port {port} (exit "
                                    f"{proc.poll()}): {err_log.read_text()[-2000:]}",
                                    pytrace=False)  # fmt: skip
                    await asyncio.sleep(0.1)
            screen, key = b"", None
            async with http.ws_connect(local + "/ws?width=100&height=30") as ws:
                while b"Verdict" not in screen:
                    m = await asyncio.wait_for(ws.receive(), 60)
                    assert m.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), m
                    if m.type == aiohttp.WSMsgType.BINARY:
                        screen += m.data
                await ws.send_json(["stdin", "h"])  # the verdict screen's "export html"
                deadline = time.monotonic() + 60
                while key is None:
                    m = await asyncio.wait_for(ws.receive(), max(1, deadline - time.monotonic()))
                    if m.type == aiohttp.WSMsgType.TEXT:
                        msg = json.loads(m.data)
                        if msg[0] == "deliver_file_start":
                            key = msg[1]
                    elif m.type == aiohttp.WSMsgType.BINARY:
                        screen += m.data
                    else:
                        pytest.fail(f"websocket closed before the download was offered: {m}")
                # the browser fetches the download from its own origin (textual.js), here local
                async with http.get(f"{local}/download/{key}") as r:
                    assert r.status == 200, r.status
                    disposition = r.headers.get("Content-Disposition", "")
                    report = await r.text()
                await ws.send_json(["stdin", "q"])
        return page, screen, disposition, report

    try:
        page, screen, disposition, report = asyncio.run(browse())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # every absolute URL in the page is under the public URL; none names the server's own port
    urls = re.findall(r"""(?:src|href)="([^"]+)"|data-session-websocket-url="([^"]+)\"""", page)
    urls = [a or b for a, b in urls]
    assert f"ws://localhost:{tunnel}/ws" in urls, urls
    assert any(u.startswith(f"{public}/static/") and u.endswith("textual.js") for u in urls), urls
    assert f":{port}" not in page and "127.0.0.1" not in page
    assert b"GO" in screen
    assert "attachment" in disposition and "tunnelled.html" in disposition
    assert report.startswith("<!DOCTYPE html>") and "abtui report: tunnelled" in report
    assert (tmp_path / "tunnelled.html").read_text(encoding="utf-8") == report  # also on disk
    assert f"open {public} in your browser" in err_log.read_text()
