"""The simulator's profiler: ``POST /start_profile`` and ``/stop_profile`` as vLLM serves them,
writing a Kineto-schema trace (:mod:`abtui.profile.writer`) of the batching engine's own steps.

Configured as vLLM 0.32 is, with ``--profiler-config '{"profiler": "torch",
"torch_profiler_dir": "/abs/dir"}'`` (the same option value works for both servers); of vLLM's
other keys ``max_iterations`` (steps to record at most, 0: up to :data:`MAX_STEPS`),
``torch_profiler_use_gzip`` and ``detailed_trace_annotation`` are used, the rest are accepted
and ignored. Without the option the two routes do not exist (404), as on vLLM.

Each step is one window of the trace in *simulated* time (endpoint time × the time scale, so
the trace shows the modelled GPU's microseconds), annotated as vLLM's worker annotates it
(``execute_context_C(T)_generation_G(T)``, or the detailed form), and split as the roofline
of :func:`abtui.hardware.roofline.step_cost` splits it:

- the fixed step overhead first, with no kernel in it: the host scheduling and preparing the
  step (the profile's idle / launch gaps), plus the draft passes' fixed cost;
- per layer, a GEMM/GEMV kernel (its share of the weights' time) and an attention kernel (its
  share of the KV cache's time), and with tensor parallelism an all-reduce kernel. The kernel
  time, max(memory time, compute time), is divided by the resource the step is bound by: bytes
  (weights against KV cache) when memory-bound, FLOPs (linear layers and LM head against the
  attention pairs) when compute-bound;
- the draft model's share of kernel time (speculative decoding) as one GEMM kernel;
- the per-sequence overhead (input preparation, sampling) as a sampling kernel.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from abtui.errors import UsageError
from abtui.profile.writer import Annotation, Kernel, chrome_trace, write_chrome

MAX_STEPS = 2000  # steps one profile records at most (each is ~2 events per layer)
_HINT = 'give e.g. --profiler-config \'{"profiler": "torch", "torch_profiler_dir": "/abs/dir"}\''
_LAUNCH_US = 1.0  # a kernel's launch call precedes it by this much (host time)


@dataclass(frozen=True, slots=True)
class ProfilerConfig:
    """Where traces go and what a profile records (vLLM's keys of the same names)."""

    torch_profiler_dir: str
    max_iterations: int = 0
    use_gzip: bool = True
    detailed: bool = False

    def to_json(self) -> str:
        return json.dumps(
            {
                "profiler": "torch",
                "torch_profiler_dir": self.torch_profiler_dir,
                "max_iterations": self.max_iterations,
                "torch_profiler_use_gzip": self.use_gzip,
                "detailed_trace_annotation": self.detailed,
            }
        )


def parse_profiler_config(text: str) -> ProfilerConfig:
    """The :class:`ProfilerConfig` of ``--profiler-config``'s JSON; a bad value raises
    ``UsageError`` naming the key."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--profiler-config is not JSON: {exc}", _HINT) from None
    if not isinstance(doc, dict):
        raise UsageError("--profiler-config must be a JSON object", _HINT)
    if doc.get("profiler") != "torch":
        raise UsageError(
            f"--profiler-config: profiler {doc.get('profiler')!r} is not supported by the "
            "simulator",
            'give "profiler": "torch" (the simulator writes a torch profiler trace)',
        )
    where = doc.get("torch_profiler_dir")
    if not isinstance(where, str) or not where.strip():
        raise UsageError("--profiler-config: torch_profiler_dir is missing", _HINT)
    limit = doc.get("max_iterations", 0)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise UsageError(
            f"--profiler-config: max_iterations {limit!r} is invalid", "give an integer >= 0"
        )
    flags = {}
    for key in ("torch_profiler_use_gzip", "detailed_trace_annotation"):
        v = doc.get(key, key == "torch_profiler_use_gzip")
        if not isinstance(v, bool):
            raise UsageError(f"--profiler-config: {key} {v!r} is invalid", "give true or false")
        flags[key] = v
    return ProfilerConfig(
        os.path.abspath(os.path.expanduser(where)),
        limit,
        flags["torch_profiler_use_gzip"],
        flags["detailed_trace_annotation"],
    )


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One engine step as the engine planned it: its start (engine clock, s) and duration
    (simulated s), the annotation's counts, and its time split (simulated s)."""

    start: float
    label: str
    gemm: float
    attention: float
    comm: float
    draft: float
    sampling: float
    gaps: float

    @property
    def total(self) -> float:
        return self.gemm + self.attention + self.comm + self.draft + self.sampling + self.gaps


PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # vLLM's rule for profile_prefix


def step_label(chunks: list[tuple[int, int]], n_dec: int, k1: int, sum_ctx: int, detailed: bool):
    """vLLM's step annotation: ``chunks`` are the prefill chunks' (cached, new) tokens; the
    ``n_dec`` decoding requests run ``k1`` query tokens each over ``sum_ctx`` context tokens."""
    c_tok = sum(n for _, n in chunks)
    g_tok = n_dec * k1
    if not detailed:
        return f"execute_context_{len(chunks)}({c_tok})_generation_{n_dec}({g_tok})"
    c_sk = sum(c0 + n for c0, n in chunks)
    c_qq = sum(n * n for _, n in chunks)
    c_qk = sum(n * (c0 + n) for c0, n in chunks)
    # a decode's key length such that its causal pairs are the engine's k1·ctx + k1(k1−1)/2
    g_sk = sum_ctx + n_dec * (k1 - 1)
    return (
        f"execute_{c_tok + g_tok}_context_{len(chunks)}(sq{c_tok}sk{c_sk}sqsq{c_qq}sqsk{c_qk})"
        f"_generation_{n_dec}(sq{g_tok}sk{g_sk}sqsq{n_dec * k1 * k1}sqsk{k1 * g_sk})"
    )


class StepProfiler:
    """Records the engine's steps between :meth:`start` and :meth:`stop`, then writes them."""

    def __init__(self, config: ProfilerConfig, engine, name: str = "sim") -> None:
        self.config = config
        self.engine = engine
        self.name = name
        self.steps: list[StepRecord] = []
        self.active = False
        self.dropped = 0  # steps past the limit
        self.max_steps: int | None = None  # /start_profile's max_iterations (None: the config's)
        self.prefix: str | None = None  # /start_profile's profile_prefix: the file's name
        self._t0 = 0.0

    @property
    def limit(self) -> int:
        m = self.config.max_iterations if self.max_steps is None else self.max_steps
        return min(m, MAX_STEPS) if m else MAX_STEPS

    def start(self, now: float) -> None:
        self.steps, self.dropped, self._t0, self.active = [], 0, now, True
        self.engine.profiler = self

    def record(self, step: StepRecord) -> None:
        if len(self.steps) < self.limit:
            self.steps.append(step)
        else:
            self.dropped += 1

    def stop(self) -> Path:
        """Stop recording and write the trace; its path. Raises ``OSError`` when the folder
        cannot be written."""
        self.active = False
        self.engine.profiler = None
        folder = Path(self.config.torch_profiler_dir)
        folder.mkdir(parents=True, exist_ok=True)
        suffix = ".pt.trace.json.gz" if self.config.use_gzip else ".pt.trace.json"
        name = self.prefix or self.name
        path = folder / f"{name}_rank0.{time.time_ns() // 1_000_000}{suffix}"
        write_chrome(path, self.trace())
        self.steps = []
        return path

    def trace(self) -> dict:
        """The Kineto document of the recorded steps (simulated µs from the profile's start)."""
        e = self.engine
        layers = e.preset.model.layers
        scale = e.options.time_scale
        comm = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
        gemm = _gemm_name(e.preset.weight_dtype)
        kernels: list[Kernel] = []
        anns: list[Annotation] = []
        for s in self.steps:
            t = (s.start - self._t0) * scale * 1e6
            dur = s.total * 1e6
            anns.append(Annotation(s.label, t, dur, gpu=True))
            at = t + s.gaps * 1e6
            per = [
                (gemm, s.gemm * 1e6 / layers),
                ("flash_fwd_splitkv_kernel", s.attention * 1e6 / layers),
                (comm, s.comm * 1e6 / layers),
            ]
            for _ in range(layers):
                for name, d in per:
                    if d > 0:
                        kernels.append(Kernel(name, at, d, launch=max(t, at - _LAUNCH_US)))
                        at += d
            for name, d in ((gemm + "_draft", s.draft), ("topk_topp_sampling_kernel", s.sampling)):
                if d > 0:
                    kernels.append(Kernel(name, at, d * 1e6, launch=max(t, at - _LAUNCH_US)))
                    at += d * 1e6
        meta = {
            "deviceProperties": [{"id": 0, "name": f"{e.preset.gpu.label} (simulated)"}],
            "abtui_sim": {
                "preset": e.preset.name,
                "time_scale": scale,
                "steps": len(self.steps),
                "steps_dropped": self.dropped,
            },
        }
        return chrome_trace(kernels, annotations=anns, meta=meta)


def _gemm_name(weight_dtype: str) -> str:
    """A GEMM kernel's name as the profile shows one for these weights."""
    if weight_dtype == "fp8":
        return "cutlass_scaled_mm_sm90_fp8_e4m3"
    if weight_dtype == "int4":
        return "marlin_gemm_int4"
    return "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"
