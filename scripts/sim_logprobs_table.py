#!/usr/bin/env python3
"""What the simulator's logprobs (abtui/sim/logprobs.py, simulated) give per variant, and what
they cost: the table in docs/simulator.md ("Logprobs").

For each variant against BF16 weights and KV, over ``--seeds`` sim seeds (each seed is another
simulated model): the perplexity of abtui's fixed text (echo + logprobs, as abtui.quality.ppl
asks) relative to BF16, and top-1 agreement and the KL lower bound on BF16's greedy
continuation of abtui's 16 fixed prompts (as abtui.quality.logprobs collects and compares
them). Medians over seeds, with the range. Cost: wall time of ``score`` per generated token (16
prompts × 16 tokens) and per echoed prompt token, medians of ``--repeat``. In-process, no HTTP.

    python scripts/sim_logprobs_table.py
    python scripts/sim_logprobs_table.py --seeds 30 --repeat 5
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time
from importlib import metadata

from abtui.quality.logprobs import TOP_K, compare, prompts
from abtui.quality.ppl import FIXED_TEXT
from abtui.sim.engine import SimRequest
from abtui.sim.logprobs import Model, score

VARIANTS = (("fp8", "bf16"), ("int4", "bf16"), ("bf16", "fp8"), ("fp8", "fp8"), ("int4", "fp8"))


def _req(prompt: str, k: int, echo: bool, max_tokens: int) -> SimRequest:
    return SimRequest(
        req_id=1,
        chat=False,
        prompt=prompt,
        prompt_tokens=len(prompt.split()),
        max_tokens=max_tokens,
        arrival_ns=0,
        logprobs=k,
        echo=echo,
    )


def ppl(model: Model) -> float:
    lp = score(model, _req(FIXED_TEXT, 1, True, 1)).logprobs["token_logprobs"][1:-1]
    return math.exp(-sum(lp) / len(lp))


def seqs(model: Model) -> list:
    out = []
    for p in prompts():
        lp = score(model, _req(p, TOP_K, False, 16)).logprobs
        out.append([[t, top] for t, top in zip(lp["tokens"], lp["top_logprobs"], strict=True)])
    return out


def _fmt(xs: list[float], f: str) -> str:
    return f"{format(statistics.median(xs), f)} ({format(min(xs), f)} – {format(max(xs), f)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print(
        f"# sim_logprobs_table — {platform.system()}-{platform.release()} {platform.machine()}, "
        f"{os.cpu_count()} cpus, Python {platform.python_version()}, "
        f"abtui {metadata.version('abtui')}; load average {os.getloadavg()[0]:.2f} at start; "
        f"{a.seeds} seeds (medians, range)"
    )
    print("| weights | KV | PPL vs bf16 | top-1 agreement | KL lower bound (nats) |")
    print("|---|---|--:|--:|--:|")
    base = {s: (ppl(Model(s)), seqs(Model(s))) for s in range(a.seeds)}
    for w, kv in VARIANTS:
        r, top1, kl = [], [], []
        for s in range(a.seeds):
            m = Model(s, w, kv)
            r.append(ppl(m) / base[s][0] - 1)
            c = compare(base[s][1], seqs(m))
            top1.append(c.top1_agreement)
            kl.append(c.kl_lower_bound)
        print(
            f"| {w} | {kv} | {_fmt([x * 100 for x in r], '+.1f')} % | "
            f"{_fmt([x * 100 for x in top1], '.1f')} % | {_fmt(kl, '.4f')} |"
        )
    gen, pre = [], []
    for _ in range(a.repeat):
        t = time.perf_counter()
        seqs(Model(0, "int4", "fp8"))
        gen.append((time.perf_counter() - t) / (16 * len(prompts())) * 1e6)
        t = time.perf_counter()
        ppl(Model(0, "int4", "fp8"))
        pre.append((time.perf_counter() - t) / len(FIXED_TEXT.split()) * 1e6)
    print(
        f"\ncost (int4, kv fp8; median of {a.repeat}): {statistics.median(gen):.0f} µs per "
        f"generated token, {statistics.median(pre):.0f} µs per echoed prompt token"
    )


if __name__ == "__main__":
    main()
