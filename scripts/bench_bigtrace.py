#!/usr/bin/env python3
"""A ~1 GB trace, streamed: the time and peak memory to read, import and replay part of it.

Writes two ~1 GB files in a temporary folder under /tmp (deleted at the end unless ``--keep``):
an abtui JSONL workload of text prompts (~2 kB a line) and a Mooncake trace of the same size
(lengths and prefix block ids, ~300 bytes a line). Then, each step in a fresh process (peak
memory = that process's VmHWM, the high-water mark of its resident set):

- ``read``: :func:`abtui.workload.jsonl.read_workload` with ``limit=N``, what ``abtui run
  --workload FILE --requests N`` does: every line read and checked, N items held;
- ``import``: ``abtui workload import mooncake`` of the Mooncake file (two streamed passes),
  output to /dev/null;
- ``run``: ``abtui run --workload FILE --requests N`` against two simulated endpoints on
  127.0.0.1 (the main process's peak; the load generators hold N items each);
- ``run-small``: the same run from a file of only the first N lines, for comparison: the
  difference is what the 1 GB file costs.

Medians of ``--repeat`` runs; the machine, versions and load average are printed with them.

    python scripts/bench_bigtrace.py                 # 1 GB, N = 1000, 3 repeats
    python scripts/bench_bigtrace.py --gb 0.1 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

WORDS = "the of and to in is that for it as was with be by on not he this are or his".split()


def _hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def write_workload(path: Path, size: int, seed: int = 0) -> int:
    """Text prompts of ~2 kB (varied, seeded) with rising arrivals, until ``size`` bytes."""
    rng = random.Random(seed)
    pool = " ".join(rng.choice(WORDS) for _ in range(4000))
    n = written = 0
    with path.open("w") as fh:
        while written < size:
            start = rng.randrange(0, len(pool) - 2500)
            line = (
                json.dumps(
                    {
                        "id": f"r{n}",
                        "arrival_s": round(n * 0.01, 3),
                        "prompt": pool[start : start + rng.randint(1500, 2500)],
                        "max_tokens": 16,
                    }
                )
                + "\n"
            )
            fh.write(line)
            written += len(line)
            n += 1
    return n


def write_mooncake(path: Path, size: int, seed: int = 0) -> int:
    rng = random.Random(seed + 1)
    n = written = 0
    with path.open("w") as fh:
        while written < size:
            k = rng.randint(1, 40)
            line = (
                json.dumps(
                    {
                        "timestamp": n * 10,
                        "input_length": 512 * k,
                        "output_length": rng.randint(10, 400),
                        "hash_ids": list(range(n % 1000, n % 1000 + k)),
                    }
                )
                + "\n"
            )
            fh.write(line)
            written += len(line)
            n += 1
    return n


# ---------------------------------------------------------------- steps (in a child process)


def step_read(args) -> dict:
    from abtui.workload.jsonl import read_workload

    wl = read_workload(args.file, limit=args.requests)
    return {"items": len(wl.items), "lines": wl.stats.kept}


def step_import(args) -> dict:
    from abtui.cli import main

    rc = main(["workload", "import", "mooncake", args.file, "-o", os.devnull])
    return {"rc": rc}


def step_run(args) -> dict:
    from abtui.cli import main
    from abtui.sim.process import SimProcess

    with SimProcess(ttft_ms=2, itl_ms=0.5) as a, SimProcess(ttft_ms=2, itl_ms=0.5) as b:
        t0 = time.perf_counter()
        rc = main(
            [
                "run",
                "--baseline",
                a.url,
                "--candidate",
                b.url,
                "--workload",
                args.file,
                "--requests",
                str(args.requests),
                "--rate",
                "200",
                "--headless",
                "--name",
                "bigtrace",
                "--sessions-dir",
                args.sessions,
                "--overwrite",
            ]
        )
        return {"rc": rc, "run_s": time.perf_counter() - t0}


STEPS = {"read": step_read, "import": step_import, "run": step_run, "run-small": step_run}


def child(args) -> None:
    t0 = time.perf_counter()
    out = STEPS[args.step](args)
    out |= {"time_s": time.perf_counter() - t0, "hwm_mb": _hwm_mb()}
    print("RESULT " + json.dumps(out), flush=True)


def run_step(step: str, file: Path, requests: int, sessions: Path) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--step",
        step,
        "--file",
        str(file),
        "--requests",
        str(requests),
        "--sessions",
        str(sessions),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"step {step} failed (rc {p.returncode}): {p.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0, help="size of each file (default 1)")
    ap.add_argument("--requests", type=int, default=1000, help="N: items used (default 1000)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", default="read,import,run,run-small")
    ap.add_argument("--keep", action="store_true", help="keep the files (their folder is printed)")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--sessions", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step:
        return child(args)

    tmp = Path(tempfile.mkdtemp(prefix="abtui-bigtrace-", dir="/tmp"))
    try:
        size = int(args.gb * 2**30)
        wl, mc, small = tmp / "workload.jsonl", tmp / "mooncake.jsonl", tmp / "small.jsonl"
        steps = args.steps.split(",")
        t0 = time.perf_counter()
        n_wl = write_workload(wl, size) if {"read", "run", "run-small"} & set(steps) else 0
        if n_wl:
            with wl.open() as src, small.open("w") as dst:
                for _, line in zip(range(args.requests), src, strict=False):
                    dst.write(line)
        n_mc = write_mooncake(mc, size) if "import" in steps else 0
        print(
            f"wrote {tmp}: workload {n_wl:,} lines, mooncake {n_mc:,} lines, "
            f"{args.gb:g} GiB each, in {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        rows = []
        for step in steps:
            file = {"import": mc, "run-small": small}.get(step, wl)
            res = [
                run_step(step, file, args.requests, tmp / "sessions") for _ in range(args.repeat)
            ]
            for r in res:
                if r.get("rc") not in (None, 0, 3, 4):
                    raise SystemExit(f"step {step}: exit code {r['rc']}")
            rows.append(
                (
                    step,
                    file.stat().st_size,
                    statistics.median(r["time_s"] for r in res),
                    statistics.median(r["hwm_mb"] for r in res),
                    res[0],
                )
            )
        print()
        print(
            f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cpus, "
            f"Linux {platform.release()}; Python {platform.python_version()}, "
            f"abtui {metadata.version('abtui')}, duckdb {metadata.version('duckdb')}; "
            f"load average at end {os.getloadavg()[0]:.1f}; N = {args.requests}; "
            f"medians of {args.repeat}"
        )
        print("| step | file | time (s) | peak RSS (MB) | detail |\n|---|---|---|---|---|")
        for step, fsize, t, mb, detail in rows:
            d = {k: v for k, v in detail.items() if k not in ("time_s", "hwm_mb")}
            print(f"| {step} | {fsize / 2**20:,.1f} MiB | {t:.1f} | {mb:.0f} | {json.dumps(d)} |")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
