#!/usr/bin/env python3
"""What interleaving the quality items with the load changes: the demo's A/B (two simulated
GPUs on 127.0.0.1, Llama-3-8B BF16 vs FP8, chat-like Poisson load, the ``niah`` and ``keys``
suites) with ``quality.mode`` ``separate`` and ``interleaved``, alternated ``--repeat`` times.
Reported per mode and arm, medians over the repeats: the load's client-side P50/P99 TTFT and
P50 TPOT (quality requests are never among them, but interleaved ones share the server with
them), the load generator's schedule lag P99 (the quality sender shares the machine with the
generators), and how many quality items went during the load.

    python scripts/bench_quality_modes.py                    # 390 requests (30 s), 3 repeats
    python scripts/bench_quality_modes.py --requests 720 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
from dataclasses import replace
from importlib import metadata


def run_once(urls, mode: str, opts, tmp: str, k: int) -> dict:
    from abtui.demo import build_spec
    from abtui.metrics.summary import summarize
    from abtui.runner.session import run_session
    from abtui.store.reader import SessionReader
    from abtui.workload.synthetic import ChatShape, chat_items

    shape = replace(ChatShape(), cv=1.0)
    items = chat_items(opts.requests, opts.rate, opts.seed, shape)
    spec = build_spec(opts, urls, len(items), shape.input_median, shape.output_median)
    spec.name = f"{mode}-{k}"
    spec.store.dir = tmp
    spec.quality.mode = mode
    res = run_session(spec, items=items)
    with SessionReader(res.path) as rd:
        t, meta = rd.request_table(), rd.meta()
        n_quality = len(rd.quality())
    out = {
        "status": res.status,
        "quality_rows": n_quality,
        "during": (meta.get("quality_interleaved") or {}).get("sent_during_load"),
    }
    for arm, a in enumerate(spec.arms):
        s = summarize(t, arm)
        out[a.name] = {
            "ttft_p50": s.ttft.p50,
            "ttft_p99": s.ttft.p99,
            "tpot_p50": s.tpot.p50,
            "lag_p99": meta["generator_health"]["arms"][a.name]["lag_p99_s"],
            "n": s.ok,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--requests", type=int, default=390, help="requests per arm (390: 30 s)")
    ap.add_argument("--rate", type=float, default=13.0, help="requests/s (the demo's 13)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per mode, alternated (3)")
    a = ap.parse_args()
    from abtui.demo import BASELINE, CANDIDATE, DemoOptions, _sim_config, arm_names
    from abtui.sim.process import SimProcess

    opts = DemoOptions(requests=a.requests, rate=a.rate)
    load0 = os.getloadavg()
    runs: dict[str, list[dict]] = {"separate": [], "interleaved": []}
    with (
        tempfile.TemporaryDirectory() as tmp,
        SimProcess(_sim_config("baseline", BASELINE, opts)) as sa,
        SimProcess(_sim_config("candidate", CANDIDATE, opts)) as sb,
    ):
        for k in range(a.repeat):
            for mode in runs:
                runs[mode].append(run_once((sa.url, sb.url), mode, opts, tmp, k))
    names = arm_names(BASELINE, CANDIDATE)
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in open("/proc/cpuinfo")
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    print(
        f"machine   {cpu}, {os.cpu_count()} CPUs; load average before "
        f"{load0[0]:.2f}, after {os.getloadavg()[0]:.2f} (1 min)"
    )
    print(f"versions  abtui {metadata.version('abtui')}, Python {platform.python_version()}")
    print(
        f"workload  demo presets {BASELINE} vs {CANDIDATE}, {a.requests} requests/arm at "
        f"{a.rate:g} req/s, quality niah+keys; medians of {a.repeat} alternated runs"
    )
    hdr = (
        f"{'mode':<12} {'arm':<5} {'ok':>4} {'TTFT P50':>9} {'TTFT P99':>9} {'TPOT P50':>9} "
        f"{'lag P99':>8} {'quality rows':>12} {'sent in load':>12}"
    )
    print(hdr + "\n" + "-" * len(hdr))
    for mode, rs in runs.items():
        for name in names:

            def med(key: str, rs=rs, name=name) -> float:
                return statistics.median(r[name][key] for r in rs) * 1e3

            during = [r["during"] for r in rs if r["during"] is not None]
            print(
                f"{mode:<12} {name:<5} {rs[0][name]['n']:>4} {med('ttft_p50'):9.1f} "
                f"{med('ttft_p99'):9.1f} {med('tpot_p50'):9.2f} {med('lag_p99'):8.2f} "
                f"{statistics.median(r['quality_rows'] for r in rs):>12g} "
                f"{statistics.median(during) if during else '-':>12}"
            )
    print("(ms; 'sent in load': quality rows sent before the last load request ended, both arms)")
    bad = [r["status"] for rs in runs.values() for r in rs if r["status"] != "complete"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
