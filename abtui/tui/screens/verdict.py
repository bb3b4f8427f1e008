"""The verdict: banner and reasons, the metrics table, SLO and goodput, cost, diagnosis, and
what differs between the arms. Everything comes from the report module's data
(``SessionVerdict`` and ``report_data``); nothing is recomputed here."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.markup import escape
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from abtui.report.quality import console_lines
from abtui.report.verdict_text import effect_table, rows_of
from abtui.stats.session import SessionVerdict
from abtui.stats.verdict import GO, NO_GO, label

RESULT_STYLE = {GO: "bold white on dark_green", NO_GO: "bold white on dark_red"}
RESULT_WORDS = {GO: "✓ GO", NO_GO: "✗ NO-GO", "INCONCLUSIVE": "~ INCONCLUSIVE"}


@dataclass
class VerdictData:
    """What the verdict screen shows, loaded by a worker from the session file."""

    sv: SessionVerdict
    doc: dict  # abtui.report.export.report_data
    diagnosis: list[str]


def load_verdict(path) -> VerdictData:
    """The core calls behind the screen (run in a thread worker)."""
    from abtui.report.export import report_data
    from abtui.stats.session import session_verdict
    from abtui.telemetry.diagnosis import diagnose, diagnosis_lines

    sv = session_verdict(path)
    return VerdictData(sv, report_data(sv), diagnosis_lines(diagnose(path)))


def _banner(d: VerdictData) -> Text:
    v = d.sv.verdict
    t = Text()
    title = "A/A calibration" if d.sv.aa else "Verdict"
    t.append(
        f" {title}: {RESULT_WORDS.get(v.result, v.result)} ",
        RESULT_STYLE.get(v.result, "bold black on yellow"),
    )
    status = d.doc.get("status")
    if status and status != "complete":
        t.append(f"  session {status}", "bold red")
    if d.sv.meta.get("degraded"):
        t.append("  DEGRADED SESSION", "bold red")
    for pair in v.pairs:
        t.append(f"\n{pair.candidate} vs {pair.baseline}: {pair.result}", "bold")
        for r in pair.reasons:
            t.append(f"\n  - {r}")
    if not v.pairs:
        t.append("\nnothing to compare: the baseline or every candidate has no measured request")
    return t


def _slo_cost(d: VerdictData) -> Text:
    t = Text()
    slo = d.doc.get("slo") or {}
    if slo:
        lim = ", ".join(f"{k} ≤ {v * 1e3:g} ms" for k, v in slo.items())
        t.append(f"SLO ({lim})\n", "bold")
        for name, s in d.doc["summaries"].items():
            att, good = s.get("slo_attainment"), s.get("goodput_output_tokens_per_s")
            att_s = "n/a" if att is None or not math.isfinite(att) else f"{att:.1%}"
            good_s = "n/a" if good is None or not math.isfinite(good) else f"{good:,.0f} tok/s"
            t.append(f"  {name}: attainment {att_s}, goodput {good_s}\n")
    else:
        t.append("SLO: none given (no attainment or goodput)\n", "dim")
    costs = [(n, c) for p in d.sv.verdict.pairs if p.cost for n, c in p.cost.items()]
    if costs:
        t.append("cost\n", "bold")
        for n, c in dict(costs).items():
            mt, rq = c.get("usd_per_mtok_good"), c.get("usd_per_1k_good_requests")
            t.append(
                f"  {n}: "
                + (f"${mt:,.3f}/Mtok good" if mt is not None else "n/a")
                + (f", ${rq:,.3f} per 1k good requests" if rq is not None else "")
                + "\n"
            )
    else:
        t.append("cost: no GPU price given\n", "dim")
    return t


def _config(d: VerdictData) -> Text:
    t = Text("what differs between the arms\n", "bold")
    diffs = d.doc.get("config_diff") or []
    if not diffs:
        return t.append("  nothing recorded differs", "dim")
    for row in diffs:
        t.append(f"  {row['setting']}: ", "bold")
        t.append(" | ".join(str(x) for x in row["values"]) + "\n")
    return t


class VerdictScreen(Screen):
    BINDINGS = [
        ("m", "export('md')", "export md"),
        ("h", "export('html')", "export html"),
        ("l", "back", "live panes"),
        ("escape", "back", "live panes"),
    ]

    def __init__(self, data: VerdictData) -> None:
        super().__init__(id="verdict")
        self.data = data

    def compose(self) -> ComposeResult:
        d = self.data
        pol = d.sv.verdict.policy
        with VerticalScroll():
            yield Static(_banner(d), id="banner")
            for i, pair in enumerate(d.sv.verdict.pairs):
                yield Static(effect_table(pair, pol), id=f"metrics-{i}", classes="metrics")
                notes = [f"{label(e.key)}: {e.note}" for e in rows_of(pair, pol)
                         if e.note and e.key in (pol["primary"], *pol["guardrails"])]  # fmt: skip
                if notes:
                    yield Static(escape("\n".join(notes)), classes="notes")
                quality = console_lines(pair.quality)  # suites, length buckets, gates
                if quality:
                    yield Static(Text("\n".join(quality)), id=f"quality-{i}", classes="notes")
            yield Static(_slo_cost(d), id="slo")
            yield Static(Text("\n".join(d.diagnosis)), id="diagnosis")
            yield Static(_config(d), id="config")
            yield Static("", id="exported")
        yield Footer()

    def action_export(self, fmt: str) -> None:
        from abtui.report.export import to_markdown

        sv, doc = self.data.sv, self.data.doc
        if fmt == "md":
            text = to_markdown(sv, doc)
        else:
            from abtui.report.html import to_html

            text = to_html(sv, doc)
        out = sv.path.with_suffix(f".{fmt}")
        try:
            out.write_text(text, encoding="utf-8")
            msg = Text(f"wrote {fmt} report to {out}", "green")
        except OSError as e:
            msg = Text(f"cannot write {out}: {e}", "bold red")
        self.query_one("#exported", Static).update(msg)

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:  # the live panes are underneath
            self.app.pop_screen()
