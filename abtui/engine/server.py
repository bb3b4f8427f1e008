"""llama.cpp's C++ server (``llama-server``) as a child process on a loopback port.

::

    with LlamaCppServer(model, parallel=4, extra_args=("-ctk", "q8_0", "-ctv", "q8_0")) as srv:
        httpx.get(srv.url + "/models")   # srv.url ends in /v1
        httpx.get(srv.base + "/metrics")  # Prometheus text, llamacpp:* names

It runs with ``--metrics`` (and ``--slots``), continuous batching over ``parallel`` slots, and no
web UI. ``start`` waits for ``/health`` to answer 200 (503 while the model loads) and fails with
the server's own last log lines if it exits first. ``stop`` sends SIGTERM, then SIGKILL after
10 s. The child dies with the process that started it (Linux ``PR_SET_PDEATHSIG``), so a
crashed test leaves no server behind.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Self

import httpx

from abtui.childproc import child_setup
from abtui.engine.build import require_server
from abtui.engine.tinymodel import EngineError


@dataclass(frozen=True, slots=True)
class ServerTiming:
    """One finished request as llama-server timed it (its ``print_timing`` log lines), in ms."""

    prompt_ms: float  # prompt evaluation (prefill), up to the first token sampled
    prompt_tokens: int
    eval_ms: float  # first token sampled → last token sampled
    eval_runs: int  # tokens generated (the first comes from the prefill's logits)
    total_ms: float

    @property
    def ms_per_token(self) -> float:
        """Decode time per step: ``eval_ms / (tokens − 1)``, as llama-server itself divides."""
        return self.eval_ms / (self.eval_runs - 1) if self.eval_runs > 1 else float("nan")


_NUM = r"([0-9.]+) ms /\s*(\d+)"
_PROMPT = re.compile(r"prompt eval time =\s*" + _NUM)
_EVAL = re.compile(r"\s eval time =\s*" + _NUM)
_TOTAL = re.compile(r"total time =\s*([0-9.]+) ms")


def parse_timings(log: str) -> list[ServerTiming]:
    """Every finished request's timing block in a llama-server log, in the order logged."""
    out: list[ServerTiming] = []
    prompt = ev = None
    for line in log.splitlines():
        if "print_timing" not in line:
            continue
        if m := _PROMPT.search(line):
            prompt = (float(m[1]), int(m[2]))
        elif m := _EVAL.search(line):
            ev = (float(m[1]), int(m[2]))
        elif (m := _TOTAL.search(line)) and prompt and ev:
            out.append(ServerTiming(prompt[0], prompt[1], ev[0], ev[1], float(m[1])))
            prompt = ev = None
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServedProcess:
    """What the two engine servers share: a log file, the wait for ``/health`` and the context
    manager. A subclass sets ``proc``, ``base`` and ``_log`` in its ``start`` and says its
    ``label`` and how it stops."""

    startup_timeout: float

    @property
    def label(self) -> str:
        return "the server"

    def start(self) -> Self:
        raise NotImplementedError

    proc: subprocess.Popen | None
    base: str
    _log: IO[str] | None

    def _open_log(self, path: Path | None) -> None:
        if path is not None:
            self._log = open(path, "w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        else:
            self._log = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")

    def _wait_healthy(self, argv: list[str], deadline: float, poll_s: float, tail: int) -> None:
        """Return when ``/health`` answers 200; close and raise when the process exits first
        (with its log's end) or ``deadline`` (monotonic) passes (with ``tail`` characters of
        it)."""
        assert self.proc is not None
        with httpx.Client(trust_env=False, timeout=2.0) as c:
            while True:
                if self.proc.poll() is not None:
                    log = self.log_text()[-3000:]
                    rc = self.proc.returncode
                    self.close()
                    raise EngineError(
                        f"{self.label} exited with code {rc}: {log}",
                        f"run it by hand to see why: {' '.join(argv)}",
                    )
                try:
                    if c.get(self.base + "/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    log = self.log_text()[-tail:] if tail else ""
                    self.close()
                    raise EngineError(
                        f"{self.label} did not become healthy within "
                        f"{self.startup_timeout:g} s" + (f": {log}" if log else ""),
                        f"run it by hand: {' '.join(argv)}",
                    )
                time.sleep(poll_s)

    def log_text(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        text = self._log.read()
        self._log.seek(0, os.SEEK_END)
        return text

    def stop(self) -> int | None:
        raise NotImplementedError

    def close(self) -> None:
        self.stop()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class LlamaCppServer(ServedProcess):
    """Start ``llama-server`` for ``model``; stop it on exit.

    ``parallel`` is the slot count (``-np``): how many sequences it batches together.
    ``ctx`` is the context per slot; the server's total context is ``ctx × parallel``.
    ``threads`` is llama.cpp's thread count; ``cpus`` pins the process to those cores.
    ``draft`` is a draft model for speculative decoding (``-md``), with ``draft_max`` /
    ``draft_min`` tokens per draft. ``extra_args`` are passed as they are (``-ctk q8_0``…).
    """

    def __init__(
        self,
        model: Path,
        *,
        name: str = "tiny",
        parallel: int = 1,
        ctx: int = 1024,
        threads: int = 1,
        cpus: tuple[int, ...] | None = None,
        draft: Path | None = None,
        draft_max: int = 8,
        draft_min: int = 0,
        flash_attn: str | None = None,
        extra_args: tuple[str, ...] = (),
        binary: Path | None = None,
        log_path: Path | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        self.model = Path(model)
        self.name = name
        self.parallel = parallel
        self.ctx = ctx
        self.threads = threads
        self.cpus = cpus
        self.draft = Path(draft) if draft is not None else None
        self.draft_max = draft_max
        self.draft_min = draft_min
        self.flash_attn = flash_attn
        self.extra_args = tuple(extra_args)
        self.binary = Path(binary) if binary is not None else None
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.port = 0
        self.base = ""
        self.url = ""
        self.proc: subprocess.Popen | None = None
        self._log = None

    def argv(self) -> list[str]:
        binary = self.binary or require_server()
        args = [
            str(binary),
            "-m",
            str(self.model),
            "-a",
            self.name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-np",
            str(self.parallel),
            "-c",
            str(self.ctx * self.parallel),
            "-t",
            str(self.threads),
            "-tb",
            str(self.threads),
            "--metrics",
            "--slots",
            "--no-webui",
            "--no-warmup",
        ]
        if self.flash_attn is not None:
            args += ["-fa", self.flash_attn]
        if self.draft is not None:  # this llama.cpp drafts nothing unless a type is named
            args += [
                "-md",
                str(self.draft),
                "--spec-type",
                "draft-simple",
                "--spec-draft-n-max",
                str(self.draft_max),
                "--spec-draft-n-min",
                str(self.draft_min),
                "-td",
                str(self.threads),
            ]
        return args + list(self.extra_args)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def label(self) -> str:
        return f"llama-server for {self.model.name}"

    def start(self) -> LlamaCppServer:
        for p in (self.model, self.draft):
            if p is not None and not p.exists():
                raise EngineError(
                    f"model file {p} does not exist",
                    "make the test models first: abtui engine models DIR",
                )
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = self.base + "/v1"
        argv = self.argv()
        self._open_log(self.log_path)
        parent, cpus = os.getpid(), self.cpus
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=(lambda: _pin(parent, cpus)) if os.name == "posix" else None,
        )
        self._wait_healthy(argv, time.monotonic() + self.startup_timeout, 0.05, 0)
        return self

    def timings(self) -> list[ServerTiming]:
        """The server's own timing of every request it finished so far (from its log)."""
        return parse_timings(self.log_text())

    def cpu_seconds(self) -> float:
        """CPU time the server process has used so far (user + system, from ``/proc``; nan
        where there is none): the work it did, whatever else shared the cores."""
        try:
            with open(f"/proc/{self.pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError, TypeError):
            return float("nan")

    def metrics_text(self) -> str:
        """The server's ``/metrics`` now (Prometheus text)."""
        r = httpx.get(self.base + "/metrics", timeout=5.0, trust_env=False)
        r.raise_for_status()
        return r.text

    def props(self) -> dict:
        r = httpx.get(self.base + "/props", timeout=5.0, trust_env=False)
        r.raise_for_status()
        return r.json()

    def kill(self) -> None:
        """SIGKILL now: a server that dies mid-run, for tests."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> int | None:
        proc, rc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            rc = proc.returncode
        return rc


def _pin(parent: int, cpus: tuple[int, ...] | None) -> None:  # pragma: no cover - in the child
    child_setup(parent, None)
    if cpus and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, set(cpus))
        except OSError:
            pass
