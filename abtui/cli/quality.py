"""``abtui run`` options of the quality suites (flags override ``[quality]`` in the spec)."""

from __future__ import annotations

from abtui.errors import UsageError


def add_quality_options(p) -> None:
    from abtui.cli.types import bounded
    from abtui.quality.config import QualitySpec

    q = QualitySpec()
    g = p.add_argument_group("quality: the same items to every arm, greedy, paired")
    g.add_argument(
        "--quality", metavar="SUITES", help="built-in suites, comma-separated: niah, keys, exact"
    )
    g.add_argument("--quality-file", metavar="FILE", help="a user suite (JSON Lines)")
    g.add_argument(
        "--quality-mode",
        choices=("separate", "interleaved"),
        help="send the items after the load test (separate) or during it (interleaved: "
        f"quality under load, never counted in the latency figures; default {q.mode})",
    )
    g.add_argument(
        "--quality-api",
        choices=("auto", "chat", "completions"),
        help="send the items as chat messages (chat/instruct models) or as a plain "
        f"prompt (base models); default {q.api}: ask the endpoints",
    )
    g.add_argument(
        "--quality-budget",
        type=float,
        metavar="SECONDS",
        help="the quality items' time budget: the endpoints are timed first and the "
        "longest haystacks left out (said) while the whole would take longer "
        f"(default {q.budget_s:g} s)",
    )
    g.add_argument(
        "--quality-margin",
        type=bounded("quality.margin"),
        metavar="FRACTION",
        help="non-inferiority margin on Δacc's lower 95%% CI bound "
        f"(default {q.margin:g} = {q.margin * 100:g} pp)",
    )


def apply_quality_options(spec, args) -> None:
    q = spec.quality
    if getattr(args, "quality", None):
        names = [s.strip() for s in args.quality.split(",") if s.strip()]
        if not names:
            raise UsageError("--quality: no suite named", "e.g. --quality niah,keys,exact")
        q.suites = names
    if getattr(args, "quality_file", None):
        q.file = args.quality_file
    if getattr(args, "quality_mode", None):
        q.mode = args.quality_mode
    if getattr(args, "quality_api", None):
        q.api = args.quality_api
    if getattr(args, "quality_budget", None) is not None:
        q.budget_s = args.quality_budget
    if getattr(args, "quality_margin", None) is not None:
        q.margin = args.quality_margin
