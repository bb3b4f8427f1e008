#!/usr/bin/env python3
"""Where a small headless A/B spends its time outside the load window: before the first
request (start-up) and after the last one (summary, verdict, teardown).

The first request is a warm-up one (the load window starts there); a second line gives the
first measured request, after the warm-up and the common start.

Two simulated GPUs on 127.0.0.1 (h100 bf16 / fp8, time scale 8, 256 in a batch), then
``abtui run --concurrency C --requests N --headless`` in this process; the session file gives
the first dispatch and the last completion (the same monotonic clock). ``--cli`` runs the
``abtui`` command in a new process instead, as a user does: the interpreter's start and the
imports count then. Each edge is given in wall seconds and in CPU seconds (this process's, less
the sampler's own thread, plus the load generators' and any other child started by the run; not
the simulators'), read every 10 ms by a sampler thread: other processes on a busy machine
stretch the wall time much more than the CPU time. Give the load average (printed) with any
figure. Every process compiles abtui's modules afresh when they have no cached bytecode
(``PYTHONDONTWRITEBYTECODE`` set, a read-only checkout): the line says so; ``python -m
compileall abtui`` first measures what an installed abtui does.

    python scripts/bench_run_edges.py 320 64 --out /tmp/edges      # then 512 256
    python scripts/bench_run_edges.py 320 64 --out /tmp/edges --cli   # as `abtui run` does
    python scripts/bench_run_edges.py 320 64 --out /tmp/edges --profile --top 30   # cProfile
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import cProfile
import io
import os
import pstats
import resource
import subprocess
import sys
import threading
import time

_TICK = os.sysconf("SC_CLK_TCK")


def _children(pid: int | str = "self") -> set[int]:
    pids: set[int] = set()
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children") as f:
                pids.update(int(p) for p in f.read().split())
    return pids


def _proc_cpu(pid: int) -> float:
    """utime + stime of a live (or not yet reaped) process and of the children it reaped, and
    of its live descendants, in seconds; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    own = sum(int(x) for x in fields[11:15]) / _TICK  # utime stime cutime cstime
    return own + sum(_proc_cpu(c) for c in _children(pid))


def _reaped_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class CpuSampler(threading.Thread):
    """``(perf_counter_ns, CPU seconds)`` every ``interval`` s: this process (less this thread)
    plus its children other than ``exclude`` (live ones from /proc, reaped ones from rusage)."""

    def __init__(self, exclude: set[int], interval: float = 0.01) -> None:
        super().__init__(daemon=True, name="cpu-sampler")
        self.exclude, self.interval = exclude, interval
        self.samples: list[tuple[int, float]] = []
        self.stop = threading.Event()

    def now(self) -> float:
        kids = sum(_proc_cpu(p) for p in _children() - self.exclude)
        return time.process_time() - time.thread_time() + _reaped_cpu() + kids

    def run(self) -> None:  # the last sample is taken after the stop
        while True:
            stopping = self.stop.is_set()
            self.samples.append((time.perf_counter_ns(), self.now()))
            if stopping:
                return
            self.stop.wait(self.interval)

    def at(self, t_ns: int) -> float:
        """The CPU seconds of the last sample at or before ``t_ns`` (the very last one for the
        end: it was taken after it)."""
        k = bisect.bisect_right([t for t, _ in self.samples], t_ns) - 1
        return self.samples[min(max(k, 0), len(self.samples) - 1)][1]


def _bytecode_cached(module) -> bool:
    import importlib.util

    return os.path.exists(importlib.util.cache_from_source(module.__file__))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("requests", type=int)
    ap.add_argument("concurrency", type=int)
    ap.add_argument("--out", required=True, help="folder for the session file and the profile")
    ap.add_argument("--profile", action="store_true", help="run under cProfile (slower)")
    ap.add_argument(
        "--cli",
        action="store_true",
        help="run the abtui command in a new process instead: its interpreter start and imports "
        "count (the profile is not available then)",
    )
    ap.add_argument("--top", type=int, default=0, help="print the profile's top N (cumulative)")
    args = ap.parse_args()
    # abtui first, as the command does (it sets the BLAS threads before numpy), and here rather
    # than at the top: the spawned load generators import this module again as __mp_main__
    import abtui.cli
    from abtui.sim.engine import SimConfig
    from abtui.sim.preset_cli import PresetOptions
    from abtui.sim.process import SimProcess
    from abtui.store.reader import SessionReader

    def cfg(preset: str) -> SimConfig:
        return SimConfig(
            port=0, seed=0, preset=PresetOptions(preset, time_scale=8.0, max_num_seqs=256)
        )

    name = f"edges-{args.requests}-{args.concurrency}"
    prof = cProfile.Profile() if args.profile and not args.cli else None
    with SimProcess(cfg("h100:llama-3-8b:bf16")) as a, SimProcess(cfg("h100:llama-3-8b:fp8")) as b:
        argv = ["run", "--baseline", a.url, "--candidate", b.url, "--headless", "--overwrite"]
        argv += ["--concurrency", str(args.concurrency), "--requests", str(args.requests)]
        argv += ["--name", name, "--sessions-dir", os.path.abspath(args.out)]
        sampler = CpuSampler(exclude=_children())
        sampler.start()
        t0 = time.perf_counter_ns()
        if args.cli:  # run from the tree this script imported: -m puts the working folder first
            tree = os.path.dirname(os.path.dirname(os.path.dirname(abtui.cli.__file__)))
            cmd = [sys.executable, "-m", "abtui", *argv]
            out = subprocess.run(cmd, stdout=subprocess.DEVNULL, cwd=tree, check=False)
            rc = out.returncode
        else:
            with contextlib.redirect_stdout(io.StringIO()):
                if prof is not None:
                    prof.enable()
                rc = abtui.cli.main(argv)
                if prof is not None:
                    prof.disable()
        t1 = time.perf_counter_ns()
        sampler.stop.set()
        sampler.join()
    with SessionReader(os.path.join(args.out, f"{name}.duckdb")) as rd:
        t = rd.request_table(include_warmup=True)
    first, last = int(t.dispatched_ns.min()), int(t.done_ns.max())
    c0, cf, cl = (sampler.at(x) for x in (t0, first, last))
    c1 = sampler.samples[-1][1]
    print(
        f"{args.requests} requests at {args.concurrency}: exit {rc}, wall {(t1 - t0) / 1e9:.2f} s"
        f" (CPU {c1 - c0:.2f} s); before the first request {(first - t0) / 1e9:.2f} s (CPU "
        f"{cf - c0:.2f} s); load window {(last - first) / 1e9:.2f} s (CPU {cl - cf:.2f} s); "
        f"after the last {(t1 - last) / 1e9:.2f} s (CPU {c1 - cl:.2f} s); load average "
        f"{os.getloadavg()[0]:.1f}; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}"
        + ("; under cProfile" if prof is not None else "")
        + ("; a new abtui process" if args.cli else "")
        + ("" if _bytecode_cached(abtui.cli) else "; abtui's bytecode not cached")
    )
    measured = int(t.dispatched_ns[~t.warmup].min()) if (~t.warmup).any() else first
    print(
        f"  the first request is a warm-up one; the first measured request "
        f"{(measured - t0) / 1e9:.2f} s after the start (CPU {sampler.at(measured) - c0:.2f} s): "
        "the warm-up, the connections opened and the start barrier in between"
    )
    if prof is not None:
        prof.dump_stats(os.path.join(args.out, f"{name}.prof"))
        if args.top:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
