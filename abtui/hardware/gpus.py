"""GPU spec table: dense tensor-core peaks, HBM bandwidth, memory, power (docs/methods.md §5).

Peaks are the datasheets' *dense* figures (no 2:4 sparsity), in FLOP/s (or OP/s for INT8);
``None`` where the GPU has no such tensor-core mode (A100: no FP8). Memory is the size the
driver reports, close to the marketing figure in GiB. ``link_gbs`` is the per-direction
GPU-to-GPU bandwidth used for tensor-parallel all-reduce (NVLink where the board has it, PCIe
Gen4/5 x16 otherwise); ``idle_w`` is a typical idle draw, used by the simulated power gauge.
"""

from __future__ import annotations

from dataclasses import dataclass

from abtui.errors import UsageError

GiB = 1 << 30
T = 1e12


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str  # canonical short name, e.g. "h100-sxm"
    label: str  # human name, e.g. "NVIDIA H100 SXM 80GB"
    bf16_flops: float  # dense BF16 tensor-core peak, FLOP/s
    fp8_flops: float | None  # dense FP8 peak, FLOP/s (None: no FP8 tensor cores)
    int8_ops: float | None  # dense INT8 peak, OP/s
    mem_bw: float  # HBM/GDDR peak bandwidth, bytes/s
    memory_bytes: int  # device memory
    tdp_w: float  # board power limit, W
    idle_w: float  # typical idle draw, W
    link_gbs: float  # GPU-GPU bandwidth per direction, GB/s (NVLink or PCIe)
    link: str  # "nvlink" or "pcie"
    aliases: tuple[str, ...] = ()

    def flops_for(self, dtype: str) -> float:
        """Peak FLOP/s of the matmuls when activations are in ``dtype`` ("bf16" | "fp8")."""
        if dtype == "fp8" and self.fp8_flops:
            return self.fp8_flops
        return self.bf16_flops


GPUS: tuple[GpuSpec, ...] = (
    GpuSpec(
        "h100-sxm",
        "NVIDIA H100 SXM 80GB",
        989 * T,
        1979 * T,
        1979 * T,
        3.35e12,
        80 * GiB,
        700,
        70,
        450,
        "nvlink",
        ("h100", "h100sxm"),
    ),
    GpuSpec(
        "h200",
        "NVIDIA H200 SXM 141GB",
        989 * T,
        1979 * T,
        1979 * T,
        4.8e12,
        141 * GiB,
        700,
        75,
        450,
        "nvlink",
        ("h200-sxm",),
    ),
    GpuSpec(
        "a100-80gb",
        "NVIDIA A100 80GB SXM",
        312 * T,
        None,
        624 * T,
        2.039e12,
        80 * GiB,
        400,
        55,
        300,
        "nvlink",
        ("a100", "a100-sxm", "a100-80gb-sxm"),
    ),
    GpuSpec(
        "l40s",
        "NVIDIA L40S 48GB",
        362 * T,
        733 * T,
        733 * T,
        0.864e12,
        48 * GiB,
        350,
        35,
        32,
        "pcie",
        (),
    ),
    GpuSpec(
        "l4",
        "NVIDIA L4 24GB",
        121 * T,
        242.5 * T,
        242.5 * T,
        0.3e12,
        24 * GiB,
        72,
        16,
        32,
        "pcie",
        (),
    ),
    GpuSpec(
        "b200",
        "NVIDIA B200 180GB",
        2250 * T,
        4500 * T,
        4500 * T,
        8e12,
        180 * GiB,
        1000,
        120,
        900,
        "nvlink",
        ("b200-sxm",),
    ),
)

_BY_NAME = {key: g for g in GPUS for key in (g.name, *g.aliases)}


def gpu_names() -> list[str]:
    return [g.name for g in GPUS]


def get_gpu(name: str) -> GpuSpec:
    """The GPU called ``name`` (case-insensitive; aliases such as ``h100``); UsageError else."""
    gpu = _BY_NAME.get(name.strip().lower().replace("_", "-"))
    if gpu is None:
        raise UsageError(
            f"unknown GPU {name!r}",
            f"choose one of {', '.join(gpu_names())} (aliases: "
            + ", ".join(a for g in GPUS for a in g.aliases)
            + ")",
        )
    return gpu
