#!/usr/bin/env python3
"""The simulator against published vLLM runs (the table in docs/simulator.md).

Source: Lambda's vLLM benchmark (vLLM 0.6, September 2024), ``benchmark_serving`` with 10
ShareGPT prompts sent at once; files ``results/prompt_10/<gpus>/<model>_len2048.json`` of
https://github.com/LambdaLabsML/vllm-benchmark. Below: the prompt lengths of the ten requests,
the output lengths each run produced, and the run's published median TTFT, median TPOT, duration
and the per-token time once one request remained (its 10-token ITL chunks / 10). The sim serves
the same ten requests (``BatchEngine.simulate``) and prints published / simulated.

    python scripts/sim_vs_published.py
"""

from __future__ import annotations

import statistics

from abtui.sim.batching import BatchEngine
from abtui.sim.offline import simulate
from abtui.sim.presets import parse_preset

PROMPTS = [13, 25, 27, 10, 329, 29, 399, 328, 4, 205]
# preset: (source, output lengths, median TTFT ms, median TPOT ms, duration s, ms/token 1 left)
RUNS = {
    "h100:llama-3-8b:bf16": (
        "1xH100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1",
        [120, 429, 233, 194, 101, 741, 9, 3, 6, 31],
        62.2,
        7.56,
        5.37,
        7.05,
    ),
    "h100:llama-3.1-8b:fp8": (
        "1xH100-80GB-SXM/Meta-Llama-3.1-8B-FP8_tp1",
        [120, 1, 1, 194, 0, 40, 0, 0, 6, 80],
        62.5,
        5.20,
        1.07,
        4.94,
    ),
    "a100:llama-3-8b:bf16": (
        "1xA100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1",
        [120, 507, 233, 194, 101, 741, 9, 3, 6, 31],
        126.7,
        12.01,
        8.59,
        11.30,
    ),
    "h100:llama-3-70b:bf16:tp=4": (
        "4xH100-80GB-SXM/Meta-Llama-3-70B-Instruct_tp4",
        [120, 661, 233, 194, 101, 741, 0, 0, 6, 35],
        140.6,
        18.12,
        13.07,
        17.00,
    ),
}


def _cell(published: float, simulated: float, digits: int) -> str:
    return f"{published:.{digits}f} / {simulated:.{digits}f} ({simulated / published - 1:+.0%})"


def main() -> None:
    print("| preset | median TTFT ms | median TPOT ms | run s | ms/token, 1 left |")
    print("|---|---|---|---|---|")
    for name, (source, outs, ttft, tpot, duration, alone) in RUNS.items():
        preset = parse_preset(name)
        # a request that produced no token was still prefilled: give it one
        res = simulate(
            BatchEngine(preset), [(0.0, p, max(o, 1)) for p, o in zip(PROMPTS, outs, strict=True)]
        )
        sim_ttft = statistics.median(r.ttft for r in res) * 1e3
        sim_tpot = statistics.median(r.tpot for r, o in zip(res, outs, strict=True) if o > 1) * 1e3
        sim_duration = max(r.finished for r in res)
        sim_alone = simulate(BatchEngine(preset), [(0.0, 29, 742)])[0].tpot * 1e3
        print(
            f"| `{name}` ({source}) | {_cell(ttft, sim_ttft, 0)} | {_cell(tpot, sim_tpot, 2)} | "
            f"{_cell(duration, sim_duration, 2)} | {_cell(alone, sim_alone, 2)} |"
        )


if __name__ == "__main__":
    main()
