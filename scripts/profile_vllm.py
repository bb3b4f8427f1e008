"""Profile a real vLLM CPU server (SmolLM2-135M) and show the profile: docs/profile.md's figures.

Starts ``vllm.entrypoints.openai.api_server`` with the torch profiler configured
(:func:`abtui.engine.vllm_server.profiler_args`), sends ``--requests`` completions one after the
other between ``/start_profile`` and ``/stop_profile``, then runs ``abtui profile show`` on the
trace vLLM wrote (needs vLLM in this interpreter and ``abtui engine fetch smollm2 --hf``)::

    python scripts/profile_vllm.py --out /tmp/vllm-profile
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx

from abtui.cli import main as abtui_main
from abtui.engine.vllm_server import profiled_smollm2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the trace and the log")
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=8)
    args = ap.parse_args()
    srv = profiled_smollm2(args.out)
    if srv is None:
        print("run `abtui engine fetch smollm2 --hf` first", file=sys.stderr)
        return 2
    traces = args.out / "traces"
    with srv, httpx.Client(trust_env=False, timeout=300) as c:
        print(f"vllm up in {srv.startup_s:.0f} s", file=sys.stderr)
        c.post(srv.base + "/start_profile").raise_for_status()
        for i in range(args.requests):
            body = {"model": "smollm2", "prompt": "The harbour at dawn, " * (10 + 5 * i)}
            body |= {"max_tokens": args.max_tokens, "temperature": 0.0}
            c.post(srv.url + "/completions", json=body).raise_for_status()
        t0 = time.monotonic()
        c.post(srv.base + "/stop_profile").raise_for_status()
        print(f"/stop_profile took {time.monotonic() - t0:.1f} s", file=sys.stderr)
    found = sorted(traces.glob("*.pt.trace.json*"))
    if not found:
        print(f"no trace in {traces}", file=sys.stderr)
        return 1
    return abtui_main(["profile", "show", str(found[-1]), "--top", "4", "--optimises", "gemm"])


if __name__ == "__main__":
    sys.exit(main())
