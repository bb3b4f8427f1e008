"""``abtui open SESSION --web`` behind a tunnel: with ``--public-url`` the
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

try:
    import aiohttp  # with textual-serve (the web extra)
except ImportError:  # pragma: no cover
    aiohttp = None
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


def start_web(session, port: int, log, *extra: str) -> subprocess.Popen:
    with log.open("wb") as err:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "abtui",
                "open",
                str(session),
                "--web",
                "--port",
                str(port),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


async def wait_until_served(http, proc, port: int, log) -> str:
    """The token the server printed, once it answers on ``port`` (a refusal is an answer)."""
    deadline = time.monotonic() + 60  # the server starts (~1 s quiet, more when loaded)
    while True:
        token = re.search(r"\?token=([\w-]+)", log.read_text())
        try:
            if token is not None:
                async with http.get(f"http://127.0.0.1:{port}/static/") as r:
                    await r.read()
                return token[1]
        except aiohttp.ClientConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(
                f"abtui open --web never answered on port {port} (exit {proc.poll()}): "
                f"{log.read_text()[-2000:]}",
                pytrace=False,
            )
        await asyncio.sleep(0.1)


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
    session = write_session(tmp_path, "tunnelled", n=60)
    port, tunnel = _free_port(), _free_port()  # the server's port; the tunnel's other end
    public = f"http://localhost:{tunnel}"
    err_log = tmp_path / "web-stderr.txt"
    proc = start_web(session, port, err_log, "--public-url", public + "/")

    async def browse() -> tuple[str, bytes, str, str]:
        # `ssh -L tunnel:127.0.0.1:port` forwards the browser's bytes unchanged: it connects
        # to 127.0.0.1:port, naming localhost:tunnel (Host), from a page of it (Origin)
        local = f"http://127.0.0.1:{port}"
        as_browser = {"Host": f"localhost:{tunnel}"}
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            token = await wait_until_served(http, proc, port, err_log)
            async with http.get(f"{local}/?token={token}", headers=as_browser) as r:
                assert r.status == 200
                page = await r.text()
            screen, key = b"", None
            async with http.ws_connect(
                local + "/ws?width=100&height=30", headers=as_browser, origin=public
            ) as ws:
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
                async with http.get(f"{local}/download/{key}", headers=as_browser) as r:
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
    assert f"open {public}/?token=" in err_log.read_text()


def test_open_web_answers_only_its_user(tmp_path):
    """Cross-site websocket hijacking and DNS rebinding, over real HTTP and websocket requests
    on loopback: a page of another site (foreign Origin), a rebound name (foreign Host) and any
    request without the token are refused, the handshake included; the token's URL sets a
    cookie (HttpOnly, SameSite=Strict) and moves the address bar to a URL without it; with the
    cookie and the right Origin the app runs. The token is printed once and stored nowhere."""
    _need_web()
    session = write_session(tmp_path, "guarded", n=20)
    port = _free_port()
    log = tmp_path / "web-stderr.txt"
    proc = start_web(session, port, log)
    url = f"http://127.0.0.1:{port}"
    evil = {"Origin": "http://evil.example"}
    rebound = {"Host": f"evil.example:{port}"}

    async def status(http, path, headers=None, **kw) -> int:
        async with http.get(url + path, headers=headers or {}, **kw) as r:
            await r.read()
            return r.status

    async def handshake(http, headers=None, origin=None) -> int:
        try:
            async with http.ws_connect(
                url + "/ws?width=80&height=24", headers=headers or {}, origin=origin
            ) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as e:
            return e.status

    async def browse():
        got = {}
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            token = await wait_until_served(http, proc, port, log)
            got["no token"] = await status(http, "/")
            got["wrong token"] = await status(http, "/?token=" + "x" * len(token))
            got["ws no token"] = await handshake(http, origin=url)
            got["rebound"] = await status(http, f"/?token={token}", rebound)
            got["foreign page"] = await status(http, f"/?token={token}", evil)
            got["rebound static"] = await status(http, "/static/js/textual.js", rebound)
            got["static"] = await status(http, "/static/js/textual.js")
            async with http.get(f"{url}/?fontsize=14&token={token}", allow_redirects=False) as r:
                got["login"] = (
                    r.status,
                    r.headers.get("Location"),
                    r.headers.getall("Set-Cookie", []),
                    r.headers.get("Referrer-Policy"),
                )
            async with http.get(f"{url}/?token={token}") as r:  # the cookie is in the jar now
                got["page"] = r.status, str(r.url), await r.text()
            got["ws foreign origin"] = await handshake(http, origin="http://evil.example")
            got["ws no origin"] = await handshake(http)
            got["ws rebound"] = await handshake(http, rebound, origin=url)
            screen = b""
            async with http.ws_connect(url + "/ws?width=80&height=24", origin=url) as ws:
                while b"Verdict" not in screen:
                    m = await asyncio.wait_for(ws.receive(), 60)
                    if m.type != aiohttp.WSMsgType.BINARY:
                        break
                    screen += m.data
                await ws.send_json(["stdin", "q"])
            got["screen"] = screen
        return token, got

    try:
        token, got = asyncio.run(browse())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    for what in (
        "no token",
        "wrong token",
        "ws no token",
        "rebound",
        "foreign page",
        "rebound static",
        "ws foreign origin",
        "ws no origin",
        "ws rebound",
    ):
        assert got[what] == 403, (what, got[what])
    assert got["static"] == 200  # textual-serve's own scripts: public, but by a served name
    code, location, cookies, referrer = got["login"]
    assert code == 302 and location == "./?fontsize=14" and referrer == "no-referrer"
    (cookie,) = cookies
    assert token in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie, cookie
    code, final, page = got["page"]
    assert code == 200 and token not in final and token not in page, final
    assert b"Verdict" in got["screen"]  # the app ran for the right page
    printed = log.read_text()
    assert printed.count(token) == 1, printed  # the one URL line; no access log
    assert token.encode() not in session.read_bytes()
    assert not any(
        token.encode() in p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and p != log
    )


def _children(pid: int) -> set[int]:
    """Every live process below ``pid`` (Linux /proc), zombies left out."""
    found, frontier = set(), {pid}
    while frontier:
        parents, frontier = frontier, set()
        for stat in os.scandir("/proc"):
            if not stat.name.isdigit():
                continue
            try:
                with open(f"/proc/{stat.name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[1]) in parents:
                frontier.add(int(stat.name))
        found |= frontier
    return found


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.add(pid)
        except OSError:
            pass
    return alive


def _wait_gone(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(pids)


async def _app_running(http, proc, port: int, log, wait_for_frame: bool):
    """A websocket to the server on ``port`` and the app processes below it once one runs
    (and, if asked, has drawn its first frame)."""
    url = f"http://127.0.0.1:{port}"
    token = await wait_until_served(http, proc, port, log)
    async with http.get(f"{url}/?token={token}") as r:
        assert r.status == 200
    ws = await http.ws_connect(url + "/ws?width=80&height=24", origin=url)
    deadline = time.monotonic() + 30
    while not (apps := _children(proc.pid)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if wait_for_frame:
        await asyncio.wait_for(ws.receive(), 60)
    return ws, apps


def _browse_then(proc, port: int, log, wait_for_frame: bool, then) -> set[int]:
    """Opens the app in a fresh client, calls ``then(ws)`` with it, returns its processes."""

    async def go() -> set[int]:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            ws, apps = await _app_running(http, proc, port, log, wait_for_frame)
            then(ws)
            await asyncio.sleep(0)
            return apps

    return asyncio.run(go())


def _drop(ws) -> None:
    ws._response.connection.transport.abort()  # the tab closed: no close frame


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_open_web_children_die_with_their_connection_and_the_server(tmp_path):
    """A browser that drops its websocket while the app starts, or once it runs, leaves no
    app process behind (one once redrew at ~40 % CPU for minutes, outliving the server); a
    server stopped with SIGTERM, or killed outright, takes every app process with it."""
    _need_web()
    session = write_session(tmp_path, "dropped", n=60)
    servers, seen = [], set()
    try:
        port, log = _free_port(), tmp_path / "web-1.txt"
        servers.append(proc := start_web(session, port, log))
        for wait_for_frame in (False, False, True):
            seen |= (apps := _browse_then(proc, port, log, wait_for_frame, _drop))
            assert apps, "the websocket started no app process"
            assert not _wait_gone(apps, 15), "an app outlived its dropped connection"
        seen |= (apps := _browse_then(proc, port, log, True, lambda ws: proc.terminate()))
        assert apps
        assert proc.wait(timeout=15) is not None  # SIGTERM is obeyed, apps running or not
        assert not _wait_gone(apps, 5), "an app outlived the server (SIGTERM)"

        port, log = _free_port(), tmp_path / "web-2.txt"
        servers.append(proc := start_web(session, port, log))
        seen |= (apps := _browse_then(proc, port, log, True, lambda ws: proc.kill()))
        assert apps
        assert not _wait_gone(apps, 10), "an app outlived its killed server"
    finally:
        for proc in servers:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        for pid in _alive(seen):  # a failed check leaves none behind
            os.kill(pid, 9)
