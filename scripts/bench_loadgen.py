#!/usr/bin/env python3
"""The highest Poisson request rate the load generator sustains with P99 schedule lag < 1 ms.

Against the zero-delay simulated endpoint (``SimProcess(ttft_ms=0, itl_ms=0)``, 4-token
answers), with 1 and several generator processes sharing one Poisson schedule (each request
assigned to one process at random, so each process sees a Poisson stream of rate R/G). The
generator processes are abtui's own (``abtui.runner.generator.generator_main``, the code
`abtui run` uses), started on a common t0 as the session does.

Schedule lag = dispatched − scheduled of every request (the stored raw facts). For each process
count the rate climbs by ``--step`` from ``--start`` (median of ``--repeat`` runs per rate) until
a request fails or P99 lag passes 50 ms; the figure is the highest rate up to which every rate's median P99
lag was under 1 ms. Other processes on the machine preempt the generator and show up as lag: give the
load average (printed) with any figure.

    python scripts/bench_loadgen.py                       # 1, 2, 4 processes (capped at cpus)
    python scripts/bench_loadgen.py --procs 1,2 --repeat 3 --seconds 3
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import queue as queue_mod
import statistics
import sys
import time
from importlib import metadata

import numpy as np

from abtui.client.items import Item
from abtui.client.stream import Target
from abtui.hardware.host import cpu_model
from abtui.runner.generator import ArmPlan, generator_main
from abtui.runner.messages import Batch, Done, Fatal, GeneratorStats, Ready
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.workload.arrivals import arrival_offsets

LAG_LIMIT_S = 0.001
SATURATED_S = 0.05  # stop climbing once the median P99 lag passes this
OUT_TOKENS = 4
IN_TOKENS = 32


def _items(n: int, rate: float, seed: int) -> list[Item]:
    offsets = arrival_offsets(n, rate, "poisson", seed)
    prompt = " ".join(["the"] * IN_TOKENS)
    return [
        Item(index=i, id=f"i{i}", arrival_s=t, prompt=f"{i} {prompt}", max_tokens=OUT_TOKENS)
        for i, t in enumerate(offsets)
    ]


def run_once(url: str, procs: int, rate: float, seconds: float, seed: int, cpus=None) -> dict:
    """One schedule of ``rate × seconds`` requests over ``procs`` generator processes."""
    n = max(200, int(rate * seconds))
    items = _items(n, rate, seed)
    owner = np.random.default_rng(seed + 1).integers(0, procs, size=n)
    target = Target(base_url=url, model="sim-model", params={"ignore_eos": True})
    ctx = mp.get_context("spawn")
    results, stop = ctx.Queue(), ctx.Event()
    ps, pipes = [], []
    for g in range(procs):
        mine = [it for it, o in zip(items, owner, strict=True) if o == g]
        warm = [
            Item(index=n + g * 4 + k, id=f"w{g}.{k}", prompt="warm up", max_tokens=OUT_TOKENS)
            for k in range(4)
        ]
        plan = ArmPlan(
            arm=g,
            target=target,
            items=mine,
            warmup_items=warm,
            mode="open",
            concurrency=None,
            store_text=False,
            cpu=cpus[g % len(cpus)] if cpus else None,
        )
        parent, child = ctx.Pipe()
        p = ctx.Process(target=generator_main, args=(plan, results, child, stop), daemon=True)
        p.start()
        ps.append(p)
        pipes.append(parent)
    recs, ready, done, stats = [], set(), set(), {}
    started = False
    deadline = time.monotonic() + seconds * 5 + 60
    try:
        while len(done) < procs and time.monotonic() < deadline:
            try:
                msg = results.get(timeout=0.1)
            except queue_mod.Empty:
                msg = None
            match msg:
                case Batch():
                    recs.extend(r for r in msg.records if not r.warmup)
                case Ready():
                    ready.add(msg.wid)
                case Done():
                    done.add(msg.wid)
                    stats[msg.wid] = msg.stats
                case Fatal():
                    done.add(msg.wid)
                    stats[msg.wid] = msg.error
            if not started and len(ready) == procs:
                t0 = time.perf_counter_ns() + 200_000_000
                for pe in pipes:
                    pe.send(t0)
                started = True
    finally:
        stop.set()
        for p in ps:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
    lag = np.array([(r.dispatched_ns - r.scheduled_ns) / 1e9 for r in recs if r.dispatched_ns])
    ok = sum(r.status == "ok" for r in recs)
    cpu = [
        (s.measure_cpu_s or 0) / s.measure_wall_s
        for s in stats.values()
        if isinstance(s, GeneratorStats) and s.measure_wall_s
    ]
    return {
        "n": n,
        "ok": ok,
        "p50": float(np.percentile(lag, 50)) if len(lag) else float("nan"),
        "p99": float(np.percentile(lag, 99)) if len(lag) else float("nan"),
        "max": float(lag.max()) if len(lag) else float("nan"),
        "cpu": max(cpu) if cpu else float("nan"),
        "lags": lag,
        "spawn_lag_max": max(
            (s.get("lag_max_s", 0) for s in stats.values() if isinstance(s, dict)), default=0
        ),
    }


def sustained(url: str, procs: int, args) -> tuple[float | None, list[dict]]:
    rate, best, rows, intact = args.start, None, [], True
    while rate <= args.max_rate:
        runs = [
            run_once(url, procs, rate, args.seconds, seed, args.gen_cpus)
            for seed in range(args.repeat)
        ]
        row = {
            "procs": procs,
            "rate": rate,
            "p50": statistics.median(r["p50"] for r in runs),
            "p99": statistics.median(r["p99"] for r in runs),
            "max": statistics.median(r["max"] for r in runs),
            "cpu": statistics.median(r["cpu"] for r in runs),
            "failed": sum(r["n"] - r["ok"] for r in runs),
        }
        rows.append(row)
        print(
            f"  {procs} proc  {rate:>8.0f} req/s  lag P50 {row['p50'] * 1e3:7.3f} ms  P99 "
            f"{row['p99'] * 1e3:7.3f} ms  max {row['max'] * 1e3:7.2f} ms  generator CPU "
            f"{100 * row['cpu']:3.0f}%  failed {row['failed']}",
            flush=True,
        )
        if row["p99"] < LAG_LIMIT_S and not row["failed"]:
            if intact:
                best = rate  # every rate up to here kept P99 < 1 ms
        else:
            intact = False
        if row["failed"] or row["p99"] > SATURATED_S:
            break
        rate = round(rate * args.step)
    return best, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", default=None, help="generator process counts (default 1,2,4 ≤ cpus)")
    ap.add_argument("--start", type=float, default=100.0, help="first rate, req/s")
    ap.add_argument("--step", type=float, default=1.5, help="rate multiplier per step")
    ap.add_argument("--max-rate", type=float, default=50_000.0)
    ap.add_argument("--seconds", type=float, default=2.0, help="schedule length per run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per rate (median)")
    ap.add_argument(
        "--no-pin",
        action="store_true",
        help="do not pin the endpoint to core 0 and the generators to the others",
    )
    args = ap.parse_args()
    cpus = os.cpu_count() or 1
    pin = not args.no_pin and cpus >= 2
    args.gen_cpus = list(range(1, cpus)) if pin else None
    procs = (
        [int(x) for x in args.procs.split(",")]
        if args.procs
        else [p for p in (1, 2, 4) if p <= max(cpus, 2)]
    )
    vers = ", ".join(f"{d} {metadata.version(d)}" for d in ("abtui", "numpy", "uvloop") if _has(d))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"# bench_loadgen — {platform.platform()}, {cpus} cpus, {cpu_model()}, Python "
        f"{platform.python_version()}, {vers}; load average at start {load:.1f}"
    )
    print(
        f"# zero-delay simulated endpoint, {OUT_TOKENS}-token answers, Poisson arrivals; "
        f"median of {args.repeat} runs of {args.seconds:g} s per rate"
    )
    best = {}
    print(f"# pinned: endpoint core 0, generators cores 1-{cpus - 1}" if pin else "# not pinned")
    with SimProcess(
        SimConfig(port=0, ttft_ms=0, itl_ms=0, model="sim-model"), cpu=0 if pin else None
    ) as sim:
        for p in procs:
            best[p], _ = sustained(sim.url, p, args)
    print("\n| generator processes | highest Poisson rate with P99 lag < 1 ms |")
    print("|---|---|")
    for p, r in best.items():
        print(f"| {p} | {'below the start rate' if r is None else f'{r:,.0f} req/s'} |")


def _has(dist: str) -> bool:
    try:
        metadata.version(dist)
        return True
    except metadata.PackageNotFoundError:
        return False


if __name__ == "__main__":
    sys.exit(main())
