"""``abtui run`` and ``abtui demo``: the run's options, the flags laid over the spec, the run
under the TUI (on a terminal) or headless (:mod:`abtui.headless`), and the exit code."""

from __future__ import annotations

import argparse
import sys

from abtui.cli.types import bounded
from abtui.errors import UsageError
from abtui.metrics.summary import SLO_KEYS
from abtui.report.untrusted import inert
from abtui.spec.model import (
    APIS,
    CostSpec,
    LoadSpec,
    PolicySpec,
    RaySpec,
    RequestSpec,
    StoreSpec,
    WorkloadSpec,
)
from abtui.stats.decide import COST_KEYS, RATE_KEYS

_W, _L, _R, _S, _C, _P, _RAY = (
    WorkloadSpec(),
    LoadSpec(),
    RequestSpec(),
    StoreSpec(),
    CostSpec(),
    PolicySpec(),
    RaySpec(),
)  # the defaults the help states


# --until-decided with no budget given: room for the default P99 guardrails (~1,000 pairs
# before they can be bounded) and for a 10 % effect under moderate dependence
UNTIL_DECIDED_REQUESTS = 2_000


def add_run_options(p: argparse.ArgumentParser) -> None:
    """``abtui run``'s options, in groups in the order a user needs them: what to compare, how
    hard and how long, what to send, what counts as good, where it goes; then quality, the
    verdict, and the schedules, scale-out and ablations of larger experiments."""
    g = p.add_argument_group("arms: what to compare")
    g.add_argument(
        "--baseline", metavar="URL", help="baseline endpoint, e.g. http://127.0.0.1:8001/v1"
    )
    g.add_argument(
        "--candidate",
        metavar="URL",
        action="append",
        default=None,
        help="candidate endpoint (repeat for several candidates)",
    )
    g.add_argument(
        "--model", help="model name for every arm (default: the first the endpoint lists)"
    )
    g.add_argument("--api", choices=APIS, help=f"API to use (default {_R.api})")
    g.add_argument(
        "--ca-bundle",
        metavar="FILE",
        help="trust this PEM CA file (private CA) for every https arm, on top of the system's",
    )
    g.add_argument(
        "--insecure",
        action="store_true",
        help="https without certificate checks, every arm (stored in the session, warned about)",
    )
    g = p.add_argument_group("load: how hard and how long")
    g.add_argument(
        "--rate", type=bounded("load.rate"), metavar="R", help="open loop: requests/s to every arm"
    )
    g.add_argument(
        "--concurrency",
        type=bounded("load.concurrency"),
        metavar="N",
        help="closed loop: requests in flight per arm (with --rate: a cap)",
    )
    g.add_argument(
        "--requests",
        type=bounded("workload.requests"),
        metavar="N",
        help="measured requests per arm (default 200, or every item of --workload)",
    )
    from abtui.cli.workload import (
        add_run_load_options,
        add_run_schedule_options,
        add_run_workload_options,
    )

    add_run_load_options(g, _L)
    g.add_argument(
        "--warmup",
        type=bounded("load.warmup"),
        metavar="N",
        help=f"warm-up requests per arm, stored and left out of every figure (default {_L.warmup})",
    )
    g.add_argument(
        "--until-decided",
        action="store_true",
        help="stop as soon as the anytime-valid verdict is decided (GO or NO-GO); --requests "
        f"/ --duration are then the budget ({UNTIL_DECIDED_REQUESTS:,} requests per arm "
        "when neither they nor a spec file or --workload set one; docs/verdict.md §11)",
    )
    g.add_argument(
        "--seed",
        type=bounded("workload.seed"),
        help=f"workload and schedule seed (default {_W.seed})",
    )
    g = p.add_argument_group("workload: what to send")
    g.add_argument(
        "--input-tokens",
        type=bounded("workload.input_tokens"),
        metavar="N",
        help=f"prompt length in tokens (default {_W.input_tokens})",
    )
    g.add_argument(
        "--output-tokens",
        type=bounded("workload.output_tokens"),
        metavar="N",
        help=f"max_tokens of each request (default {_W.output_tokens})",
    )
    add_run_workload_options(g, _W, _L)
    g = p.add_argument_group("SLOs and requests: what counts as good")
    g.add_argument(
        "--slo",
        metavar="SPEC",
        help="per-request SLOs, each with its unit (us, ms, s, m; a bare number is refused), "
        "e.g. ttft=500ms,tpot=50ms; keys: " + ", ".join(SLO_KEYS),
    )
    g.add_argument(
        "--timeout", metavar="DURATION", help=f"whole-request timeout (default {_R.timeout_s:g}s)"
    )
    g = p.add_argument_group("session: where it goes, how it shows")
    g.add_argument("--name", help="session name: sessions/<name>.duckdb (default: a timestamp)")
    g.add_argument(
        "--headless", action="store_true", help="print progress and the summary (no TUI)"
    )
    g.add_argument(
        "--sessions-dir", metavar="DIR", help=f"folder of session files (default {_S.dir})"
    )
    g.add_argument("--overwrite", action="store_true", help="replace an existing session file")
    g.add_argument("--no-store-text", action="store_true", help="do not store generated text")
    from abtui.cli.quality import add_quality_options

    add_quality_options(p)
    g = p.add_argument_group("verdict and cost")
    add_verdict_options(g)
    g.add_argument(
        "--aa",
        action="store_true",
        help="A/A calibration: send the baseline's schedule to the baseline twice, the copies "
        "taking turns (schedule alternate, A B | B A, at least 8 block pairs over --runs × "
        "--blocks; a parallel schedule is overridden: two copies at the same instants share "
        "engine steps), and store the measured noise floor, |bias| + 1.96 × between-block "
        "spread per metric (no --candidate needed)",
    )
    g = p.add_argument_group("schedule: sweeps, repeats, a shared GPU")
    add_run_schedule_options(g, _L)
    g = p.add_argument_group("scale-out: more load generators")
    g.add_argument(
        "--generators",
        type=bounded("load.generators"),
        metavar="N",
        help=f"load-generator processes per arm, for rates one core cannot keep (default {_L.generators})",
    )
    g.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run the load generators as Ray actors on a cluster: auto, ray://HEAD:10001 "
        "(bare --ray: $RAY_ADDRESS, else auto); docs/scale-out.md",
    )
    g.add_argument(
        "--ray-placement",
        choices=("spread", "pack"),
        help=f"place the generators over the nodes, or pack them (default {_RAY.placement})",
    )
    from abtui.cli.profile import add_run_profile_options

    add_run_profile_options(p)
    g = p.add_argument_group("factorial ablation (docs/ablation.md)")
    g.add_argument(
        "--factor",
        metavar="NAME=URL",
        action="append",
        default=None,
        help="the endpoint with only optimisation NAME switched on (2 or 3 factors; with "
        "--baseline and --combined)",
    )
    g.add_argument(
        "--combined",
        metavar="A+B=URL",
        action="append",
        default=None,
        help="the endpoint with factors A and B both on (every combination of the --factor "
        "names: one for 2 factors, four for 3)",
    )


