"""The verdict in the terminal (headless ``abtui run`` / ``abtui report``), after the summary.

One block per candidate: the result and its reasons in words, then the decision rows — the
primary objective, the guardrails and a few more — with A, B, Δ%, CI, corrected p and outcome.
Every figure comes from :class:`abtui.verdict.saved.SessionVerdict`; nothing is recomputed here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TextIO

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from abtui.metrics.catalogue import is_latency
from abtui.report.untrusted import InertConsole
from abtui.stats.effects import Effect
from abtui.stats.labels import label, pct, short_label
from abtui.stats.noise_floor import NoiseFloor
from abtui.stats.sweep import LevelPoint, SweepSummary
from abtui.verdict.policy import GO, NO_GO, PairVerdict, Policy
from abtui.verdict.saved import SessionVerdict

_COLOR = {GO: "green", NO_GO: "red", "CALIBRATED": "green"}
_OUTCOME_COLOR = {"IMPROVED": "green", "REGRESSED": "red", "EQUIVALENT": "cyan"}
SHOWN = (  # rows shown besides primary and guardrails (where the comparison has them)
    "ttft.p50",
    "ttft.p99",
    "ttfo.p50",  # only after reasoning (abtui.metrics.catalogue.latency_keys)
    "ttfo.p99",
    "tpot.p50",
    "tpot.p99",
    "tpot_reasoning.p50",  # likewise
    "tpot_answer.p50",
    "itl.p99",
    "e2e.p50",
    "e2e.p99",
    "throughput.output_tokens",
    "goodput.output_tokens",
    "slo.attainment",
    "cost.per_mtok_good",
)


def value(e: Effect, v: float) -> str:
    """A row's value in its natural unit (ms for latency)."""
    if v is None or not math.isfinite(v):
        return "n/a"
    if is_latency(e.metric):
        return f"{v * 1e3:,.2f} ms" if v < 10 else f"{v:,.2f} s"
    if e.key == "slo.attainment":
        return f"{v * 100:.1f}%"
    if e.metric == "cost":
        return f"${v:,.3f}"
    return f"{v:,.1f}/s"


def p_text(p: float) -> str:
    if p is None or not math.isfinite(p):
        return "—"
    return f"{p:.4f}" if p >= 1e-4 else "<0.0001"


def role_of(key: str, policy: Policy) -> str:
    """A metric's part in the verdict policy: ``primary``, ``guardrail`` or ``""``."""
    if key == policy.primary:
        return "primary"
    return "guardrail" if key in policy.guardrails else ""


def policy_first(effects: list[Effect], policy: Policy) -> list[Effect]:
    """``effects`` with the primary first, then the guardrails in the policy's order, then the
    rest as they came: what the verdict rests on is read first."""
    rank = {k: i for i, k in enumerate([policy.primary, *policy.guardrails])}
    return sorted(effects, key=lambda e: rank.get(e.key, len(rank)))  # stable: the rest keep order


def rows_of(pair: PairVerdict, policy: Policy) -> list[Effect]:
    keys = [policy.primary, *policy.guardrails, *SHOWN]
    seen, out = set(), []
    for k in keys:
        e = pair.comparison.get(k)
        if e is not None and k not in seen:
            seen.add(k)
            out.append(e)
    return out


def effect_table(pair: PairVerdict, policy: Policy) -> Table:
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col, just in (
        ("metric", "left"),
        ("role", "left"),
        (pair.baseline, "right"),
        (pair.candidate, "right"),
        ("Δ", "right"),
        ("95% CI", "right"),
        ("δ", "right"),
        ("p (adj)", "right"),
        ("outcome", "left"),
    ):
        t.add_column(escape(col), justify=just)
    for e in rows_of(pair, policy):
        role = role_of(e.key, policy)
        color = _OUTCOME_COLOR.get(e.outcome, "yellow")
        t.add_row(
            label(e.key),
            role,
            value(e, e.a),
            value(e, e.b),
            pct(e.ratio),
            f"[{pct(e.lo)}, {pct(e.hi)}]",
            f"±{e.delta:.0%}",
            p_text(e.p_adj),
            f"[{color}]{e.outcome}[/]",
        )
    return t


