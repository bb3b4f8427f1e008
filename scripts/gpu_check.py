#!/usr/bin/env python3
"""What abtui's NVML sampler reads on this machine: every field per GPU, ``n/a`` where the GPU
or driver does not support it. Two samples one second apart (GPM bandwidth/SM/tensor activity
needs two). No GPU, no driver or no ``pynvml`` prints one line and exits 0: a normal state.

    python scripts/gpu_check.py            # all GPUs
    python scripts/gpu_check.py 0 2        # GPUs 0 and 2
"""

from __future__ import annotations

import platform
import sys
import time
from typing import TextIO

FIELDS = (
    ("gpu.mem_used_bytes", "memory used", 2**-30, "GiB"),
    ("gpu.mem_total_bytes", "memory total", 2**-30, "GiB"),
    ("gpu.busy", "busy time (kernel running; not occupancy)", 100, "%"),
    ("gpu.mem_busy", "memory busy time (not bandwidth)", 100, "%"),
    ("gpu.dram_active", "DRAM bandwidth used / peak (GPM)", 100, "%"),
    ("gpu.sm_active", "SM utilisation (GPM)", 100, "%"),
    ("gpu.tensor_active", "tensor pipes active (GPM)", 100, "%"),
    ("gpu.power_w", "power", 1, "W"),
    ("gpu.energy_j", "energy since driver load", 1e-3, "kJ"),
    ("gpu.sm_clock_mhz", "SM clock", 1, "MHz"),
    ("gpu.mem_clock_mhz", "memory clock", 1, "MHz"),
    ("gpu.temp_c", "temperature", 1, "°C"),
    ("gpu.throttle_reasons", "clock event reasons (bitmask)", 1, ""),
    ("gpu.throttled", "throttled (power/thermal/slowdown)", 1, ""),
)


def report(indices: list[int] | None, out: TextIO, pause_s: float = 1.0) -> int:
    from abtui.telemetry.nvml import Nvml

    nv = Nvml()
    print(f"host {platform.node()}, python {platform.python_version()}", file=out)
    if not nv.start():
        print(nv.status, file=out)
        return 0
    idx = list(range(nv.count)) if not indices else indices
    bad = nv.check_indices(idx)
    if bad:
        print(bad, file=out)
        nv.close()
        return 2
    for i in idx:
        nv.sample(i)  # the first sample: GPM needs a previous one
    time.sleep(pause_s)
    samples = {i: nv.sample(i) for i in idx}
    for i in idx:
        print(f"GPU {i}: {nv.names.get(i, '?')}", file=out)
        s = samples[i]
        for key, label, scale, unit in FIELDS:
            v = s.get(key)
            if v is None:
                text = "n/a"
            elif key == "gpu.throttle_reasons":
                text = hex(int(v))
            else:
                text = f"{v * scale:,.1f} {unit}".rstrip()
            print(f"  {label:<44} {text}", file=out)
    if nv.status:
        print(nv.status, file=out)
    nv.close()
    return 0


if __name__ == "__main__":
    sys.exit(report([int(a) for a in sys.argv[1:]], sys.stdout))
