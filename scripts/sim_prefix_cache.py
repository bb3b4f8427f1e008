#!/usr/bin/env python3
"""The simulator's prefix cache seen from a client: one request at a time behind a shared prefix.

Two simulated endpoints (``--preset``, default h100:llama-3-8b:bf16, time scale 1) run in child
processes, one with prefix caching (the default) and one with ``--no-prefix-caching``. To each,
``--requests`` chat requests are sent one after the other over loopback: a system prompt of
``--system`` words shared by all, then a question of its own (20 words), ``max_tokens`` 1, so a
request's wall time is its prefill (plus the HTTP round trip). Printed per endpoint and request:
the ``usage.prompt_tokens_details.cached_tokens`` the response says and the wall time; then the
``vllm:prefix_cache_*`` counters of ``/metrics``.

    python scripts/sim_prefix_cache.py
    python scripts/sim_prefix_cache.py --system 4000 --requests 4
"""

from __future__ import annotations

import argparse
import os
import time

import httpx

from abtui.sim.engine import SimConfig
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.process import SimProcess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="h100:llama-3-8b:bf16")
    ap.add_argument("--system", type=int, default=1000, help="shared words (default 1000)")
    ap.add_argument("--requests", type=int, default=3)
    args = ap.parse_args()
    system = " ".join(f"s{i}" for i in range(args.system))
    print(f"sim_prefix_cache: {args.preset}, load average {os.getloadavg()[0]:.2f}")
    for caching in (True, False):
        cfg = SimConfig(preset=PresetOptions(args.preset, prefix_caching=caching))
        with SimProcess(cfg) as sim, httpx.Client(trust_env=False) as c:
            c.get(sim.url + "/models")  # connect first
            print(f"prefix caching {'on' if caching else 'off'}:")
            for q in range(args.requests):
                body = {
                    "messages": [
                        {"role": "system", "content": system},
                        {"role": "user", "content": f"question {q} " * 10},
                    ],
                    "max_tokens": 1,
                }
                t = time.perf_counter()
                usage = c.post(sim.url + "/chat/completions", json=body).json()["usage"]
                dt = time.perf_counter() - t
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                print(
                    f"  request {q}: {usage['prompt_tokens']} prompt tokens, {cached} cached, "
                    f"{dt * 1e3:.1f} ms"
                )
            metrics = c.get(sim.url.removesuffix("/v1") + "/metrics").text
            for line in metrics.splitlines():
                if line.startswith("vllm:prefix_cache"):
                    print("  " + line)


if __name__ == "__main__":
    main()
