"""Profile the demo's two simulated arms and show the profiles: the figures in docs/profile.md.

Starts one simulator process per preset (``python -m abtui.sim --preset … --profiler-config
…``, loopback), asks each for ``/start_profile``, sends the same burst of requests to each,
``/stop_profile``, then runs ``abtui profile show`` on the two traces with the Amdahl line for
an optimisation of GEMM/GEMV and the roofline cross-check::

    python scripts/profile_sim.py --out /tmp/sim-profile
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import httpx

from abtui.cli import main as abtui_main
from abtui.demo import BASELINE, CANDIDATE
from abtui.sim.engine import SimConfig
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.process import SimProcess
from abtui.sim.profiler import ProfilerConfig


async def _burst(url: str, n: int, prompt: int, max_tokens: int) -> None:
    body = {"prompt": " ".join(["word"] * prompt), "max_tokens": max_tokens, "ignore_eos": True}
    limits = httpx.Limits(max_connections=n)
    async with httpx.AsyncClient(trust_env=False, timeout=300, limits=limits) as c:
        got = await asyncio.gather(*[c.post(url + "/completions", json=body) for _ in range(n)])
    assert all(r.status_code == 200 for r in got), [r.text for r in got if r.status_code != 200]


def profile(preset: str, folder: Path, args: argparse.Namespace) -> str:
    cfg = SimConfig(
        preset=PresetOptions(preset, time_scale=args.time_scale),
        profiler=ProfilerConfig(str(folder), detailed=True),
    )
    with SimProcess(cfg) as sim, httpx.Client(trust_env=False, timeout=300) as c:
        base = sim.url.removesuffix("/v1")
        c.post(base + "/start_profile").raise_for_status()
        asyncio.run(_burst(sim.url, args.requests, args.prompt, args.max_tokens))
        r = c.post(base + "/stop_profile")
        r.raise_for_status()
        return r.json()["trace"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the two traces")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens (words)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--time-scale", type=float, default=4.0)
    args = ap.parse_args()
    traces = {}
    for name, preset in (("bf16", BASELINE), ("fp8", CANDIDATE)):
        traces[name] = profile(preset, args.out / name, args)
        print(f"{name} ({preset}): {traces[name]}", file=sys.stderr)
    argv = ["profile", "show", *(f"{k}={v}" for k, v in traces.items())]
    argv += ["--optimises", "gemm", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--top", "1"]
    (args.out / "traces.json").write_text(json.dumps(traces))
    return abtui_main(argv)


if __name__ == "__main__":
    sys.exit(main())