FULL_TABLE_WIDTH = 100  # narrower: the compact metrics table (short names, no δ and p columns)
OUTCOME_STYLE = {"IMPROVED": "green", "REGRESSED": "bold red", "EQUIVALENT": "cyan"}


def short_value(e: Effect, v: float) -> str:
    """A row's value in at most ~8 characters: ``840.3ms``, ``1.343s``, ``1,419/s``."""
    if v is None or not math.isfinite(v):
        return "n/a"
    if is_latency(e.metric):
        if v >= 1:
            return f"{v:.3f}s" if v < 10 else f"{v:,.1f}s"
        return f"{v * 1e3:.1f}ms" if v >= 0.1 else f"{v * 1e3:.2f}ms"
    if e.key == "slo.attainment":
        return f"{v * 100:.1f}%"
    if e.metric == "cost":
        return f"${v:,.3f}" if v < 100 else f"${v:,.0f}"
    return f"{v:,.0f}/s" if v >= 100 else f"{v:.1f}/s"


def short_pct(x: float, sign: str = "%") -> str:
    """``-37.4%``; ``+7018%`` from ±1000% (one decimal is noise there)."""
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x * 100:+.1f}{sign}" if abs(x) < 10 else f"{x * 100:+.0f}{sign}"


def _ci(e: Effect) -> str:
    """The CI in percent without the ``%`` signs (the header says so): ``[-45.7,-29.6]``."""
    return f"[{short_pct(e.lo, '')},{short_pct(e.hi, '')}]"


def metrics_table(
    pair: PairVerdict, policy: Policy, width: int, extra: int = 0, elsewhere: str | None = None
) -> Table:
    """The pair's metrics table for ``width`` columns: the full one (A, B, Δ, CI, δ, p, outcome)
    from FULL_TABLE_WIDTH; narrower, short metric names, the role as one letter, the CI without
    ``%`` signs, and no δ or p columns, so that no row wraps at 80 columns. The outcome is always
    a word (legible without colour). The caption says from what terminal width δ and p show
    (``extra``: the screen's columns beside the table) or, for printed text (no terminal to
    widen), ``elsewhere``: where they are."""
    if width >= FULL_TABLE_WIDTH:
        return effect_table(pair, policy)
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False, padding=(0, 1))
    t.add_column("metric", no_wrap=True)
    t.add_column("r", no_wrap=True)
    for name in (pair.baseline, pair.candidate):  # a long arm name is cut, its values are not
        t.add_column(escape(name), justify="right", no_wrap=True, max_width=12, overflow="ellipsis")
    t.add_column("Δ", justify="right", no_wrap=True)
    t.add_column("95% CI (%)", justify="right", no_wrap=True)
    t.add_column("outcome", no_wrap=True)
    for e in rows_of(pair, policy):
        role = {"primary": "P", "guardrail": "G"}.get(role_of(e.key, policy), "")
        t.add_row(
            short_label(e.key),
            role,
            short_value(e, e.a),
            short_value(e, e.b),
            short_pct(e.ratio),
            _ci(e),
            Text(e.outcome, OUTCOME_STYLE.get(e.outcome, "yellow")),
        )
    where = f", p: {elsewhere}" if elsewhere else f" and p (adj) from {FULL_TABLE_WIDTH + extra}"
    t.caption = f"r: P primary, G guardrail · δ{where}" + ("" if elsewhere else " columns wide")
    t.caption_justify = "left"
    return t


SWEEP_COLUMNS = (
    "arm",
    "level",
    "load req/s",
    "attainment",
    "goodput tok/s",
    "P99 E2E",
    "$/Mtok good",
    "front",
)


def sweep_cells(p: LevelPoint) -> list[str]:
    """One sweep point as display strings (no markup: the caller escapes); the level numbered
    from 1, as the TUI's "level 1/N"."""
    load, att, good, p99, usd = (
        p.shown(k)
        for k in ("load_rps", "attainment", "goodput_tps", "p99_e2e_s", "usd_per_mtok_good")
    )
    return [
        str(p.arm),
        str(p.level + 1),
        f"{load:,.2f}" if load else "n/a",
        "n/a" if att is None else f"{att * 100:.1f}%",
        "n/a" if good is None else f"{good:,.0f}",
        "n/a" if p99 is None else f"{p99 * 1e3:,.1f} ms",
        "n/a" if usd is None else f"${usd:,.3f}",
        "✓" if p.on_front else "",
    ]


