"""``abtui demo --scenario prefix-caching``: prefix caching off against on, two simulated GPUs.

Both arms are the same preset (the demo's ``--baseline-preset``, Llama-3-8B BF16 on an H100);
the baseline serves with ``--no-prefix-caching``, the candidate with vLLM's automatic prefix
caching (:mod:`abtui.sim.prefix_cache`). The workload is what makes a prefix cache pay: chat
requests behind a few long shared system prompts (:data:`SYSTEMS` "apps", each
:data:`SYSTEM_TOKENS` tokens, a multiple of the 16-token block so that all of it can be served
from the cache) and a short question of their own (lognormal, median :data:`QUESTION_MEDIAN`
tokens, starting with the request's index so that questions share nothing), Poisson arrivals.

Expected, from the simulator's physics: the candidate computes only the question's tokens and
the last partial block of each prompt, so its prefill, and its TTFT, drop to a small part of the
baseline's, and about SYSTEM_TOKENS / prompt tokens of the prompt tokens are served from the
cache (the first request of each app misses); decode is the same on both. The responses' hit
rates (``usage.prompt_tokens_details.cached_tokens``) and the simulated server's
``vllm:prefix_cache_*`` counters appear in the diagnosis and the reports. No quality suites:
both arms run the same weights.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass

import numpy as np

SCENARIOS = ("precision", "prefix-caching")
SYSTEMS = 4  # distinct system prompts ("apps") the requests share
SYSTEM_TOKENS = 1024  # tokens of each system prompt: 64 blocks of 16
QUESTION_MEDIAN = 64  # the user's own question, tokens (median; lognormal σ 0.6)
OUTPUT_MEDIAN = 128  # max_tokens, median (lognormal σ 0.6)
ARMS = ("no-cache", "prefix-cache")


def shared_prefix_items(n: int, rate: float, seed: int, systems: int = SYSTEMS) -> list:
    """``n`` chat items at ``rate`` req/s (Poisson), each a system prompt drawn from
    ``systems`` shared ones followed by a question of its own."""
    from abtui.client.items import Item, synthetic_prompt
    from abtui.workload.synthetic import gamma_offsets, lognormal_lengths

    rng = np.random.default_rng(seed)
    words = random.Random(seed)
    # each app's prompt starts with its own name: no two share a block by accident
    prompts = [
        f"app{k} " + synthetic_prompt(SYSTEM_TOKENS - 1, words) for k in range(max(1, systems))
    ]
    app = rng.integers(0, len(prompts), size=n)
    q = lognormal_lengths(n, QUESTION_MEDIAN, 0.6, 8, 1024, rng)
    out_len = lognormal_lengths(n, OUTPUT_MEDIAN, 0.6, 8, 1024, rng)
    offsets = gamma_offsets(n, rate, 1.0, rng)
    return [
        Item(
            index=i,
            id=f"i{i}",
            arrival_s=offsets[i],
            messages=[
                {"role": "system", "content": prompts[app[i]]},
                {"role": "user", "content": f"{i} " + synthetic_prompt(q[i] - 1, words)},
            ],
            max_tokens=out_len[i],
            n_input=SYSTEM_TOKENS + q[i],
            tags=[f"app{app[i]}"],
        )
        for i in range(n)
    ]


@dataclass(slots=True)
class PrefixDemo:
    preset: str
    requests: int
    rate: float
    time_scale: float
    max_num_seqs: int
    seed: int
    name: str | None
    sessions_dir: str | None
    slo_ttft_s: float = 0.2
    slo_tpot_s: float = 0.01


def _sim_config(opts: PrefixDemo, caching: bool):
    from abtui.errors import UsageError
    from abtui.sim.engine import SimConfig
    from abtui.sim.preset_cli import PresetOptions

    po = PresetOptions(
        opts.preset,
        time_scale=opts.time_scale,
        max_num_seqs=opts.max_num_seqs,
        prefix_caching=caching,
    )
    cfg = SimConfig(port=0, seed=opts.seed, preset=po)
    try:
        cfg.validate()
    except UsageError as exc:
        raise UsageError(f"--baseline-preset: {exc.message}", exc.hint) from None
    return cfg


def build_spec(opts: PrefixDemo, urls: tuple[str, str], items: list):
    from datetime import datetime

    from abtui.demo import _hardware
    from abtui.spec import ArmSpec, Spec, validate

    hw = _hardware(opts.preset, opts)  # type: ignore[arg-type]
    spec = Spec(
        name=opts.name or datetime.now().strftime("demo-prefix-%Y%m%d-%H%M%S"),
        arms=[
            ArmSpec(name=ARMS[0], url=urls[0], role="baseline", **hw),
            ArmSpec(name=ARMS[1], url=urls[1], role="candidate", **hw),
        ],
    )
    w = spec.workload
    w.requests, w.seed = len(items), opts.seed
    w.input_tokens = SYSTEM_TOKENS + QUESTION_MEDIAN
    w.output_tokens = OUTPUT_MEDIAN
    spec.load.rate = opts.rate
    spec.load.arrival = "poisson"
    spec.policy.primary = "ttft.p50"
    spec.slo = {
        "ttft": opts.slo_ttft_s / opts.time_scale,
        "tpot": opts.slo_tpot_s / opts.time_scale,
    }
    if opts.sessions_dir:
        spec.store.dir = opts.sessions_dir
    return validate(spec, "demo --scenario prefix-caching")


def run_prefix_demo(opts: PrefixDemo, run_and_report):
    """Start the two endpoints (cache off, on), replay the shared-prefix workload through
    ``run_and_report(spec, items)``, stop them; returns what it returned."""
    from abtui.errors import UsageError
    from abtui.report.console import say
    from abtui.sim.process import SimProcess

    if opts.time_scale <= 0:
        raise UsageError(f"--time-scale {opts.time_scale:g} is invalid", "give a factor > 0")
    items = shared_prefix_items(opts.requests, opts.rate, opts.seed)
    scale = f", time scale ×{opts.time_scale:g}" if opts.time_scale != 1 else ""
    with SimProcess(_sim_config(opts, False)) as a, SimProcess(_sim_config(opts, True)) as b:
        spec = build_spec(opts, (a.url, b.url), items)
        say(
            f"abtui demo --scenario prefix-caching: two simulated GPUs on 127.0.0.1, both "
            f"{opts.preset} — baseline {ARMS[0]} (--no-prefix-caching), candidate {ARMS[1]} "
            f"(vLLM-style automatic prefix caching; simulated, at most {opts.max_num_seqs} "
            f"requests in a batch{scale})\n"
            f"  workload: {opts.requests} chat requests per arm, poisson {opts.rate:g} req/s; "
            f"each a system prompt of {SYSTEM_TOKENS} tokens shared by its app ({SYSTEMS} "
            f"apps) and a question of its own (median {QUESTION_MEDIAN} tokens), outputs "
            f"median {OUTPUT_MEDIAN}; primary TTFT P50; no quality suites (same weights)",
            sys.stderr,
        )
        return run_and_report(spec, items)
