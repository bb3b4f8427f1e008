"""Command line: subcommands → core calls. The TUI, when there is one, is imported lazily.

Every user error is an :class:`~abtui.errors.AbtuiError`, printed as one line with a hint, exit
code 2. Options with a bad value get the same treatment (no argparse usage dump).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from abtui import __version__
from abtui.errors import AbtuiError, UsageError
from abtui.metrics.summary import SLO_KEYS
from abtui.stats.decide import COST_KEYS, RATE_KEYS
from abtui.workload.cli import positive_number


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, a hint, exit code 2
        raise UsageError(f"{self.prog}: {message}", f"see `{self.prog} --help`")


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"expected a number ≥ {low}, got {v}")
        return v

    return parse


_positive_int, _nonneg_int = _int_at_least(1), _int_at_least(0)


_positive_float = positive_number(float)


def _add_run_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("arms")
    g.add_argument("--baseline", metavar="URL", help="baseline endpoint, e.g. http://127.0.0.1:8001/v1")
    g.add_argument(
        "--candidate", metavar="URL", action="append", default=None,
        help="candidate endpoint (repeat for several candidates)",
    )
    g.add_argument(
        "--factor", metavar="NAME=URL", action="append", default=None,
        help="factorial ablation: the endpoint with only optimisation NAME switched on (2 or 3 "
             "factors; with --baseline and --combined; docs/ablation.md)",
    )  # fmt: skip
    g.add_argument(
        "--combined", metavar="A+B=URL", action="append", default=None,
        help="factorial ablation: the endpoint with factors A and B both on (every combination "
             "of the --factor names: one for 2 factors, four for 3)",
    )  # fmt: skip
    g.add_argument("--model", help="model name for every arm (default: the first the endpoint lists)")
    g.add_argument("--api", choices=("completions", "chat"), help="API to use (default: completions)")
    g.add_argument("--ca-bundle", metavar="FILE",
                   help="trust this PEM CA file (private CA) for every https arm, on top of the system's")
    g.add_argument("--insecure", action="store_true",
                   help="https without certificate checks, every arm (stored in the session, warned about)")
    g = p.add_argument_group("workload and load")
    g.add_argument("--requests", type=_positive_int, help="measured requests per arm (default 200)")
    g.add_argument("--input-tokens", type=_positive_int, help="prompt length in tokens (default 512)")
    g.add_argument("--output-tokens", type=_positive_int, help="max_tokens of each request (default 128)")
    g.add_argument("--seed", type=int, help="workload and schedule seed (default 0)")
    g.add_argument("--rate", type=_positive_float, help="open loop: requests/s to every arm")
    g.add_argument("--arrival", choices=("poisson", "constant", "gamma", "replay"),
                   help="arrival process (default poisson; replay: the workload file's timestamps)")
    g.add_argument(
        "--concurrency", type=_positive_int,
        help="closed loop: requests in flight per arm (with --rate: a cap)",
    )
    g.add_argument("--warmup", type=_nonneg_int, help="warm-up requests per arm, excluded (default 2)")
    from abtui.workload.cli import add_run_workload_options

    add_run_workload_options(g)
    g = p.add_argument_group("SLOs and requests")
    g.add_argument("--slo", metavar="SPEC",
                   help="per-request SLOs, e.g. ttft=500ms,tpot=50ms; keys: " + ", ".join(SLO_KEYS))  # fmt: skip
    g.add_argument("--timeout", metavar="DURATION", help="whole-request timeout (default 600s)")
    g = p.add_argument_group("session")
    g.add_argument("--name", help="session name: sessions/<name>.duckdb (default: a timestamp)")
    g.add_argument("--sessions-dir", metavar="DIR", help="folder of session files (default sessions)")
    g.add_argument("--overwrite", action="store_true", help="replace an existing session file")
    g.add_argument("--no-store-text", action="store_true", help="do not store generated text")
    g.add_argument("--headless", action="store_true", help="print progress and the summary (no TUI)")
    g.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                   help="run the load generators as Ray actors on a cluster: auto, ray://HEAD:10001 "
                        "(bare --ray: $RAY_ADDRESS, else auto); docs/scale-out.md")
    g.add_argument("--ray-placement", choices=("spread", "pack"),
                   help="place the generators over the nodes (spread, the default) or pack them")
    from abtui.quality.cli import add_quality_options

    add_quality_options(p)
    g = p.add_argument_group("verdict")
    g.add_argument(
        "--aa", action="store_true",
        help="A/A calibration: send the baseline's schedule to the baseline twice, the copies "
             "taking turns (schedule alternate, A B | B A, at least 8 block pairs over --runs × "
             "--blocks; a parallel schedule is overridden: two copies at the same instants share "
             "engine steps), and store the measured noise floor, |bias| + 1.96 × between-block "
             "spread per metric (no --candidate needed)",
    )  # fmt: skip
    _add_verdict_options(g)


def _add_verdict_options(g) -> None:
    g.add_argument("--gpu-price", type=_nonneg_float, metavar="USD",
                   help="USD per GPU-hour of every arm: adds $/Mtok and $ per 1k good requests")
    g.add_argument("--gpus", type=_positive_int, metavar="N", help="GPUs per arm (default 1)")
    g.add_argument("--primary", metavar="METRIC",
                   help="primary objective (default e2e.p50): METRIC.STAT with METRIC one of ttft, "
                        "ttft_user, tpot, itl, e2e and STAT one of mean, p50, p90, p95, p99; or "
                        + ", ".join(RATE_KEYS + COST_KEYS))  # fmt: skip
    g.add_argument("--noise-floor", metavar="SESSION",
                   help="an A/A session (abtui run --aa) whose noise floor raises δ")  # fmt: skip


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number ≥ 0, got {text!r}")
    return v


def _verdict_overrides(args) -> tuple[dict, dict]:
    """(cost, policy) overrides from the verdict flags (None values: not given)."""
    from abtui.stats.decide import METRIC_KEYS

    if args.primary is not None and args.primary not in METRIC_KEYS:
        raise UsageError(f"--primary: unknown metric {args.primary!r}", "known: " + ", ".join(METRIC_KEYS))
    cost = {"gpu_price": args.gpu_price, "gpus": args.gpus}
    policy = {"primary": args.primary, "noise_floor": args.noise_floor}
    return cost, policy


def _apply_aa(spec, args):
    """--aa: two arms, both the baseline (same URL, model, settings)."""
    import dataclasses

    if args.candidate:
        raise UsageError("--aa sends the baseline's schedule to the baseline twice: drop --candidate")
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
        said.append(f"schedule {ld.schedule} → alternate (A B | B A: the copies never share an "
                    "instant or an engine step)")  # fmt: skip
        ld.schedule = "alternate"
    want = -(-AA_MIN_BLOCKS // max(1, ld.runs))
    if ld.blocks < want:
        said.append(f"blocks {ld.blocks} → {want} (≥ {AA_MIN_BLOCKS} block pairs over "
                    f"{ld.runs} run(s), for the between-block spread)")  # fmt: skip
        ld.blocks = want
    return "--aa: " + "; ".join(said) if said else ""


def _name_url(text: str, flag: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    if not sep or not name.strip() or not url.strip():
        raise UsageError(f"{flag} {text!r}: expected NAME=URL", f"e.g. {flag} fp8=http://127.0.0.1:8002/v1")
    return name.strip(), url.strip()


def _apply_factorial(spec, args):
    """--factor NAME=URL … --combined A+B=URL … --baseline URL: the arms of a 2^k factorial
    (named base, NAME…, A+B…) and ``[ablation] factors``; the spec's validation checks that
    every combination is there."""
    from abtui.spec import ArmSpec
    from abtui.stats.factorial import BASE_NAME

    if not (args.baseline and args.factor):
        raise UsageError("a factorial ablation needs --baseline URL and a --factor NAME=URL per factor",
                         "e.g. --baseline URL0 --factor fp8=URL1 --factor spec=URL2 --combined fp8+spec=URL3")
    if args.candidate:
        raise UsageError("--candidate and --factor do not mix: every arm of a factorial is a combination",
                         "give each endpoint as --factor NAME=URL or --combined A+B=URL")
    factors = [_name_url(f, "--factor") for f in args.factor]
    combos = [_name_url(c, "--combined") for c in args.combined or []]
    spec.arms = [ArmSpec(name=BASE_NAME, url=args.baseline, role="baseline")]
    spec.arms += [ArmSpec(name=n, url=u, role="candidate") for n, u in factors + combos]
    spec.ablation.factors = [n for n, _ in factors]
    return spec


def _apply_flags(spec, args):
    """Flags override the spec file."""
    from abtui.spec import ArmSpec, parse_duration, parse_slo_string

    if getattr(args, "ray", None) is not None:
        import os

        spec.ray.address = args.ray or os.environ.get("RAY_ADDRESS") or "auto"
    if getattr(args, "ray_placement", None):
        spec.ray.placement = args.ray_placement
    if getattr(args, "aa", False):
        spec = _apply_aa(spec, args)
    elif getattr(args, "factor", None) or getattr(args, "combined", None):
        spec = _apply_factorial(spec, args)
    elif args.baseline or args.candidate:
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
    if args.model:
        for a in spec.arms:
            a.model = args.model
    for a in spec.arms:  # TLS flags apply to every arm
        if args.insecure:
            a.insecure, a.ca_bundle = True, None
        elif args.ca_bundle:
            a.ca_bundle = args.ca_bundle
    if args.api:
        spec.request.api = args.api
        for a in spec.arms:
            a.api = args.api
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
    from abtui.workload.cli import apply_run_workload_options

    apply_run_workload_options(spec, args)
    from abtui.quality.cli import apply_quality_options

    apply_quality_options(spec, args)
    if args.rate is not None:
        ld.rate = args.rate
    if args.concurrency is not None:
        ld.concurrency = args.concurrency
    if args.slo:
        spec.slo = parse_slo_string(args.slo)
    if args.timeout:
        spec.request.timeout_s = parse_duration(args.timeout, "--timeout")
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
    if getattr(args, "aa", False):
        note = _aa_schedule(spec)
        if note:
            print(note, file=sys.stderr)
    return spec


def cmd_run(args) -> int:
    from abtui.spec import Spec, load_spec, validate

    if args.spec:
        spec, text = load_spec(args.spec)
        source = args.spec
    else:
        spec, text, source = Spec(), "", "command line"
    spec = validate(_apply_flags(spec, args), source)
    if spec.policy.noise_floor:  # a bad A/A session fails now, not after the whole run
        from abtui.verdict.session import load_noise_floor

        load_noise_floor(spec.policy.noise_floor)
    return _run_and_report(spec, text, overwrite=args.overwrite, tui=_use_tui(args))


def _use_tui(args) -> bool:
    """The TUI on a terminal, unless --headless; plain output when piped or redirected."""
    return not args.headless and sys.stdin.isatty() and sys.stdout.isatty()


def _run_in_tui(job):
    """Run ``job(observer, stop_event)`` under the live TUI; its result (the session) after the
    app closes. An error of the run (bad endpoint…) is raised here, as headless would."""
    from abtui.tui.app import AbtuiApp

    app = AbtuiApp(job=job)
    result = app.run()
    if app.error is not None:
        raise app.error
    if result is None:
        raise SystemExit(130)  # quit before the session started
    return result


def _run_and_report(spec, text: str, *, overwrite: bool, items=None, gate: bool = True,
                    tui: bool = False) -> int:  # fmt: skip
    """Run, print the summary and the verdict. Exit code: the verdict's (0 GO, 3 NO-GO,
    4 INCONCLUSIVE) for a complete run; 130 for an interrupted one (its verdict is still printed
    and stored, and cannot be GO); 1 when the run failed. ``gate=False`` (the demo): 0 for any
    complete run."""
    from abtui.report.console import HeadlessObserver
    from abtui.runner.session import run_session

    if tui:
        result = _run_in_tui(lambda obs, stop: run_session(
            spec, text, obs, overwrite=overwrite, items=items, stop_request=stop))  # fmt: skip
    else:
        result = run_session(spec, text, HeadlessObserver(sys.stderr), overwrite=overwrite,
                             items=items)  # fmt: skip
    return _report_run(result, gate)


def _report_run(result, gate: bool) -> int:
    """After a run: the summary, diagnosis and verdict printed; the exit code (see above)."""
    from abtui.report.console import print_session_summary

    print_session_summary(result.path, sys.stdout)
    from abtui.report.diagnosis import print_diagnosis

    print_diagnosis(result.path, sys.stdout)
    if result.status not in ("complete", "interrupted"):
        return 1
    sv = _print_verdict(result.path, {}, {})
    if result.status == "interrupted":
        return 130
    return sv.exit_code if gate else 0


def _print_verdict(path, cost: dict, policy: dict):
    from abtui.report.verdict_text import print_verdict
    from abtui.verdict.session import session_verdict

    sv = session_verdict(path, cost=cost, policy=policy)
    print_verdict(sv, sys.stdout)
    return sv


def cmd_demo(args) -> int:
    """Two simulated GPUs on loopback, a chat-like workload, the summary (abtui.demo); with
    ``--ablation`` four, a 2×2 factorial (abtui.demo_ablation)."""
    from abtui.demo import DemoOptions, run_demo

    if args.ablation:
        from abtui.demo_ablation import AblationOptions, run_ablation_demo

        opts = AblationOptions(requests=args.requests, time_scale=args.time_scale, seed=args.seed,
                               name=args.name, sessions_dir=args.sessions_dir)  # fmt: skip
        return run_ablation_demo(opts, lambda spec, items: _run_and_report(
            spec, "", overwrite=False, items=items, gate=False, tui=_use_tui(args)))  # fmt: skip

    opts = DemoOptions(
        baseline_preset=args.baseline_preset, candidate_preset=args.candidate_preset,
        requests=args.requests, rate=args.rate, time_scale=args.time_scale, seed=args.seed,
        name=args.name, sessions_dir=args.sessions_dir, quality=not args.no_quality,
    )  # fmt: skip
    return run_demo(
        opts,
        lambda spec, items: _run_and_report(
            spec, "", overwrite=False, items=items, gate=False, tui=_use_tui(args)
        ),
        note_to=sys.stdout,
    )


def cmd_sim_serve(args) -> int:
    from abtui.sim.cli_args import config_from_args
    from abtui.sim.server import serve

    serve(config_from_args(args))
    return 0


def cmd_roofline(args) -> int:
    """The pure roofline of a GPU x model x dtype (abtui.hardware.table)."""
    from abtui.hardware.gpus import get_gpu
    from abtui.hardware.models import get_model, load_hf_config
    from abtui.hardware.table import print_roofline
    from abtui.sim.predict import parse_batches

    if bool(args.model) == bool(args.model_config):
        raise UsageError("give --model NAME or --model-config FILE", "e.g. --model llama-3-8b")
    model = get_model(args.model) if args.model else load_hf_config(args.model_config)
    print_roofline(get_gpu(args.gpu), model, args.dtype, args.kv_dtype, parse_batches(args.batch),
                   args.context, sys.stdout, tp=args.tp)  # fmt: skip
    return 0


def cmd_sim_predict(args) -> int:
    from abtui.sim.batching import EngineOptions
    from abtui.sim.predict import parse_batches, print_prediction
    from abtui.sim.presets import parse_preset

    preset = parse_preset(args.preset, args.model_config)
    options = EngineOptions(gpu_mem_util=args.gpu_mem_util)
    options.validate()
    print_prediction(preset, parse_batches(args.batch), args.context, sys.stdout, options)
    return 0


def cmd_report(args) -> int:
    """The summary and verdict of a saved session; exit code = the verdict's (0/3/4)."""
    from abtui.report.console import print_session_summary

    cost, policy = _verdict_overrides(args)
    if args.format == "text":
        print_session_summary(Path(args.session), sys.stdout)
        from abtui.report.diagnosis import print_diagnosis

        print_diagnosis(Path(args.session), sys.stdout)
        return _print_verdict(Path(args.session), cost, policy).exit_code
    from abtui.report.export import write_report

    return write_report(Path(args.session), args.format, args.output, cost=cost, policy=policy)


