"""Shareable reports of a session: ``abtui report SESSION --format md|html|json``.

Every format holds the same facts: the verdict and its reasons, the metrics table (A, B, Δ%,
CI, corrected p, outcome, δ), SLO attainment, cost, and what differs between the arms'
configurations. Strings that came from an endpoint, a trace or a spec (arm names, URLs, model
names, parameters, error messages) are untrusted: Markdown escapes them (:func:`md_escape`),
HTML escapes them with :func:`html.escape` (:mod:`abtui.report.html`), JSON encodes them.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from abtui.errors import UsageError
from abtui.report.document import (  # noqa: F401 (config_diff, report_data: re-exported)
    FLOOR_COLUMNS,
    config_diff,
    floor_section,
    policy_line,
    report_data,
)
from abtui.report.untrusted import printable
from abtui.report.verdict_text import (
    SWEEP_COLUMNS,
    floor_left_out,
    floor_method,
    floor_rows,
    p_text,
    policy_first,
    role_of,
    sweep_cells,
    sweep_line,
    value,
)
from abtui.stats.labels import label, pct
from abtui.verdict.saved import SessionVerdict, session_verdict

_MD_SPECIAL = str.maketrans(
    {
        "\\": "\\\\",
        "|": "\\|",
        "`": "\\`",
        "*": "\\*",
        "_": "\\_",
        "[": "\\[",
        "]": "\\]",
        "<": "&lt;",
        ">": "&gt;",
        "&": "&amp;",
        "#": "\\#",
        "\n": " ",
        "\r": " ",
    }
)


def md_escape(text) -> str:
    """A string safe inside Markdown text and table cells (no markup, no HTML, one line)."""
    return printable(str(text).translate(_MD_SPECIAL))


def to_markdown(sv: SessionVerdict, doc: dict) -> str:
    v = sv.verdict
    e_ = md_escape
    lines = [f"# abtui report: {e_(doc['session']['name'])}", ""]
    title = "A/A calibration" if sv.aa else "Verdict"
    lines += [
        f"**{title}: {v.result}** (exit code {sv.exit_code}; session {e_(doc['status'])}, "
        f"load {e_(doc['session'].get('load'))})",
        "",
    ]
    lines += _md_overview(sv, doc)
    if not v.pairs:
        lines += [
            "Nothing to compare: the baseline or every candidate has no measured request.",
            "",
        ]
    for pair in v.pairs + v.ladder:
        kind = "ladder step" if pair in v.ladder else "candidate"
        lines += [f"## {e_(pair.candidate)} vs {e_(pair.baseline)} ({kind}): {pair.result}", ""]
        lines += [f"- {e_(r)}" for r in pair.reasons] + [""]
        from abtui.report.sequential import row_lines

        if pair in v.pairs:  # a run --until-decided: its anytime-valid rows
            seq_rows = row_lines(sv.sequential)
            lines += [e_(x.strip()) + "  " for x in seq_rows] + ([""] if seq_rows else [])
            from abtui.report.sequential import fixed_n_heading

            head = fixed_n_heading(sv.sequential, v.policy)
            lines += [e_(head), ""] if head else []
        lines += [
            f"| metric | {e_(pair.baseline)} | {e_(pair.candidate)} | Δ | 95% CI | δ | p (adj) | outcome | note |",
            "|---|--:|--:|--:|--:|--:|--:|---|---|",
        ]
        for e in policy_first(pair.comparison.effects, v.policy):
            role = role_of(e.key, v.policy)
            role = f" ({role})" if role else ""
            lines.append(
                f"| {label(e.key)}{role} | {value(e, e.a)} | {value(e, e.b)} | {pct(e.ratio)} | "
                f"[{pct(e.lo)}, {pct(e.hi)}] | ±{e.delta:.0%} | {p_text(e.p_adj)} | {e.outcome} | "
                f"{e_(e.note)} |"
            )
        from abtui.report.quality import markdown as quality_md
        from abtui.report.quality import mode_info

        lines += quality_md(pair.quality, e_, mode_info(sv.meta))
        rt = pair.comparison.rank_tests
        if rt:
            lines += [
                "",
                "Rank tests ("
                + ", ".join(
                    f"{label(k + '.p50').split(' ', 1)[1]}: {t.test} p={p_text(t.p)}, shift {pct(t.shift)}"
                    for k, t in rt.items()
                )
                + ")",
            ]
        if pair.cost:
            lines += [
                "",
                "| cost | " + " | ".join(e_(n) for n in pair.cost) + " |",
                "|---|" + "--:|" * len(pair.cost),
            ]
            for field, lab in (
                ("usd_per_hour", "$/hour"),
                ("usd_per_mtok_output", "$/Mtok output"),
                ("usd_per_mtok_total", "$/Mtok total"),
                ("usd_per_mtok_good", "$/Mtok good"),
                ("usd_per_1k_good_requests", "$ per 1k good requests"),
            ):
                lines.append(
                    f"| {lab} | "
                    + " | ".join(_money(c.shown(field)) for c in pair.cost.values())
                    + " |"
                )
        lines.append("")
    from abtui.report.factorial import markdown as factorial_md

    lines += factorial_md(v.factorial, v.policy, e_)
    if v.sweep:
        lines += [
            "## Load sweep",
            "",
            "| " + " | ".join(SWEEP_COLUMNS) + " |",
            "|---|" + "--:|" * (len(SWEEP_COLUMNS) - 1),
        ]
        lines += ["| " + " | ".join(e_(c) for c in sweep_cells(p)) + " |" for p in v.sweep.points]
        lines += [
            "",
            e_(sweep_line(v.sweep)),
            "",
        ]
    lines += _md_summary(doc)
    if doc["config_diff"]:
        lines += [
            "## Configuration differences",
            "",
            "| setting | " + " | ".join(e_(a["name"]) for a in doc["arms"]) + " |",
            "|---|" + "---|" * len(doc["arms"]),
        ]
        lines += [
            f"| {e_(d['setting'])} | " + " | ".join(e_(x) for x in d["values"]) + " |"
            for d in doc["config_diff"]
        ]
        lines.append("")
    from abtui.report.diagnosis import diagnosis_markdown

    lines += diagnosis_markdown(doc, e_)
    from abtui.report.profile import profile_markdown

    lines += profile_markdown(doc, e_)
    lines += _md_floor(sv)
    lines += [policy_line(doc, sv.verdict.policy.noise_floor_detail), ""]
    return "\n".join(lines)


def _md_overview(sv: SessionVerdict, doc: dict) -> list[str]:
    """The degraded mark, the summary cards and the run's metadata (abtui.report.overview)."""
    from abtui.report.overview import cards, degraded_lines, metadata

    e_ = md_escape
    out = []
    deg = degraded_lines(sv)
    if deg:
        out += [f"> **{e_(deg[0])}**"] + [f"> - {e_(r)}" for r in deg[1:]] + [""]
    cs = cards(sv, doc)
    out += [
        "| " + " | ".join(e_(c.title) for c in cs) + " |",
        "|" + "---|" * len(cs),
        "| " + " | ".join(f"**{e_(c.value)}**" for c in cs) + " |",
        "| " + " | ".join(e_(c.detail) for c in cs) + " |",
        "",
    ]
    out += ["## Run", "", "| | |", "|---|---|"]
    out += [f"| {e_(k)} | {e_(v)} |" for k, v in metadata(sv, doc)]
    return out + [""]


