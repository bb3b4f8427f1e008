"""What the live screen's newer views cost to render, per update (the UI thread's CPU, which a
small machine takes from the load generators): the compare view (every arm's CDFs overlaid and
the arms' table) for 2 and 8 arms at 80×24 and 160×48, and one pane's gauge histories.

    .venv/bin/python scripts/bench_tui_views.py
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import numpy as np

from abtui.client.records import OK, RequestRecord
from abtui.runner.observer import ArmProgress
from abtui.tui.widgets.gauges import gauge_rows
from abtui.tui.widgets.overlay import compare_text


def arm(seed: int, scale: float, n: int = 2000) -> ArmProgress:
    rng = np.random.default_rng(seed)
    p = ArmProgress(name=f"arm{seed}", planned=n)
    for k in range(n):
        t0 = k * 50_000_000
        first = t0 + int(rng.lognormal(np.log(0.05 * scale), 0.6) * 1e9)
        out = int(rng.integers(20, 200))
        last = first + int(rng.lognormal(np.log(0.012 * scale), 0.2) * (out - 1) * 1e9)
        p.live.add(
            RequestRecord(
                arm=0,
                item=k,
                scheduled_ns=t0,
                dispatched_ns=t0,
                chunk_ns=[first, last],
                done_ns=last,
                status=OK,
                n_output=out,
            )
        )
    for s in range(120):
        for key, v in (
            ("nvml:gpu.busy", 0.9),
            ("nvml:gpu.dram_active", 0.6),
            ("nvml:gpu.mem_used_bytes", 60 * 2**30),
            ("vllm:kv_usage", 0.4),
        ):
            p.gauge(key, v * (0.5 + 0.5 * s / 120))
    p.gauge("nvml:gpu.mem_total_bytes", 80 * 2**30)
    return p


def median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    arms = [arm(k + 1, 1 / (1 + 0.3 * k)) for k in range(8)]
    print(
        f"# {platform.python_version()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f}; medians of 50 renders"
    )
    print("| view | size | ms |\n| --- | --- | --- |")
    for n in (2, 8):
        names = [a.name for a in arms[:n]]
        views = [a.live.view() for a in arms[:n]]
        for w, h in ((80, 21), (160, 43)):
            ms = median_ms(lambda: compare_text(names, views, w, h), 50)  # noqa: B023
            print(f"| compare view, {n} arms | {w}×{h} | {ms:.2f} |")
    p = arms[0]
    ms = median_ms(lambda: gauge_rows(p.telemetry, p.history.series(), 76), 50)
    print(f"| gauge histories, one pane | 76 columns | {ms:.2f} |")


if __name__ == "__main__":
    main()
