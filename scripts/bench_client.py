#!/usr/bin/env python3
"""The load generator's own ceiling and measurement error (issue: the spine).

Endpoint (abtui's simulator) pinned to one core, client to the other, loopback only:

  (a) ingest: zero-delay endpoint, 256-token responses, tokens/s one generator process parses;
  (b) error of measured TTFT and of every inter-chunk gap against the endpoint's own logged
      send times, at 64 streams (TTFT 50 ms, ITL 10 ms) and 256 streams (ITL 20 ms);
  (c) time from `abtui run` to the first request reaching the endpoint, and peak memory
      (main process + load generators);
  (d) the first wave: the load generator's own loop (warm-up of 2, then a closed
      loop at 64 and 256 streams, 2 waves), TTFT error of the first wave (the requests sent at
      t0) and of the later one, against the endpoint's log — with the connections opened before
      t0 (the default) and, ``--preconnect off``, without (as abtui did before). Run it with an
      older abtui on PYTHONPATH to measure that one (its records have no connect phase). The
      first wave's error is split into the way there (sent → the endpoint logs the request as
      received: it includes the endpoint's own queue while it reads a burst of requests on its
      one core, which its log cannot see) and the way back (the endpoint writes the first
      chunk → the client reads it: the client's own delay);
  (e) why the httpx path opens nothing ahead: the client CPU of a wave of N requests (4-token
      answers) on a cold httpx client and on one whose pool holds N idle connections.

The client side is the generator's own code (FastClient + fast_stream_request on the same event
loop runner), or httpx with --http httpx. Prints a table; medians of --repeat runs.

    python scripts/bench_client.py            # all parts, fast path
    python scripts/bench_client.py --http httpx --parts ab
    python scripts/bench_client.py --parts d --preconnect both   # the first wave, both ways
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
from abtui.runner.messages import Batch, Ready, SegmentDone
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
        await asyncio.gather(
            *(send(client, target, items[0], build_body(target, items[0]), r) for r in warm)
        )
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
        sent = r.dispatched_ns + (getattr(r, "connect_ns", 0) or 0)  # the service view's start
        ttft_err.append(((c[0] - sent) - (s[0] - recv[r.item])) / 1e6)
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
            with (
                SimProcess(SimConfig(ttft_ms=50, itl_ms=10, chunk_log=log), cpu=SIM_CPU) as a,
                SimProcess(SimConfig(ttft_ms=50, itl_ms=10), cpu=SIM_CPU) as b,
            ):
                t0 = time.perf_counter_ns()
                p = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "abtui",
                        "run",
                        "--baseline",
                        a.url,
                        "--candidate",
                        b.url,
                        "--requests",
                        "200",
                        "--rate",
                        "20",
                        "--input-tokens",
                        "512",
                        "--output-tokens",
                        "128",
                        "--sessions-dir",
                        d,
                        "--name",
                        "bench",
                        "--headless",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                peak = main_peak = 0
                while p.poll() is None:
                    pids = _tree(p.pid)
                    rss = [_rss_kb(x) for x in pids]
                    peak = max(peak, sum(rss))
                    main_peak = max(main_peak, rss[0])
                    time.sleep(0.05)
            first = min(
                json.loads(x)["t_ns"]
                for x in Path(log).read_text().splitlines()
                if json.loads(x).get("event") == "recv"
            )
            starts.append((first - t0) / 1e9)
            peaks.append(peak / 1024)
            mains.append(main_peak / 1024)
    return {
        "start_s": statistics.median(starts),
        "peak_mb": statistics.median(peaks),
        "main_mb": statistics.median(mains),
    }


class _Results:
    """The generator's result queue, in process: answers ``Ready`` / ``SegmentDone`` with a
    ``t0`` 100 ms ahead (the main process's START_DELAY_S) and keeps the records."""

    def __init__(self, start) -> None:
        self.start, self.recs = start, []

    def put(self, msg) -> None:
        if isinstance(msg, Batch):
            self.recs += [r for r in msg.records if not r.warmup]
        elif isinstance(msg, Ready | SegmentDone):
            self.start.t0s.append(time.perf_counter_ns() + 100_000_000)


class _Start:
    def __init__(self) -> None:
        self.t0s: list[int] = []

    def poll(self) -> bool:
        return bool(self.t0s)

    def recv(self) -> int:
        return self.t0s.pop(0)


class _NoStop:
    def is_set(self) -> bool:
        return False


def _first_wave_run(url: str, http: str, streams: int, out_tokens: int, preconnect: bool):
    """One generator (abtui.runner.generator, as `abtui run` starts it), bodies tagged for the
    endpoint's log; returns its measured records."""
    import dataclasses

    from abtui.client.items import Item
    from abtui.runner import generator

    tagged = generator.build_body

    def build(target, item, extra=None):  # the log's key: which request each line is
        return tagged(target, item, {"abtui_key": item.index, **(extra or {})})

    generator.build_body = build
    target = Target(base_url=url, model="sim-model")
    items = synthetic_items(streams * 2, 64, out_tokens, 0, [0.0] * (streams * 2))
    warm = [
        Item(index=100_000 + k, id=f"w{k}", prompt="warm up", max_tokens=out_tokens, n_input=2)
        for k in range(2)
    ]
    kw = (
        {"preconnect": preconnect}
        if "preconnect" in {f.name for f in dataclasses.fields(generator.ArmPlan)}
        else {}
    )
    plan = generator.ArmPlan(
        arm=0,
        target=target,
        items=items,
        warmup_items=warm,
        mode="closed",
        concurrency=streams,
        store_text=False,
        http=http,
        **kw,
    )
    start = _Start()
    results = _Results(start)
    generator.run_loop(generator._Generator(plan, results, start, _NoStop()).run())
    generator.build_body = tagged
    return results.recs


def _wave_errors(recs: list[RequestRecord], log_path: str, streams: int) -> dict:
    recv, first = {}, {}
    for line in Path(log_path).read_text().splitlines():
        e = json.loads(line)
        k = e.get("key")
        if k is None:
            continue
        if e.get("event") == "recv":
            recv[k] = e["t_ns"]
        elif e.get("seq") is not None:  # a token chunk written: the first is the earliest
            first[k] = min(first.get(k, e["t_ns"]), e["t_ns"])
    ok = sorted(
        (r for r in recs if r.status == "ok" and r.chunk_ns and r.item in recv and r.item in first),
        key=lambda r: r.dispatched_ns,
    )
    out = {"n_ok": len(ok), "n": len(recs)}

    def p(x):
        return (float(np.percentile(x, 50)), float(np.percentile(x, 99))) if x else (np.nan, np.nan)

    for name, part in (("first", ok[:streams]), ("later", ok[streams:]), ("all", ok)):
        sent = [r.dispatched_ns + (getattr(r, "connect_ns", 0) or 0) for r in part]
        # error = (received by the server − sent) + (read by the client − written by the server)
        there = [(recv[r.item] - t) / 1e6 for r, t in zip(part, sent, strict=True)]
        back = [(r.chunk_ns[0] - first[r.item]) / 1e6 for r in part]
        out[name] = p([a + b for a, b in zip(there, back, strict=True)])
        out[name + "_there"], out[name + "_back"] = p(there), p(back)
        out[name + "_connected"] = sum(t > r.dispatched_ns for r, t in zip(part, sent, strict=True))
    return out


def part_d(http: str, streams: int, out_tokens: int, repeat: int, preconnect: bool) -> dict:
    runs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "chunks.jsonl")
            cfg = SimConfig(ttft_ms=50, itl_ms=20, chunk_log=log)
            mask = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
            with SimProcess(cfg, cpu=SIM_CPU) as sim:
                _pin(CLIENT_CPU)
                try:
                    recs = _first_wave_run(sim.url, http, streams, out_tokens, preconnect)
                finally:
                    if mask:
                        os.sched_setaffinity(0, mask)
            runs.append(_wave_errors(recs, log, streams))
    out = {}
    for k in runs[0]:
        vals = [r[k] for r in runs]
        out[k] = (
            tuple(statistics.median(v[i] for v in vals) for i in range(2))
            if isinstance(vals[0], tuple)
            else statistics.median(vals)
        )
    return out


