"""The ``abtui`` command's quick exit (abtui/cli/entry.py): the exit handlers run, the output
is flushed, the code is the command's; a thread that is not a daemon is waited for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONUNBUFFERED", None)  # buffered output, as most users have it
    return env


def _run(code: str) -> subprocess.CompletedProcess:
    env = _env()
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )


def test_exit_now_runs_the_handlers_flushes_and_keeps_the_code():
    out = _run(
        "import atexit, sys\n"
        "from abtui.cli.entry import exit_now\n"
        "atexit.register(lambda: print('handler ran'))\n"
        "print('buffered', end=' ')\n"
        "print('to stderr', file=sys.stderr, end='')\n"
        "exit_now(3)\n"
    )
    assert out.returncode == 3
    assert out.stdout == "buffered handler ran\n"
    assert out.stderr == "to stderr"


def test_exit_now_waits_for_a_working_thread():
    out = _run(
        "import threading, time\n"
        "from abtui.cli.entry import exit_now\n"
        "def late():\n"
        "    time.sleep(0.3)\n"
        "    print('thread done', flush=True)\n"
        "threading.Thread(target=late).start()\n"
        "exit_now(4)\n"
    )
    assert out.returncode == 4
    assert out.stdout == "thread done\n"


def test_python_m_abtui_exits_with_the_commands_code():
    env = _env()
    out = subprocess.run(
        [sys.executable, "-m", "abtui", "report", "/nonexistent/x.duckdb"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2
    assert "does not exist" in out.stderr
