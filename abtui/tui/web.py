"""``abtui open SESSION --web``: the TUI served to a browser through textual-serve.

The server binds to 127.0.0.1 only. The page it serves names its scripts, styles and websocket
by absolute URL, built from the *public URL*: by default ``http://127.0.0.1:PORT``, which is
right only for a browser on the same machine and port. Through a tunnel (``ssh -L
9000:127.0.0.1:8000 gpu-box``) the browser is at ``http://localhost:9000``: give that as
``--public-url`` and the page loads. Reports exported from the verdict screen (``m``/``h``) are
written next to the session file as in a terminal and, in a browser, also sent to it as a
download (:func:`send_to_browser`).
"""

from __future__ import annotations

import io
import shlex
import sys
from pathlib import Path
from urllib.parse import urlsplit

from abtui.errors import UsageError

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
        raise UsageError(f"--public-url {url!r}: the port is not a number from 0 to 65535") from None
    return url.strip().rstrip("/")


def serve_web(session: Path, port: int, url: str | None = None) -> int:
    """The same app in a browser through textual-serve, on 127.0.0.1 only (no authentication:
    reach it through an SSH tunnel; docs/security.md), its page addressed from ``url``
    (:func:`public_url`). Each browser tab runs ``abtui open SESSION`` in its own process."""
    base = public_url(url, port)  # a bad URL fails before anything is imported or bound
    try:
        from textual_serve.server import Server
    except ImportError:
        raise UsageError(
            "abtui open --web needs textual-serve (the `web` extra)",
            "pip install 'abtui[web]', or view the session with `abtui open` in a terminal",
        ) from None
    command = " ".join(shlex.quote(x) for x in
                       (sys.executable, "-m", "abtui", "open", str(session.resolve())))  # fmt: skip
    print(f"abtui: serving {session.name} on 127.0.0.1:{port}; open {base} in your browser"
          + ("" if url else " (through a tunnel to another port: --public-url)"),
          file=sys.stderr)  # fmt: skip
    Server(command, host="127.0.0.1", port=port, title=f"abtui · {session.name}",
           public_url=base).serve()  # fmt: skip
    return 0


def send_to_browser(app, name: str, text: str) -> bool:
    """When ``app`` runs in a browser (``abtui open --web``), offer ``text`` to it as a download
    named ``name`` (Textual's ``App.deliver_text``; sent from memory, so it arrives even where
    the session's folder cannot be written); False in a terminal (nothing sent)."""
    if not getattr(app, "is_web", False):
        return False
    app.deliver_text(io.StringIO(text), save_filename=name, open_method="download",
                     mime_type=MIME.get(Path(name).suffix, "text/plain"), encoding="utf-8")  # fmt: skip
    return True
