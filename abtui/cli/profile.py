"""``abtui profile show``: the per-class, per-phase time of one or more profiles, their
differences, and the Amdahl bound of an optimisation (docs/profile.md)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from abtui.cli.helptext import examples
from abtui.cli.types import positive_float, positive_int
from abtui.errors import UsageError
from abtui.report.untrusted import inert

_ARM = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]{0,39})=(.+)")
_MEASURED = re.compile(r"([a-z]+)=([+-]?\d+(?:\.\d+)?)%?")


def add_profile_parser(sub) -> None:
    p = sub.add_parser(
        "profile",
        help="where a server's time goes: operator classes per phase, Amdahl's bound",
        description="Read profiler output (PyTorch/Kineto Chrome traces, Nsight Systems and "
        "Nsight Compute exports) and show each operator class's share of the time, phase by "
        "phase (docs/profile.md).",
        epilog=examples(
            "abtui profile show traces/rank0.pt.trace.json.gz",
            "abtui profile show bf16=a.pt.trace.json.gz fp8=b.pt.trace.json.gz --optimises gemm",
        ),
    )
    psub = p.add_subparsers(
        dest="profile_command", parser_class=type(p), metavar="COMMAND", title="commands"
    )
    s = psub.add_parser(
        "show",
        help="class shares per phase of each profile, the second against the first, Amdahl",
        description="Each TRACE's operators or kernels sorted into classes (GEMM/GEMV, "
        "attention, norm + elementwise, sampling, communication, memcpy, other) with their "
        "share of the busy time and the idle / launch gaps, per phase (prefill, decode, mixed: "
        "from the trace's step annotations). With two or more traces, each against the first; "
        "with --optimises, the bound on each phase's speed-up (Amdahl). A TRACE is a file "
        "(.json, .json.gz, .sqlite, .csv) or NAME=FILE.",
        epilog=examples(
            "abtui profile show rank0.pt.trace.json.gz --gpu h100-sxm --model llama-3-8b --top 10",
            "abtui profile show base=a.json.gz fp8=b.json.gz --optimises gemm --factor 1.8",
            "abtui profile show report.sqlite --optimises attention --measured decode=-12%",
        ),
    )
    s.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="profile file, NAME=FILE, or NAME=FILE,FILE,… (one per rank: their mean)",
    )
    s.add_argument(
        "--optimises",
        metavar="CLASS,…",
        help="the classes an optimisation targets (e.g. gemm,attention): prints the bound on "
        "each phase's speed-up",
    )
    s.add_argument(
        "--factor",
        type=positive_float,
        default=2.0,
        metavar="K",
        help="--optimises: the bound also for those classes K times faster (default %(default)g)",
    )
    s.add_argument(
        "--measured",
        action="append",
        default=[],
        metavar="PHASE=CHANGE%",
        help="a phase's measured time change to set against the bound, e.g. decode=-41%% "
        "(TPOT), prefill=-20%% (TTFT); with two traces their time per step is used unless given",
    )
    s.add_argument(
        "--classes",
        metavar="FILE",
        help="TOML with a [profile.classes] table (class = [patterns]) checked before the "
        "built-in one",
    )
    s.add_argument(
        "--top",
        type=positive_int,
        default=5,
        metavar="N",
        help="the N operators or kernels with the most time, per phase (default %(default)s)",
    )
    s.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text or json (default %(default)s)",
    )
    _add_roofline_options(s)
    s.set_defaults(func=cmd_profile_show)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


def _add_roofline_options(s) -> None:
    r = s.add_argument_group(
        "roofline cross-check",
        "with --gpu and a model: each phase's roofline floor and bound (from the step "
        "annotations' token counts) against the profile (docs/profile.md)",
    )
    r.add_argument("--gpu", help="h100-sxm, h200, a100-80gb, l40s, l4, b200")
    r.add_argument("--model", help="a preset model, e.g. llama-3-8b")
    r.add_argument("--model-config", metavar="FILE", help="or a Hugging Face config.json")
    r.add_argument(
        "--dtype", default="bf16", help="weights: bf16, fp16, fp8, int8, int4 (default %(default)s)"
    )
    r.add_argument(
        "--kv-dtype", default="bf16", metavar="DTYPE", help="KV cache dtype (default %(default)s)"
    )
    r.add_argument(
        "--context",
        type=positive_int,
        default=2048,
        metavar="TOKENS",
        help="a decode sequence's context when the annotations do not say (default %(default)s)",
    )
    r.add_argument(
        "--tp",
        type=positive_int,
        default=1,
        metavar="N",
        help="tensor-parallel GPUs (default %(default)s)",
    )


def _arms(specs: list[str]) -> list[tuple[str, list[Path]]]:
    """(name, files) per TRACE: ``FILE``, ``NAME=FILE`` or ``NAME=FILE,FILE,…`` (one file per
    rank)."""
    out, seen = [], set()
    for spec in specs:
        m = _ARM.fullmatch(spec)
        if m and not Path(spec).exists():
            name, rest = m.group(1), m.group(2)
            paths = [Path(rest)] if Path(rest).exists() else [Path(x) for x in rest.split(",") if x]
        else:
            name, paths = Path(spec).name, [Path(spec)]
        if name in seen:
            raise UsageError(f"two profiles named {name!r}", "name them: NAME=FILE")
        seen.add(name)
        out.append((name, paths))
    return out


def _optimises(text: str | None, order: tuple[str, ...]) -> tuple[str, ...]:
    if text is None:
        return ()
    classes = tuple(dict.fromkeys(c.strip() for c in text.split(",") if c.strip()))
    unknown = [c for c in classes if c not in order]
    if not classes or unknown:
        raise UsageError(
            f"--optimises: unknown class {', '.join(unknown) or '(none given)'}",
            f"the classes: {', '.join(order)}",
        )
    return classes


def _measured(items: list[str]) -> dict[str, tuple[float, str]]:
    from abtui.profile.phases import PHASES

    out = {}
    for item in items:
        m = _MEASURED.fullmatch(item.strip())
        if not m or m.group(1) not in PHASES:
            raise UsageError(
                f"--measured {item}: expected PHASE=CHANGE%, e.g. decode=-41%",
                f"phases: {', '.join(PHASES)}",
            )
        change = float(m.group(2)) / 100
        if change <= -1:
            raise UsageError(f"--measured {item}: a time cannot fall by 100 % or more")
        out[m.group(1)] = (1 / (1 + change), f"given: {m.group(1)} time {100 * change:+.1f} %")
    return out


def _roofline(args, profiles) -> list[tuple]:
    """(profile, checks, setup) for each profile, when --gpu and a model are given."""
    if not args.gpu and not (args.model or args.model_config):
        return []
    from abtui.hardware.gpus import get_gpu
    from abtui.hardware.models import get_model, load_hf_config
    from abtui.hardware.roofline import DTYPE_BYTES
    from abtui.profile.roofline import roofline_checks

    if not args.gpu or bool(args.model) == bool(args.model_config):
        raise UsageError(
            "the roofline cross-check needs --gpu and one of --model, --model-config",
            "e.g. --gpu h100-sxm --model llama-3-8b",
        )
    for flag, dtype in (("--dtype", args.dtype), ("--kv-dtype", args.kv_dtype)):
        if dtype not in DTYPE_BYTES:
            raise UsageError(f"{flag} {dtype}: not a dtype", ", ".join(DTYPE_BYTES))
    gpu = get_gpu(args.gpu)
    model = get_model(args.model) if args.model else load_hf_config(args.model_config)
    setup = f"{gpu.name}, {model.name}, {args.dtype} weights, {args.kv_dtype} KV, tp {args.tp}"
    return [
        (p, roofline_checks(p, gpu, model, args.dtype, args.kv_dtype, args.context, args.tp), setup)
        for p in profiles
    ]


def cmd_profile_show(args) -> int:
    from abtui.profile import render
    from abtui.profile.amdahl import amdahl
    from abtui.profile.analyse import analyse, compare, merge
    from abtui.profile.classes import DEFAULT, load_class_table
    from abtui.profile.read import read_trace

    table = load_class_table(args.classes) if args.classes else DEFAULT
    targeted = _optimises(args.optimises, table.order)
    given = _measured(args.measured)
    profiles = [
        merge([analyse(read_trace(f), table, None, args.top) for f in files], name, args.top)
        for name, files in _arms(args.traces)
    ]
    base = profiles[0]
    diffs = [(b, compare(base, b)) for b in profiles[1:]]
    measured = {}
    if diffs:
        b, first = diffs[0]
        for d in first:
            if d.speedup is not None:
                measured[d.phase] = (d.speedup, f"time / step, {b.name} against {base.name}")
    measured.update(given)
    lines = amdahl(base, targeted, args.factor, measured) if targeted else []
    roof = _roofline(args, profiles)
    if args.format == "json":
        doc = {
            "classes": {c: table.label(c) for c in (*table.order, "idle")},
            "profiles": [render.profile_json(p) for p in profiles],
            "diff": [render.diff_json(base, b, d) for b, d in diffs],
            "amdahl": render.amdahl_json(lines),
            "roofline": [
                {"profile": p.name, "phases": render.roofline_json(c)} for p, c, _ in roof
            ],
        }
        print(inert(render.dumps(doc)))
        return 0
    out: list[str] = []
    for p in profiles:
        out += [*render.profile_text(p), ""]
    for b, d in diffs:
        out += [*render.diff_text(base, b, d), ""]
    out += render.amdahl_text(base, lines)
    for p, checks, setup in roof:
        out += ["", *render.roofline_text(p, checks, setup)]
    sys.stdout.write(inert("\n".join(out).rstrip("\n") + "\n"))
    return 0


def add_run_profile_options(p) -> None:
    """``abtui run``'s profiling options (the spec's ``[profile]``; docs/profile.md)."""
    g = p.add_argument_group(
        "profile: where each server's time goes (docs/profile.md)",
        "each arm's server profiles a window of the measured phase (POST /start_profile, "
        "/stop_profile: vLLM with --profiler-config, SGLang, abtui sim serve); its requests are "
        "left out of the latency figures",
    )
    g.add_argument("--profile", action="store_true", help="profile a window of each arm")
    g.add_argument(
        "--profile-after",
        metavar="DURATION",
        help="open the window this long after the measured phase starts (default 1s)",
    )
    g.add_argument("--profile-for", metavar="DURATION", help="the window's length (default 5s)")
    g.add_argument(
        "--profile-steps",
        type=positive_int,
        metavar="N",
        help="at most N engine steps recorded (sent to servers that take it)",
    )
    g.add_argument(
        "--profile-dir",
        metavar="DIR",
        help="where the servers write traces (DIR/ARM or DIR): the files new since the window",
    )
    g.add_argument(
        "--profile-trace",
        action="append",
        default=[],
        metavar="ARM=PATH",
        help="where ARM's trace appears on this machine (a file or a folder), for a server "
        "that does not share the filesystem",
    )
    g.add_argument(
        "--optimises",
        metavar="CLASS,…",
        help="the classes the candidate's optimisation targets (gemm, attention, …): the "
        "Amdahl bound per phase",
    )


def apply_run_profile_options(spec, args) -> None:
    """The profiling flags over the spec's ``[profile]`` (checked by ``abtui.spec.validate``)."""
    from abtui.spec import parse_duration

    pr = spec.profile
    given = [
        args.profile_after,
        args.profile_for,
        args.profile_steps,
        args.profile_dir,
        args.optimises,
        *args.profile_trace,
    ]
    if args.profile or any(x is not None for x in given):
        pr.enabled = True
    if args.profile_after is not None:
        pr.after_s = parse_duration(args.profile_after, "--profile-after")
    if args.profile_for is not None:
        pr.duration_s = parse_duration(args.profile_for, "--profile-for")
    if args.profile_steps is not None:
        pr.steps = args.profile_steps
    if args.profile_dir is not None:
        pr.dir = args.profile_dir
    if args.optimises is not None:
        pr.optimises = [c.strip() for c in args.optimises.split(",") if c.strip()]
    for item in args.profile_trace:
        m = _ARM.fullmatch(item)
        if not m:
            raise UsageError(f"--profile-trace {item}: expected ARM=PATH")
        pr.traces[m.group(1)] = m.group(2)
