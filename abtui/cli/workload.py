"""``abtui workload import|inspect|synth|conversations`` and the workload flags of
``abtui run``."""

from __future__ import annotations

import argparse
import sys

from abtui.cli.helptext import examples
from abtui.cli.types import bounded
from abtui.report.untrusted import inert


def add_run_load_options(g, ld) -> None:
    """``abtui run``'s load flags beyond rate and concurrency (``ld``: the spec's defaults)."""
    g.add_argument(
        "--duration",
        type=_duration,
        metavar="DURATION",
        help="longest measured phase per segment, e.g. 60s (open loop: the requests "
        "scheduled within it; closed loop: none started after it)",
    )
    g.add_argument(
        "--arrival",
        choices=("poisson", "constant", "gamma", "replay"),
        help=f"arrival process (default {ld.arrival}; replay: the workload file's timestamps)",
    )
    g.add_argument(
        "--burstiness",
        type=bounded("load.burstiness"),
        metavar="CV",
        help=f"gamma arrivals: CV of the gaps (1 = Poisson, >1 bursty; default {ld.burstiness:g})",
    )


def add_run_workload_options(g, w, ld) -> None:
    """``abtui run``'s workload flags (``w``, ``ld``: the spec's defaults)."""
    g.add_argument(
        "--input-dist",
        metavar="DIST",
        help="prompt lengths: fixed:N, uniform:LO:HI, normal:MEAN:SD, "
        "lognormal:MEDIAN:SIGMA or trace:FILE (default fixed:--input-tokens)",
    )
    g.add_argument(
        "--output-dist",
        metavar="DIST",
        help="max_tokens distribution, same grammar (default fixed:--output-tokens)",
    )
    g.add_argument(
        "--prefix-groups",
        type=bounded("workload.prefix_groups"),
        metavar="N",
        help=f"shared-prefix groups: item i starts with group i mod N's prefix (default {w.prefix_groups}: none)",
    )
    g.add_argument(
        "--prefix-tokens",
        type=bounded("workload.prefix_tokens"),
        metavar="N",
        help=f"tokens of each group's prefix (default {w.prefix_tokens})",
    )
    g.add_argument(
        "--images-per-request",
        type=bounded("workload.images_per_request"),
        metavar="N",
        help="images made locally and sent with each prompt (PNG data URLs; needs --api chat; "
        f"default {w.images_per_request})",
    )
    g.add_argument(
        "--image-size",
        metavar="WxH[,WxH…]",
        help=f"their pixel size, or several, drawn per image (default {w.image_size})",
    )
    g.add_argument(
        "--workload",
        metavar="FILE",
        help="replay a workload file (abtui JSONL; `abtui workload import` writes one)",
    )
    g.add_argument(
        "--conversations",
        metavar="FILE",
        help="replay a conversation file turn by turn (`abtui workload conversations` writes "
        "one; needs --api chat): turn k goes when turn k-1's answer completed plus think time",
    )
    g.add_argument(
        "--history",
        choices=("recorded", "own"),
        help="the history a conversation's turn carries: the file's answers (recorded, the "
        "default: the arms send the same prompts) or the arm's own answers (own)",
    )
    g.add_argument(
        "--session-header",
        metavar="NAME",
        help='the header naming a turn\'s conversation (default X-Session-ID; "" sends none)',
    )
    g.add_argument(
        "--speedup",
        type=bounded("load.speedup"),
        metavar="X",
        help=f"replay: play the file's timestamps this many times faster (default {ld.speedup:g})",
    )
    g.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip and count malformed workload lines instead of stopping",
    )


def _duration(text: str) -> float:
    from abtui.errors import SpecError
    from abtui.spec import parse_duration

    try:
        v = parse_duration(text, "--duration")
    except SpecError as e:
        raise argparse.ArgumentTypeError(e.message) from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration, got {text!r}")
    return v


def _numbers(field: str, what: str):
    """Comma-separated numbers, each inside the limit table's row ``field``."""
    one = bounded(field)

    def parse(text: str):
        parts = [x for x in text.split(",") if x.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}")
        return [one(x.strip()) for x in parts]

    return parse


def add_run_schedule_options(g, ld) -> None:
    """``abtui run``'s sweeps, repeats and alternation (``ld``: the spec's defaults)."""
    g.add_argument(
        "--sweep-rate",
        type=_numbers("load.rate", "rates"),
        metavar="R1,R2,…",
        help="a sweep of open-loop rates (req/s), each level its own segment",
    )
    g.add_argument(
        "--sweep-concurrency",
        type=_numbers("load.concurrency", "concurrencies"),
        metavar="C1,C2,…",
        help="a sweep of closed-loop concurrencies",
    )
    g.add_argument(
        "--runs",
        type=bounded("load.runs"),
        metavar="K",
        help=f"repeat the whole schedule K times (default {ld.runs})",
    )
    g.add_argument(
        "--schedule",
        choices=("parallel", "alternate"),
        help="parallel: arms at the same instants (separate hardware); alternate: arms take "
        f"turns over blocks, A B B A (one shared GPU) (default {ld.schedule})",
    )
    g.add_argument(
        "--blocks",
        type=bounded("load.blocks"),
        metavar="B",
        help=f"alternate: blocks per level (default {ld.blocks})",
    )


