"""``abtui open SESSION --web``: the TUI served to a browser through textual-serve.

The server binds to 127.0.0.1 only. The page it serves names its scripts, styles and websocket
by absolute URL, built from the *public URL*: by default ``http://127.0.0.1:PORT``, which is
right only for a browser on the same machine and port. Through a tunnel (``ssh -L
9000:127.0.0.1:8000 gpu-box``) the browser is at ``http://localhost:9000``: give that as
``--public-url`` and the page loads. Reports exported from the verdict screen (``m``/``h``) are
written next to the session file as in a terminal and, in a browser, also sent to it as a
download (:func:`send_to_browser`).

Only the user who started it can drive it (:class:`Guard`, docs/security.md): every request
must name the server by an address it serves (the ``Host`` header: a DNS-rebound name is
refused), a browser's request must come from a page of that address (the ``Origin`` header: a
page of another site is refused, the websocket handshake included), and every request but the
static files must carry the per-launch token — in the URL printed on the terminal the first
time, then in a cookie the server sets (``HttpOnly``, ``SameSite=Strict``), the address bar
redirected to a URL without it. The token is printed once, on the terminal that started the
server; it is never logged (aiohttp's access log is off) nor written to the session file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import io
import logging
import os
import secrets
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from abtui.errors import UsageError
from abtui.report.untrusted import printable

MIME = {".html": "text/html", ".md": "text/markdown", ".json": "application/json"}


def public_url(url: str | None, port: int) -> str:
    """The base URL the browser uses (no trailing ``/``): ``url`` checked, or the local one."""
    if url is None:
        return f"http://127.0.0.1:{port}"
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise UsageError(
            f"--public-url {url!r}: expected http(s)://HOST[:PORT], the address your browser opens",
            "through `ssh -L 9000:127.0.0.1:8000 gpu-box` it is http://localhost:9000",
        )
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise UsageError(
            f"--public-url {url!r}: the port is not a number from 0 to 65535"
        ) from None
    return url.strip().rstrip("/")


TOKEN_PARAM = "token"
FORBIDDEN = "abtui: forbidden"  # the whole body of a refusal: it names nothing of the server's


def _origin(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of ``url``, the port made explicit."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


def _host_header(value: str, scheme: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``Host`` header for a request made over ``scheme``."""
    try:
        parts = urlsplit(f"{scheme}://{value}")
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        return None
    return (parts.hostname or "").lower(), port


class Guard:
    """Which requests a ``--web`` server answers (see the module docstring): those naming it
    by a served address, from no page or a page of a served address, with the token."""

    def __init__(self, port: int, public: str, token: str) -> None:
        self.token = token
        self.cookie = f"abtui_token_{port}"  # cookies ignore ports: one name per server
        self.secure = public.startswith("https:")
        served = {("http", "127.0.0.1", port), _origin(public)}
        self.origins = served
        self.hosts = {(h, p) for _, h, p in served}

    def host_ok(self, host: str | None) -> bool:
        if not host:
            return False
        return any(_host_header(host, s) in self.hosts for s in ("http", "https"))

    def origin_ok(self, origin: str | None, required: bool) -> bool:
        if origin is None:
            return not required  # a browser always sends it with a websocket handshake
        try:
            return _origin(origin) in self.origins
        except ValueError:
            return False

    def token_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def middleware(self):
        from aiohttp import web

        @web.middleware
        async def guard(request, handler):
            static = request.path.startswith("/static/")
            ws = request.path == "/ws"
            if not self.host_ok(request.headers.get("Host")):
                return _refuse("Host")
            if not self.origin_ok(request.headers.get("Origin"), required=ws):
                return _refuse("Origin")
            query = request.query.get(TOKEN_PARAM)
            if not static and not (
                self.token_ok(request.cookies.get(self.cookie)) or self.token_ok(query)
            ):
                return _refuse("token")
            if query is not None and request.method == "GET" and request.path == "/":
                # the token leaves the address bar (and the history's last entry) at once
                rest = [(k, v) for k, v in request.query.items() if k != TOKEN_PARAM]
                # relative: behind a proxy that serves it under a path, the path stays
                resp = web.HTTPFound("./" + (f"?{urlencode(rest)}" if rest else ""))
                resp.set_cookie(
                    self.cookie,
                    self.token,
                    httponly=True,
                    samesite="Strict",
                    secure=self.secure,
                    path="/",
                )
                _harden(resp)
                return resp
            resp = await handler(request)
            if not ws:
                _harden(resp)
            return resp

        return guard


def _harden(resp) -> None:
    resp.headers["Referrer-Policy"] = "no-referrer"  # the page loads a font from elsewhere
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["X-Content-Type-Options"] = "nosniff"


def _refuse(what: str):
    from aiohttp import web

    logging.getLogger("abtui.web").warning("refused a request: bad or missing %s", what)
    return web.Response(status=403, text=f"{FORBIDDEN} ({what})")


QUIT_GRACE_S = 3.0  # an app asked to quit gets this long, then SIGTERM, then as long, SIGKILL


