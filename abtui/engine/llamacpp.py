"""llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``) as a child process.

::

    with LlamaServer(model_path, name="fp32", cpu=0) as srv:
        httpx.get(srv.url + "/models")
        srv.timings()  # the server's own per-request timing, from its log

The server prints llama.cpp's ``llama_perf_context_print`` lines after every completion (it runs
``--verbose``); :meth:`LlamaServer.timings` turns them into per-request prompt-eval and
decode times, the server's own view to cross-check abtui's TTFT and TPOT against. It has no
``/metrics`` endpoint and puts no ``timings`` or ``usage`` in its streams (docs/compatibility.md).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from abtui.engine.tinymodel import EngineError
from abtui.sim.process import _preexec


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True, slots=True)
class ServerTiming:
    """One completion as llama.cpp timed it (``llama_perf_context_print``), in ms."""

    prompt_ms: float  # prompt evaluation (prefill)
    prompt_tokens: int
    eval_ms: float  # decode steps after the first token
    eval_runs: int
    total_ms: float

    @property
    def ms_per_token(self) -> float:
        return self.eval_ms / self.eval_runs if self.eval_runs else float("nan")


_NUM = r"([0-9.]+) ms /\s*(\d+)"
_PROMPT = re.compile(r"prompt eval time =\s*" + _NUM)
_EVAL = re.compile(r"\s eval time =\s*" + _NUM)
_TOTAL = re.compile(r"total time =\s*([0-9.]+) ms")


def parse_timings(log: str) -> list[ServerTiming]:
    """Every completion's timing block in a server log, in order."""
    out: list[ServerTiming] = []
    prompt = ev = None
    for line in log.splitlines():
        if "llama_perf_context_print" not in line:
            continue
        if m := _PROMPT.search(line):
            prompt = (float(m[1]), int(m[2]))
        elif m := _EVAL.search(line):
            ev = (float(m[1]), int(m[2]))
        elif (m := _TOTAL.search(line)) and prompt and ev:
            out.append(ServerTiming(prompt[0], prompt[1], ev[0], ev[1], float(m[1])))
            prompt = ev = None
    return out


class LlamaServer:
    """Start llama-cpp-python's server on a free loopback port; stop it on exit.

    ``threads`` is llama.cpp's thread count (prefill and decode); ``cpu`` pins the process to
    one core, so that two arms' servers on a small machine do not fight over the same one.
    ``interrupt_requests`` is off unless asked: by default this server cuts a running stream
    short (sends ``[DONE]`` with no finish reason) as soon as another request waits.
    """

    def __init__(
        self,
        model: Path,
        *,
        name: str = "tiny",
        threads: int = 1,
        cpu: int | None = None,
        n_ctx: int = 1024,
        python: str | None = None,
        log_path: Path | None = None,
        startup_timeout: float = 120.0,
        interrupt_requests: bool = False,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.model = Path(model)
        self.name = name
        self.threads = threads
        self.cpu = cpu
        self.n_ctx = n_ctx
        self.python = python or sys.executable
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.interrupt_requests = interrupt_requests
        self.extra_args = extra_args
        self.port = 0
        self.url = ""
        self.proc: subprocess.Popen | None = None
        self._log = None

    def argv(self) -> list[str]:
        return [
            self.python, "-m", "llama_cpp.server",
            "--model", str(self.model), "--model_alias", self.name,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads),
            "--n_ctx", str(self.n_ctx), "--interrupt_requests", str(self.interrupt_requests), "--verbose", "True",
            *self.extra_args,
        ]  # fmt: skip

    def start(self) -> LlamaServer:
        if not self.model.exists():
            raise EngineError(f"model file {self.model} does not exist", "build it first")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        if self.log_path is not None:
            self._log = open(self.log_path, "w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        else:
            self._log = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        parent, cpu = os.getpid(), self.cpu
        self.proc = subprocess.Popen(
            self.argv(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=(lambda: _preexec(parent, cpu)) if os.name == "posix" else None,
        )
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(trust_env=False, timeout=2.0) as c:
            while True:
                if self.proc.poll() is not None:
                    log = self.log_text()[-3000:]
                    self.stop()
                    raise EngineError(
                        f"llama.cpp server for {self.model.name} exited with code "
                        f"{self.proc.returncode}: {log}",
                        "is llama-cpp-python[server] installed? pip install -e '.[engine]'",
                    )
                try:
                    if c.get(self.url + "/models").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise EngineError(
                        f"llama.cpp server for {self.model.name} did not answer within "
                        f"{self.startup_timeout:g} s",
                        f"run it by hand: {' '.join(self.argv())}",
                    )
                time.sleep(0.1)
        return self

    def log_text(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        text = self._log.read()
        self._log.seek(0, os.SEEK_END)
        return text

    def timings(self) -> list[ServerTiming]:
        return parse_timings(self.log_text())

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

    def close(self) -> None:
        self.stop()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