def _rps(x: float) -> str:
    return f"{x:,.2f}".rstrip("0").rstrip(".") + " req/s"


@dataclass(frozen=True, slots=True)
class Capacity:
    """What an arm's λ* is worth, from the levels tried (:func:`capacity_detail`). λ* at the
    highest load tried is only a lower bound (no level above it failed because none was
    tried): ``lower_bound``, text "≥ 24 req/s: no level failed". Otherwise ``above_rps`` is the
    next load, which missed the target; with no λ* (every level missed it) ``below_rps`` is the
    lowest load tried."""

    rps: float | None
    lower_bound: bool
    above_rps: float | None
    below_rps: float | None
    text: str

    def to_dict(self) -> dict:
        """The report document's ``sweep.capacity[arm]``."""
        return {
            "rps": self.rps,
            "lower_bound": self.lower_bound,
            "above_rps": self.above_rps,
            "below_rps": self.below_rps,
            "text": self.text,
        }


def capacity_detail(sweep: SweepSummary) -> dict[str, Capacity]:
    """Per arm, what its λ* is worth (:class:`Capacity`)."""
    target = sweep.target
    out = {}
    for arm, lam in sweep.capacity_rps.items():
        lam = None if lam is None or not math.isfinite(lam) else lam
        pts = [p for p in sweep.points if p.arm == arm and p.shown("load_rps")]
        loads = sorted(p.load_rps for p in pts)
        missed = sorted(
            p.load_rps for p in pts if p.shown("attainment") is None or p.attainment < target
        )
        if lam is None:
            text = (
                f"none: below {_rps(loads[0])}, the lowest load tried (no level reached "
                f"{target:.0%} attainment)"
                if loads
                else "none: no level measured"
            )
            out[arm] = Capacity(None, False, None, loads[0] if loads else None, text)
        elif lam >= loads[-1]:
            why = "no level failed" if not missed else "the highest level tried"
            text = f"≥ {_rps(lam)}: {why} (a lower bound, not a capacity: try higher loads)"
            out[arm] = Capacity(lam, True, None, None, text)
        else:
            above = min(x for x in missed if x > lam)
            text = f"{_rps(lam)} ({_rps(above)}, the next level tried, missed it)"
            out[arm] = Capacity(lam, False, above, None, text)
    return out


def sweep_line(sweep: SweepSummary) -> str:
    """λ* per arm (and $/Mtok good there) in words, a lower bound said so."""
    parts = []
    for arm, c in capacity_detail(sweep).items():
        usd = sweep.usd_per_mtok_good_at_capacity.get(arm)
        at = f" at ${usd:,.3f}/Mtok good" if usd is not None else ""
        parts.append(f"{arm} {c.text}{at}")
    second = "$/Mtok good" if sweep.priced else "goodput"
    return (
        f"capacity goodput λ* (largest load tried with SLO attainment ≥ {sweep.target:.0%}): "
        + "; ".join(parts)
        + f". ✓ = on the Pareto front of (P99 E2E, {second}). Levels are numbered from 1."
    )


def sweep_table(sweep: SweepSummary) -> Table:
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False, title="load sweep")
    for c in SWEEP_COLUMNS:
        t.add_column(c, justify="left" if c == "arm" else "right")
    for p in sweep.points:
        t.add_row(*(escape(c) for c in sweep_cells(p)))
    return t


def error_rates_line(pair: PairVerdict) -> str:
    """Both arms' error rates, shown for every pair (a failure is never hidden by a faster arm)."""
    parts = []
    for name, s in zip((pair.baseline, pair.candidate), pair.comparison.summaries, strict=True):
        rate = s.n_errors / s.sent if s.sent else math.nan
        parts.append(f"{name} {rate:.1%} ({s.n_errors} of {s.sent} sent)")
    return "errors: " + ", ".join(parts)