def app_service_class():
    """textual-serve's ``AppService`` made to leave no process behind: the app runs without a
    shell in between (signals reach it), and :meth:`stop` asks it to quit, then terminates it,
    then kills it, each after :data:`QUIT_GRACE_S`: a dropped connection, a busy or blocked
    app (nothing reads its output once the websocket is gone) all end with the process."""
    from textual_serve.app_service import AppService

    class AppProcess(AppService):
        async def _open_app_process(self, width: int = 80, height: int = 24):
            self.command = "exec " + self.command.removeprefix("exec ")
            return await super()._open_app_process(width, height)

        async def on_data(self, payload: bytes) -> None:
            with contextlib.suppress(ConnectionError, RuntimeError):  # keep reading the app
                await super().on_data(payload)

        async def stop(self) -> None:
            process, task = self._process, self._task
            if process is None:
                return
            if task is not None and process.returncode is None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.send_meta({"type": "quit"}), QUIT_GRACE_S)
            for end in (None, process.terminate, process.kill):
                if end is not None and process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        end()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(process.wait(), QUIT_GRACE_S)
                if process.returncode is not None:
                    break
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self._task = None

    return AppProcess


def guarded_server(command: str, port: int, title: str, public: str, token: str):
    """A textual-serve :class:`Server` that answers only what :class:`Guard` lets through, and
    whose app processes end with their websocket and with the server."""
    from aiohttp import web
    from textual_serve.server import Server

    guard = Guard(port, public, token)
    app_process = app_service_class()

    class GuardedServer(Server):
        live: set = set()  # (websocket, app) pairs being served

        async def _make_app(self):
            app = await super()._make_app()
            app.middlewares.append(guard.middleware())
            return app

        def initialize_logging(self) -> None:
            super().initialize_logging()
            # aiohttp logs each request line, query included: the first one holds the token
            logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

        async def handle_websocket(self, request):
            def query(name: str, default: int) -> int:
                value = request.query.get(name, "")
                return int(value) if value.isdigit() and 0 < int(value) < 10_000 else default

            websocket = web.WebSocketResponse(heartbeat=15)
            await websocket.prepare(request)
            app = app_process(
                self.command,
                write_bytes=websocket.send_bytes,
                write_str=websocket.send_str,
                close=websocket.close,
                download_manager=self.download_manager,
                debug=self.debug,
            )
            pair = (websocket, app)
            self.live.add(pair)
            try:
                await app.start(query("width", 80), query("height", 24))
                await self._process_messages(websocket, app)
            except (asyncio.CancelledError, ConnectionError):
                pass
            except Exception as error:  # a bad message from the page: this app ends, not all
                logging.getLogger("abtui.web").warning("websocket ended: %r", error)
            finally:
                self.live.discard(pair)
                await asyncio.shield(app.stop())
                with contextlib.suppress(Exception):
                    await websocket.close()
            return websocket

        async def on_shutdown(self, app) -> None:
            # SIGTERM or Ctrl-C: every app ends now, not after aiohttp's 60 s grace
            live, self.live = list(self.live), set()
            await asyncio.gather(*(a.stop() for _, a in live), return_exceptions=True)
            for websocket, _ in live:
                with contextlib.suppress(Exception):
                    await websocket.close()

    return GuardedServer(command, host="127.0.0.1", port=port, title=title, public_url=public)


def die_with_server(poll_s: float = 0.5) -> None:
    """In an app that textual-serve started: when the server goes (killed, so it could not
    stop the app), the app goes too, instead of redrawing for no one. Its parent changing
    is the sign; SIGTERM lets Textual restore and exit, a hard exit follows if it cannot."""
    server = os.getppid()

    def watch() -> None:
        while os.getppid() == server:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(QUIT_GRACE_S)
        os._exit(1)

    threading.Thread(target=watch, name="abtui-die-with-server", daemon=True).start()


def serve_web(session: Path, port: int, url: str | None = None) -> int:
    """The same app in a browser through textual-serve, on 127.0.0.1 only, for whoever has
    the URL it prints (:class:`Guard`; reach it from another machine through an SSH tunnel),
    its page addressed from ``url`` (:func:`public_url`). Each browser tab runs ``abtui open
    SESSION`` in its own process."""
    base = public_url(url, port)  # a bad URL fails before anything is imported or bound
    try:
        import textual_serve.server  # noqa: F401
    except ImportError:
        raise UsageError(
            "abtui open --web needs textual-serve (the `web` extra)",
            "pip install 'abtui[web]', or view the session with `abtui open` in a terminal",
        ) from None
    token = secrets.token_urlsafe(32)
    command = " ".join(
        shlex.quote(x) for x in (sys.executable, "-m", "abtui", "open", str(session.resolve()))
    )
    # printed as is (not inert(): it would redact the token, a credential query parameter)
    print(
        f"abtui: serving {printable(session.name)} on 127.0.0.1:{port}; open {base}/?{TOKEN_PARAM}="
        f"{token} in your browser (the token is this server's password: share it with no one)"
        + ("" if url else "; through a tunnel to another port: --public-url"),
        file=sys.stderr,
        flush=True,
    )
    guarded_server(command, port, f"abtui · {session.name}", base, token).serve()
    return 0


def send_to_browser(app, name: str, text: str) -> bool:
    """When ``app`` runs in a browser (``abtui open --web``), offer ``text`` to it as a download
    named ``name`` (Textual's ``App.deliver_text``; sent from memory, so it arrives even where
    the session's folder cannot be written); False in a terminal (nothing sent)."""
    if not getattr(app, "is_web", False):
        return False
    app.deliver_text(
        io.StringIO(text),
        save_filename=name,
        open_method="download",
        mime_type=MIME.get(Path(name).suffix, "text/plain"),
        encoding="utf-8",
    )
    return True
