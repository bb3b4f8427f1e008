#!/usr/bin/env python3
"""The simulated DCGM gauges against the roofline arithmetic, as a scraper sees them.

A simulated endpoint (``--preset``, default h100:llama-3-8b:bf16, time scale 1) runs in a child
process; this process drives a workload over loopback and scrapes ``/metrics`` every
``--interval`` seconds, as a Prometheus or abtui scraper does. Three workloads:

- ``decode``: 16 streams of 32-token prompts generating 800 tokens each (memory-bound decode at
  batch 16): expected DRAM = the decode step's MBU, tensor ≈ its MFU (a few percent);
- ``prefill``: 48 prompts of 3,000 tokens sent at once, 1 token each (the queue keeps every step
  at the 8,192-token budget: compute-bound): expected tensor ≈ the steps' MFU, DRAM their MBU;
- ``chat``: the demo's chat-like Poisson load (13 req/s, ~512-token prompts, ~160-token
  answers): decode-dominated with prefill chunks mixed in; no single expected value, the spread
  of the readings is the point (a gauge of the last step alone swings with it).

Expected values are computed here from :mod:`abtui.hardware.roofline` (``step_cost`` of the
steps the workload implies, time-weighted), not from the simulator's engine. Printed: per
workload, the scrapes taken while the workload ran (the first is skipped: its window holds the
start) — mean, min and max of DRAM / tensor / SM activity against the expectation.

    python scripts/sim_gauges.py
    python scripts/sim_gauges.py --workloads decode,prefill --interval 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import re
import statistics
import sys
import time
from dataclasses import replace

import httpx

from abtui.hardware import roofline
from abtui.sim import gpu_model
from abtui.sim.engine import SimConfig
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.presets import parse_preset
from abtui.sim.process import SimProcess

GAUGES = {
    "dram": "DCGM_FI_PROF_DRAM_ACTIVE",
    "tensor": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "sm": "DCGM_FI_PROF_SM_ACTIVE",
}
# the gauges' averaging window (0: the step in flight)
GAUGE_WINDOW_S = getattr(gpu_model, "GAUGE_WINDOW_S", 0.0)
VERBOSE = False  # --verbose: every reading
BUDGET = 8192  # the engine's default max_batched_tokens


def gauge(text: str, name: str) -> float | None:
    m = re.search(rf'^{name}{{gpu="0"[^}}]*}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


def decode_expected(preset: str, batch: int, prompt: int, out: int) -> dict[str, float]:
    """Time-weighted DRAM / tensor / SM activity of the decode steps from context ``prompt`` to
    ``prompt + out`` at ``batch`` (the roofline's step_cost of each step)."""
    p = parse_preset(preset)
    return _weighted(p, [roofline.decode_shape(batch, prompt + i) for i in range(1, out)])


def prefill_expected(preset: str, n: int, prompt: int) -> dict[str, float]:
    """The steps of ``n`` queued ``prompt``-token prompts, FCFS chunks under the budget."""
    p = parse_preset(preset)
    shapes, left = [], [prompt] * n
    i = 0
    while i < n:
        tokens = kv_read = sampled = 0
        pairs = 0.0
        seqs = 0
        budget = BUDGET
        j = i
        while j < n and budget > 0:
            c0 = prompt - left[j]
            k = min(left[j], budget)
            tokens += k
            kv_read += c0
            pairs += k * c0 + k * (k + 1) / 2
            left[j] -= k
            budget -= k
            seqs += 1
            sampled += left[j] == 0
            j += 1
        shapes.append(roofline.StepShape(tokens, sampled, kv_read, tokens, pairs, seqs))
        while i < n and left[i] == 0:
            i += 1
    return _weighted(p, shapes)


def _weighted(p, shapes) -> dict[str, float]:
    g = p.gpu
    peak = g.flops_for(roofline.matmul_dtype(g, p.weight_dtype))
    nbytes = flops = kernels = t = 0.0
    for s in shapes:
        c = roofline.step_cost(g, p.model, p.weight_dtype, p.kv_dtype, s, p.tp)
        nbytes, flops, t = nbytes + c.bytes, flops + c.flops, t + c.time
        kernels += max(c.t_memory, c.t_compute)
    return {"dram": nbytes / (g.mem_bw * t), "tensor": flops / (peak * t), "sm": kernels / t}


async def _scrape_while(base: str, task: asyncio.Future, interval: float) -> list[dict]:
    out = []
    async with httpx.AsyncClient(trust_env=False, timeout=10) as c:
        while not task.done():
            await asyncio.sleep(interval)
            if task.done():
                break
            text = (await c.get(base + "/metrics")).text
            out.append({k: gauge(text, name) for k, name in GAUGES.items()})
    skip = max(1, round(GAUGE_WINDOW_S / interval))  # windows that hold the start
    return out[skip:]


async def _post_all(url: str, bodies: list[dict], delays: list[float]) -> None:
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(trust_env=False, timeout=300, limits=limits) as c:

        async def one(body, delay):
            await asyncio.sleep(delay)
            r = await c.post(url + "/completions", json=body)
            r.raise_for_status()

        await asyncio.gather(*(one(b, d) for b, d in zip(bodies, delays, strict=True)))


def workload(name: str):
    """(bodies, delays, expected or None)."""
    if name == "decode":
        bodies = [{"prompt": f"{i} " + "w " * 31, "max_tokens": 800} for i in range(16)]
        return bodies, [0.0] * 16, ("decode", 16, 32, 800)
    if name == "prefill":
        bodies = [{"prompt": f"{i} " + "w " * 2999, "max_tokens": 1} for i in range(48)]
        return bodies, [0.0] * 48, ("prefill", 48, 3000)
    if name == "chat":
        from abtui.workload.synthetic import ChatShape, chat_items

        items = chat_items(110, 13.0, 0, replace(ChatShape(), cv=1.0))
        bodies = [{"prompt": it.prompt, "max_tokens": it.max_tokens} for it in items]
        return bodies, [it.arrival_s for it in items], None
    raise SystemExit(f"unknown workload {name!r}: decode, prefill or chat")


def run(preset: str, name: str, interval: float) -> None:
    bodies, delays, exp = workload(name)
    with SimProcess(SimConfig(port=0, preset=PresetOptions(preset))) as sim:
        base = sim.url.removesuffix("/v1")

        async def go():
            task = asyncio.ensure_future(_post_all(sim.url, bodies, delays))
            got = await _scrape_while(base, task, interval)
            await task
            return got

        t0 = time.perf_counter()
        got = asyncio.run(go())
        wall = time.perf_counter() - t0
    if exp is None:
        want = {}
    elif exp[0] == "decode":
        want = decode_expected(preset, *exp[1:])
    else:
        want = prefill_expected(preset, *exp[1:])
    print(f"{name}: {len(got)} scrapes over {wall:.1f} s")
    for k in GAUGES:
        vals = [g[k] for g in got if g[k] is not None]
        if not vals:
            print(f"  {k:<7} not exported")
            continue
        w = f"   roofline {want[k]:6.1%}" if k in want else ""
        if VERBOSE:
            print("   ", " ".join(f"{v:.2f}" for v in vals))
        print(
            f"  {k:<7} mean {statistics.mean(vals):6.1%}  min {min(vals):6.1%}  "
            f"max {max(vals):6.1%}{w}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="h100:llama-3-8b:bf16")
    ap.add_argument("--workloads", default="decode,prefill,chat")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    ap.add_argument("--verbose", action="store_true", help="print every reading")
    a = ap.parse_args()
    global VERBOSE
    VERBOSE = a.verbose
    print(
        f"# {platform.node()} · Python {sys.version.split()[0]} · preset {a.preset} · "
        f"scrape every {a.interval:g} s"
    )
    for name in a.workloads.split(","):
        run(a.preset, name, a.interval)


if __name__ == "__main__":
    main()
