#!/usr/bin/env python3
"""The load generator's own ceiling and measurement error (issue: the spine).

Endpoint (abtui's simulator) pinned to one core, client to the other, loopback only:

  (a) ingest: zero-delay endpoint, 256-token responses, tokens/s one generator process parses;
  (b) error of measured TTFT and of every inter-chunk gap against the endpoint's own logged
      send times, at 64 streams (TTFT 50 ms, ITL 10 ms) and 256 streams (ITL 20 ms);
  (c) time from `abtui run` to the first request reaching the endpoint, and peak memory
      (main process + load generators).

The client side is the generator's own code (FastClient + fast_stream_request on the same event
loop runner), or httpx with --http httpx. Prints a table; medians of --repeat runs.

    python scripts/bench_client.py            # all parts, fast path
    python scripts/bench_client.py --http httpx --parts ab
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from abtui.client.fast import FastClient, fast_stream_request
from abtui.client.items import synthetic_items
from abtui.client.records import RequestRecord
from abtui.client.stream import Target, build_body, make_client, stream_request
from abtui.runner.generator import run_loop
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess

SIM_CPU, CLIENT_CPU = 0, 1


def _pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and cpu in os.sched_getaffinity(0):
        os.sched_setaffinity(0, {cpu})


async def _drive(url: str, http: str, n: int, conc: int, out_tokens: int, in_tokens: int):
    items = synthetic_items(n, in_tokens, out_tokens, 0, [0.0] * n)
    target = Target(base_url=url, model="sim-model")
    client = FastClient() if http == "fast" else make_client(conc * 2)
    send = fast_stream_request if http == "fast" else stream_request
    bodies = [build_body(target, it, {"abtui_key": it.index}) for it in items]
    recs: list[RequestRecord] = []
    async with client:
        # warm the connections first, as `abtui run` does
        warm = [RequestRecord(arm=0, item=-1) for _ in range(conc)]
        await asyncio.gather(*(send(client, target, items[0], build_body(target, items[0]), r)
                               for r in warm))  # fmt: skip
        sem = asyncio.Semaphore(conc)

        async def one(i: int) -> None:
            async with sem:
                r = RequestRecord(arm=0, item=i)
                await send(client, target, items[i], bodies[i], r, store_text=False)
                recs.append(r)

        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return recs, wall, cpu


def _run(cfg: SimConfig, http: str, n: int, conc: int, out_tokens: int, in_tokens: int = 64):
    result = {}
    mask = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    with SimProcess(cfg, cpu=SIM_CPU) as sim:
        _pin(CLIENT_CPU)

        async def main():
            result["v"] = await _drive(sim.url, http, n, conc, out_tokens, in_tokens)

        try:
            run_loop(main())
        finally:
            if mask:
                os.sched_setaffinity(0, mask)
    return result["v"]


def part_a(http: str, repeat: int) -> dict:
    rates, cpus = [], []
    for _ in range(repeat):
        recs, wall, cpu = _run(SimConfig(ttft_ms=0, itl_ms=0), http, 400, 64, 256)
        bad = [r for r in recs if r.status != "ok"]
        assert not bad, bad[0].error_message
        tokens = sum(r.n_output for r in recs)
        rates.append(tokens / wall)
        cpus.append(cpu / wall)
    return {"tokens_per_s": statistics.median(rates), "client_cpu": statistics.median(cpus)}


def _errors(recs: list[RequestRecord], log_path: str) -> dict:
    recv, sends = {}, {}
    for line in Path(log_path).read_text().splitlines():
        e = json.loads(line)
        if e.get("key") is None:
            continue
        if e.get("event") == "recv":
            recv[e["key"]] = e["t_ns"]
        else:
            sends.setdefault(e["key"], []).append((e["seq"], e["t_ns"]))
    ttft_err, gap_err, arrival = [], [], []
    for r in recs:
        s = [t for _, t in sorted(sends.get(r.item, []))]
        c = r.chunk_ns
        if r.status != "ok" or len(s) != len(c) or r.item not in recv:
            continue
        ttft_err.append(((c[0] - r.dispatched_ns) - (s[0] - recv[r.item])) / 1e6)
        arrival += [(a - b) / 1e6 for a, b in zip(c, s, strict=True)]
        gap_err += list((np.diff(c) - np.diff(s)) / 1e6)
    return {
        "n_req": len(ttft_err),
        "ttft_p50": float(np.percentile(ttft_err, 50)),
        "ttft_p99": float(np.percentile(ttft_err, 99)),
        "gap_p50": float(np.percentile(gap_err, 50)),
        "gap_p99": float(np.percentile(gap_err, 99)),
        "arrival_p99": float(np.percentile(arrival, 99)),
    }


def part_b(http: str, streams: int, ttft: float, itl: float, out_tokens: int, repeat: int) -> dict:
    runs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "chunks.jsonl")
            cfg = SimConfig(ttft_ms=ttft, itl_ms=itl, chunk_log=log)
            recs, wall, cpu = _run(cfg, http, streams * 2, streams, out_tokens)
            e = _errors(recs, log)
            e["client_cpu"] = cpu / wall
            runs.append(e)
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(pid: int) -> list[int]:
    out = [pid]
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for c in (task / "children").read_text().split():
                out += _tree(int(c))
    except OSError:
        pass
    return out


def part_c(repeat: int) -> dict:
    starts, peaks, mains = [], [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "chunks.jsonl")
            with SimProcess(SimConfig(ttft_ms=50, itl_ms=10, chunk_log=log), cpu=SIM_CPU) as a, \
                 SimProcess(SimConfig(ttft_ms=50, itl_ms=10), cpu=SIM_CPU) as b:  # fmt: skip
                t0 = time.perf_counter_ns()
                p = subprocess.Popen(
                    [sys.executable, "-m", "abtui", "run", "--baseline", a.url, "--candidate",
                     b.url, "--requests", "200", "--rate", "20", "--input-tokens", "512",
                     "--output-tokens", "128", "--sessions-dir", d, "--name", "bench",
                     "--headless"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                peak = main_peak = 0
                while p.poll() is None:
                    pids = _tree(p.pid)
                    rss = [_rss_kb(x) for x in pids]
                    peak = max(peak, sum(rss))
                    main_peak = max(main_peak, rss[0])
                    time.sleep(0.05)
            first = min(
                json.loads(x)["t_ns"] for x in Path(log).read_text().splitlines()
                if json.loads(x).get("event") == "recv"
            )  # fmt: skip
            starts.append((first - t0) / 1e9)
            peaks.append(peak / 1024)
            mains.append(main_peak / 1024)
    return {
        "start_s": statistics.median(starts),
        "peak_mb": statistics.median(peaks),
        "main_mb": statistics.median(mains),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--http", choices=("fast", "httpx"), default="fast")
    ap.add_argument("--parts", default="abc", help="which parts to run (default abc)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    ver = {p: metadata.version(p) for p in ("httpx", "duckdb", "numpy")}
    try:
        ver["uvloop"] = metadata.version("uvloop")
    except metadata.PackageNotFoundError:
        ver["uvloop"] = "absent"
    print(f"# bench_client — {platform.platform()}, {os.cpu_count()} cpus, Python "
          f"{platform.python_version()}, {ver}; http={args.http}; median of {args.repeat}")  # fmt: skip
    if "a" in args.parts:
        a = part_a(args.http, args.repeat)
        print(f"(a) ingest, zero-delay endpoint, 256-token responses, 64 streams: "
              f"{a['tokens_per_s']:,.0f} tokens/s per process (client CPU {a['client_cpu']:.0%})")  # fmt: skip
    if "b" in args.parts:
        print("(b) error vs the endpoint's send log (ms):  streams  TTFT P50  TTFT P99  "
              "gap P50  gap P99  arrival P99  client CPU")  # fmt: skip
        for streams, ttft, itl, toks in ((64, 50, 10, 256), (256, 50, 20, 128)):
            b = part_b(args.http, streams, ttft, itl, toks, args.repeat)
            print(f"    TTFT {ttft} ms / ITL {itl} ms {streams:>14}  {b['ttft_p50']:+8.2f}  "
                  f"{b['ttft_p99']:+8.2f}  {b['gap_p50']:+7.2f}  {b['gap_p99']:+7.2f}  "
                  f"{b['arrival_p99']:+11.2f}  {b['client_cpu']:9.0%}")  # fmt: skip
    if "c" in args.parts:
        c = part_c(args.repeat)
        print(f"(c) `abtui run` → first request at the endpoint: {c['start_s']:.2f} s; "
              f"peak RSS {c['peak_mb']:.0f} MB in all (main process {c['main_mb']:.0f} MB)")  # fmt: skip


if __name__ == "__main__":
    main()
