#!/usr/bin/env python3
"""The simulator's own ceilings: it must never be what limits a benchmark.

  (a) serve: a sim pinned to one core streams 256-token answers to 64 concurrent streams
      driven by abtui's fast client pinned to the other core; the batching engine
      (``--preset h100:llama-3-8b:fp8`` at a time scale so large that steps cost ~nothing, so
      the sim runs flat out: due steps run back to back, their tokens coalesced per write);
      at time scale 2 with 256 streams (a decode step every ~3 ms of wall time, one token
      per chunk per stream: ~80k tokens/s asked of the sim, the per-step, per-stream cost); and, for reference, the scripted fixed-delay engine
      with zero delays. Reported: streamed tokens per wall second, and per CPU second of the sim
      process (its own capacity on one core, whatever the client's speed).
  (b) offline: ``BatchEngine.simulate`` of 10,000 requests (Poisson at ~80% of the preset's
      capacity, 512-token prompts, 128-token answers), with and without speculative decoding.

Medians of --repeat runs. Loopback only.

    python scripts/bench_sim.py
    python scripts/bench_sim.py --parts b --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import time
from importlib import metadata

from abtui.client.fast import FastClient, fast_stream_request
from abtui.client.items import synthetic_items
from abtui.client.records import RequestRecord
from abtui.client.stream import Target, build_body
from abtui.runner.generator import run_loop
from abtui.sim.batching import BatchEngine
from abtui.sim.engine import SimConfig
from abtui.sim.offline import simulate
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.presets import parse_preset
from abtui.sim.process import SimProcess

SIM_CPU, CLIENT_CPU = 0, 1
PRESET = "h100:llama-3-8b:fp8"


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _drive(url: str, model: str, n: int, conc: int, out_tokens: int):
    items = synthetic_items(n, 64, out_tokens, 0, [0.0] * n)
    target = Target(base_url=url, model=model)
    bodies = [build_body(target, it, {}) for it in items]
    recs: list[RequestRecord] = []
    async with FastClient() as client:
        warm = [RequestRecord(arm=0, item=-1) for _ in range(conc)]
        await asyncio.gather(
            *(fast_stream_request(client, target, items[0], bodies[0], r) for r in warm)
        )
        sem = asyncio.Semaphore(conc)

        async def one(i: int) -> None:
            async with sem:
                r = RequestRecord(arm=0, item=i)
                await fast_stream_request(client, target, items[i], bodies[i], r, store_text=False)
                recs.append(r)

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return recs, time.perf_counter() - t0


def serve_once(cfg: SimConfig, model: str, n: int = 512, conc: int = 64, out: int = 256):
    mask = os.sched_getaffinity(0)
    with SimProcess(cfg, cpu=SIM_CPU if SIM_CPU in mask else None) as sim:
        if CLIENT_CPU in mask:
            os.sched_setaffinity(0, {CLIENT_CPU})
        box = {}

        async def main():
            cpu0 = _cpu_s(sim.pid)
            box["v"] = await _drive(sim.url, model, n, conc, out)
            box["cpu"] = _cpu_s(sim.pid) - cpu0

        try:
            run_loop(main())
        finally:
            os.sched_setaffinity(0, mask)
    recs, wall = box["v"]
    bad = [r for r in recs if r.status != "ok"]
    assert not bad, bad[0].error_message
    tokens = sum(r.n_output for r in recs)
    chunks = sum(len(r.chunk_tokens) for r in recs)
    return tokens / wall, tokens / box["cpu"], tokens / chunks


def part_a(repeat: int) -> list[tuple[str, float, float, float]]:
    rows = []
    batch = SimConfig(preset=PresetOptions(PRESET, time_scale=1e6))
    paced = SimConfig(preset=PresetOptions(PRESET, time_scale=2))
    fixed = SimConfig(ttft_ms=0, itl_ms=0)
    name = parse_preset(PRESET).name
    for label, cfg, model, conc, n in (
        ("batching, time scale 1e6 (flat out), 64 streams", batch, name, 64, 512),
        ("batching, time scale 2, 256 streams", paced, name, 256, 1024),
        ("fixed-delay (0 ms delays), 64 streams", fixed, "sim-model", 64, 512),
    ):
        runs = [serve_once(cfg, model, n, conc) for _ in range(repeat)]
        rows.append((label, *(statistics.median(r[i] for r in runs) for i in range(3))))
    return rows


def workload(n: int, rate: float, prompt: int, out: int, seed: int = 0):
    rng, t, reqs = random.Random(seed), 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        reqs.append((t, prompt, out))
    return reqs


def part_b(repeat: int) -> list[tuple[str, float, int, float]]:
    rows = []
    for preset in (PRESET, PRESET + ":spec=k4a0.7"):
        p = parse_preset(preset)
        burst = simulate(BatchEngine(p), [(0.0, 512, 128)] * 2000)
        capacity = 2000 / max(r.finished for r in burst)  # requests/s when saturated
        reqs = workload(10_000, 0.8 * capacity, 512, 128)
        times, steps = [], 0
        for _ in range(repeat):
            engine = BatchEngine(p)
            t0 = time.perf_counter()
            simulate(engine, reqs)
            times.append(time.perf_counter() - t0)
            steps = engine.stats().steps_total
        rows.append((preset, statistics.median(times), steps, 0.8 * capacity))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="ab", help="which parts to run (default ab)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(
        f"# bench_sim — {platform.platform()}, {os.cpu_count()} cpus, Python "
        f"{platform.python_version()}, abtui {metadata.version('abtui')}; load average "
        f"{load:.2f} at start; median of {args.repeat}"
    )
    if "a" in args.parts:
        print("(a) serve 256-token answers, sim on CPU 0, client on CPU 1:")
        print(
            f"    {'engine':<52} {'tokens/s (wall)':>16} {'per sim CPU-s':>14} {'tokens/chunk':>13}"
        )
        for label, wall, cpu, per_chunk in part_a(args.repeat):
            print(f"    {label:<52} {wall:>16,.0f} {cpu:>14,.0f} {per_chunk:>13.1f}")
    if "b" in args.parts:
        print("(b) offline simulate(), 10,000 requests, 512-token prompts, 128-token answers:")
        print(f"    {'preset':<40} {'rate req/s':>10} {'steps':>8} {'wall s':>8}")
        for preset, wall, steps, rate in part_b(args.repeat):
            print(f"    {preset:<40} {rate:>10.1f} {steps:>8,} {wall:>8.3f}")


if __name__ == "__main__":
    main()
