#!/usr/bin/env python3
"""Soak: a steady load for a long time; does abtui's memory stay flat, and how many bytes of
session file does a request cost?

Starts two simulated endpoints, then ``abtui run --headless`` as a child process at a steady
Poisson ``--rate`` for ``--minutes`` (default 30; ``--duration`` of the run), and samples the
resident memory (VmRSS from /proc) of the main process and of its child processes (the load
generators and multiprocessing's resource tracker) every ``--every`` seconds. Prints the samples, the growth from the first quarter of the run to
the last (medians of each), and the session file's bytes per request (file + WAL at the end,
over every stored request). Linux only (/proc).

Ends with a verdict per process, on its RSS *floor* (the minimum over the trailing
``FLOOR_WINDOW_S``): FLAT when the floor's last-quarter median is within ``MAX_GROWTH_MB`` of
its first-quarter median and its least-squares slope over the second half is at most
``MAX_SLOPE_MB_MIN``; exit code 0 when every process is flat, 3 when one is not, 1 when the run
failed. Only samples from ``STARTUP_S`` to the end of the measured phase count (after it, the
main process computes the summary and verdict, a transient peak).

Why a floor: the main process has a bounded sawtooth. DuckDB holds appended rows in memory
until its WAL reaches 16 MB and it checkpoints (a 10–15 MB tooth every ~3 minutes at the
default load), which tilts a raw 15-minute least-squares line by up to ±0.2 MB/min depending
on where the teeth fall (simulated). The floor over a window longer than a tooth is the memory
kept across checkpoints, which is what a leak raises. The raw figures are printed too.

    python scripts/soak.py                       # 30 minutes at 20 req/s per arm
    python scripts/soak.py --minutes 3 --every 10

``--stall AT:SECONDS`` stops the main process (SIGSTOP) AT seconds into the run for SECONDS,
then resumes it (SIGCONT), as a slow disk or a long checkpoint would: the generators keep
sending and queue their finished records meanwhile. Each generator's RSS is then printed on its
own, and the end checks that every scheduled request of every arm reached the session file
(requests stored per arm vs items), with the generators' health (schedule lag, backlog).

    python scripts/soak.py --minutes 2 --every 1 --stall 30:45
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
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
FLOOR_WINDOW_S = 240.0  # the floor: RSS minimum over this trailing window (> one tooth)
MAX_GROWTH_MB = 5.0  # flat: the floor's last-quarter median at most this above the first's
MAX_SLOPE_MB_MIN = 0.1  # ... and its least-squares slope over the second half at most this


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


def slope_mb_min(ts: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` (MB) over ``ts`` (s), in MB per minute."""
    n = len(ts)
    if n < 3:
        return float("nan")
    mt, my = sum(ts) / n, sum(ys) / n
    den = sum((t - mt) ** 2 for t in ts)
    return 60 * sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / den if den else 0.0