def cmd_open(args) -> int:
    """The saved session in the TUI (panes from its stored samples, then the verdict)."""
    from abtui.store.reader import SessionReader

    with SessionReader(Path(args.session)):  # a bad file fails here, in one line
        pass
    if getattr(args, "web", False):
        from abtui.tui.web import serve_web  # the UI's own module: the core never imports it

        return serve_web(Path(args.session), args.port)
    web_driver = "web_driver" in os.environ.get("TEXTUAL_DRIVER", "")  # under textual-serve
    if not (web_driver or sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError(
            "abtui open needs a terminal", f"`abtui report {args.session}` prints the verdict"
        )
    from abtui.tui.app import AbtuiApp

    app = AbtuiApp(session=Path(args.session))
    app.run()
    if app.error is not None:
        raise app.error
    return 0


def cmd_start(folder: Path = Path("sessions")) -> int:
    """``abtui`` on a terminal: the start screen (recent sessions, the demo, a run from a spec).
    A session run or opened from it goes back to the list when left; when the app quits, one
    line per session it ran says where it is and how it ended. Exit code 0."""
    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.start import StartScreen

    app = AbtuiApp(start=StartScreen(folder))
    app.run()
    if app.error is not None:
        raise app.error
    for kind, result in app.ran:
        print(f"{kind}: {result.path} ({result.status}); `abtui report {result.path}` prints"
              " its summary and verdict")  # fmt: skip
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="abtui",
        description="A/B test LLM inference endpoints: same workload, side by side, a verdict.",
    )
    p.add_argument("--version", action="version", version=f"abtui {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    r = sub.add_parser(
        "run", help="run an A/B session (spec file and/or flags)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Replay one workload against a baseline and candidates; store every sample;\n"
        "end on a verdict (exit code 0 GO, 3 NO-GO, 4 INCONCLUSIVE). The load is open loop\n"
        "(--rate) or closed loop (--concurrency): one of the two is needed, from the flags or\n"
        "the spec's [load].",
        epilog="examples:\n"
        "  abtui run --baseline http://127.0.0.1:8001/v1 --candidate http://127.0.0.1:8002/v1 \\\n"
        "            --requests 1000 --rate 20 --slo ttft=500ms,tpot=50ms --name my-ab\n"
        "  abtui run spec.toml --headless          # a spec file; flags override it\n"
        "  abtui run --aa --baseline URL --concurrency 8   # A/A: the set-up's own noise floor",
    )  # fmt: skip
    r.add_argument("spec", nargs="?", help="experiment spec (TOML); flags override it")
    _add_run_options(r)
    r.set_defaults(func=cmd_run)

    from abtui.demo import DemoOptions

    _d = DemoOptions()
    d = sub.add_parser("demo", help="run an A/B session against two simulated GPUs (offline)")
    d.add_argument("--baseline-preset", default=_d.baseline_preset, metavar="PRESET",
                   help="simulated baseline (default %(default)s; grammar: `abtui sim serve --help`)")
    d.add_argument("--candidate-preset", default=_d.candidate_preset, metavar="PRESET",
                   help="simulated candidate (default %(default)s)")
    d.add_argument("--requests", type=_positive_int, default=_d.requests, help="requests per arm (default %(default)s)")
    d.add_argument("--rate", type=_positive_float, default=_d.rate, help="requests/s, Poisson (default %(default)s)")
    d.add_argument("--time-scale", type=_positive_float, default=_d.time_scale,
                   help="run the simulated GPUs this many times faster (default %(default)s)")
    d.add_argument("--seed", type=int, default=_d.seed, help="workload seed (default %(default)s)")
    d.add_argument("--name", help="session name (default: demo-<timestamp>)")
    d.add_argument("--sessions-dir", metavar="DIR", help="folder of session files (default sessions)")
    d.add_argument("--headless", action="store_true", help="print the summary (no TUI)")
    d.add_argument("--ablation", action="store_true",
                   help="a 2×2 factorial instead: int4 weights × speculative decoding on four "
                        "simulated H100s, closed loop (docs/ablation.md); --rate and the presets "
                        "are not used, nor the quality suites")  # fmt: skip
    d.add_argument("--no-quality", action="store_true",
                   help="skip the quality suites (niah, keys) after the load test")  # fmt: skip
    d.set_defaults(func=cmd_demo)

    s = sub.add_parser("sim", help="the simulated OpenAI-compatible endpoint")
    ssub = s.add_subparsers(dest="sim_command", parser_class=_Parser)
    ss = ssub.add_parser("serve", help="serve a simulated endpoint on 127.0.0.1")
    from abtui.sim.cli_args import add_arguments

    add_arguments(ss)
    ss.set_defaults(func=cmd_sim_serve)
    sp = ssub.add_parser("predict", help="the roofline prediction of a preset (TPOT floor, bound)")
    sp.add_argument("--preset", required=True, help="e.g. h100:llama-3-8b:fp8 (see sim serve --help)")
    sp.add_argument("--model-config", metavar="FILE", help="a Hugging Face config.json for MODEL")
    sp.add_argument("--batch", default="1,8,64", help="batch sizes (default %(default)s)")
    sp.add_argument("--context", type=int, default=2048, help="tokens per sequence (default %(default)s)")
    sp.add_argument("--gpu-mem-util", type=float, default=0.9, help="for the KV capacity (default %(default)s)")
    sp.set_defaults(func=cmd_sim_predict)

    rf = sub.add_parser("roofline", help="roofline floors of a GPU x model x dtype (TPOT, TTFT, bound)")
    rf.add_argument("--gpu", required=True, help="h100-sxm, h200, a100-80gb, l40s, l4, b200")
    rf.add_argument("--model", help="a preset model, e.g. llama-3-8b")
    rf.add_argument("--model-config", metavar="FILE", help="or a Hugging Face config.json")
    rf.add_argument("--dtype", default="bf16", help="weights: bf16, fp16, fp8, int8, int4 (default %(default)s)")
    rf.add_argument("--kv-dtype", default="bf16", help="KV cache dtype (default %(default)s)")
    rf.add_argument("--batch", default="1,8,64", help="batch sizes (default %(default)s)")
    rf.add_argument("--context", type=int, default=2048, help="tokens per sequence (default %(default)s)")
    rf.add_argument("--tp", type=_positive_int, default=1, help="tensor-parallel GPUs (default %(default)s)")
    rf.set_defaults(func=cmd_roofline)

    from abtui.workload.cli import add_workload_parser

    add_workload_parser(sub)

    from abtui.engine.cli import add_engine_parser

    add_engine_parser(sub)

    rep = sub.add_parser(
        "report", help="the summary and verdict of a saved session (exit code 0 GO, 3 NO-GO, 4 INCONCLUSIVE)"
    )
    rep.add_argument("session", help="session file (.duckdb)")
    rep.add_argument("--format", choices=("text", "md", "html", "json"), default="text",
                     help="text (the terminal summary, default), md, html (one self-contained file) or json")
    rep.add_argument("-o", "--output", metavar="FILE",
                     help="write the md/html/json report here (default stdout)")  # fmt: skip
    _add_verdict_options(rep.add_argument_group("verdict"))
    rep.set_defaults(func=cmd_report)
    op = sub.add_parser("open", help="re-play a saved session in the TUI: its panes on a "
                        "timeline (space plays, ? lists the keys) and its verdict")
    op.add_argument("session", help="session file (.duckdb)")
    op.add_argument("--web", action="store_true",
                    help="serve it to a browser on 127.0.0.1 (textual-serve, the `web` extra; "
                         "no authentication: use an SSH tunnel)")  # fmt: skip
    op.add_argument("--port", type=_positive_int, default=8000,
                    help="port for --web (default %(default)s)")  # fmt: skip
    op.set_defaults(func=cmd_open)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            if args.command is None and sys.stdin.isatty() and sys.stdout.isatty():
                return cmd_start()
            parser.print_help()  # no terminal (or only options): the usage, as before
            return 0
        return args.func(args)
    except AbtuiError as e:
        hint = f" (hint: {e.hint})" if e.hint else ""
        print(f"abtui: {e.message}{hint}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("abtui: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
