#!/usr/bin/env python3
"""How long ``abtui profile show`` takes, and how much memory, on a large trace: a Kineto-style
Chrome trace (gzip) of ``--steps`` decode steps of ``--kernels`` kernels each (a launch call per
kernel, as a GPU trace has), written by abtui.profile.writer, then read and analysed
(``read_trace`` + ``analyse``) ``--repeat`` times. Prints the file's size, the median time and
the process's peak RSS.

    python scripts/bench_profile.py                         # 2,000 steps × 300 kernels
    python scripts/bench_profile.py --steps 200 --kernels 100 --repeat 5
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path

from abtui.profile.analyse import analyse
from abtui.profile.read import read_trace
from abtui.profile.writer import Annotation, Kernel, chrome_trace, write_chrome

NAMES = [
    "sm90_xmma_gemm_bf16bf16_bf16f32",
    "flash_fwd_splitkv_kernel",
    "void vllm::rms_norm_kernel<c10::BFloat16>",
    "void vllm::act_and_mul_kernel<silu>",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
]


def build(path: Path, steps: int, kernels: int) -> Path:
    ks, anns, t = [], [], 0.0
    for _ in range(steps):
        anns.append(Annotation("execute_context_0(0)_generation_64(64)", t, kernels * 6.0))
        for i in range(kernels):
            ks.append(Kernel(NAMES[i % len(NAMES)], t + 3 + 5 * i, 4.0, launch=t + 1 + 5 * i))
        t += kernels * 6.0 + 50
    return write_chrome(path, chrome_trace(ks, annotations=anns))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--kernels", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        f = build(Path(tmp) / "big.pt.trace.json.gz", a.steps, a.kernels)
        size = f.stat().st_size
        times = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            p = analyse(read_trace(f))
            times.append(time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    events = a.steps * (2 * a.kernels + 1)
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(
        f"{a.steps:,} steps × {a.kernels} kernels: {events:,} events, {size / 1e6:.1f} MB gzipped"
    )
    print(
        f"read + analyse: median {statistics.median(times):.2f} s of {a.repeat}; peak RSS {rss:.0f} MiB"
    )
    print(
        f"decode: {p.phases['decode'].steps:,} steps, idle {p.phases['decode'].share('idle'):.1%}"
    )


if __name__ == "__main__":
    main()
