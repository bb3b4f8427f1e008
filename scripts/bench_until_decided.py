#!/usr/bin/env python3
"""Real ``--until-decided`` runs against two simulators on 127.0.0.1 (docs/verdict.md §11):
how often an A/A run (identical simulators, different seeds) ends GO or NO-GO, and when a
faster candidate stops.

Each repeat starts two fresh simulators (``abtui.sim``), runs a session in this process
(``abtui.runner.session.run_session``, real load generators, a session file under ``--dir``)
with ``load.until_decided``, and reads the stored ``sequential`` key and the verdict:

- ``aa``: both simulators at ``--ttft-ms`` / ``--itl-ms`` with 1 ms jitter. A false call is a
  final GO or NO-GO.
- ``fast``: the candidate ``--speedup`` times faster (TTFT and ITL). Reported: the pairs and
  seconds at the stop, and the share GO.

``--sim fixed`` (the default) is the fixed-delay simulator above; ``--sim preset`` the
continuous-batching one (``--preset`` on both arms for ``aa``, ``--fast-preset`` as the
candidate for ``fast``, ``--time-scale`` times faster than the modelled GPU): queueing and
batching dynamics instead of independent delays.

    nice -n 10 python scripts/bench_until_decided.py --cells aa --repeats 20 --budget 300
    nice -n 10 python scripts/bench_until_decided.py --cells fast --repeats 10 --speedup 1.25
    nice -n 10 python scripts/bench_until_decided.py --sim preset --cells aa --repeats 50
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _spec(a: str, b: str, args, name: str, out: Path, seed: int):
    from abtui.spec import Spec, validate
    from abtui.spec.model import ArmSpec

    spec = Spec(
        name=name,
        arms=[ArmSpec(name="base", url=a), ArmSpec(name="cand", url=b)],
    )
    spec.workload.requests = args.budget
    spec.workload.input_tokens, spec.workload.output_tokens = 16, 8
    spec.workload.seed = seed
    spec.load.rate, spec.load.until_decided = args.rate, True
    spec.store.dir, spec.store.text = str(out), False
    spec.policy.resamples = 1000  # the fixed-n view only: the verdict is the sequential one
    if args.guardrails:
        spec.policy.guardrails = args.guardrails.split(",")
    return validate(spec, "bench")


def _sims(cell: str, k: int, args):
    """The baseline's and candidate's simulator configurations of repeat ``k``."""
    from abtui.sim.engine import SimConfig

    if args.sim == "preset":
        from abtui.sim.preset_cli import PresetOptions

        cand = args.fast_preset if cell == "fast" else args.preset
        return (
            SimConfig(
                seed=2 * k + 1, preset=PresetOptions(args.preset, time_scale=args.time_scale)
            ),
            SimConfig(seed=2 * k + 2, preset=PresetOptions(cand, time_scale=args.time_scale)),
        )
    f = args.speedup if cell == "fast" else 1.0
    base = SimConfig(seed=2 * k + 1, ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, jitter_ms=1.0)
    cand = SimConfig(
        seed=2 * k + 2, ttft_ms=args.ttft_ms / f, itl_ms=args.itl_ms / f, jitter_ms=1.0
    )
    return base, cand


def one(cell: str, k: int, args, out: Path) -> dict:
    from abtui.runner.session import run_session
    from abtui.sim.process import SimProcess
    from abtui.verdict.saved import session_verdict

    base, cand = _sims(cell, k, args)
    with SimProcess(base) as a, SimProcess(cand) as b:
        spec = _spec(a.url, b.url, args, f"{cell}-{k}", out, seed=k)
        t = time.monotonic()
        res = run_session(spec, overwrite=True)
        wall = time.monotonic() - t
    sv = session_verdict(res.path)
    seq = sv.meta.get("sequential") or {}
    return {
        "sim": args.sim,
        "cell": cell,
        "repeat": k,
        "status": res.status,
        "result": sv.result,
        "decision": seq.get("decision"),
        "stop_reason": seq.get("stop_reason"),
        "pairs": seq.get("pairs"),
        "stopped_at": seq.get("stopped_at"),
        "looks": len(seq.get("looks") or []),
        "look_s": seq.get("look_s"),
        "wall_s": round(wall, 1),
    }


def summarise(rows: list[dict]) -> list[str]:
    out = [
        "| sim | cell | runs | GO | NO-GO | INCONCLUSIVE | stopped early | pairs (median) "
        "| s (median) |"
    ]
    out.append("|---|---|--:|--:|--:|--:|--:|--:|--:|")
    for sim, cell in sorted({(r.get("sim", "fixed"), r["cell"]) for r in rows}):
        rs = [r for r in rows if r["cell"] == cell and r.get("sim", "fixed") == sim]
        n = len(rs)
        count = {x: sum(r["result"] == x for r in rs) for x in ("GO", "NO-GO", "INCONCLUSIVE")}
        early = sum(r["stop_reason"] == "decided" for r in rs)
        pairs = statistics.median(r["pairs"] or 0 for r in rs)
        wall = statistics.median(r["wall_s"] for r in rs)
        out.append(
            f"| {sim} | {cell} | {n} | {count['GO']} | {count['NO-GO']} | {count['INCONCLUSIVE']} | "
            f"{early} | {pairs:.0f} | {wall:.1f} |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cells", default="aa,fast", help="aa, fast (comma-separated)")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--budget", type=int, default=300, help="requests per arm")
    p.add_argument("--rate", type=float, default=60.0, help="requests/s per arm")
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--itl-ms", type=float, default=2.0)
    p.add_argument("--speedup", type=float, default=1.25, help="fast: candidate this × faster")
    p.add_argument("--guardrails", default="ttft.p50,tpot.p50", help="'' for the defaults")
    p.add_argument("--sim", choices=("fixed", "preset"), default="fixed")
    p.add_argument("--preset", default="h100:llama-3-8b:bf16", help="--sim preset: both arms")
    p.add_argument("--fast-preset", default="h100:llama-3-8b:fp8", help="--sim preset: fast")
    p.add_argument("--time-scale", type=float, default=10.0, help="--sim preset")
    p.add_argument("--summarise", nargs="*", help="only pool these --json files' rows")
    p.add_argument("--dir", help="session files (default: a temporary folder)")
    p.add_argument("--json", help="write every run's row here")
    args = p.parse_args(argv)
    if args.summarise:
        rows = [r for f in args.summarise for r in json.loads(Path(f).read_text())]
        print("\n".join(summarise(rows)))
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.dir or tmp)
        out.mkdir(parents=True, exist_ok=True)
        for cell in args.cells.split(","):
            for k in range(args.repeats):
                r = one(cell, k, args, out)
                rows.append(r)
                print(json.dumps(r), file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("\n".join(summarise(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
