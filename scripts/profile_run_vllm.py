"""``abtui run --profile`` against a real vLLM CPU server: docs/profile.md's figures.

The baseline is vLLM serving SmolLM2-135M with the torch profiler configured
(:func:`abtui.engine.vllm_server.profiler_args`, its traces in ``OUT/traces``: vLLM's
``/stop_profile`` names no file, so the run is told where with ``--profile-trace``); the
candidate is a simulator started with ``--profiler-config`` (it answers its trace's path). The
run profiles a window of both, stores the analysis and prints it (needs vLLM in this
interpreter and ``abtui engine fetch smollm2 --hf``)::

    python scripts/profile_run_vllm.py --out /tmp/vllm-run-profile
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from abtui.cli import main as abtui_main
from abtui.engine.vllm_server import profiled_smollm2
from abtui.sim.engine import SimConfig
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.process import SimProcess
from abtui.sim.profiler import ProfilerConfig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for traces, log, session")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--rate", type=float, default=2.0)
    args = ap.parse_args()
    srv = profiled_smollm2(args.out)
    if srv is None:
        print("run `abtui engine fetch smollm2 --hf` first", file=sys.stderr)
        return 2
    traces = args.out / "traces"
    sim = SimConfig(
        preset=PresetOptions("h100:llama-3-8b:bf16", time_scale=4.0),
        profiler=ProfilerConfig(str(args.out / "sim-traces"), detailed=True),
    )
    with srv, SimProcess(sim) as s:
        print(f"vllm up in {srv.startup_s:.0f} s", file=sys.stderr)
        argv = ["run", "--headless", "--baseline", srv.url, "--candidate", s.url]
        argv += ["--requests", str(args.requests), "--rate", str(args.rate)]
        argv += ["--input-tokens", "64", "--output-tokens", "16", "--model", "smollm2"]
        argv += ["--profile-after", "2s", "--profile-for", "3s", "--optimises", "gemm"]
        argv += ["--profile-trace", f"baseline={traces}", "--sessions-dir", str(args.out)]
        return abtui_main([*argv, "--name", "vllm-profile", "--overwrite"])


if __name__ == "__main__":
    sys.exit(main())