def verdict_table(rows: list[tuple], seconds: float) -> bool:
    """Print the growth table of ``rows`` (t, main MB, children MB, ...); True when flat."""
    # start-up (imports, pools) and the end (the summary and verdict computed) left out
    settled = [r for r in rows if STARTUP_S <= r[0] <= seconds] or rows
    ts = [r[0] for r in settled]

    def floor(i: int) -> list[tuple[float, float]]:
        """(t, min RSS over the trailing window) once a full window has passed."""
        return [
            (t, min(r[i] for r in settled if t - FLOOR_WINDOW_S <= r[0] <= t))
            for t in ts
            if t - ts[0] >= FLOOR_WINDOW_S
        ]

    def figures(series: list[tuple[float, float]]) -> tuple[float, float, float, float]:
        """First- and last-quarter medians, growth, slope over the second half (MB/min)."""
        if len(series) < 4:
            nan = float("nan")
            return nan, nan, nan, nan
        q = max(1, len(series) // 4)
        f = statistics.median(y for _, y in series[:q])
        l_ = statistics.median(y for _, y in series[-q:])
        half = series[len(series) // 2 :]
        return f, l_, l_ - f, slope_mb_min([t for t, _ in half], [y for _, y in half])

    print(
        "| process | series | first quarter (median) | last quarter (median) | growth "
        "| slope, 2nd half | range, 2nd half | verdict |"
    )
    print("|---|---|---|---|---|---|---|---|")
    flat_all = True
    for name, i in (("main", 1), ("children (sum)", 2)):
        raw = [(r[0], r[i]) for r in settled]
        for label, series in (("RSS", raw), (f"floor ({FLOOR_WINDOW_S:g} s min)", floor(i))):
            f, l_, g, sl = figures(series)
            ys = [y for _, y in series[len(series) // 2 :]] or [float("nan")]
            verdict = ""
            if label != "RSS":
                flat = g <= MAX_GROWTH_MB and sl <= MAX_SLOPE_MB_MIN  # NaN (too short): not flat
                flat_all &= flat
                verdict = "FLAT" if flat else "GROWING" if sl == sl else "TOO SHORT"
            print(
                f"| {name} | {label} | {f:.1f} MB | {l_:.1f} MB | {g:+.1f} MB "
                f"| {sl:+.3f} MB/min | {min(ys):.1f}–{max(ys):.1f} MB | {verdict} |"
            )
    print()
    return flat_all


LINE = re.compile(r"t=\s*([\d.]+) s\s+main\s+([\d.]+) MB\s+children\s+([\d.]+) MB")


def label(pid: int) -> str:
    """``gen`` for a load generator, ``tracker`` for multiprocessing's resource tracker."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return "tracker" if b"resource_tracker" in cmd else "gen"


def parse_stall(text: str) -> tuple[float, float]:
    try:
        at, dur = (float(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--stall {text!r}: expected AT:SECONDS") from None
    if at < 0 or dur <= 0:
        raise argparse.ArgumentTypeError(f"--stall {text!r}: AT >= 0 and SECONDS > 0")
    return at, dur


def stall_report(path: Path) -> bool:
    """Per arm: measured requests stored vs items scheduled; the stored generator health.
    True when every scheduled request of every arm is in the file."""
    con = duckdb.connect(str(path), read_only=True)
    (n_items,) = con.execute(
        "SELECT count(*) FROM items WHERE coalesce(tags, '') NOT LIKE '%\"warmup\"%'"
    ).fetchone()
    per_arm = con.execute(
        "SELECT arm, count(*), count(DISTINCT item) FROM requests WHERE NOT warmup "
        "GROUP BY arm ORDER BY arm"
    ).fetchall()
    health = con.execute("SELECT value FROM meta WHERE key = 'generator_health'").fetchone()
    con.close()
    complete = True
    for arm, n, distinct in per_arm:
        ok = n == distinct == n_items
        complete &= ok
        print(
            f"arm {arm}: {n} requests stored ({distinct} distinct items) of {n_items} "
            f"scheduled: {'all there' if ok else 'MISSING'}"
        )
    if health:
        for name, a in (json.loads(health[0]).get("arms") or {}).items():
            print(
                f"generator {name}: "
                + ", ".join(
                    f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in a.items()
                )
            )
    return complete and len(per_arm) == 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=20.0, help="req/s per arm (default 20)")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument(
        "--probe",
        type=Path,
        metavar="FILE",
        help="run the main process under scripts/memprobe.py (tracemalloc, glibc "
        "heap, duckdb_memory() every --every s, as JSON lines into FILE)",
    )
    ap.add_argument("--no-trace", action="store_true", help="with --probe: no tracemalloc")
    ap.add_argument(
        "--tui",
        action="store_true",
        help="with --probe: the run with the live TUI attached (memprobe.py --tui)",
    )
    ap.add_argument(
        "--analyse",
        type=Path,
        metavar="LOG",
        help="run nothing: print the table and verdict of the samples in LOG (this "
        "script's output; --minutes as in that run)",
    )
    ap.add_argument(
        "--stall",
        type=parse_stall,
        metavar="AT:SECONDS",
        help="SIGSTOP the main process AT s into the run for SECONDS, then SIGCONT",
    )
    args = ap.parse_args()
    if args.tui and not args.probe:
        ap.error("--tui needs --probe FILE")
    if not Path("/proc/self/status").exists():
        print("soak.py needs Linux /proc", file=sys.stderr)
        return 2

    if args.analyse:
        rows = [
            (float(m[1]), float(m[2]), float(m[3]))
            for m in map(LINE.search, args.analyse.read_text().splitlines())
            if m
        ]
        flat = verdict_table(rows, args.minutes * 60)
        print(f"verdict: {'FLAT' if flat else 'NOT FLAT'}")
        return 0 if flat else 3
    load_start = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="abtui-soak-"))
    seconds = args.minutes * 60
    rows: list[tuple[float, float, float, int]] = []  # t, main MB, generators MB, n generators
    with (
        SimProcess(ttft_ms=20, itl_ms=5, seed=1) as a,
        SimProcess(ttft_ms=20, itl_ms=5, seed=2) as b,
    ):
        head = [sys.executable, "-m", "abtui"]
        if args.probe:
            probe = Path(__file__).with_name("memprobe.py")
            head = [
                sys.executable,
                str(probe),
                "--out",
                str(args.probe),
                "--every",
                f"{args.every:g}",
                *(["--no-trace"] if args.no_trace else []),
                *(["--tui"] if args.tui else []),
                "--",
            ]
        cmd = [
            *head,
            "run",
            "--baseline",
            a.url,
            "--candidate",
            b.url,
            "--rate",
            str(args.rate),
            "--duration",
            f"{seconds:g}s",
            "--input-tokens",
            str(args.input_tokens),
            "--output-tokens",
            str(args.output_tokens),
            "--warmup",
            "0",
            "--timeout",
            "30s",
            "--name",
            "soak",
            "--sessions-dir",
            str(tmp),
            *([] if args.tui else ["--headless"]),
        ]
        t0 = time.monotonic()
        # stderr to a file, never a pipe read at the end: the progress lines (one every 2 s)
        # fill a pipe's 64 KB in ~15 minutes, and the run then blocks writing the next one
        log = tmp / "abtui-run.log"
        with log.open("w") as err_f:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_f)
        stalled = None  # monotonic time of the SIGSTOP, while stopped
        stall_done = False
        while proc.poll() is None:
            time.sleep(min(args.every, 1.0) if not rows else args.every)
            t = time.monotonic() - t0
            if args.stall and not stall_done:
                at, dur = args.stall
                if stalled is None and t >= at:
                    os.kill(proc.pid, signal.SIGSTOP)
                    stalled = t
                    print(f"  t={t:7.0f} s  SIGSTOP main process", flush=True)
                elif stalled is not None and t >= stalled + dur:
                    os.kill(proc.pid, signal.SIGCONT)
                    stall_done = True
                    print(
                        f"  t={t:7.0f} s  SIGCONT main process (stopped {t - stalled:.1f} s)",
                        flush=True,
                    )
            main_mb = rss_mb(proc.pid)
            kids = [(c, rss_mb(c)) for c in children(proc.pid)]
            gens = [m for _, m in kids if m is not None]
            if main_mb is not None and gens:
                rows.append((t, main_mb, sum(gens), len(gens)))
                r = rows[-1]
                each = ""
                if args.stall:
                    each = "  " + " ".join(f"{label(c)} {m:.1f}" for c, m in kids if m is not None)
                print(
                    f"  t={r[0]:7.0f} s  main {r[1]:7.1f} MB  children {r[2]:7.1f} MB ({r[3]})"
                    f"{each}",
                    flush=True,
                )
        err = log.read_text(errors="replace")
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

    load = os.getloadavg()
    print()
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cpus, load "
        f"average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f} at the start, "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end"
    )
    print(
        f"python {platform.python_version()}, abtui {metadata.version('abtui')}, "
        f"duckdb {duckdb.__version__}"
    )
    print(
        f"samples from {STARTUP_S:g} s to {seconds:g} s; growth: last-quarter median minus "
        "first-quarter median; slope: least squares over the second half"
    )
    print(
        f"run: {args.minutes:g} min at {args.rate:g} req/s per arm, 2 arms, "
        f"{args.input_tokens} in / {args.output_tokens} out tokens; {len(rows)} samples"
    )
    print()
    flat_all = verdict_table(rows, seconds)
    print(f"requests stored: {n_req} ({statuses}); chunks: {n_chunks}")
    print(
        f"session file (+ WAL): {size / 1e6:.2f} MB = {size / max(n_req, 1):.0f} bytes per request "
        f"({size / max(n_chunks, 1):.1f} per chunk)"
    )
    print(f"file kept at {path}")
    print()
    if args.stall:
        if not stall_report(path):
            print("verdict: REQUESTS MISSING after the stall")
            return 3
    print(
        f"verdict: {'FLAT' if flat_all else 'NOT FLAT'} (flat: the RSS floor grows ≤ "
        f"{MAX_GROWTH_MB:g} MB and its slope is ≤ {MAX_SLOPE_MB_MIN:g} MB/min, every process)"
    )
    return 0 if flat_all else 3


if __name__ == "__main__":
    sys.exit(main())