async def _httpx_wave(c, target: Target, items) -> None:
    recs = [RequestRecord(arm=0, item=i) for i in range(len(items))]
    await asyncio.gather(
        *(
            stream_request(c, target, it, build_body(target, it), r)
            for it, r in zip(items, recs, strict=True)
        )
    )
    assert all(r.status == "ok" for r in recs), recs[0].error_message


async def _httpx_cpu(url: str, n: int, warm: bool) -> float:
    target = Target(base_url=url, model="sim-model")
    items = synthetic_items(n, 64, 4, 0, [0.0] * n)
    async with make_client(2 * n) as c:
        if warm:  # n requests at once leave n idle connections in the pool
            await _httpx_wave(c, target, items)
        c0 = time.process_time()
        await _httpx_wave(c, target, items)
        return time.process_time() - c0


def part_e(n: int, repeat: int) -> dict:
    """Client CPU seconds of one wave of ``n`` requests on httpx: cold, and on a pool that holds
    ``n`` idle connections."""
    out = {"cold": [], "warm": []}
    mask = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    for _ in range(repeat):
        for mode in ("cold", "warm"):
            with SimProcess(SimConfig(ttft_ms=50, itl_ms=20), cpu=SIM_CPU) as sim:
                _pin(CLIENT_CPU)
                got = {}

                async def main(url=sim.url, warm=mode == "warm", got=got):
                    got["cpu"] = await _httpx_cpu(url, n, warm)

                try:
                    run_loop(main())
                finally:
                    if mask:
                        os.sched_setaffinity(0, mask)
                out[mode].append(got["cpu"])
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--http", choices=("fast", "httpx"), default="fast")
    ap.add_argument("--parts", default="abc", help="which parts to run (default abc; also d, e)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--preconnect",
        choices=("on", "off", "both"),
        default="on",
        help="(d): connections opened before t0, or not, or both in turn",
    )
    args = ap.parse_args()
    ver = {p: metadata.version(p) for p in ("httpx", "duckdb", "numpy")}
    try:
        ver["uvloop"] = metadata.version("uvloop")
    except metadata.PackageNotFoundError:
        ver["uvloop"] = "absent"
    print(
        f"# bench_client — {platform.platform()}, {os.cpu_count()} cpus, Python "
        f"{platform.python_version()}, {ver}; http={args.http}; median of {args.repeat}"
    )
    if "a" in args.parts:
        a = part_a(args.http, args.repeat)
        print(
            f"(a) ingest, zero-delay endpoint, 256-token responses, 64 streams: "
            f"{a['tokens_per_s']:,.0f} tokens/s per process (client CPU {a['client_cpu']:.0%})"
        )
    if "b" in args.parts:
        print(
            "(b) error vs the endpoint's send log (ms):  streams  TTFT P50  TTFT P99  "
            "gap P50  gap P99  arrival P99  client CPU"
        )
        for streams, ttft, itl, toks in ((64, 50, 10, 256), (256, 50, 20, 128)):
            b = part_b(args.http, streams, ttft, itl, toks, args.repeat)
            print(
                f"    TTFT {ttft} ms / ITL {itl} ms {streams:>14}  {b['ttft_p50']:+8.2f}  "
                f"{b['ttft_p99']:+8.2f}  {b['gap_p50']:+7.2f}  {b['gap_p99']:+7.2f}  "
                f"{b['arrival_p99']:+11.2f}  {b['client_cpu']:9.0%}"
            )
    if "c" in args.parts:
        c = part_c(args.repeat)
        print(
            f"(c) `abtui run` → first request at the endpoint: {c['start_s']:.2f} s; "
            f"peak RSS {c['peak_mb']:.0f} MB in all (main process {c['main_mb']:.0f} MB)"
        )
    if "d" in args.parts:
        print(
            f"(d) first wave, TTFT error vs the endpoint's log (ms), TTFT 50 ms / ITL 20 ms, "
            f"warm-up 2, closed loop, 2 waves; load average before: "
            f"{os.getloadavg()[0]:.2f}"
        )
        print(
            "    preconnect  streams  first wave P50/P99 (opened) [to the server | back]  "
            "later P50/P99   all P50/P99"
        )
        modes = {"on": [True], "off": [False], "both": [False, True]}[args.preconnect]
        for streams, toks in ((64, 32), (256, 32)):
            for pre in modes:
                d = part_d(args.http, streams, toks, args.repeat, pre)
                f, la, al = d["first"], d["later"], d["all"]
                th, bk = d["first_there"], d["first_back"]
                print(
                    f"    {'on' if pre else 'off':>10}  {streams:>7}  {f[0]:+7.2f} / {f[1]:+7.2f} "
                    f"({d['first_connected']:>3.0f}) [{th[0]:+.1f}/{th[1]:+.1f} | "
                    f"{bk[0]:+.1f}/{bk[1]:+.1f}]  {la[0]:+6.2f} / {la[1]:+6.2f}  "
                    f"{al[0]:+6.2f} / {al[1]:+6.2f}   ok {d['n_ok']:.0f}/{d['n']:.0f}"
                )
        print(f"    load average after: {os.getloadavg()[0]:.2f}")
    if "e" in args.parts:
        print(
            f"(e) httpx, client CPU of one wave (s), cold pool vs N idle connections; load "
            f"average before: {os.getloadavg()[0]:.2f}"
        )
        for n in (64, 128):
            e = part_e(n, args.repeat)
            print(
                f"    N = {n:>3}: cold {e['cold']:.2f} s, N idle {e['warm']:.2f} s "
                f"(x{e['warm'] / e['cold']:.1f})"
            )


if __name__ == "__main__":
    main()
