"""Command line: subcommands → core calls. The TUI, when there is one, is imported lazily.

Every user error is an :class:`~abtui.errors.AbtuiError`, printed as one line with a hint, exit
code 2. Options with a bad value get the same treatment (no argparse usage dump). The commands
live beside this module: ``run``/``demo`` in :mod:`abtui.cli.run`, ``workload`` in
:mod:`abtui.cli.workload`; the worlds bring their own (``sim``: :mod:`abtui.sim.cli_args`,
``engine``: :mod:`abtui.engine.cli`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# Before numpy loads: one BLAS thread. The verdict's bootstrap multiplies many small matrices
# (resamples × units × a few histogram bins); OpenBLAS's worker threads, one per core, spin on
# each product and, on a busy machine, wait for a CPU: the end of a 320-request headless A/B
# took 26 s instead of 3 s at load average 13 on 2 cores (docs/reliability.md).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from abtui import __version__
from abtui.cli.helptext import HelpFormatter, examples
from abtui.cli.types import bounded, positive_float, positive_int
from abtui.errors import AbtuiError, StoreError, UsageError

__all__ = ["apply_flags", "build_parser", "main"]

# What the commands need is imported when a command is parsed or run, not with this module: a
# load generator started from the ``abtui`` script imports it again (multiprocessing's spawn
# runs the main script in each child), and the run command's options load numpy and Rich.
_FROM_RUN = ("add_run_options", "add_verdict_options", "apply_flags", "cmd_demo", "cmd_run")


def __getattr__(name: str):
    if name in _FROM_RUN or name == "verdict_overrides":
        from abtui.cli import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)  # subcommands' parsers too
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # one line, one prefix, the (sub)command's help, exit 2
        raise _ArgError(f"{self.prog}: {message}", f"see `{self.prog} --help`")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an unknown argument is reported by the (sub)command it was given
        to, with the closest of its flags: ``abtui run: unrecognized argument --candiate; did
        you mean --candidate?`` (argparse's top level said ``abtui: unrecognized arguments``
        and pointed at ``abtui --help``)."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            where = self._deepest(list(sys.argv[1:] if args is None else args))
            where.error(unknown_message(extras, where))
        return ns

    def _deepest(self, argv: list[str]) -> argparse.ArgumentParser:
        """The innermost subcommand's parser named in ``argv``."""
        parser: argparse.ArgumentParser = self
        for tok in argv:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if subs and tok in subs[0].choices:
                parser = subs[0].choices[tok]
        return parser


class _ArgError(UsageError):
    """A command-line error whose message already starts with the command (``abtui run:``)."""

    prefixed = True


def unknown_message(extras: list[str], parser: argparse.ArgumentParser) -> str:
    """``unrecognized argument --candiate; did you mean --candidate?``: the first unknown flag
    against ``parser``'s own flags."""
    import difflib

    msg = f"unrecognized argument{'s' if len(extras) > 1 else ''} {' '.join(extras)}"
    flag = next((x.split("=", 1)[0] for x in extras if x.startswith("--")), None)
    if flag:
        known = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
        if close:
            msg += f"; did you mean {close[0]}?"
    return msg


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
    print_roofline(
        get_gpu(args.gpu),
        model,
        args.dtype,
        args.kv_dtype,
        parse_batches(args.batch),
        args.context,
        sys.stdout,
        tp=args.tp,
    )
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
    """The summary and verdict of a saved session; exit code = the verdict's (0/3/4). It only
    reads the file (docs/session-file.md); a damaged one is an error naming it (exit 2)."""
    from abtui.cli.run import verdict_overrides
    from abtui.report.console import print_session_summary
    from abtui.store.damage import reading

    cost, policy = verdict_overrides(args)
    with reading(args.session):
        if args.format == "text":
            print_session_summary(Path(args.session), sys.stdout)
            from abtui.report.diagnosis import print_diagnosis

            print_diagnosis(Path(args.session), sys.stdout)
            from abtui.report.profile import print_profile

            print_profile(Path(args.session), sys.stdout)
            from abtui.headless import print_session_verdict

            return print_session_verdict(Path(args.session), cost, policy).exit_code
        from abtui.report.export import write_report

        return write_report(Path(args.session), args.format, args.output, cost=cost, policy=policy)