def add_verdict_options(g) -> None:
    g.add_argument(
        "--primary",
        metavar="METRIC",
        help=f"primary objective (default {_P.primary}): METRIC.STAT with METRIC one of "
        "ttft, ttft_user, ttfo, tpot, tpot_reasoning, tpot_answer, itl, e2e and STAT one of "
        "mean, p50, p90, p95, p99; "
        "or " + ", ".join(RATE_KEYS + COST_KEYS),
    )
    g.add_argument(
        "--gpu-price",
        type=bounded("cost.gpu_price"),
        metavar="USD",
        help="USD per GPU-hour of every arm: adds $/Mtok and $ per 1k good requests",
    )
    g.add_argument(
        "--gpus", type=bounded("cost.gpus"), metavar="N", help=f"GPUs per arm (default {_C.gpus})"
    )
    g.add_argument(
        "--noise-floor",
        metavar="SESSION",
        help="an A/A session (abtui run --aa) whose noise floor raises δ",
    )


def verdict_overrides(args) -> tuple[dict, dict]:
    """(cost, policy) overrides from the verdict flags (None values: not given)."""
    from abtui.stats.decide import METRIC_KEYS

    if args.primary is not None and args.primary not in METRIC_KEYS:
        raise UsageError(
            f"--primary: unknown metric {args.primary!r}", "known: " + ", ".join(METRIC_KEYS)
        )
    cost = {"gpu_price": args.gpu_price, "gpus": args.gpus}
    policy = {"primary": args.primary, "noise_floor": args.noise_floor}
    return cost, policy


