"""``abtui sim predict``: the roofline's prediction for a preset, as a table.

For each batch size b (every sequence at the same context c), one decode step of the batching
engine's model: step time, TPOT floor (step time / tokens each sequence gains per step: 1, or
(1 − α^(k+1)) / (1 − α) with speculative decoding), output tokens/s, the bound (memory or
compute), MBU (bytes moved / step time / peak bandwidth) and MFU (FLOPs / step time / peak
matmul FLOP/s), and whether the KV cache holds b sequences of c tokens. Then the time to
prefill one prompt of c tokens. The figures are what :mod:`abtui.sim.batching` uses: the same
efficiency factors, overheads and draft cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from abtui.errors import UsageError
from abtui.hardware import roofline
from abtui.sim.batching import EngineOptions
from abtui.sim.presets import Preset


@dataclass(frozen=True, slots=True)
class Prediction:
    batch: int
    context: int
    step_s: float
    tpot_s: float
    tokens_per_s: float
    bound: str
    mbu: float
    mfu: float
    fits: bool  # the KV cache holds batch x context tokens


def expected_tokens(k: int, alpha: float) -> float:
    """Expected tokens per verify step with draft length k and acceptance α."""
    if k == 0:
        return 1.0
    if alpha >= 1.0:
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def predict(
    preset: Preset, batches: list[int], context: int, options: EngineOptions | None = None
) -> tuple[list[Prediction], int, roofline.StepCost]:
    """(one :class:`Prediction` per batch, KV capacity in tokens, the prefill of ``context``)."""
    o = options or EngineOptions()
    p, e = preset, o.efficiency
    cap = roofline.kv_capacity_tokens(
        p.gpu, p.model, p.weight_dtype, p.kv_dtype, p.tp, o.gpu_mem_util, o.max_batched_tokens
    )
    dtype = roofline.matmul_dtype(p.gpu, p.weight_dtype)
    gain = expected_tokens(p.spec_k, p.spec_alpha)
    rows = []
    for b in batches:
        shape = roofline.decode_shape(b, context, p.spec_k + 1)
        c = roofline.step_cost(p.gpu, p.model, p.weight_dtype, p.kv_dtype, shape, p.tp, e)
        step = c.time
        if p.spec_k:
            step += p.spec_k * (o.draft_fraction * max(c.t_memory, c.t_compute) + o.draft_pass_s)
        rows.append(
            Prediction(
                batch=b,
                context=context,
                step_s=step,
                tpot_s=step / gain,
                tokens_per_s=b * gain / step,
                bound=c.bound,
                mbu=roofline.mbu(c.bytes, step, p.gpu),
                mfu=roofline.mfu(c.flops, step, p.gpu, dtype),
                fits=b * context <= cap,
            )
        )
    prefill = roofline.step_cost(
        p.gpu, p.model, p.weight_dtype, p.kv_dtype, roofline.prefill_shape(context), p.tp, e
    )
    return rows, cap, prefill


def parse_batches(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or any(b < 1 for b in out):
        raise UsageError(f"--batch {text!r} is invalid", "give batch sizes such as 1,8,64")
    return out


def print_prediction(
    preset: Preset,
    batches: list[int],
    context: int,
    out: TextIO,
    options: EngineOptions | None = None,
) -> None:
    if context < 1:
        raise UsageError(f"--context {context} is invalid", "give a context of >= 1 tokens")
    rows, cap, prefill = predict(preset, batches, context, options)
    g, m = preset.gpu, preset.model
    print(
        f"{preset.name} (simulated roofline): {g.label} x{preset.tp}, {m.name} "
        f"({m.param_count() / 1e9:.2f}B params), KV capacity {cap:,} tokens",
        file=out,
    )
    head = ("batch", "context", "step ms", "TPOT ms", "tokens/s", "bound", "MBU", "MFU", "KV fits")
    print("  ".join(f"{h:>9}" for h in head), file=out)
    for r in rows:
        cells = (
            f"{r.batch}",
            f"{r.context}",
            f"{r.step_s * 1e3:.2f}",
            f"{r.tpot_s * 1e3:.2f}",
            f"{r.tokens_per_s:,.0f}",
            r.bound,
            f"{r.mbu:.0%}",
            f"{r.mfu:.0%}",
            "yes" if r.fits else "no",
        )
        print("  ".join(f"{c:>9}" for c in cells), file=out)
    print(
        f"prefill of one {context}-token prompt: {prefill.time * 1e3:.1f} ms "
        f"({prefill.bound}-bound)",
        file=out,
    )