def cmd_open(args) -> int:
    """The saved session in the TUI (panes from its stored samples, then the verdict)."""
    from abtui.store.damage import reading
    from abtui.store.reader import SessionReader

    with reading(args.session), SessionReader(Path(args.session)):  # a bad file fails here
        pass
    if getattr(args, "public_url", None) and not getattr(args, "web", False):
        raise UsageError(
            "--public-url is for --web",
            f"abtui open {args.session} --web --public-url {args.public_url}",
        )
    if getattr(args, "web", False):
        from abtui.tui.web import serve_web  # the UI's own module: the core never imports it

        return serve_web(Path(args.session), args.port, args.public_url)
    web_driver = "web_driver" in os.environ.get("TEXTUAL_DRIVER", "")  # under textual-serve
    if not (web_driver or sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError(
            "abtui open needs a terminal", f"`abtui report {args.session}` prints the verdict"
        )
    from abtui.tui.app import AbtuiApp

    if web_driver:
        from abtui.tui.web import die_with_server

        die_with_server()
    app = AbtuiApp(session=Path(args.session))
    with reading(args.session):
        app.run()
        if app.error is not None:  # the replay or verdict failed: said after the app closed
            raise app.error
    if app.return_code:  # the app stopped on an error of its own (Textual showed it)
        raise StoreError(
            f"abtui open {args.session}: the terminal UI stopped on an error",
            f"`abtui report {args.session}` reads the file without it",
        )
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
        print(
            f"{kind}: {result.path} ({result.status}); `abtui report {result.path}` prints"
            " its summary and verdict"
        )
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``command`` (one of :data:`COMMANDS`), the top level and
    that command only: :func:`main` builds just the command it was given, since the others'
    options import the simulator's and the engine's modules (~0.07 s of every run's start)."""
    p = _Parser(
        prog="abtui",
        description="A/B test LLM inference endpoints: same workload, side by side, a verdict. "
        "Without a command, on a terminal: the start screen (recent sessions, the demo, a run "
        "from a spec file).",
        epilog=examples(
            "abtui demo                                  # two simulated GPUs, offline",
            "abtui run --baseline URL --candidate URL --rate 20 --requests 1000",
            "abtui report sessions/my-ab.duckdb --format html -o my-ab.html",
        ),
    )
    p.add_argument("--version", action="version", version=f"abtui {__version__}")
    sub = p.add_subparsers(
        dest="command", parser_class=_Parser, metavar="COMMAND", title="commands"
    )
    for name, add in COMMANDS.items():
        if command in (None, name) or command not in COMMANDS:
            add(sub)
    return p


def _add_workload(sub) -> None:
    from abtui.cli.workload import add_workload_parser

    add_workload_parser(sub)


def _add_profile(sub) -> None:
    from abtui.cli.profile import add_profile_parser

    add_profile_parser(sub)


def _add_engine(sub) -> None:
    from abtui.engine.cli import add_engine_parser

    add_engine_parser(sub)


def _add_run(sub) -> None:
    r = sub.add_parser(
        "run",
        help="run an A/B session (spec file and/or flags)",
        description="Replay one workload against a baseline and candidates; store every sample;\n"
        "end on a verdict (exit code 0 GO, 3 NO-GO, 4 INCONCLUSIVE). The load is open loop\n"
        "(--rate) or closed loop (--concurrency): one of the two is needed, from the flags or\n"
        "the spec's [load]. Flags override the spec file.",
        epilog=examples(
            "abtui run --baseline http://127.0.0.1:8001/v1 --candidate http://127.0.0.1:8002/v1 \\\n"
            "          --requests 1000 --rate 20 --slo ttft=500ms,tpot=50ms --name my-ab",
            "abtui run spec.toml --headless          # a spec file; flags override it",
            "abtui run --aa --baseline URL --concurrency 8   # A/A: the set-up's own noise floor",
        ),
    )
    from abtui.cli.run import add_run_options, cmd_run

    r.add_argument("spec", nargs="?", help="experiment spec (TOML)")
    add_run_options(r)
    r.set_defaults(func=cmd_run)


def _add_demo(sub) -> None:
    from abtui.cli.run import cmd_demo
    from abtui.demo import DemoOptions
    from abtui.demo_prefix import SCENARIOS
    from abtui.spec.model import StoreSpec

    _d = DemoOptions()
    d = sub.add_parser(
        "demo",
        help="run an A/B session against two simulated GPUs (offline)",
        description="Two simulated GPUs on 127.0.0.1 (BF16 against FP8 weights by default), a "
        "replayed chat-like workload, the quality suites, the live TUI and the verdict; no GPU "
        "and no server of yours. Exit code 0 whatever the verdict (it is not a gate).",
        epilog=examples(
            "abtui demo",
            "abtui demo --ablation                  # a 2×2: int4 weights × speculative decoding",
            "abtui demo --scenario prefix-caching --headless   # prefix caching off vs on",
        ),
    )
    g = d.add_argument_group("what is simulated")
    g.add_argument(
        "--baseline-preset",
        default=_d.baseline_preset,
        metavar="PRESET",
        help="simulated baseline (default %(default)s; grammar: `abtui sim serve --help`)",
    )
    g.add_argument(
        "--candidate-preset",
        default=_d.candidate_preset,
        metavar="PRESET",
        help="simulated candidate (default %(default)s)",
    )
    g.add_argument(
        "--ablation",
        action="store_true",
        help="a 2×2 factorial instead: int4 weights × speculative decoding on four "
        "simulated H100s, closed loop (docs/ablation.md); --rate and the presets "
        "are not used",
    )
    g.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default=SCENARIOS[0],
        help="precision: the baseline preset against the candidate preset on a chat-like "
        "workload; prefix-caching: the baseline preset with prefix caching off against on, "
        "on chat requests behind a few shared system prompts (default %(default)s)",
    )
    g.add_argument(
        "--time-scale",
        type=positive_float,
        default=_d.time_scale,
        metavar="X",
        help="run the simulated GPUs this many times faster (default %(default)s)",
    )
    g = d.add_argument_group("load and quality")
    g.add_argument(
        "--requests",
        type=bounded("workload.requests"),
        default=_d.requests,
        metavar="N",
        help="requests per arm (default %(default)s)",
    )
    g.add_argument(
        "--rate",
        type=bounded("load.rate"),
        default=_d.rate,
        metavar="R",
        help="requests/s (default %(default)s)",
    )
    g.add_argument(
        "--seed",
        type=bounded("workload.seed"),
        default=_d.seed,
        help="workload seed (default %(default)s)",
    )
    g.add_argument(
        "--no-quality",
        action="store_true",
        help="skip the quality suites (niah, keys) after the load test",
    )
    g.add_argument(
        "--profile",
        action="store_true",
        help="each simulator profiles a window of the load: class shares per phase, the "
        "Amdahl bound of FP8's GEMM gain (docs/profile.md)",
    )
    g = d.add_argument_group("session")
    g.add_argument("--headless", action="store_true", help="print the summary (no TUI)")
    g.add_argument("--name", help="session name (default demo-<timestamp>)")
    g.add_argument(
        "--sessions-dir", metavar="DIR", help=f"folder of session files (default {StoreSpec().dir})"
    )
    d.set_defaults(func=cmd_demo)


def _add_sim(sub) -> None:
    s = sub.add_parser(
        "sim",
        help="the simulated OpenAI-compatible endpoint: serve it, predict a preset",
        epilog=examples(
            "abtui sim serve --port 8001 --ttft-ms 40 --itl-ms 8",
            "abtui sim predict --preset h100:llama-3-8b:fp8",
        ),
    )
    ssub = s.add_subparsers(
        dest="sim_command", parser_class=_Parser, metavar="COMMAND", title="commands"
    )
    ss = ssub.add_parser(
        "serve",
        help="serve a simulated endpoint on 127.0.0.1",
        description="A simulated OpenAI-compatible endpoint (/v1/completions, /v1/chat/completions, "
        "/v1/models, /metrics) until Ctrl-C: fixed delays, or with --preset a continuous-batching "
        "engine on a modelled GPU (docs/simulator.md).",
        epilog=examples(
            "abtui sim serve --port 8001 --ttft-ms 40 --itl-ms 8",
            "abtui sim serve --port 8002 --preset h100:llama-3-8b:fp8 --time-scale 10",
            "abtui sim serve --port 8003 --fail 429=0.05 --stall-rate 0.01 --stall-ms 500",
        ),
    )
    from abtui.sim.cli_args import add_arguments

    add_arguments(ss)
    ss.set_defaults(func=cmd_sim_serve)
    sp = ssub.add_parser(
        "predict",
        help="the roofline prediction of a preset (TPOT floor, bound)",
        description="What the simulator would do for a preset: per batch size, the step time "
        "with its fitted efficiencies, the bound, MBU/MFU and the KV capacity.",
        epilog=examples(
            "abtui sim predict --preset h100:llama-3-8b:bf16 --batch 1,8,64 --context 2048",
            "abtui sim predict --preset h200:llama-3-70b:fp8:tp=4 --gpu-mem-util 0.85",
        ),
    )
    sp.add_argument(
        "--preset",
        required=True,
        help="e.g. h100:llama-3-8b:fp8 (grammar: `abtui sim serve --help`)",
    )
    sp.add_argument("--model-config", metavar="FILE", help="a Hugging Face config.json for MODEL")
    sp.add_argument(
        "--batch", default="1,8,64", metavar="B1,B2,…", help="batch sizes (default %(default)s)"
    )
    sp.add_argument(
        "--context",
        type=int,
        default=2048,
        metavar="TOKENS",
        help="tokens per sequence (default %(default)s)",
    )
    sp.add_argument(
        "--gpu-mem-util",
        type=float,
        default=0.9,
        metavar="FRACTION",
        help="of GPU memory, for the KV capacity (default %(default)s)",
    )
    sp.set_defaults(func=cmd_sim_predict)
    s.set_defaults(func=lambda args: (s.print_help(), 0)[1])


def _add_roofline(sub) -> None:
    rf = sub.add_parser(
        "roofline",
        help="roofline floors of a GPU x model x dtype (TPOT, TTFT, bound)",
        description="Datasheet peaks only, so every figure is a floor no engine can beat "
        "(formulas: docs/methods.md, section 5).",
        epilog=examples(
            "abtui roofline --gpu h100-sxm --model llama-3-8b --dtype fp8",
            "abtui roofline --gpu h200 --model llama-3-70b --tp 4 --batch 1,32 --context 8192",
            "abtui roofline --gpu l40s --model qwen2.5-7b --dtype int4 --kv-dtype fp8",
        ),
    )
    rf.add_argument("--gpu", required=True, help="h100-sxm, h200, a100-80gb, l40s, l4, b200")
    rf.add_argument("--model", help="a preset model, e.g. llama-3-8b")
    rf.add_argument("--model-config", metavar="FILE", help="or a Hugging Face config.json")
    rf.add_argument(
        "--dtype", default="bf16", help="weights: bf16, fp16, fp8, int8, int4 (default %(default)s)"
    )
    rf.add_argument(
        "--kv-dtype", default="bf16", metavar="DTYPE", help="KV cache dtype (default %(default)s)"
    )
    rf.add_argument(
        "--batch", default="1,8,64", metavar="B1,B2,…", help="batch sizes (default %(default)s)"
    )
    rf.add_argument(
        "--context",
        type=int,
        default=2048,
        metavar="TOKENS",
        help="tokens per sequence (default %(default)s)",
    )
    rf.add_argument(
        "--tp",
        type=positive_int,
        default=1,
        metavar="N",
        help="tensor-parallel GPUs (default %(default)s)",
    )
    rf.set_defaults(func=cmd_roofline)


def _add_report(sub) -> None:
    rep = sub.add_parser(
        "report",
        help="the summary and verdict of a saved session (exit code 0 GO, 3 NO-GO, 4 INCONCLUSIVE)",
        description="The summary, diagnosis and verdict of a saved session, from the file alone "
        "(no endpoint needed). The verdict flags re-judge it without changing the file's spec.",
        epilog=examples(
            "abtui report sessions/my-ab.duckdb",
            "abtui report sessions/my-ab.duckdb --format html -o my-ab.html",
            "abtui report sessions/my-ab.duckdb --gpu-price 2.5 --noise-floor sessions/aa.duckdb",
        ),
    )
    rep.add_argument("session", help="session file (.duckdb)")
    g = rep.add_argument_group("output")
    g.add_argument(
        "--format",
        choices=("text", "md", "html", "json"),
        default="text",
        help="text (the terminal summary), md, html (one self-contained file) or json "
        "(default %(default)s)",
    )
    g.add_argument(
        "-o", "--output", metavar="FILE", help="write the md/html/json report here (default stdout)"
    )
    from abtui.cli.run import add_verdict_options

    add_verdict_options(rep.add_argument_group("verdict and cost"))
    rep.set_defaults(func=cmd_report)


def _add_open(sub) -> None:
    op = sub.add_parser(
        "open",
        help="re-play a saved session in the TUI: its panes on a timeline and its verdict",
        description="The saved session in the terminal UI, offline: its panes at the run's end "
        "state on a timeline, then its verdict over them once computed (space plays, ←/→ seek, "
        "l back to the panes, ? lists the keys).",
        epilog=examples(
            "abtui open sessions/my-ab.duckdb",
            "abtui open sessions/my-ab.duckdb --web --port 8000   # then an SSH tunnel to it",
            "abtui open sessions/my-ab.duckdb --web --public-url http://localhost:9000"
            "   # behind ssh -L 9000:127.0.0.1:8000",
        ),
    )
    op.add_argument("session", help="session file (.duckdb)")
    op.add_argument(
        "--web",
        action="store_true",
        help="serve it to a browser on 127.0.0.1 (textual-serve, the `web` extra): "
        "open the URL with the token it prints; from elsewhere, through an "
        "SSH tunnel",
    )
    op.add_argument(
        "--port", type=positive_int, default=8000, help="port for --web (default %(default)s)"
    )
    op.add_argument(
        "--public-url",
        metavar="URL",
        help="for --web: the address your browser opens, when it is not "
        "http://127.0.0.1:PORT (through `ssh -L 9000:127.0.0.1:8000 gpu-box`: "
        "http://localhost:9000); the page names its scripts and websocket by it",
    )
    op.set_defaults(func=cmd_open)


# every command, in the order --help lists them, and what adds its parser
COMMANDS = {
    "demo": _add_demo,
    "run": _add_run,
    "open": _add_open,
    "report": _add_report,
    "workload": _add_workload,
    "profile": _add_profile,
    "roofline": _add_roofline,
    "sim": _add_sim,
    "engine": _add_engine,
}

# commands whose process runs a session (writes it, then reads it back) on a memory budget
RUNS_A_SESSION = ("run", "demo")


def main(argv: list[str] | None = None) -> int:
    try:
        words = sys.argv[1:] if argv is None else argv
        parser = build_parser(words[0] if words else None)
        args = parser.parse_args(argv)
        if args.command in RUNS_A_SESSION:  # before anything loads DuckDB (hardware.memory)
            from abtui.hardware.memory import quiet_duckdb_allocator

            quiet_duckdb_allocator()
        if not getattr(args, "func", None):
            if args.command is None and sys.stdin.isatty() and sys.stdout.isatty():
                return cmd_start()
            parser.print_help()  # no terminal (or only options): the usage, as before
            return 0
        return args.func(args)
    except AbtuiError as e:
        hint = f" (hint: {e.hint})" if e.hint else ""
        head = "" if getattr(e, "prefixed", False) else "abtui: "  # one prefix, not two
        from abtui.report.untrusted import inert

        print(inert(f"{head}{e.message}{hint}"), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("abtui: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
