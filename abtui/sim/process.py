"""The sim as a child process: :class:`SimProcess`.

Benchmarks and end-to-end tests run the endpoint in its own process (own interpreter, own
event loop, optionally its own CPU core) so that it never competes with the load generator
for the GIL::

    with SimProcess(ttft_ms=50, itl_ms=10, cpu=1) as sim:
        httpx.get(sim.url + "/models")
"""

from __future__ import annotations

import dataclasses
import os
import queue
import subprocess
import sys
import tempfile
import threading
from typing import Any

from abtui.childproc import child_setup
from abtui.errors import AbtuiError
from abtui.sim.cli_args import config_to_argv
from abtui.sim.engine import SimConfig

_MARK = "abtui sim: listening on "


class SimStartError(AbtuiError):
    """The simulator child process did not start."""

    title = "simulator"


class SimProcess:
    """Start ``python -m abtui.sim`` on a free port; stop it on exit.

    ``config`` (a :class:`SimConfig`) or keyword fields of it (``ttft_ms=...``); the port is
    always chosen by the child (port 0). ``cpu`` pins the child to that core. The child gets
    SIGTERM if the thread that started it dies (Linux ``PR_SET_PDEATHSIG``), so start it from
    the main thread or a thread that outlives it.
    """

    def __init__(
        self,
        config: SimConfig | None = None,
        *,
        cpu: int | None = None,
        startup_timeout: float = 30.0,  # a loaded 2-core box has taken over 10 s to import
        stop_timeout: float = 5.0,
        **fields: Any,
    ) -> None:
        config = config if config is not None else SimConfig()
        self.config = dataclasses.replace(config, port=0, **fields)
        self.config.validate()
        self.cpu = cpu
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.url = ""
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self._stderr: Any = None
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> SimProcess:
        if self.cpu is not None and hasattr(os, "sched_getaffinity"):
            if self.cpu not in os.sched_getaffinity(0):
                raise SimStartError(
                    f"CPU {self.cpu} is not available to this process",
                    f"choose one of {sorted(os.sched_getaffinity(0))}",
                )
        argv = [sys.executable, "-m", "abtui.sim", *config_to_argv(self.config)]
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        parent, cpu = os.getpid(), self.cpu
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=False,
            preexec_fn=(lambda: child_setup(parent, cpu)) if os.name == "posix" else None,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(
            target=_drain, args=(self.proc.stdout, lines), name="abtui-sim-stdout", daemon=True
        )
        self._reader.start()
        try:
            line = lines.get(timeout=self.startup_timeout)
        except queue.Empty:
            line = ""
        if not line or not line.startswith(_MARK):
            rc = self._terminate()  # waits for the child, so its stderr is complete
            if line == "":
                why = f"no 'listening on' line within {self.startup_timeout:g}s"
            elif line is None:
                why = f"it exited with code {rc}"
            else:
                why = f"unexpected output {line!r}"
            err = self._err_text()
            self._close_stderr()
            raise SimStartError(
                f"the simulator did not start ({' '.join(argv)}): {why}"
                + (f"; its stderr: {err}" if err else ""),
                "run the command above by hand to see what it says",
            )
        self.url = line[len(_MARK) :].strip()
        self.port = int(self.url.rsplit(":", 1)[1].split("/", 1)[0])
        return self

    def _err_text(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            return self._stderr.read()[-4000:].strip()
        except (OSError, ValueError):
            return ""

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after ``stop_timeout``; returns the exit code."""
        rc = self._terminate()
        self._close_stderr()
        return rc

    def _terminate(self) -> int | None:
        proc, rc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(self.stop_timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            rc = proc.returncode
        if self._reader is not None:
            self._reader.join(1.0)  # the pipe is at EOF now that the child is gone
            self._reader = None
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
        return rc

    def _close_stderr(self) -> None:
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> SimProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _drain(stream: Any, lines: queue.Queue[str | None]) -> None:
    """Read the child's stdout: hand over the first line, then keep the pipe from filling."""
    first = True
    try:
        for line in stream:
            if first:
                lines.put(line)
                first = False
    except (OSError, ValueError):
        pass
    if first:
        lines.put(None)
