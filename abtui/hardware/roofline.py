"""The roofline formulas (docs/methods.md §5): bytes, FLOPs and predicted time of a forward step.

Pure functions of a :class:`~abtui.hardware.gpus.GpuSpec` and a
:class:`~abtui.hardware.models.ModelConfig`. One *step* (a forward pass of a batch) is
described by a :class:`StepShape`: how many query tokens it runs, how many of them sample a
token (and so need the LM head), how many KV entries attention reads and writes, and how many
(query, key) pairs attention scores.

- Weights: the layers' matmuls are stored in the weight dtype; the embedding and the LM head
  stay in BF16 (as FP8 and INT4 checkpoints keep them). A step streams every layer weight and
  the LM head once; the embedding lookup reads a few rows (ignored).
- KV bytes per token = 2 · L · h_kv · d_head · bytes_kv (Llama-3-8B BF16: 128 KiB).
- FLOPs = 2 · linear params · tokens + 2 · LM-head params · sampled tokens
  + 4 · L · (h_q · d_head) · pairs. A decode token at context c has c pairs; a prefill chunk of
  n tokens after c0 cached ones has n · c0 + n (n + 1) / 2 (causal), which for a whole prompt
  of P tokens gives the familiar 2 · L · d · P².
- Step time = max(bytes / (BW · eff_bw), FLOPs / (FLOP/s · eff_flop)) + all-reduce + overhead.
  The matmul peak is FP8's when weights are FP8 and the GPU has FP8 tensor cores (W8A8),
  BF16's otherwise (INT4 is weight-only: dequantised to BF16 before the matmul).
- Tensor parallel (degree t): each GPU streams 1/t of the layer weights and of the LM head,
  holds KV for max(1, h_kv / t) heads, and does 1/t of the FLOPs. Each layer adds two
  all-reduces of the step's activations (tokens · hidden · 2 bytes), costed as a ring:
  2 (t − 1) / t · bytes / link bandwidth + a fixed latency per all-reduce (5 µs on NVLink,
  15 µs on PCIe); nothing overlaps them with compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from abtui.hardware.gpus import GpuSpec
from abtui.hardware.models import ModelConfig

# bytes per element; int4 adds one BF16 scale per group of 128 weights
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2 / 128}
ALLREDUCE_LATENCY_S = {"nvlink": 5e-6, "pcie": 15e-6}


@dataclass(frozen=True, slots=True)
class Efficiency:
    """How much of the datasheet peak the kernels reach, and the fixed cost of a step."""

    bw: float = 0.68  # fraction of peak memory bandwidth reached (fitted: docs/simulator.md)
    flops: float = 0.60  # fraction of peak matmul FLOP/s reached by large GEMMs
    step_overhead_s: float = 0.35e-3  # launch / scheduling / sampling time per step
    per_seq_overhead_s: float = 3e-6  # extra per running sequence (input prep, sampling)


@dataclass(frozen=True, slots=True)
class StepShape:
    """What one forward step runs (all sequences of the batch together)."""

    tokens: int  # query tokens run through the layers
    sampled: int  # tokens whose logits are computed (decodes + prompts that finish)
    kv_read: float  # KV entries read by attention (context of every sequence)
    kv_written: int  # KV entries written (= tokens)
    pairs: float  # (query, key) pairs scored by attention
    seqs: int = 0  # sequences in the batch (for the per-sequence overhead)


@dataclass(frozen=True, slots=True)
class StepCost:
    bytes: float  # per GPU
    flops: float  # per GPU
    t_memory: float  # bytes / effective bandwidth, s
    t_compute: float  # FLOPs / effective FLOP/s, s
    t_comm: float  # tensor-parallel all-reduce, s
    t_overhead: float  # fixed per-step cost, s

    @property
    def time(self) -> float:
        return max(self.t_memory, self.t_compute) + self.t_comm + self.t_overhead

    @property
    def bound(self) -> str:
        return "memory" if self.t_memory >= self.t_compute else "compute"


def weight_bytes(model: ModelConfig, weight_dtype: str) -> float:
    """Bytes of all weights as stored (one copy, all TP ranks together)."""
    head = 0 if model.tied_embeddings else model.lm_head_params()
    return (
        model.linear_params() * DTYPE_BYTES[weight_dtype]
        + (model.embedding_params() + head) * DTYPE_BYTES["bf16"]
    )


def streamed_weight_bytes(model: ModelConfig, weight_dtype: str) -> float:
    """Weight bytes a forward step reads (all ranks together): layer weights + LM head."""
    return (
        model.linear_params() * DTYPE_BYTES[weight_dtype]
        + model.lm_head_params() * DTYPE_BYTES["bf16"]
    )


def kv_bytes_per_token(model: ModelConfig, kv_dtype: str) -> float:
    """KV-cache bytes per token, all ranks together: 2 · L · h_kv · d_head · bytes_kv."""
    return 2 * model.layers * model.kv_heads * model.head_dim * DTYPE_BYTES[kv_dtype]


def kv_bytes_per_token_per_gpu(model: ModelConfig, kv_dtype: str, tp: int = 1) -> float:
    """KV bytes per token on one GPU: KV heads split over ranks, replicated below one each."""
    heads = max(1.0, model.kv_heads / tp)
    return 2 * model.layers * heads * model.head_dim * DTYPE_BYTES[kv_dtype]


def matmul_dtype(gpu: GpuSpec, weight_dtype: str) -> str:
    return "fp8" if weight_dtype == "fp8" and gpu.fp8_flops else "bf16"


def step_bytes_flops(
    model: ModelConfig, weight_dtype: str, kv_dtype: str, shape: StepShape, tp: int = 1
) -> tuple[float, float]:
    """(bytes moved, FLOPs) per GPU for one step of ``shape``."""
    kv = kv_bytes_per_token_per_gpu(model, kv_dtype, tp)
    nbytes = streamed_weight_bytes(model, weight_dtype) / tp + kv * (
        shape.kv_read + shape.kv_written
    )
    flops = (
        2 * model.linear_params() * shape.tokens
        + 2 * model.lm_head_params() * shape.sampled
        + 4 * model.layers * model.q_dim * shape.pairs
    ) / tp
    return nbytes, flops


def allreduce_time(gpu: GpuSpec, model: ModelConfig, tokens: int, tp: int) -> float:
    """Two ring all-reduces per layer of ``tokens`` × hidden BF16 activations."""
    if tp <= 1:
        return 0.0
    msg = tokens * model.hidden * DTYPE_BYTES["bf16"]
    one = 2 * (tp - 1) / tp * msg / (gpu.link_gbs * 1e9) + ALLREDUCE_LATENCY_S[gpu.link]
    return 2 * model.layers * one


def step_cost(
    gpu: GpuSpec,
    model: ModelConfig,
    weight_dtype: str,
    kv_dtype: str,
    shape: StepShape,
    tp: int = 1,
    eff: Efficiency = Efficiency(),  # noqa: B008 - frozen, shared default
) -> StepCost:
    """The predicted cost of one step (see the module docstring)."""
    nbytes, flops = step_bytes_flops(model, weight_dtype, kv_dtype, shape, tp)
    t_mem = nbytes / (gpu.mem_bw * eff.bw)
    t_cmp = flops / (gpu.flops_for(matmul_dtype(gpu, weight_dtype)) * eff.flops)
    t_comm = allreduce_time(gpu, model, shape.tokens, tp)
    t_over = eff.step_overhead_s + eff.per_seq_overhead_s * shape.seqs
    return StepCost(nbytes, flops, t_mem, t_cmp, t_comm, t_over)


def decode_shape(batch: int, context: int, tokens_per_seq: int = 1) -> StepShape:
    """A pure decode step: ``batch`` sequences at ``context`` tokens each."""
    q = batch * tokens_per_seq
    return StepShape(
        tokens=q,
        sampled=q,
        kv_read=batch * context,
        kv_written=q,
        pairs=q * context + batch * tokens_per_seq * (tokens_per_seq - 1) / 2,
        seqs=batch,
    )


def prefill_shape(n: int, cached: int = 0, finishes: bool = True) -> StepShape:
    """A prefill chunk of ``n`` tokens after ``cached`` already in the KV cache."""
    return StepShape(
        tokens=n,
        sampled=1 if finishes else 0,
        kv_read=cached,
        kv_written=n,
        pairs=n * cached + n * (n + 1) / 2,
        seqs=1,
    )


def prefill_flops(model: ModelConfig, prompt: int) -> float:
    """The prefill FLOPs of a whole prompt (docs/methods.md §5): 2·N·P + 2·L·d·P² (N without embedding)."""
    n = model.linear_params() + model.lm_head_params()
    return 2 * n * prompt + 2 * model.layers * model.q_dim * prompt**2


def mbu(bytes_per_step: float, step_time: float, gpu: GpuSpec) -> float:
    """Model bandwidth utilisation: bytes moved per step / step time / peak bandwidth."""
    return bytes_per_step / step_time / gpu.mem_bw if step_time > 0 else math.nan


def mfu(flops_per_step: float, step_time: float, gpu: GpuSpec, dtype: str = "bf16") -> float:
    """Model FLOPs utilisation: FLOPs per step / step time / peak FLOP/s of ``dtype``."""
    return flops_per_step / step_time / gpu.flops_for(dtype) if step_time > 0 else math.nan


def kv_capacity_tokens(
    gpu: GpuSpec,
    model: ModelConfig,
    weight_dtype: str,
    kv_dtype: str,
    tp: int = 1,
    mem_util: float = 0.9,
    max_batched_tokens: int = 8192,
) -> int:
    """Tokens of KV cache that fit: (memory × util − weights − activations) / KV per token.

    Per GPU: weights / tp, and an activation reserve of 1 GiB (CUDA context, graphs, sampler)
    plus the step's largest activations, max_batched_tokens × (hidden + 2 · ffn / tp) × 2 bytes
    × 2 (input and output buffers). Can be <= 0: the model does not fit.
    """
    free = gpu.memory_bytes * mem_util - weight_bytes(model, weight_dtype) / tp
    free -= activation_reserve_bytes(model, tp, max_batched_tokens)
    return int(free // kv_bytes_per_token_per_gpu(model, kv_dtype, tp))


def activation_reserve_bytes(model: ModelConfig, tp: int, max_batched_tokens: int) -> float:
    per_token = (model.hidden + 2 * model.ffn / tp) * DTYPE_BYTES["bf16"] * 2
    return float(1 << 30) + max_batched_tokens * per_token