def apply_run_workload_options(spec, args) -> None:
    w, ld = spec.workload, spec.load
    for flag, obj, attr in (
        ("workload", w, "file"),
        ("conversations", w, "conversations"),
        ("history", w, "history"),
        ("session_header", spec.request, "session_header"),
        ("input_dist", w, "input_dist"),
        ("output_dist", w, "output_dist"),
        ("prefix_groups", w, "prefix_groups"),
        ("prefix_tokens", w, "prefix_tokens"),
        ("images_per_request", w, "images_per_request"),
        ("image_size", w, "image_size"),
        ("burstiness", ld, "burstiness"),
        ("speedup", ld, "speedup"),
        ("sweep_rate", ld, "sweep_rate"),
        ("sweep_concurrency", ld, "sweep_concurrency"),
        ("runs", ld, "runs"),
        ("schedule", ld, "schedule"),
        ("blocks", ld, "blocks"),
        ("generators", ld, "generators"),
        ("duration", ld, "duration_s"),
    ):
        v = getattr(args, flag, None)
        if v is not None:
            setattr(obj, attr, v)
    if getattr(args, "skip_bad", False):
        w.skip_bad = True
    from_file = args.workload or getattr(args, "conversations", None)
    if from_file and args.rate is not None and ld.arrival == "replay" and args.arrival is None:
        ld.arrival = "poisson"  # a spec's replay, overridden by --rate


def add_workload_parser(sub) -> None:
    from abtui.workload.importers import FORMATS

    p = sub.add_parser(
        "workload",
        help="import traces into abtui's JSONL workload format, inspect one, synthesise one",
        epilog=examples(
            "abtui workload import sharegpt sg.json -o sg.jsonl",
            "abtui workload inspect sg.jsonl --context 8192",
            "abtui workload synth -o w.jsonl --rate 10 --arrival gamma --burstiness 2",
        ),
    )
    wsub = p.add_subparsers(
        dest="workload_command", parser_class=type(p), metavar="COMMAND", title="commands"
    )
    imp = wsub.add_parser(
        "import",
        help="convert a trace (ShareGPT, Mooncake, Azure, BurstGPT) to abtui JSONL",
        description="Convert a trace to abtui's JSON Lines workload, one request per line. Entries "
        "with nothing to replay are left out and counted; a malformed one stops the import, named "
        "by file and line (or entry), unless --skip-bad.",
        epilog=examples(
            "abtui workload import sharegpt sg.json -o sg.jsonl        # then abtui run --rate R",
            "abtui workload import mooncake trace.jsonl -o mc.jsonl --skip-bad",
            "abtui workload import azure AzureLLMInferenceTrace_conv.csv -o azure.jsonl",
        ),
    )
    imp.add_argument("format", choices=FORMATS, help="the trace's format")
    imp.add_argument("file", help="the trace file")
    imp.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the JSONL file to write"
    )
    imp.add_argument("--skip-bad", action="store_true", help="skip and count malformed lines")
    imp.set_defaults(func=cmd_import)
    ins = wsub.add_parser(
        "inspect",
        help="lengths, arrival rate, burstiness, prefix sharing of a workload",
        epilog=examples(
            "abtui workload inspect sg.jsonl",
            "abtui workload inspect mc.jsonl --context 8192 --skip-bad",
        ),
    )
    ins.add_argument("file", help="abtui JSONL workload file")
    ins.add_argument(
        "--context",
        type=bounded("item.input_tokens"),
        metavar="TOKENS",
        help="warn about requests this context window cannot hold (prompt + max_tokens)",
    )
    ins.add_argument("--skip-bad", action="store_true", help="skip and count malformed lines")
    ins.set_defaults(func=cmd_inspect)
    syn = wsub.add_parser(
        "synth",
        help="write a seeded synthetic workload as abtui JSONL (to inspect or share)",
        description="The synthetic workload `abtui run` would send with the same options, as "
        "abtui JSONL: same seed, same items and arrival times.",
        epilog=examples(
            "abtui workload synth -o w.jsonl --rate 10 --arrival gamma --burstiness 2 \\\n"
            "                     --input-dist lognormal:512:0.8",
            "abtui workload synth -o prefix.jsonl --requests 500 --prefix-groups 8 --prefix-tokens 1024",
        ),
    )
    syn.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the JSONL file to write"
    )
    syn.add_argument(
        "--requests",
        type=bounded("workload.requests"),
        default=200,
        metavar="N",
        help="items (default %(default)s)",
    )
    syn.add_argument(
        "--rate", type=bounded("load.rate"), metavar="R", help="req/s (default: no arrival times)"
    )
    syn.add_argument(
        "--arrival",
        choices=("poisson", "constant", "gamma"),
        default="poisson",
        help="arrival process, with --rate (default %(default)s)",
    )
    syn.add_argument(
        "--burstiness",
        type=bounded("load.burstiness"),
        default=1.0,
        metavar="CV",
        help="gamma: CV of the gaps (default %(default)s)",
    )
    syn.add_argument(
        "--input-tokens",
        type=bounded("workload.input_tokens"),
        default=512,
        metavar="N",
        help="prompt length in tokens (default %(default)s)",
    )
    syn.add_argument(
        "--output-tokens",
        type=bounded("workload.output_tokens"),
        default=128,
        metavar="N",
        help="max_tokens of each item (default %(default)s)",
    )
    syn.add_argument(
        "--input-dist", metavar="DIST", help="as for abtui run (default fixed:--input-tokens)"
    )
    syn.add_argument(
        "--output-dist", metavar="DIST", help="as for abtui run (default fixed:--output-tokens)"
    )
    syn.add_argument(
        "--prefix-groups",
        type=bounded("workload.prefix_groups"),
        default=0,
        metavar="N",
        help="shared-prefix groups (default %(default)s: none)",
    )
    syn.add_argument(
        "--prefix-tokens",
        type=bounded("workload.prefix_tokens"),
        default=0,
        metavar="N",
        help="tokens of each group's prefix (default %(default)s)",
    )
    syn.add_argument(
        "--images-per-request",
        type=bounded("workload.images_per_request"),
        default=0,
        metavar="N",
        help="seeded PNGs in each prompt, as `abtui run` makes them, written into the file as "
        "chat content parts (data URLs; run the file with --api chat). Each 512x512 PNG is "
        "~33 kB (~44 kB in the file): 200 requests × 2 images ≈ 18 MB (default %(default)s)",
    )
    syn.add_argument(
        "--image-size",
        default="512x512",
        metavar="WxH[,WxH…]",
        help="their pixel size, or several, drawn per image (default %(default)s)",
    )
    syn.add_argument(
        "--seed",
        type=bounded("workload.seed"),
        default=0,
        help="seed of prompts and arrivals (default %(default)s)",
    )
    syn.set_defaults(func=cmd_synth)
    _add_conversations_parser(wsub)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


