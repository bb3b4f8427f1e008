#!/usr/bin/env python3
"""Soak: a steady load for a long time; does abtui's memory stay flat, and how many bytes of
session file does a request cost?

Starts two simulated endpoints, then ``abtui run --headless`` as a child process at a steady
Poisson ``--rate`` for ``--minutes`` (default 30; ``--duration`` of the run), and samples the
resident memory (VmRSS from /proc) of the main process and of its child processes (the load
generators and multiprocessing's resource tracker) every ``--every`` seconds. Prints the samples, the growth from the first quarter of the run to
the last (medians of each), and the session file's bytes per request (file + WAL at the end,
over every stored request). Linux only (/proc).

    python scripts/soak.py                       # 30 minutes at 20 req/s per arm
    python scripts/soak.py --minutes 3 --every 10
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import duckdb

from abtui.sim.process import SimProcess

STARTUP_S = 15.0  # samples before this are start-up, left out of the growth figures


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def children(pid: int) -> list[int]:
    out = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(x) for x in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=20.0, help="req/s per arm (default 20)")
    ap.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=64)
    args = ap.parse_args()
    if not Path("/proc/self/status").exists():
        print("soak.py needs Linux /proc", file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="abtui-soak-"))
    seconds = args.minutes * 60
    rows: list[tuple[float, float, float, int]] = []  # t, main MB, generators MB, n generators
    with (
        SimProcess(ttft_ms=20, itl_ms=5, seed=1) as a,
        SimProcess(ttft_ms=20, itl_ms=5, seed=2) as b,
    ):
        cmd = [
            sys.executable, "-m", "abtui", "run", "--baseline", a.url, "--candidate", b.url,
            "--rate", str(args.rate), "--duration", f"{seconds:g}s", "--input-tokens",
            str(args.input_tokens), "--output-tokens", str(args.output_tokens), "--warmup", "0",
            "--timeout", "30s", "--name", "soak", "--sessions-dir", str(tmp), "--headless",
        ]  # fmt: skip
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while proc.poll() is None:
            time.sleep(min(args.every, 1.0) if not rows else args.every)
            main_mb = rss_mb(proc.pid)
            gens = [m for m in (rss_mb(c) for c in children(proc.pid)) if m is not None]
            if main_mb is not None and gens:
                rows.append((time.monotonic() - t0, main_mb, sum(gens), len(gens)))
                r = rows[-1]
                print(f"  t={r[0]:7.0f} s  main {r[1]:7.1f} MB  children {r[2]:7.1f} MB ({r[3]})",
                      flush=True)  # fmt: skip
        err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode not in (0, 3, 4):
        print(f"abtui run failed ({proc.returncode}):\n{err[-3000:]}", file=sys.stderr)
        return 1

    path = tmp / "soak.duckdb"
    size = sum(p.stat().st_size for p in tmp.glob("soak.duckdb*"))
    con = duckdb.connect(str(path), read_only=True)
    n_req, n_chunks = con.execute(
        "SELECT (SELECT count(*) FROM requests), (SELECT count(*) FROM chunks)"
    ).fetchone()
    statuses = dict(con.execute("SELECT status, count(*) FROM requests GROUP BY 1").fetchall())
    con.close()

    settled = [r for r in rows if r[0] >= STARTUP_S] or rows  # start-up (imports, pools) left out
    q = max(1, len(settled) // 4)
    first, last = settled[:q], settled[-q:]

    def growth(i: int) -> tuple[float, float, float]:
        f, l_ = statistics.median(r[i] for r in first), statistics.median(r[i] for r in last)
        return f, l_, l_ - f

    load = os.getloadavg()
    print()
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cpus, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (at the end)")  # fmt: skip
    print(f"python {platform.python_version()}, abtui {metadata.version('abtui')}, "
          f"duckdb {duckdb.__version__}")  # fmt: skip
    print(f"growth: first vs last quarter of the samples after the first {STARTUP_S:g} s")
    print(f"run: {args.minutes:g} min at {args.rate:g} req/s per arm, 2 arms, "
          f"{args.input_tokens} in / {args.output_tokens} out tokens; {len(rows)} samples")  # fmt: skip
    print()
    print("| process | RSS first quarter (median) | RSS last quarter (median) | growth |")
    print("|---|---|---|---|")
    for name, i in (("main", 1), ("child processes (sum)", 2)):
        f, l_, g = growth(i)
        print(f"| {name} | {f:.1f} MB | {l_:.1f} MB | {g:+.1f} MB |")
    print()
    print(f"requests stored: {n_req} ({statuses}); chunks: {n_chunks}")
    print(f"session file (+ WAL): {size / 1e6:.2f} MB = {size / max(n_req, 1):.0f} bytes per request "
          f"({size / max(n_chunks, 1):.1f} per chunk)")  # fmt: skip
    print(f"file kept at {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
