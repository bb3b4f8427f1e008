"""``abtui demo``: an A/B session against two simulated GPUs, offline, in about two minutes.

Two simulated endpoints run in child processes (:class:`~abtui.sim.process.SimProcess`), each
the batching engine of a preset (default: Llama-3-8B on an H100 in BF16 against the same in
FP8 weights); a seeded chat-like workload (:func:`abtui.workload.synthetic.chat_items`:
lognormal prompt and answer lengths, Poisson arrivals) is replayed against both at the same
instants, and the headless summary is printed and the session file written, as ``abtui run``
does. Every GPU figure behind it is simulated; nothing needs a GPU or the network.

The default load (13 req/s of ~512-token prompts and ~160-token answers, at most 32 requests in
a batch) keeps a batch of a few dozen requests running on BF16, about 80% of what it can serve:
decode is memory-bound there, so FP8 weights show about half the TPOT, and the BF16 arm, slower
to drain its batch, has requests queueing at times (its TTFT tail grows) while FP8 keeps up.

Quality (``--no-quality`` skips it): after the load test the built-in ``niah`` and ``keys``
suites (:data:`QUALITY_SUITES`, :data:`QUALITY_PER_CELL` haystacks per length, lengths up to
what the model's 8k context holds: 1k–4k) go to both arms, greedy and paired, answered by the
simulator's quality face (:mod:`abtui.sim.quality_face`); the summary and the verdict show the
quality table. The gate's margin is :data:`QUALITY_MARGIN` (15 pp): suites of 30-45 items
cannot show less (the verdict would be INCONCLUSIVE, "underpowered"). At these lengths the faces put FP8 weights 0.3 pp below BF16 — less than one
flip in a few dozen items — so the expected accuracy result is no difference, and the demo says
so after the verdict (:func:`quality_note`) rather than pretend to a drop; the simulated
logprobs (:mod:`abtui.sim.logprobs`) do show FP8's small shift (top-1 agreement below 100%,
KL > 0).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime

from abtui.errors import UsageError

BASELINE = "h100:llama-3-8b:bf16"
CANDIDATE = "h100:llama-3-8b:fp8"
QUALITY_SUITES = ["niah", "keys"]
QUALITY_PER_CELL = 5  # haystacks per context length: 30 keys and 45 niah items per arm
# The demo's quality gate. 30-45 items cannot show non-inferiority within 1 pp (that takes ~380
# items with no flipped answer), so the demo gates at 15 pp and says so; a real run sizes its
# suites for the margin it needs (the verdict prints how many items would decide).
QUALITY_MARGIN = 0.15
# --profile: the window, in the modelled GPU's seconds (divided by the time scale): after the
# first arrivals have filled the batch, and long enough for a few hundred decode steps
PROFILE_AFTER_S = 10.0
PROFILE_FOR_S = 3.0
PROFILE_STEPS = 500  # a trace of more takes the simulator seconds more to write, stalling it
# --profile at the default request count: the window's requests (~100 per arm) are left out
# of the latency figures, and a P99 guardrail needs 1,000 left
PROFILE_REQUESTS = 1250


@dataclass(slots=True)
class DemoOptions:
    baseline_preset: str = BASELINE
    candidate_preset: str = CANDIDATE
    requests: int = 1100  # per arm: 85 s of arrivals; a P99 guardrail needs ≥ 1000 ok requests
    rate: float = 13.0  # requests/s (Poisson): ~80% of what the BF16 arm can serve
    time_scale: float = 1.0  # >1: the simulated GPUs run that many times faster
    max_num_seqs: int = 32  # running batch cap per endpoint (vLLM's --max-num-seqs)
    seed: int = 0
    name: str | None = None
    sessions_dir: str | None = None
    slo_ttft_s: float = 0.2
    slo_tpot_s: float = 0.01
    quality: bool = True  # the niah and keys suites after the load test
    profile: bool = False  # each simulator profiles a window of the load (docs/profile.md)


def arm_names(baseline: str, candidate: str) -> tuple[str, str]:
    """Short arm names: the preset fields that differ (``bf16`` / ``fp8``)."""
    a, b = baseline.lower().split(":"), candidate.lower().split(":")
    if a == b:
        return "baseline", "candidate"
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return ":".join(a[i] for i in diff), ":".join(b[i] for i in diff)
    return baseline, candidate


def _sim_config(flag: str, preset: str, opts: DemoOptions, traces: str | None = None):
    from abtui.sim.engine import SimConfig
    from abtui.sim.preset_cli import PresetOptions
    from abtui.sim.profiler import ProfilerConfig

    # the same seed on both arms: identical text, and paired quality-face draws
    po = PresetOptions(preset, time_scale=opts.time_scale, max_num_seqs=opts.max_num_seqs)
    # --profile: vLLM's --profiler-config, with the step annotations that carry the KV lengths
    prof = ProfilerConfig(traces, detailed=True) if traces else None
    cfg = SimConfig(port=0, seed=opts.seed, preset=po, profiler=prof)
    try:
        cfg.validate()
    except UsageError as exc:
        raise UsageError(f"{flag}: {exc.message}", exc.hint) from None
    return cfg


def _hardware(preset: str, opts: DemoOptions) -> dict:
    """The simulated GPU, model and dtypes of an arm, for the diagnosis's roofline and MBU;
    none when the sim runs faster than real time (its times are then not the GPU's)."""
    from abtui.hardware.models import model_names
    from abtui.sim.presets import parse_preset

    p = parse_preset(preset)
    if opts.time_scale != 1 or p.model.name not in model_names():
        return {}
    return {
        "gpu": p.gpu.name,
        "model_preset": p.model.name,
        "dtype": p.weight_dtype,
        "kv_dtype": p.kv_dtype,
        "gpus": p.tp,
    }


def build_spec(
    opts: DemoOptions,
    urls: tuple[str, str],
    n_items: int,
    median_in: int,
    median_out: int,
    dists: tuple[str, str] | None = None,
):
    from abtui.spec import ArmSpec, Spec, validate

    a_name, b_name = arm_names(opts.baseline_preset, opts.candidate_preset)
    spec = Spec(
        name=opts.name or datetime.now().strftime("demo-%Y%m%d-%H%M%S"),
        arms=[
            ArmSpec(
                name=a_name, url=urls[0], role="baseline", **_hardware(opts.baseline_preset, opts)
            ),
            ArmSpec(
                name=b_name, url=urls[1], role="candidate", **_hardware(opts.candidate_preset, opts)
            ),
        ],
    )
    w = spec.workload
    w.requests, w.input_tokens, w.output_tokens, w.seed = n_items, median_in, median_out, opts.seed
    if dists:  # the lengths the caller's items were drawn from, not fixed medians
        w.input_dist, w.output_dist = dists
    spec.load.rate = opts.rate
    spec.load.arrival = "poisson"
    # SLOs of the modelled GPU, on the endpoint's clock (which runs time_scale times faster)
    spec.slo = {
        "ttft": opts.slo_ttft_s / opts.time_scale,
        "tpot": opts.slo_tpot_s / opts.time_scale,
    }
    if opts.sessions_dir:
        spec.store.dir = opts.sessions_dir
    if opts.profile:  # a window of the load; FP8 weights target the GEMMs
        spec.profile.enabled = True
        spec.profile.after_s = PROFILE_AFTER_S / opts.time_scale
        spec.profile.duration_s = PROFILE_FOR_S / opts.time_scale
        spec.profile.steps = PROFILE_STEPS
        spec.profile.optimises = ["gemm"]
    if opts.quality:
        spec.quality.suites = list(QUALITY_SUITES)
        spec.quality.per_cell = QUALITY_PER_CELL
        spec.quality.margin = QUALITY_MARGIN
    return validate(spec, "demo")


def quality_note(path, baseline: str, candidate: str) -> str | None:
    """What the simulated quality faces predict for the session's quality items, next to how
    finely its item counts can resolve a difference (None when no quality rows were stored)."""
    from abtui.quality.prompts import TASKS
    from abtui.sim.presets import parse_preset
    from abtui.sim.quality_face import accuracy, variant_of
    from abtui.store.reader import SessionReader

    with SessionReader(path) as rd:
        rows = [json.loads(r["detail"]) for r in rd.quality() if r["arm"] == 0]
        lp = rd.meta().get("quality_logprobs") or {}
    va, vb = (variant_of(parse_preset(p)) for p in (baseline, candidate))
    by_suite: dict[str, list[float]] = {}
    for d in rows:
        if d["suite"] in TASKS:
            n = d.get("context_tokens") or 0
            by_suite.setdefault(d["suite"], []).append(
                accuracy(d["suite"], vb, n) - accuracy(d["suite"], va, n)
            )
    if not by_suite:
        return None
    a, b = arm_names(baseline, candidate)
    parts = [
        f"{suite} {100 * sum(x) / len(x):+.1f} pp over {len(x)} items (one flip "
        f"{100 / len(x):.1f} pp)"
        for suite, x in sorted(by_suite.items())
    ]
    small = all(abs(sum(x) / len(x)) < 1 / len(x) for x in by_suite.values())
    tail = (
        " — less than one flip: no accuracy difference is the expected result here, not a "
        "measurement failure"
        if small
        else ""
    )
    if small and lp and all(x.get("supported") for x in lp.values()):
        tail += "; the logprob agreement line shows the small shift the task scores cannot"
    return f"demo: the simulator's model of quality expects {b} vs {a}: " + "; ".join(parts) + tail


def intro(opts: DemoOptions, spec, shape) -> str:
    """What the demo is about to run, in the words the run's own header uses for the load
    (:func:`abtui.runner.session.describe_load`: "poisson 13 req/s"), and whether its request
    count lets a P99 guardrail be called (:func:`abtui.metrics.tails.tail_min_n`)."""
    from abtui.metrics.tails import tail_min_n
    from abtui.runner.session import describe_load

    need = tail_min_n("p99")
    if opts.requests >= need:
        enough = f"enough for the P99 guardrails, which need {need:,} per arm"
    else:
        enough = (
            f"below the {need:,} per arm a P99 guardrail needs: the P99 rows will be "
            "INCONCLUSIVE and the verdict cannot be GO"
        )
    scale = f", time scale ×{opts.time_scale:g}" if opts.time_scale != 1 else ""
    lengths = (
        f"lognormal prompts median {shape.input_median} tokens (σ {shape.input_sigma:g}), "
        f"outputs median {shape.output_median} (σ {shape.output_sigma:g})"
    )
    lines = [
        f"abtui demo: two simulated GPUs on 127.0.0.1 — baseline {opts.baseline_preset}, "
        f"candidate {opts.candidate_preset} (simulated, at most {opts.max_num_seqs} requests "
        f"in a batch{scale})",
        f"  workload: {opts.requests} chat-like requests per arm ({enough}), "
        f"{describe_load(spec)}, {lengths}",
    ]
    if opts.profile:
        lines.append(
            f"  profile: each simulator profiles {PROFILE_FOR_S:g} s of the load, "
            f"{PROFILE_AFTER_S:g} s in (at most {PROFILE_STEPS} steps; modelled seconds), for an "
            "optimisation of GEMM/GEMV; the window's requests are left out of the latency figures"
        )
    if opts.quality:
        lines.append(
            f"  quality: {', '.join(QUALITY_SUITES)} after the load test, gated at "
            f"{QUALITY_MARGIN * 100:g} pp (a demo-sized suite cannot show 1 pp; "
            "--no-quality skips)"
        )
    return "\n".join(lines)


def run_demo(opts: DemoOptions, run_and_report, note_to=None):
    """Start the two simulated endpoints, replay the workload through ``run_and_report(spec,
    items)`` (the CLI's run + summary), stop the endpoints; returns what it returned (the CLI:
    its exit code). ``note_to``: a stream for :func:`quality_note` after the run (the CLI's
    stdout, under the verdict it printed)."""
    import sys

    from abtui.report.console import say
    from abtui.sim.process import SimProcess
    from abtui.workload.synthetic import ChatShape, chat_items

    if opts.time_scale <= 0:
        raise UsageError(f"--time-scale {opts.time_scale:g} is invalid", "give a factor > 0")
    shape = replace(ChatShape(), cv=1.0)  # Poisson: what the summary's load line says
    items = chat_items(opts.requests, opts.rate, opts.seed, shape)
    if opts.profile and not opts.name:  # the traces' folder is named after the session
        opts = replace(opts, name=datetime.now().strftime("demo-%Y%m%d-%H%M%S"))
    traces = _trace_dirs(opts)
    base_cfg = _sim_config("--baseline-preset", opts.baseline_preset, opts, traces[0])
    cand_cfg = _sim_config("--candidate-preset", opts.candidate_preset, opts, traces[1])
    with SimProcess(base_cfg) as a, SimProcess(cand_cfg) as b:
        spec = build_spec(
            opts,
            (a.url, b.url),
            len(items),
            shape.input_median,
            shape.output_median,
            dists=shape.dists(),
        )
        say(intro(opts, spec, shape), sys.stderr)
        rc = run_and_report(spec, items)
    if note_to is not None and (opts.quality or opts.profile):
        from abtui.runner.session import session_path

        path = session_path(spec)[1]
        if opts.profile and path.exists():
            for line in profile_note(path, opts.baseline_preset, opts.candidate_preset):
                say(line, note_to)
        note = (
            opts.quality
            and path.exists()
            and quality_note(path, opts.baseline_preset, opts.candidate_preset)
        )
        if note:
            say(note, note_to)
    return rc


def _trace_dirs(opts: DemoOptions) -> tuple[str | None, str | None]:
    """Where each simulator writes its traces with ``--profile``: beside the session file,
    ``<sessions>/<name>.traces/<arm>``."""
    if not opts.profile:
        return None, None
    from pathlib import Path

    from abtui.spec.model import StoreSpec

    root = Path(opts.sessions_dir or StoreSpec().dir).resolve() / f"{opts.name}.traces"
    a, b = arm_names(opts.baseline_preset, opts.candidate_preset)
    return str(root / a), str(root / b)


def profile_note(path, baseline: str, candidate: str) -> list[str]:
    """The profile the run stored beside what the simulator's roofline predicts for the same
    steps (:func:`abtui.sim.profile_check.expected_shares`): per arm and phase, GEMM/GEMV's and
    the gaps' shares of the time and the time per step."""
    from abtui.errors import AbtuiError
    from abtui.profile.render import duration
    from abtui.sim.profile_check import expected_shares
    from abtui.store.reader import SessionReader

    with SessionReader(path) as rd:
        doc = rd.meta().get("profile") or {}
    presets = dict(zip(arm_names(baseline, candidate), (baseline, candidate), strict=True))
    out, worst = [], 0.0
    for arm in doc.get("arms") or []:
        phases = (arm.get("profile") or {}).get("phases") or {}
        if not arm.get("traces") or arm["name"] not in presets:
            continue
        try:
            want = expected_shares(arm["traces"][0], presets[arm["name"]])
        except (AbtuiError, OSError):  # the traces were moved away since
            continue
        for phase in ("prefill", "decode", "mixed"):
            got, exp = (phases.get(phase) or {}).get("share_of_time"), want.get(phase)
            if not got or not exp:
                continue
            g, i = got.get("gemm", 0.0), got.get("idle", 0.0)
            worst = max(worst, abs(g - exp["gemm"]), abs(i - exp["idle"]))
            out.append(
                f"  {arm['name']} {phase}: GEMM/GEMV {100 * g:.1f} % (roofline "
                f"{100 * exp['gemm']:.1f} %), gaps {100 * i:.1f} % ({100 * exp['idle']:.1f} %), "
                f"{duration(phases[phase].get('per_step_us'))} / step "
                f"({duration(exp['per_step_us'])})"
            )
    if not out:
        return []
    head = (
        "demo: the profile against the simulator's roofline of the same steps (share of each "
        f"phase's time; the roofline's in brackets): within {100 * worst:.2f} points"
    )
    return [head, *out]