def _apply_aa(spec, args):
    """--aa: two arms, both the baseline (same URL, model, settings)."""
    import dataclasses

    if args.candidate:
        raise UsageError(
            "--aa sends the baseline's schedule to the baseline twice: drop --candidate"
        )
    if args.baseline:
        from abtui.spec import ArmSpec

        base = ArmSpec(name="baseline", url=args.baseline, role="baseline")
    elif spec.arms:
        base = next((a for a in spec.arms if a.role == "baseline"), spec.arms[0])
        base = dataclasses.replace(base, role="baseline")
    else:
        raise UsageError("--aa needs a baseline: --baseline URL or [[arms]] in the spec")
    again = dataclasses.replace(base, name=f"{base.name}-again", role="candidate")
    spec.arms = [base, again]
    return spec


def _aa_schedule(spec) -> str:
    """--aa, after the other flags: the copies alternate (never at the same instants) over at
    least AA_MIN_BLOCKS block pairs (runs × blocks). What was changed, in words ("" if nothing)."""
    from abtui.stats.noise_floor import AA_MIN_BLOCKS

    ld, said = spec.load, []
    if ld.schedule != "alternate":
        said.append(
            f"schedule {ld.schedule} → alternate (A B | B A: the copies never share an "
            "instant or an engine step)"
        )
        ld.schedule = "alternate"
    want = -(-AA_MIN_BLOCKS // max(1, ld.runs))
    if ld.blocks < want:
        said.append(
            f"blocks {ld.blocks} → {want} (≥ {AA_MIN_BLOCKS} block pairs over "
            f"{ld.runs} run(s), for the between-block spread)"
        )
        ld.blocks = want
    return "--aa: " + "; ".join(said) if said else ""


def _name_url(text: str, flag: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    if not sep or not name.strip() or not url.strip():
        raise UsageError(
            f"{flag} {text!r}: expected NAME=URL", f"e.g. {flag} fp8=http://127.0.0.1:8002/v1"
        )
    return name.strip(), url.strip()


def _apply_factorial(spec, args):
    """--factor NAME=URL … --combined A+B=URL … --baseline URL: the arms of a 2^k factorial
    (named base, NAME…, A+B…) and ``[ablation] factors``; the spec's validation checks that
    every combination is there."""
    from abtui.spec import ArmSpec
    from abtui.stats.factorial import BASE_NAME

    if not (args.baseline and args.factor):
        raise UsageError(
            "a factorial ablation needs --baseline URL and a --factor NAME=URL per factor",
            "e.g. --baseline URL0 --factor fp8=URL1 --factor spec=URL2 --combined fp8+spec=URL3",
        )
    if args.candidate:
        raise UsageError(
            "--candidate and --factor do not mix: every arm of a factorial is a combination",
            "give each endpoint as --factor NAME=URL or --combined A+B=URL",
        )
    factors = [_name_url(f, "--factor") for f in args.factor]
    combos = [_name_url(c, "--combined") for c in args.combined or []]
    spec.arms = [ArmSpec(name=BASE_NAME, url=args.baseline, role="baseline")]
    spec.arms += [ArmSpec(name=n, url=u, role="candidate") for n, u in factors + combos]
    spec.ablation.factors = [n for n, _ in factors]
    return spec


def apply_flags(spec, args):
    """Flags override the spec file: the cluster, the arms, the workload and load, then the
    request, store, cost and policy settings."""
    from abtui.cli.quality import apply_quality_options
    from abtui.cli.workload import apply_run_workload_options

    _apply_ray(spec, args)
    spec = _apply_arms(spec, args)
    _apply_endpoint(spec, args)
    _apply_load(spec, args)
    apply_run_workload_options(spec, args)
    apply_quality_options(spec, args)
    if args.rate is not None:
        spec.load.rate = args.rate
    if args.concurrency is not None:
        spec.load.concurrency = args.concurrency
    _apply_settings(spec, args)
    if hasattr(args, "profile_trace"):
        from abtui.cli.profile import apply_run_profile_options

        apply_run_profile_options(spec, args)
    if getattr(args, "aa", False):
        note = _aa_schedule(spec)
        if note:
            print(inert(note), file=sys.stderr)
    return spec


def _apply_ray(spec, args) -> None:
    if getattr(args, "ray", None) is not None:
        import os

        spec.ray.address = args.ray or os.environ.get("RAY_ADDRESS") or "auto"
    if getattr(args, "ray_placement", None):
        spec.ray.placement = args.ray_placement


def _apply_arms(spec, args):
    """The arms from --aa, --factor/--combined or --baseline/--candidate (else the spec's)."""
    from abtui.spec import ArmSpec

    if getattr(args, "aa", False):
        return _apply_aa(spec, args)
    if getattr(args, "factor", None) or getattr(args, "combined", None):
        return _apply_factorial(spec, args)
    if args.baseline or args.candidate:
        if not (args.baseline and args.candidate):
            raise UsageError(
                "give both --baseline URL and --candidate URL",
                "or put [[arms]] in a spec file",
            )
        arms = [ArmSpec(name="baseline", url=args.baseline, role="baseline")]
        cands = args.candidate
        for i, url in enumerate(cands):
            name = "candidate" if len(cands) == 1 else f"candidate{i + 1}"
            arms.append(ArmSpec(name=name, url=url, role="candidate"))
        spec.arms = arms
    return spec


def _apply_endpoint(spec, args) -> None:
    """--model, the TLS flags and --api, for every arm."""
    for a in spec.arms:
        if args.model:
            a.model = args.model
        if args.insecure:
            a.insecure, a.ca_bundle = True, None
        elif args.ca_bundle:
            a.ca_bundle = args.ca_bundle
        if args.api:
            a.api = args.api
    if args.api:
        spec.request.api = args.api


def _apply_load(spec, args) -> None:
    """The flags that set one spec field each, as given."""
    w, ld = spec.workload, spec.load
    for flag, obj, attr in (
        ("requests", w, "requests"),
        ("input_tokens", w, "input_tokens"),
        ("output_tokens", w, "output_tokens"),
        ("seed", w, "seed"),
        ("arrival", ld, "arrival"),
        ("warmup", ld, "warmup"),
        ("name", spec, "name"),
    ):
        v = getattr(args, flag)
        if v is not None:
            setattr(obj, attr, v)


def _apply_settings(spec, args) -> None:
    """SLOs, the request timeout, the store, cost and policy flags."""
    from abtui.spec import parse_duration, parse_slo_string

    if getattr(args, "until_decided", False):
        spec.load.until_decided = True
        given = (args.spec, args.requests, args.duration, args.workload)
        if all(x is None for x in given):  # P99 guardrails cannot be bounded below ~1,000
            spec.workload.requests = UNTIL_DECIDED_REQUESTS
    if args.slo:
        spec.slo = parse_slo_string(args.slo)
    if args.timeout:
        spec.request.timeout_s = _in_range(
            "request.timeout_s", parse_duration(args.timeout, "--timeout"), "--timeout"
        )
    if args.sessions_dir:
        spec.store.dir = args.sessions_dir
    if args.no_store_text:
        spec.store.text = False
    if args.gpu_price is not None:
        spec.cost.gpu_price = args.gpu_price
        for a in spec.arms:
            a.gpu_price = None
    if args.gpus is not None:
        spec.cost.gpus = args.gpus
        for a in spec.arms:
            a.gpus = None
    if args.primary is not None:
        spec.policy.primary = args.primary
    if args.noise_floor is not None:
        spec.policy.noise_floor = args.noise_floor


def _in_range(field: str, value, flag: str):
    """``value`` inside the limit table's row ``field``, else a usage error naming ``flag``."""
    from abtui import limits

    try:
        return limits.check(field, value, flag)
    except limits.OutOfRange as e:
        raise UsageError(str(e)) from None


def cmd_run(args) -> int:
    from abtui.headless import load_checked_spec

    spec, text = load_checked_spec(args.spec, lambda spec: apply_flags(spec, args))
    return run_and_report(spec, text, overwrite=args.overwrite, tui=use_tui(args))


def use_tui(args) -> bool:
    """The TUI on a terminal, unless --headless; plain output when piped or redirected."""
    return not args.headless and sys.stdin.isatty() and sys.stdout.isatty()


def run_in_tui(job):
    """Run ``job(observer, stop_event)`` under the live TUI; after the app closes, its result
    (the session) and the verdict the app computed and stored (a ``SessionVerdict``; None if
    it was left before). An error of the run (bad endpoint…) is raised here, as headless
    would."""
    from abtui.tui.app import AbtuiApp

    app = AbtuiApp(job=job)
    result = app.run()
    if app.error is not None:
        raise app.error
    if result is None:
        raise SystemExit(130)  # quit before the session started
    return result, app.verdict.sv if app.verdict is not None else None


def run_and_report(
    spec, text: str, *, overwrite: bool, items=None, gate: bool = True, tui: bool = False
) -> int:
    """Run under the TUI or headless, then print the summary and the verdict; the exit code
    (:mod:`abtui.headless` says which). The process gives big arrays back to the OS when it
    frees them (:func:`abtui.hardware.memory.big_arrays_to_the_os`): the summary and verdict at
    the end of a 100,000-request run peaked ~12 MB higher on the holes of the ones before."""
    from abtui.runner.prestart import Prestarted, generator_names, local_generators

    # the load generators start first: they import their modules while this process imports
    # its own, asks the endpoints and writes the session file (abtui.runner.prestart)
    gens = Prestarted(generator_names(spec)) if local_generators(spec) else None
    try:
        return _run_and_report(spec, text, overwrite, items, gate, tui, gens)
    finally:
        if gens is not None:  # a run that never launched them (a bad endpoint, a quit)
            gens.close()


def _run_and_report(spec, text, overwrite, items, gate, tui, gens) -> int:
    from abtui.hardware.memory import big_arrays_to_the_os
    from abtui.headless import report_run, run_headless

    big_arrays_to_the_os()

    if not tui:
        return run_headless(
            spec, text, overwrite=overwrite, items=items, gate=gate, generators=gens
        )
    from abtui.runner.session import run_session

    result, verdict = run_in_tui(
        lambda obs, stop: run_session(
            spec, text, obs, overwrite=overwrite, items=items, stop_request=stop, generators=gens
        )
    )
    return report_run(result, gate, verdict)  # the TUI's verdict printed, not computed again


def cmd_demo(args) -> int:
    """Two simulated GPUs on loopback, a chat-like workload, the summary (abtui.demo); with
    ``--ablation`` four, a 2×2 factorial (abtui.demo_ablation)."""
    from abtui.demo import DemoOptions, run_demo

    if args.ablation and getattr(args, "scenario", "precision") != "precision":
        raise UsageError("--ablation and --scenario are two demos", "pick one")
    if args.ablation:
        from abtui.demo_ablation import AblationOptions, run_ablation_demo

        if args.profile:
            raise UsageError("--profile goes with the A/B demo, not --ablation")

        opts = AblationOptions(
            requests=args.requests,
            time_scale=args.time_scale,
            seed=args.seed,
            name=args.name,
            sessions_dir=args.sessions_dir,
            quality=not args.no_quality,
        )
        return run_ablation_demo(
            opts,
            lambda spec, items: run_and_report(
                spec, "", overwrite=False, items=items, gate=False, tui=use_tui(args)
            ),
        )

    scenario = getattr(args, "scenario", "precision")
    if scenario == "prefix-caching":
        from abtui.demo_prefix import PrefixDemo, run_prefix_demo

        if args.profile:
            raise UsageError(
                "--profile goes with the precision demo (its FP8 candidate's Amdahl line)",
                "drop --profile, or --scenario",
            )
        prefix = PrefixDemo(
            preset=args.baseline_preset,
            requests=args.requests,
            rate=args.rate,
            time_scale=args.time_scale,
            max_num_seqs=DemoOptions().max_num_seqs,
            seed=args.seed,
            name=args.name,
            sessions_dir=args.sessions_dir,
        )
        return run_prefix_demo(
            prefix,
            lambda spec, items: run_and_report(
                spec, "", overwrite=False, items=items, gate=False, tui=use_tui(args)
            ),
        )
    from abtui.demo import PROFILE_REQUESTS

    requests = args.requests
    if args.profile and requests == DemoOptions().requests:  # room for the window's requests
        requests = PROFILE_REQUESTS
    opts = DemoOptions(
        baseline_preset=args.baseline_preset,
        candidate_preset=args.candidate_preset,
        requests=requests,
        rate=args.rate,
        time_scale=args.time_scale,
        seed=args.seed,
        name=args.name,
        sessions_dir=args.sessions_dir,
        quality=not args.no_quality,
        profile=args.profile,
    )
    return run_demo(
        opts,
        lambda spec, items: run_and_report(
            spec, "", overwrite=False, items=items, gate=False, tui=use_tui(args)
        ),
        note_to=sys.stdout,
    )
