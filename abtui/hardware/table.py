"""``abtui roofline``: the pure roofline of a GPU × model × dtype, as a table.

Peak figures only (datasheet bandwidth and dense FLOP/s, no efficiency factor, no overhead), so
every number is a *floor*: no engine can beat it, and the gap to a measured figure is what an
optimisation can still win. Per batch size b (every sequence at context c):

- bytes moved by one decode step (weights streamed + KV read and written), its FLOPs, the
  arithmetic intensity (FLOP/byte) against the GPU's ridge point (peak FLOP/s / bandwidth);
- the TPOT floor = max(bytes / bandwidth, FLOPs / peak FLOP/s) and the bound it comes from,
  the output tokens/s ceiling b / TPOT, and whether b × c tokens of KV fit in memory;
- the TTFT floor: prefill of one c-token prompt, and of b of them at once.

``abtui sim predict`` gives the same step with the simulator's fitted efficiencies (what an
engine typically reaches); this table is the bound. Formulas: :mod:`abtui.hardware.roofline`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from abtui.errors import UsageError
from abtui.hardware import roofline
from abtui.hardware.gpus import GpuSpec
from abtui.hardware.models import ModelConfig

IDEAL = roofline.Efficiency(bw=1.0, flops=1.0, step_overhead_s=0.0, per_seq_overhead_s=0.0)
DTYPES = tuple(roofline.DTYPE_BYTES)


@dataclass(frozen=True, slots=True)
class RooflineRow:
    batch: int
    context: int
    bytes: float  # per GPU, one decode step
    flops: float  # per GPU, one decode step
    intensity: float  # FLOP/byte
    tpot_floor_s: float
    bound: str
    tokens_per_s: float
    kv_fits: bool
    ttft_floor_s: float  # one prompt of `context` tokens
    ttft_batch_floor_s: float  # `batch` prompts of `context` tokens in one step


def roofline_rows(
    gpu: GpuSpec,
    model: ModelConfig,
    dtype: str,
    kv_dtype: str,
    batches: list[int],
    context: int,
    tp: int = 1,
) -> list[RooflineRow]:
    if dtype not in DTYPES or kv_dtype not in DTYPES:
        bad = dtype if dtype not in DTYPES else kv_dtype
        raise UsageError(f"unknown dtype {bad!r}", f"choose one of {', '.join(DTYPES)}")
    if context < 1:
        raise UsageError(f"--context {context} is invalid", "give a context of >= 1 tokens")
    cap = roofline.kv_capacity_tokens(gpu, model, dtype, kv_dtype, tp)
    one = roofline.step_cost(
        gpu, model, dtype, kv_dtype, roofline.prefill_shape(context), tp, IDEAL
    )
    rows = []
    for b in batches:
        c = roofline.step_cost(
            gpu, model, dtype, kv_dtype, roofline.decode_shape(b, context), tp, IDEAL
        )
        many = roofline.StepShape(
            tokens=b * context,
            sampled=b,
            kv_read=0,
            kv_written=b * context,
            pairs=b * context * (context + 1) / 2,
            seqs=b,
        )
        pb = roofline.step_cost(gpu, model, dtype, kv_dtype, many, tp, IDEAL)
        rows.append(
            RooflineRow(
                batch=b,
                context=context,
                bytes=c.bytes,
                flops=c.flops,
                intensity=c.flops / c.bytes,
                tpot_floor_s=c.time,
                bound=c.bound,
                tokens_per_s=b / c.time,
                kv_fits=b * context <= cap,
                ttft_floor_s=one.time,
                ttft_batch_floor_s=pb.time,
            )
        )
    return rows


def print_roofline(
    gpu: GpuSpec,
    model: ModelConfig,
    dtype: str,
    kv_dtype: str,
    batches: list[int],
    context: int,
    out: TextIO,
    tp: int = 1,
) -> list[RooflineRow]:
    rows = roofline_rows(gpu, model, dtype, kv_dtype, batches, context, tp)
    mm = roofline.matmul_dtype(gpu, dtype)
    peak = gpu.flops_for(mm)
    w_all = roofline.weight_bytes(model, dtype)
    w_step = roofline.streamed_weight_bytes(model, dtype)
    kv = roofline.kv_bytes_per_token(model, kv_dtype)
    cap = roofline.kv_capacity_tokens(gpu, model, dtype, kv_dtype, tp)
    p = lambda s="": print(s, file=out)  # noqa: E731
    p(
        f"Roofline (peak figures: floors, not predictions): {gpu.label} x{tp}, {model.name} "
        f"({model.param_count() / 1e9:.2f}B params), weights {dtype}, KV {kv_dtype}"
    )
    p(
        f"  peak {gpu.mem_bw / 1e12:.2f} TB/s, {peak / 1e12:,.0f} TFLOP/s ({mm}); ridge point "
        f"{peak / gpu.mem_bw:,.0f} FLOP/byte"
    )
    p(
        f"  weights {w_all / 1e9:.2f} GB ({w_all / gpu.mem_bw / tp * 1e3:.2f} ms to read them all "
        f"once); a decode step streams {w_step / 1e9:.2f} GB (the embedding table is only "
        f"indexed)"
    )
    p(
        f"  KV cache {kv / 1024:g} KiB per token; room for {max(cap, 0):,} tokens "
        f"at 90% of {gpu.memory_bytes / 2**30:.0f} GiB"
    )
    head = (
        "batch",
        "context",
        "GB/step",
        "TFLOP/step",
        "FLOP/B",
        "TPOT floor",
        "bound",
        "tok/s ceil",
        "KV fits",
        "TTFT floor",
        "TTFT xB",
    )
    p("  ".join(f"{h:>10}" for h in head))
    for r in rows:
        cells = (
            f"{r.batch}",
            f"{r.context}",
            f"{r.bytes / 1e9:.2f}",
            f"{r.flops / 1e12:.3f}",
            f"{r.intensity:,.1f}",
            f"{r.tpot_floor_s * 1e3:.2f} ms",
            r.bound,
            f"{r.tokens_per_s:,.0f}",
            "yes" if r.kv_fits else "NO",
            f"{r.ttft_floor_s * 1e3:.1f} ms",
            f"{r.ttft_batch_floor_s * 1e3:.1f} ms",
        )
        p("  ".join(f"{c:>10}" for c in cells))
    p(
        "TPOT floor: one decode step at peak; TTFT floor: prefill of one prompt of CONTEXT tokens "
        "(TTFT xB: BATCH of them in one step). `abtui sim predict` adds typical efficiencies."
    )
    return rows