def _md_floor(sv: SessionVerdict) -> list[str]:
    title, detail = floor_section(sv)
    if not title:
        return []
    lines = [f"## {md_escape(title)}", "", md_escape(floor_method(detail) or "none measured"), ""]
    rows = floor_rows(detail)
    if rows:
        lines += ["| " + " | ".join(FLOOR_COLUMNS) + " |", "|" + "---|" * len(FLOOR_COLUMNS)]
        lines += ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in rows]
        lines.append("")
    lines += [f"- {md_escape(x)}" for x in floor_left_out(detail)]
    return lines + [""]


def _money(x) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"${x:,.4f}"


def _md_summary(doc: dict) -> list[str]:
    names = list(doc["summaries"])
    out = [
        "## SLO attainment and throughput",
        "",
        "| | " + " | ".join(md_escape(n) for n in names) + " |",
        "|---|" + "--:|" * len(names),
    ]
    rows = (
        ("requests ok / sent", lambda s: f"{s['ok']}/{s['sent']}"),
        (
            "errors",
            lambda s: ", ".join(f"{md_escape(k)} {v}" for k, v in s["errors"].items()) or "0",
        ),
        ("SLO attainment", lambda s: _pct0(s["slo_attainment"])),
        ("goodput req/s", lambda s: _num(s["goodput_requests_per_s"], 2)),
        ("output tok/s", lambda s: _num(s["output_tokens_per_s"], 0)),
        (
            "schedule lag P99 (ms)",
            lambda s: _num(None if s["lag_p99_s"] is None else s["lag_p99_s"] * 1e3, 2),
        ),
    )
    for lab, fn in rows:
        out.append(f"| {lab} | " + " | ".join(fn(doc["summaries"][n]) for n in names) + " |")
    slo = ", ".join(f"{k} ≤ {v * 1e3:g} ms" for k, v in doc["slo"].items()) or "none set"
    return out + ["", f"SLOs: {slo}.", ""]


def _pct0(x) -> str:
    return "n/a" if x is None else f"{x * 100:.1f}%"


def _num(x, digits: int) -> str:
    return "n/a" if x is None else f"{x:,.{digits}f}"


def write_report(path: Path, fmt: str, output: str | None, *, cost=None, policy=None) -> int:
    """Render the report of the session at ``path``; returns the verdict's exit code."""
    if fmt not in ("md", "html", "json"):
        raise UsageError(f"--format {fmt!r}: expected md, html or json")
    from abtui.report.console import check_output, computing

    if output:
        check_output(output)  # before the verdict's seconds, not after them
    sv = session_verdict(path, cost=cost, policy=policy, computing=lambda: computing(path))
    doc = report_data(sv)
    if fmt == "json":
        text = json.dumps(doc, indent=2, allow_nan=False, default=str)
    elif fmt == "md":
        text = to_markdown(sv, doc)
    else:
        from abtui.report.html import to_html

        text = to_html(sv, doc)
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as e:
            raise UsageError(
                f"cannot write {output}: {e}", "check the folder exists and is writable"
            ) from None
        print(f"abtui: wrote {fmt} report to {output} ({sv.result})", file=sys.stderr)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return sv.exit_code
