"""The ``abtui`` command's entry point: :func:`abtui.cli.main`, then a quick exit.

After a run the interpreter's own teardown (every module and object freed one by one: numpy,
DuckDB, rich, the session's tables) took 0.1–0.3 s of a small headless A/B's end on the
2-core dev VM (docs/reliability.md). Once the command has returned, nothing is left to do
but the exit handlers (``atexit``: multiprocessing's children, temporary copies of session
files) and the buffered output, so :func:`exit_now` runs those and ends the process with
``os._exit``. A thread that is not a daemon still running keeps the ordinary exit (the
interpreter waits for it). Programs that call :func:`abtui.cli.main` keep their interpreter.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def exit_now(code: int | None) -> NoReturn:
    """End the process with ``code`` (None: 0) after the exit handlers and a flush of stdout
    and stderr, without the interpreter's teardown; :func:`sys.exit` while a thread that is
    not a daemon still runs."""
    code = 0 if code is None else int(code)
    main = threading.main_thread()
    if any(t is not main and t.is_alive() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()  # noqa: SLF001 (CPython's own exit handlers, run as at exit)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can be said
            if stream is not None:
                stream.flush()
    os._exit(code)


def entry() -> NoReturn:
    """``abtui …`` (the console script and ``python -m abtui``)."""
    from abtui.cli import main

    exit_now(main())
