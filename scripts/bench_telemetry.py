#!/usr/bin/env python3
"""What telemetry costs: the sampler's CPU share at 1 Hz, and its effect on the ITL
the client measures. Everything on 127.0.0.1; the figures are medians of repeats.

1. **Scrape cost.** A simulated H100 (``h100:llama-3-8b:bf16``) serves vLLM-named ``/metrics``
   with histograms and DCGM gauges; a :class:`~abtui.telemetry.sampler.TelemetryHub` scrapes it
   for ``--seconds`` at ``--interval``. Reported: the sampling threads' CPU time per poll and
   as a share of one core (CPU seconds / wall seconds), and the size of the scraped text. Also
   the parse + convert time of a text 20x larger (a big vLLM deployment's scrape is a few
   thousand lines), measured without the network.
2. **Effect on the client.** The same A/B run (two fixed-delay simulated endpoints, ITL 5 ms,
   ``--requests`` per arm at ``--rate``) with telemetry off and on (scraping the preset sim at
   ``--interval``), alternated ``--repeat`` times. Reported: median and P99 ITL per mode, and
   the on/off ratio (1.00 = no effect). Telemetry runs in the main process; the load
   generators are their own processes, so only CPU contention could reach them.

    python scripts/bench_telemetry.py                       # 1 Hz, 3 repeats
    python scripts/bench_telemetry.py --interval 0.1 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from importlib import metadata


def scrape_cost(url: str, seconds: float, interval: float) -> dict:
    from abtui.telemetry.sampler import ArmTelemetry, TelemetryHub

    hub = TelemetryHub([ArmTelemetry(0, "a", url)], interval)
    hub.start()
    t0 = time.perf_counter()
    time.sleep(seconds)
    rows, _ = hub.drain()
    hub.stop()
    wall = time.perf_counter() - t0
    return {"cpu_s": hub.cpu_s, "wall_s": wall, "polls": hub.polls, "rows": len(rows)}


def parse_cost(text: str, repeat: int = 20) -> float:
    from abtui.telemetry.scraper import PromScraper

    s = PromScraper(0, "http://127.0.0.1:1/metrics")
    times = []
    for k in range(repeat):
        t0 = time.process_time()
        s.rows_from_text(text, k)
        times.append(time.process_time() - t0)
    return statistics.median(times)


def big_text(text: str, copies: int) -> str:
    """``copies`` of the families, each under its own model_name (a multi-model scrape)."""
    return "".join(text.replace('model_name="', f'model_name="m{k}-') for k in range(copies))


def ab_run(urls, metrics_url, requests, rate, tmp, name) -> tuple[float, float]:
    from abtui.metrics.summary import summarize
    from abtui.runner.session import run_session
    from abtui.spec import ArmSpec, Spec, validate
    from abtui.store.reader import SessionReader

    on = metrics_url is not None
    spec = Spec(
        name=name,
        arms=[
            ArmSpec(name="a", url=urls[0], role="baseline", metrics_url=metrics_url or "off"),
            ArmSpec(name="b", url=urls[1], metrics_url=metrics_url or "off"),
        ],
    )
    spec.workload.requests, spec.workload.input_tokens, spec.workload.output_tokens = (
        requests,
        64,
        64,
    )
    spec.load.rate = rate
    spec.store.dir = tmp
    spec.store.text = False
    spec.telemetry.scrape = on
    res = run_session(validate(spec))
    with SessionReader(res.path) as rd:
        table = rd.request_table()
        n_tel = rd.query("SELECT count(*) FROM telemetry")[0][0]
    sums = [summarize(table, arm, {}) for arm in (0, 1)]
    assert (n_tel > 0) == on, "telemetry rows where none were expected, or none stored"
    return (statistics.mean(s.itl.p50 for s in sums), statistics.mean(s.itl.p99 for s in sums))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--seconds", type=float, default=20.0, help="scrape-cost run length")
    ap.add_argument("--requests", type=int, default=300, help="requests per arm per A/B run")
    ap.add_argument("--rate", type=float, default=30.0, help="requests/s per arm")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import httpx

    from abtui.sim.engine import SimConfig
    from abtui.sim.preset_cli import PresetOptions
    from abtui.sim.process import SimProcess
    from abtui.telemetry.scraper import metrics_url_for

    preset = SimProcess(SimConfig(preset=PresetOptions("h100:llama-3-8b:bf16")))
    fixed = [SimProcess(ttft_ms=20, itl_ms=5), SimProcess(ttft_ms=20, itl_ms=5)]
    with preset, fixed[0], fixed[1], tempfile.TemporaryDirectory() as tmp:
        murl = metrics_url_for(preset.url)
        text = httpx.get(murl, timeout=5).text
        costs = [scrape_cost(murl, args.seconds, args.interval) for _ in range(args.repeat)]
        per_poll = statistics.median(c["cpu_s"] / max(1, c["polls"]) for c in costs)
        share = statistics.median(c["cpu_s"] / c["wall_s"] for c in costs)
        big = big_text(text, 20)
        t_small, t_big = parse_cost(text), parse_cost(big)

        urls = [f.url for f in fixed]
        itl = {"off": [], "on": []}
        for k in range(args.repeat):
            for mode in ("off", "on") if k % 2 == 0 else ("on", "off"):
                m = murl if mode == "on" else None
                itl[mode].append(ab_run(urls, m, args.requests, args.rate, tmp, f"{mode}{k}"))

    def ver(d):
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            return "-"

    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {' '.join(f'{x:.2f}' for x in load)} (after the run)"
    )
    print(
        f"python {platform.python_version()}, abtui {ver('abtui')}, httpx {ver('httpx')}, "
        f"duckdb {ver('duckdb')}; interval {args.interval:g} s, {args.repeat} repeats"
    )
    print()
    print(f"{'scrape cost':<44}{'median':>14}")
    print(
        f"{'  /metrics text (preset sim)':<44}{len(text.splitlines()):>8} lines"
        f" {len(text) / 1024:>5.1f} KiB"
    )
    print(f"{'  sampler CPU per poll (fetch+parse+map)':<44}{per_poll * 1e3:>11.2f} ms")
    print(f"{'  sampler CPU share of one core':<44}{share * 100:>12.3f} %")
    print(f"{'  parse+map, same text, no network':<44}{t_small * 1e3:>11.2f} ms")
    print(f"{f'  parse+map, 20x text ({len(big.splitlines())} lines)':<44}{t_big * 1e3:>11.2f} ms")
    print()
    p50 = {m: statistics.median(v[0] for v in itl[m]) for m in itl}
    p99 = {m: statistics.median(v[1] for v in itl[m]) for m in itl}
    print(f"{'client ITL (fixed-delay sim, 5 ms)':<44}{'off':>10}{'on':>10}{'on/off':>9}")
    print(
        f"{'  P50 ITL (ms)':<44}{p50['off'] * 1e3:>10.3f}{p50['on'] * 1e3:>10.3f}"
        f"{p50['on'] / p50['off']:>9.3f}"
    )
    print(
        f"{'  P99 ITL (ms)':<44}{p99['off'] * 1e3:>10.3f}{p99['on'] * 1e3:>10.3f}"
        f"{p99['on'] / p99['off']:>9.3f}"
    )
    print(
        f"  per run (P50, P99 ms): off {[(round(a * 1e3, 3), round(b * 1e3, 3)) for a, b in itl['off']]}"
    )
    print(
        f"                         on  {[(round(a * 1e3, 3), round(b * 1e3, 3)) for a, b in itl['on']]}"
    )


if __name__ == "__main__":
    sys.exit(main())
