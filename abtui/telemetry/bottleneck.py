"""Measured MBU / MFU per arm and phase, against the roofline of the arm's GPU × model × dtype.

The arm's hardware comes from the spec (``gpu``, ``model_preset`` or ``model_config``,
``dtype``, ``kv_dtype``, ``gpus`` as the tensor-parallel degree); without ``gpu`` and a model
there is no roofline (nothing is guessed). Formulas: :mod:`abtui.hardware.roofline`
(docs/methods.md §5), at the *measured* operating point:

- **decode**: batch b = the server's mean running requests (else the client's mean number of
  requests decoding at once), context c = mean prompt + half the mean output; one step makes a
  token for each sequence in TPOT (the client's mean). MBU = bytes per step (weights + KV read
  and written) / step time / peak bandwidth; MFU = FLOPs per step / step time / peak FLOP/s.
  The step time is TPOT, or with speculative decoding (vLLM's counters) TPOT × tokens per step
  (1 + accepted / drafts), the step then running k + 1 query tokens per sequence.
- **prefill**: one prompt of the mean length P in the server's mean prefill time (else the
  client's TTFT, which adds queueing and the network: MBU/MFU then lower bounds); with a prefix
  cache, the share h of prompt tokens it served (the responses' figure, else the server's
  counters) is read from the KV cache, not computed: P·(1 − h) tokens after P·h cached.

The bound (memory or compute) is the roofline's at that point (peak figures, no overheads), and
the floor is the roofline's time there: the TPOT floor for decode, the TTFT floor for prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

from abtui.errors import AbtuiError
from abtui.hardware import roofline

IDEAL = roofline.Efficiency(bw=1.0, flops=1.0, step_overhead_s=0.0, per_seq_overhead_s=0.0)


@dataclass
class PhaseBound:
    phase: str  # decode | prefill
    bound: str  # memory | compute
    mbu: float
    mfu: float
    floor_s: float  # roofline time of the phase at the measured point (peak figures)
    measured_s: float
    batch: float
    context: float
    basis: str  # where the measured time came from
    cached: float = 0.0  # prefill: mean prompt tokens served from the prefix cache

    def label(self) -> str:
        key = self.mbu if self.bound == "memory" else self.mfu
        name = "MBU" if self.bound == "memory" else "MFU"
        other = f"MFU {self.mfu:.0%}" if self.bound == "memory" else f"MBU {self.mbu:.0%}"
        where = (
            f"batch {self.batch:.1f}, context {self.context:.0f}"
            if self.phase == "decode"
            else f"prompt {self.context:.0f}"
            + (f", {self.cached:.0f} of it cached" if self.cached >= 0.5 else "")
        )
        return (
            f"{self.phase}: {self.bound}-bound, {name} {key:.0%} ({other}; "
            f"{self.measured_s * 1e3:.2f} ms measured [{self.basis}] vs floor "
            f"{self.floor_s * 1e3:.2f} ms at {where})"
        )


def resolve(arm: dict):
    """(gpu, model, dtype, kv_dtype, tp) of a spec arm (a dict), or None without gpu/model."""
    from abtui.hardware.gpus import get_gpu
    from abtui.hardware.models import get_model, load_hf_config

    if not arm.get("gpu") or not (arm.get("model_preset") or arm.get("model_config")):
        return None
    try:
        gpu = get_gpu(arm["gpu"])
        model = (
            get_model(arm["model_preset"])
            if arm.get("model_preset")
            else load_hf_config(arm["model_config"])
        )
    except AbtuiError:
        return None  # the file moved since the run: no roofline rather than a crash
    return (
        gpu,
        model,
        arm.get("dtype") or "bf16",
        arm.get("kv_dtype") or "bf16",
        arm.get("gpus") or 1,
    )


def arm_bounds(arm: dict, d) -> list[PhaseBound]:
    """Decode and prefill :class:`PhaseBound` of one diagnosed arm (see the module docstring)."""
    hw = resolve(arm)
    if hw is None or d.prompt_tokens_mean is None:
        return []
    gpu, model, wdt, kvdt, tp = hw
    mm = roofline.matmul_dtype(gpu, wdt)
    out = []
    p = float(d.prompt_tokens_mean)
    n_out = float(d.output_tokens_mean or 1)
    if d.tpot_mean_s and d.tpot_mean_s > 0:
        if d.running:
            b, basis = max(1.0, d.running[0]), "client TPOT, server batch"
        else:
            b, basis = max(1.0, d.decode_concurrency or 1.0), "client TPOT"
        c = p + n_out / 2
        q, step = b, d.tpot_mean_s
        if d.spec_tokens_per_step and d.spec_k:
            q, step = b * (d.spec_k + 1), step * d.spec_tokens_per_step
            basis += ", spec-decode steps"
        shape = roofline.StepShape(
            tokens=q, sampled=q, kv_read=b * c, kv_written=q, pairs=q * c, seqs=b
        )
        out.append(_bound("decode", gpu, model, wdt, kvdt, tp, mm, shape, step, b, c, basis))
    t_pre = d.server.mean_s.get("prefill") if d.server is not None else None
    basis = "server prefill"
    if not t_pre and d.client is not None:
        t_pre, basis = d.client.mean_s.get("prefill"), "client TTFT"
    if t_pre and t_pre > 0:
        hit = _cached_share(d)
        n, cached = max(1, round(p * (1 - hit))), round(p * hit)
        shape = roofline.prefill_shape(n, cached)
        bound = _bound("prefill", gpu, model, wdt, kvdt, tp, mm, shape, t_pre, 1.0, p, basis)
        bound.cached = float(cached)
        out.append(bound)
    return out


def _cached_share(d) -> float:
    """The share of prompt tokens the arm's prefix cache served (0 when nothing says)."""
    pc = getattr(d, "prefix_cache", None)
    if pc is not None and pc.hit_rate is not None:
        return min(1.0, max(0.0, pc.hit_rate))
    share = getattr(d, "prompt_cached_share", None)
    return min(1.0, max(0.0, share)) if share is not None else 0.0


def _bound(phase, gpu, model, wdt, kvdt, tp, mm, shape, measured, b, c, basis) -> PhaseBound:
    cost = roofline.step_cost(gpu, model, wdt, kvdt, shape, tp, IDEAL)
    mbu = roofline.mbu(cost.bytes, measured, gpu)
    mfu = roofline.mfu(cost.flops, measured, gpu, mm)
    return PhaseBound(phase, cost.bound, mbu, mfu, cost.time, measured, b, c, basis)
