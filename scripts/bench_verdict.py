#!/usr/bin/env python3
"""Time and peak memory to compute a full verdict (issues 6, 19.2): 1,000,000 requests per arm.

Each repeat runs in a fresh child process pinned to one core with one BLAS thread, resets the
kernel's peak-RSS mark (``/proc/self/clear_refs``) once its imports are done, and reads the
peak RSS reached during the verdict. The verdict is every latency metric at mean/P50/P90/P95/P99,
throughput, goodput, SLO attainment and cost, with 10,000 bootstrap resamples, of a synthetic
two-arm session (tests.synthetic: log-normal TTFT/TPOT, the candidate 5% faster in TPOT,
``--tokens`` one-token chunks per request, so ITL has ``n × (tokens − 1)`` gaps per arm).

- ``--source file`` (the default): the session is written once to a DuckDB file
  (``scripts/synthetic_session.py``, under ``--dir``) and each child runs
  :func:`abtui.verdict.saved.session_verdict` on it, as ``abtui report`` and the end of
  ``abtui run`` do: reading the file is part of the figures.
- ``--source memory``: each child builds the table in memory (with its chunk arrays: 1.1 GB at
  10⁶ per arm) and times :func:`abtui.verdict.policy.evaluate` on it (the figure before 19.2).

Prints a table; medians of repeats.

    python scripts/bench_verdict.py                      # 1,000,000 per arm, 3 repeats
    python scripts/bench_verdict.py --n 100000 --repeat 5
    python scripts/bench_verdict.py --source memory --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

FILE_CHILD = r"""
import gc, json, os, sys, time
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from abtui.verdict.saved import session_verdict

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024.0
gc.collect()
base = rss("VmRSS:")
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    reset = True
except OSError:
    reset = False
t0 = time.perf_counter()
cpu0 = time.process_time()
sv = session_verdict(sys.argv[1], store=False)
wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_mb": rss("VmHWM:"), "table_mb": base,
                  "reset": reset, "result": sv.result,
                  "rows": len(sv.verdict.pairs[0].comparison.effects), "chunks": None}))
"""

CHILD = r"""
import gc, json, os, sys, time
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
sys.path.insert(0, sys.argv[4])  # the repo root: tests.synthetic
from tests.synthetic import ArmTruth, synthetic_table
from abtui.verdict.policy import evaluate

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024.0
n, tokens, resamples = (int(x) for x in sys.argv[1:4])
table = synthetic_table(n, [ArmTruth(), ArmTruth(tpot_scale=0.95)], n_output=tokens, rate=200, seed=1)
gc.collect()
table_rss = rss("VmRSS:")
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    reset = True
except OSError:
    reset = False
spec = {"slo": {"ttft": 0.1, "tpot": 0.02}, "cost": {"gpu_price": 2.0},
        "policy": {"resamples": resamples}}
t0 = time.perf_counter()
cpu0 = time.process_time()
v = evaluate(table, [{"name": "a"}, {"name": "b"}], spec)
wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_mb": rss("VmHWM:"), "table_mb": table_rss,
                  "reset": reset, "result": v.result, "rows": len(v.pairs[0].comparison.effects),
                  "chunks": int(table.n_chunk_rows)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=1_000_000, help="requests per arm (default 1,000,000)")
    ap.add_argument("--tokens", type=int, default=4, help="output tokens (chunks) per request")
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--source",
        choices=("file", "memory"),
        default="file",
        help="the verdict of a session file (default) or of a table in memory",
    )
    ap.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where --source file writes (and reuses) its session file",
    )
    args = ap.parse_args()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    runs = []
    if args.source == "file":
        path = args.dir / f"bench_verdict_{args.n}x{args.tokens}_r{args.resamples}.duckdb"
        if not path.exists():
            sys.path.insert(0, str(Path(__file__).parent))
            from synthetic_session import write_session

            write_session(path, args.n, args.tokens, resamples=args.resamples)
        argv = [sys.executable, "-c", FILE_CHILD, str(path)]
        chunks = 2 * args.n * args.tokens
    else:
        root = str(Path(__file__).resolve().parents[1])
        argv = [
            sys.executable,
            "-c",
            CHILD,
            str(args.n),
            str(args.tokens),
            str(args.resamples),
            root,
        ]
        chunks = None
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    for _ in range(args.repeat):
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        runs[-1]["chunks"] = runs[-1]["chunks"] or chunks
    cpu_model = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in open("/proc/cpuinfo")
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    med = {
        k: statistics.median(r[k] for r in runs) for k in ("wall_s", "cpu_s", "peak_mb", "table_mb")
    }
    print(
        f"machine: {platform.node()} {platform.system()} {platform.release()}, {cpu_model}, "
        f"{os.cpu_count()} CPUs, load average {load:.2f} at start"
    )
    print(
        f"versions: Python {platform.python_version()}, numpy {metadata.version('numpy')}, "
        f"scipy {metadata.version('scipy')}; one core, one BLAS thread"
    )
    print(
        f"workload: {args.n:,} requests per arm, {args.tokens} chunks each "
        f"({runs[0]['chunks']:,} chunks), {args.resamples:,} resamples, "
        f"{runs[0]['rows']} effect rows, verdict {runs[0]['result']}"
    )
    print()
    print("| figure | median | runs | aim |")
    print("|---|---|---|---|")
    print(
        f"| verdict wall time | {med['wall_s']:.2f} s | "
        + ", ".join(f"{r['wall_s']:.2f}" for r in runs)
        + " | < 5 s |"
    )
    print(
        f"| verdict CPU time | {med['cpu_s']:.2f} s | "
        + ", ".join(f"{r['cpu_s']:.2f}" for r in runs)
        + " | < 5 s |"
    )
    peak_note = (
        "" if all(r["reset"] for r in runs) else " (peak mark not reset: includes the build)"
    )
    print(
        f"| peak RSS during the verdict (table included){peak_note} | {med['peak_mb']:,.0f} MB | "
        + ", ".join(f"{r['peak_mb']:,.0f}" for r in runs)
        + (" | < 1 GB |" if args.source == "file" else " | < 2 GB |")
    )
    if args.source == "memory":
        print(f"| RSS of the request table alone | {med['table_mb']:,.0f} MB | | |")
    else:
        print(f"| RSS before the verdict (imports) | {med['table_mb']:,.0f} MB | | |")


if __name__ == "__main__":
    main()