def _add_conversations_parser(wsub) -> None:
    con = wsub.add_parser(
        "conversations",
        help="whole conversations (ShareGPT, Mooncake sessions, synthetic) as abtui JSONL",
        description="Write conversations, one per line: turns with their messages, answer "
        "lengths, think times and recorded answers (docs/guide.md, Conversations). Entries with "
        "nothing to replay are left out and counted; a malformed one stops it, named by file and "
        "line, unless --skip-bad.",
        epilog=examples(
            "abtui workload conversations sharegpt sg.json -o conv.jsonl --rate 2 --think 5:1",
            "abtui workload conversations mooncake trace.jsonl -o mc.jsonl",
            "abtui workload conversations synthetic -o syn.jsonl --conversations 200 --turns 6",
        ),
    )
    con.add_argument("format", choices=("sharegpt", "mooncake", "synthetic"), help="the source")
    con.add_argument("file", nargs="?", help="the trace file (not for synthetic)")
    con.add_argument("-o", "--output", required=True, metavar="FILE", help="the file to write")
    con.add_argument(
        "--think",
        type=_think,
        default=None,
        metavar="MEAN[:CV]",
        help="think time before each later turn, seconds, gamma (default 5:1; ShareGPT and "
        "synthetic: a trace's own times win)",
    )
    con.add_argument(
        "--rate",
        type=bounded("load.rate"),
        metavar="R",
        help="conversations started per second, Poisson (ShareGPT: default all at 0; synthetic: 1)",
    )
    con.add_argument(
        "--conversations",
        type=bounded("workload.requests"),
        default=100,
        metavar="N",
        help="synthetic: how many (default %(default)s)",
    )
    con.add_argument(
        "--turns",
        type=bounded("conversation.turns"),
        default=4,
        metavar="N",
        help="synthetic: median turns per conversation (default %(default)s)",
    )
    con.add_argument(
        "--system-tokens",
        type=bounded("workload.prefix_tokens"),
        default=256,
        metavar="N",
        help="synthetic: tokens of the system prompt all share (default %(default)s)",
    )
    con.add_argument(
        "--seed", type=bounded("workload.seed"), default=0, help="seed (default %(default)s)"
    )
    con.add_argument("--skip-bad", action="store_true", help="skip and count malformed lines")
    con.set_defaults(func=cmd_conversations)