FLOOR_METHOD = "|A/A bias| + 1.96 × between-block spread τ"


def floor_rows(detail: NoiseFloor | None) -> list[tuple[str, str, str, str, str, str]]:
    """(metric, bias, bias SE, spread τ, floor, block pairs) per row of a noise floor
    (:func:`abtui.verdict.saved.read_noise_floor`, a session's ``noise_floor_detail``),
    largest floor first; a legacy floor has only floors."""
    if not detail:
        return []
    if detail.legacy:
        vals = sorted(detail.values().items(), key=lambda kv: -kv[1])
        return [(label(k), "n/a", "n/a", "n/a", f"{x:.1%}", "n/a") for k, x in vals]
    rows = sorted(detail.rows.items(), key=lambda kv: -_or0(kv[1].floor))
    return [
        (
            label(k),
            pct(r.bias),
            f"{_or0(r.bias_se) * 100:.1f}%",
            f"{_or0(r.tau) * 100:.1f}%",
            f"{r.floor:.1%}",
            str(r.blocks),
        )
        for k, r in rows
    ]


def _or0(x: float) -> float:
    """0 for a figure the document holds as ``null`` (not finite)."""
    return x if math.isfinite(x) else 0.0


def floor_method(detail: NoiseFloor | None) -> str:
    """How a noise floor was measured, in words."""
    if not detail:
        return ""
    if not detail.legacy:
        return f"{FLOOR_METHOD}, {detail.blocks} block pairs"
    return "legacy: largest |A/A CI bound| of an A/A whose copies ran in parallel; rerun --aa"


def floor_left_out(detail: NoiseFloor | None) -> list[str]:
    """``P99 E2E: reason`` for every row left out of a noise floor, and its notes."""
    if not detail:
        return []
    by_reason: dict[str, list[str]] = {}
    for k, why in detail.left_out.items():
        by_reason.setdefault(why, []).append(label(k) if "." in k else k)
    out = [f"{', '.join(keys)}: {why}" for why, keys in by_reason.items()]
    return out + list(detail.notes)


PRINTED_ELSEWHERE = "`abtui report --format md`"  # printed text: no terminal to widen


def hanging(prefix: str, text: str, width: int, indent: str | None = None) -> Text:
    """``prefix`` then ``text`` (plain, not markup) wrapped at word boundaries to ``width``, its
    later lines under its first (``indent``: under that much instead), never at column 1."""
    import textwrap

    indent = " " * len(prefix) if indent is None else indent
    return Text(
        textwrap.fill(
            text,
            max(width, len(indent) + 20),
            initial_indent=prefix,
            subsequent_indent=indent,
            break_on_hyphens=False,
        ),
        no_wrap=True,
    )


def _print_quality(console, pair: PairVerdict, meta: dict, width: int | None) -> None:
    """The pair's quality section: the fixed-width lines when they fit ``width`` (None: a file
    or pipe, any width), else the table fitted to it, the columns it leaves out named (no line
    wraps at 80 columns)."""
    from rich.padding import Padding

    from abtui.report.quality import console_lines, fitted_table, mode_info

    lines = console_lines(pair.quality, mode_info(meta))
    if width is None or all(len(line) <= width for line in lines):
        for line in lines:
            console.print(escape(line))
        return
    table = fitted_table(pair.quality, mode_info(meta), width - 4, elsewhere=PRINTED_ELSEWHERE)
    console.print(Padding(table, (0, 0, 0, 4)))


