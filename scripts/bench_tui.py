#!/usr/bin/env python3
"""Does the TUI change what is measured? The same A/B run (two fixed-delay simulated endpoints
on 127.0.0.1, closed loop at ``--concurrency`` streams per arm) headless and with the TUI
attached (the Textual app in its headless test driver, rendering every update at 160x48: the
same work as on a terminal except writing to it), alternated ``--repeat`` times. Reported:
medians of the client's P50/P99 ITL and output tok/s per mode and the TUI/headless ratio
(1.00 = no effect), and the main process's CPU during the run, with the UI thread's share.
The load generators are their own processes; the TUI shares the main process with the
runner's collector only.

    python scripts/bench_tui.py                        # 256 streams per arm, ITL 50 ms, 3 repeats
    python scripts/bench_tui.py --relayout             # the TUI as before the redraw fix
    python scripts/bench_tui.py --concurrency 64 --itl-ms 20 --requests 512 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import threading
import time
from importlib import metadata


def make_spec(urls, concurrency: int, requests: int, tmp: str, name: str):
    from abtui.spec import ArmSpec, Spec, validate

    spec = Spec(
        name=name,
        arms=[
            ArmSpec(name="a", url=urls[0], role="baseline", metrics_url="off"),
            ArmSpec(name="b", url=urls[1], metrics_url="off"),
        ],
    )
    spec.workload.requests, spec.workload.input_tokens, spec.workload.output_tokens = (
        requests,
        64,
        64,
    )
    spec.load.concurrency = concurrency
    spec.store.dir = tmp
    spec.store.text = False
    spec.telemetry.scrape = False
    return validate(spec)


def timed(run):
    """``run()`` and the main process's CPU seconds (every thread: runner, collector, and the
    TUI while it renders the run), from the session's start to its end."""
    cpu0 = time.process_time()
    res = run()
    return res, time.process_time() - cpu0


def run_headless(spec):
    from abtui.runner.session import run_session

    return (*timed(lambda: run_session(spec)), 0.0)


def run_tui(spec):
    from abtui.runner.session import run_session
    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.verdict import VerdictScreen

    cpu: list[float] = []
    ui_clock = time.pthread_getcpuclockid(threading.main_thread().ident)  # the app's thread

    def job(obs, stop):
        ui0 = time.clock_gettime(ui_clock)
        res, s = timed(lambda: run_session(spec, "", obs, stop_request=stop))
        cpu.extend((s, time.clock_gettime(ui_clock) - ui0))
        return res

    async def drive():
        app = AbtuiApp(job=job)
        async with app.run_test(size=(160, 48)) as pilot:
            while app.running or not isinstance(app.screen, VerdictScreen):
                if app.error is not None:
                    raise SystemExit(f"run failed: {app.error}")
                await pilot.pause(0.2)
            await pilot.press("q")
        return app.result, cpu[0], cpu[1]

    return asyncio.run(drive())


def figures(res, cpu_s: float) -> tuple[float, float, float, float]:
    from abtui.metrics.summary import summarize
    from abtui.store.reader import SessionReader

    with SessionReader(res.path) as rd:
        table = rd.request_table()
    sums = [summarize(table, arm, {}) for arm in (0, 1)]
    return (
        statistics.mean(s.itl.p50 for s in sums),
        statistics.mean(s.itl.p99 for s in sums),
        sum(s.output_tokens_per_s for s in sums),
        cpu_s,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, default=256, help="streams per arm")
    ap.add_argument("--requests", type=int, default=1024, help="requests per arm per run")
    ap.add_argument(
        "--itl-ms",
        type=float,
        default=50.0,
        help="the simulated endpoints' ITL (at 10 ms, 256 streams per arm saturate a "
        "2-core box: chunks are read in bunches and ITL P50 reads 0)",
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--relayout",
        action="store_true",
        help="the TUI as before the fix: every widget update lays the screen out "
        "again (to measure what set_content saves)",
    )
    args = ap.parse_args()
    if args.relayout:
        from abtui.tui.screens import live
        from abtui.tui.widgets import charts

        def relayout(widget, content) -> None:
            widget.update(content)  # layout=True, whether or not anything changed

        charts.set_content = live.set_content = relayout

    from abtui.sim.process import SimProcess

    sims = [SimProcess(ttft_ms=20, itl_ms=args.itl_ms), SimProcess(ttft_ms=20, itl_ms=args.itl_ms)]
    got: dict[str, list] = {"headless": [], "tui": []}
    load0 = os.getloadavg()
    with sims[0], sims[1], tempfile.TemporaryDirectory() as tmp:
        urls = [s.url for s in sims]
        for k in range(args.repeat):
            for mode in ("headless", "tui") if k % 2 == 0 else ("tui", "headless"):
                spec = make_spec(urls, args.concurrency, args.requests, tmp, f"{mode}{k}")
                res, cpu, ui = run_headless(spec) if mode == "headless" else run_tui(spec)
                assert res.status == "complete", res.status
                got[mode].append((*figures(res, cpu), ui))

    def ver(d):
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            return "-"

    load = os.getloadavg()
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {load0[0]:.2f} before, {' '.join(f'{x:.2f}' for x in load)} after"
    )
    print(
        f"python {platform.python_version()}, abtui {ver('abtui')}, textual {ver('textual')}; "
        f"{args.concurrency} streams per arm (2 arms), {args.requests} requests per arm, "
        f"sim ITL {args.itl_ms:g} ms, {args.repeat} repeats (medians)"
        + (" (--relayout: the TUI before the fix)" if args.relayout else "")
    )
    print()
    print(f"{'':<28}{'headless':>12}{'TUI':>12}{'TUI/headless':>14}")
    for i, (lab, scale) in enumerate(
        (
            ("P50 ITL (ms)", 1e3),
            ("P99 ITL (ms)", 1e3),
            ("output tok/s (2 arms)", 1.0),
            ("main process CPU (s)", 1.0),
            ("  of which the UI thread (s)", 1.0),
        )
    ):
        h = statistics.median(v[i] for v in got["headless"]) * scale
        t = statistics.median(v[i] for v in got["tui"]) * scale
        ratio = f"{t / h:>14.3f}" if h else f"{'n/a':>14}"
        print(f"{lab:<28}{h:>12.3f}{t:>12.3f}{ratio}")
    for mode in got:
        print(
            f"  {mode:<9} per run (P50 ms, P99 ms, tok/s, CPU s, UI s): "
            + ", ".join(
                f"({a * 1e3:.2f}, {b * 1e3:.2f}, {c:,.0f}, {d:.2f}, {e:.2f})"
                for a, b, c, d, e in got[mode]
            )
        )


if __name__ == "__main__":
    main()
