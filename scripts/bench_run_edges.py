#!/usr/bin/env python3
"""Where a small headless A/B spends its time outside the load window: before the first
request (start-up) and after the last one (summary, verdict, teardown).

Two simulated GPUs on 127.0.0.1 (h100 bf16 / fp8, time scale 8, 256 in a batch), then
``abtui run --concurrency C --requests N --headless`` in this process, under cProfile; the
session file gives the first dispatch and the last completion (the same monotonic clock).
Give the load average (printed) with any figure: other processes on the machine show up here.

    python scripts/bench_run_edges.py 320 64 --out /tmp/edges      # then 512 256
    python scripts/bench_run_edges.py 320 64 --out /tmp/edges --top 30   # the profile's top
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import time

import abtui.cli  # first, as the abtui command does: it sets the BLAS threads before numpy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("requests", type=int)
    ap.add_argument("concurrency", type=int)
    ap.add_argument("--out", required=True, help="folder for the session file and the profile")
    ap.add_argument("--top", type=int, default=0, help="print the profile's top N (cumulative)")
    args = ap.parse_args()
    from abtui.sim.engine import SimConfig
    from abtui.sim.preset_cli import PresetOptions
    from abtui.sim.process import SimProcess
    from abtui.store.reader import SessionReader

    def cfg(preset: str) -> SimConfig:
        return SimConfig(
            port=0, seed=0, preset=PresetOptions(preset, time_scale=8.0, max_num_seqs=256)
        )

    name = f"edges-{args.requests}-{args.concurrency}"
    with SimProcess(cfg("h100:llama-3-8b:bf16")) as a, SimProcess(cfg("h100:llama-3-8b:fp8")) as b:
        argv = ["run", "--baseline", a.url, "--candidate", b.url, "--headless", "--overwrite"]
        argv += ["--concurrency", str(args.concurrency), "--requests", str(args.requests)]
        argv += ["--name", name, "--sessions-dir", args.out]
        prof = cProfile.Profile()
        t0 = time.perf_counter_ns()
        with contextlib.redirect_stdout(io.StringIO()):
            prof.enable()
            rc = abtui.cli.main(argv)
            prof.disable()
        t1 = time.perf_counter_ns()
    with SessionReader(os.path.join(args.out, f"{name}.duckdb")) as rd:
        t = rd.request_table(include_warmup=True)
    first, last = int(t.dispatched_ns.min()), int(t.done_ns.max())
    print(
        f"{args.requests} requests at {args.concurrency}: exit {rc}, wall {(t1 - t0) / 1e9:.2f} s"
        f"; before the first request {(first - t0) / 1e9:.2f} s; load window "
        f"{(last - first) / 1e9:.2f} s; after the last {(t1 - last) / 1e9:.2f} s; "
        f"load average {os.getloadavg()[0]:.1f}; OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS')}"
    )
    prof.dump_stats(os.path.join(args.out, f"{name}.prof"))
    if args.top:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
