"""The profile against the roofline (docs/methods.md §5): is the time where the bound says?

For a phase whose steps carry vLLM's request and token counts (:class:`StepCounts`), the mean
step's shape gives the roofline's floor (datasheet peaks, no efficiency, no overhead: what
``abtui roofline`` prints) and its bound, memory or compute. Beside them, from the profile:

- the measured time per step, and the floor's share of it;
- what the GEMM/GEMV class achieves: in a memory-bound phase the bandwidth at which it streams
  the weights (their bytes over its time per step), in a compute-bound one its FLOP rate (the
  linear layers' and LM head's FLOPs over its time), each against the GPU's peak;
- a note when the work the bound is about (GEMM/GEMV and attention) is under half the phase's
  time — then overheads, not bandwidth or compute, set the pace — or when GEMM/GEMV would have
  to beat the GPU's peak (the model, dtype or GPU given do not match the trace).

A decode step's context comes from the detailed annotation (``sk``) when the trace has it, else
from ``--context``; a prefill chunk is taken to start an empty cache unless ``sk`` says.
"""

from __future__ import annotations

from dataclasses import dataclass

from abtui.hardware.gpus import GpuSpec
from abtui.hardware.models import ModelConfig
from abtui.hardware.roofline import (
    Efficiency,
    StepShape,
    matmul_dtype,
    step_cost,
    streamed_weight_bytes,
)
from abtui.profile.analyse import Profile
from abtui.profile.model import StepCounts

PEAK = Efficiency(bw=1.0, flops=1.0, step_overhead_s=0.0, per_seq_overhead_s=0.0)


@dataclass
class RooflineCheck:
    phase: str
    steps: int  # steps with counts the shape is the mean of
    shape: StepShape
    bound: str  # "memory" or "compute"
    floor_s: float
    measured_s: float | None
    gemm_rate: float | None  # bytes/s (memory-bound) or FLOP/s (compute-bound)
    gemm_of_peak: float | None
    bound_work_share: float | None  # GEMM/GEMV + attention, of the phase's time
    notes: list[str]

    @property
    def floor_share(self) -> float | None:
        return self.floor_s / self.measured_s if self.measured_s else None


def _shape(counts: list[StepCounts], context: int) -> StepShape:
    """The mean step of ``counts``."""
    n = len(counts)
    tokens = sum(c.context_tokens + c.generation_tokens for c in counts) / n
    sampled = sum(c.context_reqs + c.generation_reqs for c in counts) / n
    kv_read = pairs = 0.0
    for c in counts:
        if c.context_seq_len is not None:
            kv_read += max(0, c.context_seq_len - c.context_tokens)
            kv_read += max(0, (c.generation_seq_len or 0) - c.generation_tokens)
            pairs += (c.context_pairs or 0.0) + (c.generation_pairs or 0.0)
        else:
            per = c.context_tokens / c.context_reqs if c.context_reqs else 0.0
            pairs += c.context_reqs * per * (per + 1) / 2 + c.generation_tokens * context
            kv_read += c.generation_reqs * context
    return StepShape(tokens, sampled, kv_read / n, tokens, pairs / n, round(sampled))


def roofline_checks(
    profile: Profile,
    gpu: GpuSpec,
    model: ModelConfig,
    weight_dtype: str,
    kv_dtype: str,
    context: int,
    tp: int = 1,
) -> list[RooflineCheck]:
    """One check per phase whose steps carry counts (prefill, decode, mixed)."""
    out = []
    steps = profile.trace.steps or profile.trace.device_steps
    for phase, ph in profile.phases.items():
        counts = [s.counts for s in steps if s.phase == phase and s.counts is not None]
        if not counts or not ph.steps:
            continue
        shape = _shape(counts, context)
        cost = step_cost(gpu, model, weight_dtype, kv_dtype, shape, tp, PEAK)
        measured = ph.per_step_us * 1e-6 if ph.per_step_us else None
        gemm_s = ph.busy_us.get("gemm", 0.0) * 1e-6 / ph.steps
        rate = of_peak = None
        if gemm_s > 0 and cost.bound == "memory":
            rate = streamed_weight_bytes(model, weight_dtype) / tp / gemm_s
            of_peak = rate / gpu.mem_bw
        elif gemm_s > 0:
            work = 2 * model.linear_params() * shape.tokens
            rate = (work + 2 * model.lm_head_params() * shape.sampled) / tp / gemm_s
            of_peak = rate / gpu.flops_for(matmul_dtype(gpu, weight_dtype))
        share = ph.time_share(("gemm", "attention"))
        check = RooflineCheck(
            phase, len(counts), shape, cost.bound, cost.time, measured, rate, of_peak, share, []
        )
        check.notes = _notes(check, profile)
        out.append(check)
    return out


def _notes(c: RooflineCheck, profile: Profile) -> list[str]:
    notes = []
    if (c.gemm_of_peak or 0.0) > 1.05 or (c.floor_share or 0.0) > 1.05:
        notes.append(
            "faster than the GPU's peak allows (the floor, or GEMM/GEMV's rate): the GPU, "
            "model or dtypes given do not match this trace"
        )
    if c.bound_work_share is not None and c.bound_work_share < 0.5:
        ph = profile.phases[c.phase]
        shares = {k: ph.time_share((k,)) or 0.0 for k in ph.busy_us}
        if ph.idle_us:
            shares["idle"] = ph.idle_us / (ph.total_busy + ph.idle_us)
        lead = max(shares, key=shares.get)
        notes.append(
            f"the roofline calls {c.phase} {c.bound}-bound, but GEMM/GEMV and attention are "
            f"{c.bound_work_share:.0%} of its time ({profile.table.label(lead)} leads): "
            f"overheads, not {'bandwidth' if c.bound == 'memory' else 'compute'}, set the pace"
        )
    return notes