def _think(text: str):
    from abtui.workload.conversation_import import ThinkTime

    mean, _, cv = text.partition(":")
    try:
        t = ThinkTime(float(mean), float(cv) if cv else 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MEAN[:CV] in seconds, got {text!r}") from None
    if not (0 <= t.mean_s <= 86_400 and 0 < t.cv <= 100):
        raise argparse.ArgumentTypeError(
            f"think time {text!r}: MEAN from 0 to 86,400 s, CV above 0 and at most 100"
        )
    return t


def cmd_conversations(args) -> int:
    from abtui.errors import UsageError
    from abtui.workload import conversation_import as ci
    from abtui.workload.conversations import write_conversations

    think = args.think or ci.ThinkTime()
    left = {}
    if args.format == "synthetic":
        if args.file:
            raise UsageError("synthetic conversations read no file", "drop the file argument")
        shape = ci.ConversationShape(
            turns_median=args.turns,
            turns_range=(1, max(20, 4 * args.turns)),
            system_tokens=args.system_tokens,
            think=think,
            rate=args.rate or 1.0,
        )
        convs = ci.synthetic_conversations(args.conversations, args.seed, shape)
        stats = None
    elif not args.file:
        raise UsageError(f"{args.format} needs the trace file", "give FILE after the format")
    elif args.format == "sharegpt":
        convs, stats, left = ci.sharegpt_conversations(
            args.file, think=think, rate=args.rate, seed=args.seed, skip_bad=args.skip_bad
        )
    else:
        convs, stats, left = ci.mooncake_conversations(
            args.file, seed=args.seed, skip_bad=args.skip_bad
        )
    n = write_conversations(args.output, convs)
    turns = sum(c.n_turns for c in convs)
    msg = f"{args.output}: {n} conversations, {turns} turns ({args.format})"
    if stats is not None and stats.skipped:
        msg += f"; {stats.skipped} bad lines skipped: " + "; ".join(stats.examples)
    if left:
        msg += "; " + "; ".join(f"{k} {why} left out" for why, k in left.items())
    print(inert(msg), file=sys.stderr)
    return 0


def cmd_import(args) -> int:
    from abtui.workload.importers import TraceImport
    from abtui.workload.jsonl import write_jsonl

    imp = TraceImport(args.format, args.file, skip_bad=args.skip_bad)
    imp.scan()  # every row checked before the output is opened
    n = write_jsonl(args.output, imp.records())  # streamed: a record at a time
    stats, note = imp.stats, imp.note
    msg = f"{args.output}: {n} requests from {args.file} ({args.format})"
    if stats.skipped:
        unit = "entries" if any(": entry " in e for e in stats.examples) else "lines"
        msg += f"; {stats.skipped} bad {unit} skipped: " + "; ".join(stats.examples)
        msg += ", …" if stats.skipped > len(stats.examples) else ""
    if note:
        msg += f"; {note}"
    print(inert(msg), file=sys.stderr)
    return 0


def cmd_inspect(args) -> int:
    from abtui.workload.inspect import format_stats, workload_stats
    from abtui.workload.jsonl import read_workload

    wl = read_workload(args.file, skip_bad=args.skip_bad)
    print(inert(format_stats(workload_stats(wl.items, args.context), args.file, args.context)))
    if wl.stats.skipped:
        print(inert(f"  {wl.stats.describe()}"))
    return 0


def cmd_synth(args) -> int:
    """The synthetic workload ``abtui run`` would send with the same options, as JSONL."""
    from abtui.spec import LoadSpec, RequestSpec, Spec, WorkloadSpec
    from abtui.workload.build import build_items
    from abtui.workload.jsonl import item_records, write_jsonl
    from abtui.workload.spec_check import check_workload

    spec = Spec(
        workload=WorkloadSpec(
            requests=args.requests,
            input_tokens=args.input_tokens,
            output_tokens=args.output_tokens,
            seed=args.seed,
            input_dist=args.input_dist,
            output_dist=args.output_dist,
            prefix_groups=args.prefix_groups,
            prefix_tokens=args.prefix_tokens,
            images_per_request=args.images_per_request,
            image_size=args.image_size,
        ),
        load=LoadSpec(rate=args.rate, arrival=args.arrival, burstiness=args.burstiness),
        # images go in chat messages: the file's items are chat items then
        request=RequestSpec(api="chat" if args.images_per_request else "completions"),
    )
    from abtui.spec.bounds import check_bounds

    check_bounds(spec, "command line")
    check_workload(spec, "command line")
    n = write_jsonl(args.output, item_records(build_items(spec, args.rate)))
    print(f"{args.output}: {n} requests", file=sys.stderr)
    return 0
