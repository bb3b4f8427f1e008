"""The verdict: banner and reasons, the metrics table, SLO and goodput, cost, diagnosis, and
what differs between the arms. Everything comes from the report module's data
(``SessionVerdict`` and ``report_data``); nothing is recomputed here."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer

from abtui.quality.gates import QualityVerdict
from abtui.report import quality as quality_report
from abtui.report.health import DEGRADED_TAG, DEGRADED_WHY, stored_health
from abtui.report.untrusted import printable
from abtui.report.verdict_text import metrics_table, rows_of
from abtui.stats.labels import label
from abtui.tui.keys import VERDICT
from abtui.tui.widgets.charts import Chart
from abtui.tui.widgets.inert import Static
from abtui.verdict.ablation import Factorial
from abtui.verdict.policy import GO, NO_GO
from abtui.verdict.saved import SessionVerdict

RESULT_STYLE = {GO: "bold white on dark_green", NO_GO: "bold white on dark_red"}
RESULT_WORDS = {GO: "✓ GO", NO_GO: "✗ NO-GO", "INCONCLUSIVE": "~ INCONCLUSIVE"}


@dataclass
class VerdictData:
    """What the verdict screen shows, loaded by a worker from the session file."""

    sv: SessionVerdict
    doc: dict  # abtui.report.document.report_data
    diagnosis: list[str]


def load_verdict(path, store: bool = False) -> VerdictData:
    """The core calls behind the screen (run in a thread worker); ``store``: the app ran the
    session, whose verdict goes into its file (an opened one is only read)."""
    from abtui.report.document import report_data
    from abtui.telemetry.diagnosis import diagnose, diagnosis_lines
    from abtui.verdict.saved import session_verdict

    sv = session_verdict(path, store=store)
    doc = report_data(sv)
    lines = diagnosis_lines(diagnose(path))
    profile = (doc.get("profile") or {}).get("lines") or []  # abtui run --profile
    if profile:
        from abtui.report.untrusted import inert

        lines += ["", *(inert(x) for x in profile)]
    return VerdictData(sv, doc, lines)


def quality_table(
    qual: QualityVerdict, mode: quality_report.QualityMode | None, width: int, extra: int = 0
):
    """The pair's quality section fitted to ``width`` columns (``extra``: the screen's columns
    beside it, to name terminal widths): :func:`abtui.report.quality.fitted_table`."""
    return quality_report.fitted_table(qual, mode, width, extra)


def health_text(meta: dict) -> Text:
    """The load generators' stored health under the banner, in the words ``abtui report``
    prints (both take them from abtui.report.health): a degraded session's reasons, and the
    notes — a generator that used most of a core, a main process that read the records seconds
    late — so that a team reviewing the session sees it ran on a stalled box. Lines start with
    a newline; the stored strings are shown inert (a session file may come from anyone)."""
    t = Text()
    words = stored_health(meta)
    if words.degraded:
        t.append(f"\n{DEGRADED_TAG}: ", "bold red")
        t.append(DEGRADED_WHY, "bold")
        for r in words.reasons:
            t.append(f"\n  ✗ {printable(r)}", "bold red")
    for note in words.notes:
        t.append("\nnote: ", "yellow")
        t.append(printable(note))
    return t


def bullets(lines: list[str], prefix: str = "  - ") -> Table:
    """``lines`` as bullets, each wrapped under its own first word (a hanging indent: a reason
    longer than the screen does not run back to column 1)."""
    t = Table.grid(padding=0)
    t.add_column(no_wrap=True, width=len(prefix))
    t.add_column(ratio=1, overflow="fold")
    for line in lines:
        t.add_row(prefix, Text(line))
    return t


def _banner(d: VerdictData) -> Group:
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
        t.append(f"  {DEGRADED_TAG}", "bold red")
    t.append_text(health_text(d.sv.meta))
    parts: list = [t]
    for pair in v.pairs:
        parts.append(Text(f"{pair.candidate} vs {pair.baseline}: {pair.result}", "bold"))
        parts.append(bullets(pair.reasons))
    if not v.pairs:
        parts.append(
            Text("nothing to compare: the baseline or every candidate has no measured request")
        )
    return Group(*parts)


def _slo_cost(d: VerdictData) -> Text:
    t = Text()
    shape = (d.doc.get("workload") or {}).get("text")  # abtui.metrics.workload: what was sent
    if shape:
        t.append("workload: ", "bold").append(printable(shape) + "\n")
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
            mt, rq = c.shown("usd_per_mtok_good"), c.shown("usd_per_1k_good_requests")
            t.append(
                f"  {n}: "
                + (f"${mt:,.3f}/Mtok good" if mt is not None else "n/a")
                + (f", ${rq:,.3f} per 1k good requests" if rq is not None else "")
                + "\n"
            )
    else:
        t.append("cost: no GPU price given\n", "dim")
    return t


def ablation_text(fac: Factorial, key: str, width: int) -> Text:
    """The ablation view: the 2×2 (or 2×2×2) of one metric from the report module's grid, its
    findings and the combination's NO-GO, wrapped at ``width``."""
    from abtui.report.factorial import combination_no_go, grid_lines, quality_lines

    t = Text(f"ablation: {' × '.join(fac.factors)} — a: next metric\n", "bold")
    if fac.error:
        return t.append(f"not computed: {printable(fac.error)}")
    lines = lambda xs: "\n".join(printable(x) for x in xs)  # noqa: E731  (each line inert)
    t.append(lines(grid_lines(fac, key, width)))
    row = fac.row(key)
    for inter in row.interactions if row else ():
        if inter.finding:
            t.append("\nfinding: ", "bold yellow").append(printable(inter.finding))
    quality = quality_lines(fac, width)  # the accuracy terms, whatever the metric shown
    if quality:
        t.append("\n" + lines(quality))
    for reason in combination_no_go(fac):
        t.append(f"\nNO-GO for {printable(fac.combination)}: ", "bold red")
        t.append(printable(reason))
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
    HELP, HELP_TITLE = VERDICT, "the verdict"
    BINDINGS = [
        ("m", "export('md')", "export md"),
        ("a", "ablation", "ablation metric"),
        ("h", "export('html')", "export html"),
        ("l", "back", "live panes"),
        ("escape", "back", "live panes"),
    ]

    def __init__(self, data: VerdictData) -> None:
        super().__init__(id="verdict")
        self.data = data
        fac = data.sv.verdict.factorial
        from abtui.verdict.ablation import headline_keys

        self._ablation_keys = headline_keys(fac, data.sv.verdict.policy) if fac else []
        self._ablation_at = 0

    def _beside(self, width: int) -> int:
        """The terminal's columns beside a table ``width`` wide (border, scrollbar), so that
        its caption can name terminal widths."""
        return max(0, self.app.size.width - width)

    def compose(self) -> ComposeResult:
        d = self.data
        pol = d.sv.verdict.policy
        qmode = quality_report.mode_info(d.sv.meta)
        with VerticalScroll():
            yield Static(_banner(d), id="banner")
            fac = d.sv.verdict.factorial
            if fac and (self._ablation_keys or fac.error):
                view = Chart(id="ablation", classes="notes")
                view.show(self._ablation_builder())
                yield view
            for i, pair in enumerate(d.sv.verdict.pairs):
                table = Chart(id=f"metrics-{i}", classes="metrics")
                table.show(lambda w, pair=pair: metrics_table(pair, pol, w, self._beside(w)))
                yield table
                # every row the table shows that has a reason (each non-decision has one)
                notes = [f"{label(e.key)}: {e.note}" for e in rows_of(pair, pol) if e.note]
                if notes:
                    yield Static("\n".join(notes), classes="notes")
                if pair.quality:  # suites, length buckets, gates
                    chart = Chart(id=f"quality-{i}", classes="notes")
                    chart.show(
                        lambda w, q=pair.quality: quality_table(q, qmode, w, self._beside(w))
                    )
                    yield chart
            yield Static(_slo_cost(d), id="slo")
            yield Static(Text("\n".join(d.diagnosis)), id="diagnosis")
            yield Static(_config(d), id="config")
        yield Static("", id="exported")  # under the scroll: seen at once, whatever is scrolled
        yield Footer()

    def _ablation_builder(self):
        fac = self.data.sv.verdict.factorial
        key = self._ablation_keys[self._ablation_at] if self._ablation_keys else ""
        return lambda w: ablation_text(fac, key, w)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``a`` only where there is an ablation to page through (the footer offered "a
        ablation metric" on every session)."""
        if action == "ablation":
            return bool(self._ablation_keys)
        return True

    def action_ablation(self) -> None:
        """The ablation view's next metric (the primary, then each guardrail)."""
        if not self._ablation_keys:
            return
        self._ablation_at = (self._ablation_at + 1) % len(self._ablation_keys)
        self.query_one("#ablation", Chart).show(self._ablation_builder())

    def action_export(self, fmt: str) -> None:
        from abtui.report.export import to_markdown

        sv, doc = self.data.sv, self.data.doc
        if fmt == "md":
            text = to_markdown(sv, doc)
        else:
            from abtui.report.html import to_html

            text = to_html(sv, doc)
        out = sv.path.with_suffix(f".{fmt}")
        from abtui.tui.web import send_to_browser

        sent = (
            "; sent to your browser as a download"
            if send_to_browser(self.app, out.name, text)
            else ""
        )
        try:
            out.write_text(text, encoding="utf-8")
            msg = Text(f"wrote {fmt} report to {out}{sent}", "green")
        except OSError as e:
            msg = Text(f"cannot write {out}: {e}{sent}", "yellow" if sent else "bold red")
        shown = self.query_one("#exported", Static)
        shown.update(msg)
        shown.display = True

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:  # the live panes are underneath
            self.app.pop_screen()
