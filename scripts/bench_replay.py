#!/usr/bin/env python3
"""How fast ``abtui open``'s timeline answers: a session file of ``--requests`` requests (split
over two arms, ``--chunks`` token chunks each, ~``--span`` seconds of run, a few errors and
cancellations, one telemetry source per arm at 1 Hz) written through the store from seeded
records, then :class:`abtui.runner.live_replay.Replay`: the load (one read of the file) and
what one redraw of the panes costs at a random playhead time — the snapshot (``Replay.at``)
and the views the panes render (``LiveArm.view`` per arm) — for seeks in random order
(backwards half the time). Medians (and P99 for seeks) of ``--repeat`` loads and
``--seeks`` seeks per load.

    python scripts/bench_replay.py                      # 100k requests, 32 chunks each
    python scripts/bench_replay.py --requests 10000 --chunks 8 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np


def write_session(path: Path, requests: int, chunks: int, span_s: float, seed: int = 0) -> None:
    from abtui.client.records import RequestRecord
    from abtui.store.writer import SessionWriter

    rng = np.random.default_rng(seed)
    per_arm = requests // 2
    with SessionWriter(path) as w:
        w.write_meta(session_name=path.stem, spec={"slo": {"ttft": 0.2, "tpot": 0.02}})
        w.write_arms(
            [
                {"arm": i, "name": n, "role": None, "url": "http://127.0.0.1:1/v1"}
                for i, n in enumerate(("bf16", "fp8"))
            ]
        )
        for arm in (0, 1):
            starts = np.sort(rng.uniform(0, span_s, per_arm))
            batch = []
            for item, s in enumerate(starts):
                sched = int(s * 1e9)
                disp = sched + int(rng.integers(0, 2_000_000))
                first = disp + int(rng.lognormal(np.log(0.05), 0.5) * 1e9)
                gaps = rng.uniform(0.005, 0.02, chunks - 1)
                chunk_ns = [first, *(first + np.cumsum(gaps * 1e9).astype(np.int64)).tolist()]
                u = rng.uniform()
                status = "ok" if u > 0.01 else "error" if u > 0.005 else "cancelled"
                ok = status == "ok"
                batch.append(
                    RequestRecord(
                        arm=arm,
                        item=item,
                        scheduled_ns=sched,
                        dispatched_ns=disp,
                        done_ns=chunk_ns[-1],
                        chunk_ns=chunk_ns if ok else [],
                        chunk_tokens=[1] * chunks if ok else [],
                        status=status,
                        error_class="http" if status == "error" else None,
                        n_output=chunks if ok else None,
                    )
                )
                if len(batch) >= 5000:
                    w.add_records(batch)
                    w.flush()
                    batch = []
            w.add_records(batch)
            w.flush()
            w.add_telemetry(
                [
                    (arm, "dcgm", int(t * 1e9), m, float(v))
                    for t in range(int(span_s) + 1)
                    for m, v in (("gpu.power_w", 400 + t % 50), ("gpu.busy", 0.9))
                ]
            )
        w.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=100_000, help="requests in all (two arms)")
    ap.add_argument("--chunks", type=int, default=32, help="token chunks per request")
    ap.add_argument("--span", type=float, default=600.0, help="seconds the run lasts")
    ap.add_argument("--seeks", type=int, default=200, help="random seeks per load")
    ap.add_argument("--repeat", type=int, default=3, help="loads")
    args = ap.parse_args()

    from abtui.runner.live_replay import Replay

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        t0 = time.perf_counter()
        write_session(path, args.requests, args.chunks, args.span)
        write_s = time.perf_counter() - t0
        loads, seeks, ends = [], [], []
        rng = np.random.default_rng(1)
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            rp = Replay(path)
            loads.append(time.perf_counter() - t0)
            for t in rng.uniform(0, rp.duration_s, args.seeks):
                t0 = time.perf_counter()
                views = [p.live.view() for p in rp.at(float(t))]
                seeks.append(time.perf_counter() - t0)
                assert views
            for _ in range(5):
                t0 = time.perf_counter()
                [p.live.view() for p in rp.end_state()]
                ends.append(time.perf_counter() - t0)
        size_mb = path.stat().st_size / 1e6

    vers = ", ".join(f"{p} {metadata.version(p)}" for p in ("numpy", "duckdb"))
    load = os.getloadavg()[0]
    print(
        f"# bench_replay — {platform.platform()}, {os.cpu_count()} cpus, Python "
        f"{platform.python_version()}, {vers}; load average at end {load:.1f}"
    )
    print(
        f"# session: {args.requests:,} requests x {args.chunks} chunks over {args.span:.0f} s, "
        f"{size_mb:.0f} MB, written in {write_s:.1f} s"
    )
    seeks.sort()
    rows = [
        (
            "load (Replay(path), one read)",
            f"{statistics.median(loads) * 1e3:,.0f} ms",
            f"median of {len(loads)}",
        ),
        (
            "seek: snapshot + views, random t",
            f"{statistics.median(seeks) * 1e3:.2f} ms",
            f"P99 {seeks[int(0.99 * (len(seeks) - 1))] * 1e3:.2f} ms of {len(seeks)}",
        ),
        ("end state + views", f"{statistics.median(ends) * 1e3:.2f} ms", f"median of {len(ends)}"),
    ]
    print(f"| {'what':34} | {'time':>10} | {'':24} |")
    print(f"|{'-' * 36}|{'-' * 12}|{'-' * 26}|")
    for what, t, note in rows:
        print(f"| {what:34} | {t:>10} | {note:24} |")


if __name__ == "__main__":
    main()
