"""What the simulator's roofline says a trace of its own should show: per phase, the time per
step and the shares of GEMM/GEMV (the weights) and of the fixed step overhead (the gaps), from
:func:`abtui.hardware.roofline.step_cost` of each step the trace's vLLM-style annotations
count. ``abtui demo --profile`` sets them beside the profile abtui measured from the trace.

Memory-bound, the weights' time is the streamed weight bytes over the effective bandwidth;
compute-bound, the linear layers' and LM head's FLOPs over the effective FLOP rate.
"""

from __future__ import annotations

from abtui.hardware import roofline
from abtui.profile.read import read_trace
from abtui.sim.presets import parse_preset


def expected_shares(trace_path: str, preset: str) -> dict[str, dict[str, float]]:
    """Per phase (prefill, decode, mixed): ``per_step_us``, ``gemm`` and ``idle`` (shares of
    the phase's time) as the roofline of the annotated steps predicts them."""
    p = parse_preset(preset)
    eff = roofline.Efficiency()
    sums: dict[str, list[float]] = {}
    for step in read_trace(trace_path).steps:
        c = step.counts
        if c is None or c.context_seq_len is None:  # needs detailed_trace_annotation
            continue
        tokens = c.context_tokens + c.generation_tokens
        shape = roofline.StepShape(
            tokens=tokens,
            sampled=c.generation_reqs + c.context_reqs,
            kv_read=c.context_seq_len + (c.generation_seq_len or 0) - tokens,
            kv_written=tokens,
            pairs=(c.context_pairs or 0.0) + (c.generation_pairs or 0.0),
            seqs=c.context_reqs + c.generation_reqs,
        )
        cost = roofline.step_cost(p.gpu, p.model, p.weight_dtype, p.kv_dtype, shape, p.tp, eff)
        if cost.bound == "memory":
            weights = roofline.streamed_weight_bytes(p.model, p.weight_dtype) / (
                p.gpu.mem_bw * eff.bw
            )
        else:
            peak = p.gpu.flops_for(roofline.matmul_dtype(p.gpu, p.weight_dtype)) * eff.flops
            linear = 2 * p.model.linear_params() * tokens
            weights = (linear + 2 * p.model.lm_head_params() * shape.sampled) / peak
        s = sums.setdefault(step.phase, [0, 0.0, 0.0, 0.0])
        s[0] += 1
        s[1] += cost.time
        s[2] += weights / p.tp
        s[3] += eff.step_overhead_s
    return {
        ph: {"per_step_us": t / n * 1e6, "gemm": w / t, "idle": o / t}
        for ph, (n, t, w, o) in sums.items()
    }