def print_verdict(sv: SessionVerdict, out: TextIO, width: int | None = None) -> None:
    """The verdict in ``width`` columns (default: the terminal's when ``out`` is one, else 130):
    narrower than :data:`FULL_TABLE_WIDTH`, the compact metrics table the verdict screen shows,
    so no row wraps mid-word at 80 columns."""
    from abtui.report.console import terminal_width

    v = sv.verdict
    fit = width is not None or terminal_width(out) is not None  # a terminal, or a set width
    width = width or terminal_width(out, 130)
    console = InertConsole(file=out, width=width, highlight=False)
    pol = v.policy
    console.print()
    title = "A/A calibration" if sv.aa else "Verdict"
    console.print(f"[bold]{title}: [{_COLOR.get(v.result, 'yellow')}]{v.result}[/][/]")
    if not v.pairs:
        console.print(
            "  nothing to compare: the baseline or every candidate has no measured request"
        )
    from abtui.report.profile import excluded_line

    profiled = excluded_line(sv.path, sv.meta)  # a run --profile: its window's requests
    for pair in v.pairs:
        console.print(
            f"\n[bold]{escape(pair.candidate)}[/] vs [bold]{escape(pair.baseline)}[/]: "
            f"[{_COLOR.get(pair.result, 'yellow')}]{pair.result}[/]"
        )
        for r in pair.reasons:
            console.print(hanging("  - ", r, width))
        console.print(hanging("  ", error_rates_line(pair), width))
        if profiled:
            console.print(hanging("  ", profiled, width))
        console.print(metrics_table(pair, pol, width, elsewhere=PRINTED_ELSEWHERE))
        from abtui.report.sequential import row_lines

        for line in row_lines(sv.sequential):  # a run --until-decided
            console.print(hanging("  ", line, width))
        _print_quality(console, pair, sv.meta, width if fit else None)
        from abtui.report.sequential import fixed_n_heading

        head = fixed_n_heading(sv.sequential, pol)
        noted = [e for e in rows_of(pair, pol) if e.note]
        if head and noted:
            console.print(hanging("  ", head, width))
        for e in noted:  # every shown row's reason, not only the guardrails'
            if e.note:
                console.print(hanging("  ", f"{label(e.key)}: {e.note}", width, "    "))
        if pair.cost:
            parts = [
                f"{escape(n)} ${c.shown('usd_per_mtok_good') or math.inf:,.3f}/Mtok good, "
                f"${c.shown('usd_per_1k_good_requests') or math.inf:,.3f} per 1k good requests"
                for n, c in pair.cost.items()
            ]
            console.print("  cost: " + "; ".join(parts))
    for pair in v.ladder:
        console.print(
            f"\nladder: [bold]{escape(pair.candidate)}[/] vs [bold]{escape(pair.baseline)}[/]: "
            f"{pair.result} — " + "; ".join(escape(r) for r in pair.reasons[:2])
        )
    if v.factorial:
        from abtui.report.factorial import text_lines

        console.print()
        for line in text_lines(v.factorial, pol, width):
            console.print(escape(line), overflow="fold")
    if v.sweep:
        console.print()
        console.print(sweep_table(v.sweep))
        console.print(escape(sweep_line(v.sweep)))
    if v.pairs:
        d = v.pairs[0].comparison.design
        console.print(
            f"\n[dim]policy: primary {label(pol.primary)}; α {pol.alpha:g} (Holm over primary + "
            f"guardrails, BH over the rest); δ {pol.delta:.0%} central / {pol.delta_tail:.0%} "
            f"tail{_raised(pol)}; "
            f"{d.resamples:,} circular-block bootstrap resamples over {d.units} units "
            f"(rank test: {d.rank_test}); exit code {sv.exit_code}.[/]"
        )
    if sv.aa:
        rows = floor_rows(sv.noise_floor_detail)
        if rows:
            console.print(
                f"noise floor ({escape(floor_method(sv.noise_floor_detail))}): "
                + ", ".join(f"{m} {f} (bias {b}, τ {t})" for m, b, _, t, f, _ in rows[:6])
                + f"; use it with --noise-floor {escape(str(sv.path))}"
            )
        else:
            console.print("no noise floor measured")
        left = floor_left_out(sv.noise_floor_detail)
        if left:
            console.print("[dim]noise floor, left out: " + escape("; ".join(left)) + "[/]")
    if sv.stored is False:
        console.print("[yellow]note:[/] the verdict was not stored (the session file is in use).")


def _raised(pol: Policy) -> str:
    """`` raised by the A/A noise floor (how)`` when a floor was applied, else ""."""
    if not pol.noise_floor_values:
        return ""
    how = floor_method(pol.noise_floor_detail)
    return f" raised by the A/A noise floor ({how})" if how else " raised by the A/A noise floor"
