"""``abtui demo --ablation``: a 2×2 factorial ablation on four simulated GPUs, offline.

The factors are two presets' fields of the same H100 serving Llama-3-8B (:data:`FACTORS`):
``int4`` (weight-only INT4: a quarter of the BF16 weight bytes, the matmuls still on BF16
tensor cores) and ``spec`` (speculative decoding, 4 draft tokens, 70 % accepted per token).
Arms: ``base`` (BF16), ``int4``, ``spec``, ``int4+spec``, each its own simulated endpoint, all
playing the same closed-loop schedule (:data:`CONCURRENCY` requests in flight per arm, so every
arm decodes batches of about the same size and the step-time physics shows, not queueing).

Why they interact (the simulator's roofline, :mod:`abtui.hardware.roofline`; nothing here sets
an outcome): a decode step costs ``max(bytes / bandwidth, FLOPs / peak)``. At a batch of a few
dozen BF16 decode is memory-bound: the weights dominate the bytes. Speculative decoding verifies
``k + 1 = 5`` tokens per request per step, five times the FLOPs for nearly the same bytes — free
while memory-bound, which is where its gain comes from. INT4 weights cut the bytes by ~4× but
not the FLOPs, so the step's ridge (where compute takes over) comes at a quarter of the batch;
with both, ``5 × batch`` verify tokens push the step past the ridge and the extra FLOPs are no
longer free: the combination gains less than the two gains multiplied (an antagonistic
interaction on TPOT). W8A8 FP8 halves bytes *and* FLOP time (FP8 tensor cores) and, by the same
physics, composes with speculation almost exactly (``abtui sim predict`` shows both).

Quality (``--no-quality`` skips it): after the load test the built-in ``niah`` and ``keys``
suites go to all four arms, greedy and paired (:data:`QUALITY_PER_CELL` haystacks per length,
1k–4k), answered by the simulator's quality face (:mod:`abtui.sim.quality_face`): INT4 weights
lose a few answers; speculative decoding loses none (greedy verification keeps exactly the
target model's tokens, and the face answers from the weights), so ``spec`` answers as ``base``
and ``int4+spec`` as ``int4``, and every item's difference in differences is 0. The factorial's
quality section shows that interaction with its score interval (docs/ablation.md); the gate's
margin is the demo's :data:`abtui.demo.QUALITY_MARGIN` (15 pp), which 45 niah and 30 keys items
with no combination-only flip clear (the interval is ±z²/(n + z²): ±7.9 and ±11.4 pp).
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime

GPU_MODEL = "h100:llama-3-8b"
FACTORS = {"int4": "int4", "spec": "spec=k4a0.7"}  # factor → what it changes in the preset
CONCURRENCY = 48  # closed loop, per arm
QUALITY_PER_CELL = 5  # haystacks per length: 45 niah and 30 keys items per arm (as abtui demo)


def preset_of(on: tuple[str, ...]) -> str:
    weights = "int4" if "int4" in on else "bf16"
    tail = ":" + FACTORS["spec"] if "spec" in on else ""
    return f"{GPU_MODEL}:{weights}{tail}"


ARMS = [("base", ()), ("int4", ("int4",)), ("spec", ("spec",)), ("int4+spec", ("int4", "spec"))]


@dataclass(slots=True)
class AblationOptions:
    requests: int = 1100  # per arm: a P99 guardrail needs ≥ 1000 ok requests
    concurrency: int = CONCURRENCY
    time_scale: float = 1.0
    seed: int = 0
    name: str | None = None
    sessions_dir: str | None = None
    max_num_seqs: int = 64
    resamples: int = 2000  # the demo's bootstrap: 4 arms, 5 pair verdicts and the factorial
    quality: bool = True  # the niah and keys suites after the load test


def build_spec(
    opts: AblationOptions,
    urls: list[str],
    n_items: int,
    median_in: int,
    median_out: int,
    dists: tuple[str, str] | None = None,
):
    from abtui.spec import ArmSpec, Spec, validate

    spec = Spec(
        name=opts.name or datetime.now().strftime("demo-ablation-%Y%m%d-%H%M%S"),
        arms=[
            ArmSpec(name=n, url=u, role="baseline" if not on else "candidate")
            for (n, on), u in zip(ARMS, urls, strict=True)
        ],
    )
    spec.ablation.factors = list(FACTORS)
    w = spec.workload
    w.requests, w.input_tokens, w.output_tokens, w.seed = n_items, median_in, median_out, opts.seed
    if dists:  # the lengths the caller's items were drawn from, not fixed medians
        w.input_dist, w.output_dist = dists
    spec.load.concurrency = opts.concurrency
    spec.policy.primary = "tpot.p50"
    spec.policy.resamples = opts.resamples
    if opts.sessions_dir:
        spec.store.dir = opts.sessions_dir
    if opts.quality:
        from abtui.demo import QUALITY_MARGIN, QUALITY_SUITES

        spec.quality.suites = list(QUALITY_SUITES)
        spec.quality.per_cell = QUALITY_PER_CELL
        spec.quality.margin = QUALITY_MARGIN
    return validate(spec, "demo --ablation")


def run_ablation_demo(opts: AblationOptions, run_and_report):
    """Start four simulated endpoints, run the 2×2 through ``run_and_report(spec, items)`` (the
    CLI's run + summary + verdict), stop them; returns what it returned."""
    from abtui.demo import DemoOptions as _Demo
    from abtui.demo import _sim_config
    from abtui.sim.process import SimProcess
    from abtui.workload.synthetic import ChatShape, chat_items

    shape = ChatShape()
    items = chat_items(opts.requests, 1.0, opts.seed, shape)  # closed loop: arrivals unused
    base = _Demo(time_scale=opts.time_scale, max_num_seqs=opts.max_num_seqs, seed=opts.seed)
    cfgs = [_sim_config(f"--ablation {n}", preset_of(on), base) for n, on in ARMS]
    print(
        "abtui demo --ablation: a 2×2 factorial on four simulated H100s (Llama-3-8B): "
        + ", ".join(f"{n} = {preset_of(on)}" for n, on in ARMS)
        + f"\n  workload: {opts.requests} chat-like requests per arm, closed loop, "
        f"{opts.concurrency} in flight per arm; {shape.describe().split(', gamma')[0]}"
        + (
            "\n  quality: niah and keys after the load test on all four arms (the simulator's "
            "quality faces: int4 weights lose a few answers, speculative decoding none, so the "
            "accuracy interaction should be 0; --no-quality skips)"
            if opts.quality
            else ""
        ),
        file=sys.stderr,
    )
    with ExitStack() as stack:
        sims = [stack.enter_context(SimProcess(c)) for c in cfgs]
        spec = build_spec(
            opts,
            [s.url for s in sims],
            len(items),
            shape.input_median,
            shape.output_median,
            dists=shape.dists(),
        )
        return run_and_report(spec, items)
