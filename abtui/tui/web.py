"""``abtui open SESSION --web``: the TUI served to a browser through textual-serve."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from abtui.errors import UsageError


def serve_web(session: Path, port: int) -> int:
    """The same app in a browser through textual-serve, on 127.0.0.1 only (no authentication:
    reach it through an SSH tunnel; docs/security.md). Each browser tab runs
    ``abtui open SESSION`` in its own process."""
    try:
        from textual_serve.server import Server
    except ImportError:
        raise UsageError(
            "abtui open --web needs textual-serve (the `web` extra)",
            "pip install 'abtui[web]', or view the session with `abtui open` in a terminal",
        ) from None
    command = " ".join(shlex.quote(x) for x in
                       (sys.executable, "-m", "abtui", "open", str(session.resolve())))  # fmt: skip
    Server(command, host="127.0.0.1", port=port, title=f"abtui · {session.name}").serve()
    return 0
