"""The live run: a header, one column per arm, and the provisional B-vs-A delta strip; ``c``
turns the columns into the compare view (every arm's CDFs overlaid, a table of the arms).

More arms than fit side by side (a 2×2×2 ablation has eight) are paged, as k9s and lazygit
page what does not fit: the baseline keeps the first column, the candidates come a page at a
time beside it (``[`` / ``]``), the strip under them says each one's delta against it, and the
last column's border says which page this is. Each pane's border carries the arm's letter, the
one the compare view draws it with.

Widgets only render what abtui.metrics.live computed (copied into ``RunProgress``)."""

from __future__ import annotations

import math

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer

from abtui.metrics.catalogue import METRICS
from abtui.metrics.live import deltas, shared_range
from abtui.metrics.summary import LAG_MAX_LIMIT_S
from abtui.runner.health import BEHIND_NOTE_S
from abtui.runner.observer import RunInfo, SeqLook
from abtui.tui import keys
from abtui.tui.messages import ArmState, RunProgress
from abtui.tui.widgets.charts import Chart, fmt_s, histogram_text, phase_bar, sparkline
from abtui.tui.widgets.gauges import gauge_rows, util_series
from abtui.tui.widgets.inert import Static
from abtui.tui.widgets.overlay import compare_text, letter
from abtui.tui.widgets.pane import (
    HISTORY_ROWS,
    PanePlan,
    counts_text,
    engine_line,
    error_line,
    gpu_line,
    pane_plan,
    title_text,
)
from abtui.tui.widgets.strip import (
    LIVE,
    VERDICT,
    delta_text,
    sequential_text,
    verdict_rows,
    verdict_views,
)
from abtui.workload.segments import Position


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(0, n - 1)] + "…"


def _short_state(state: str) -> str:
    """``stored session, complete`` → ``complete``; a killed one (``… (killed: never
    closed)``) → ``killed``."""
    return "killed" if "(killed" in state else state.removeprefix("stored session, ").split(" (")[0]


def _short_load(load: str) -> str:
    """The load's figure alone, for a narrow header: ``13 req/s`` (of ``poisson 13 req/s``),
    ``conc 8`` (of ``closed loop, concurrency 8``); "" for anything else (a sweep, a replay)."""
    import re

    if m := re.fullmatch(r"[a-z]+(?: \(burstiness [\d.]+\))? ([\d.]+ req/s)(?:,.*)?", load):
        return m.group(1)
    if m := re.fullmatch(r"closed loop, concurrency (\d+)", load):
        return f"conc {m.group(1)}"
    return ""


def header_text(
    name: str,
    state: str,
    elapsed_s: float,
    done: int,
    planned: int,
    load: str,
    segment: Position | None,
    lag_s: float,
    width: int,
    *,
    behind_s: float = 0.0,
    waiting: int = 0,
    profiling: bool = False,
) -> Text:
    """The run's header on one line of ``width``: session, state, elapsed, requests done/total,
    where the schedule is (sweep level, run, block and whose turn: ``segment``), the load and
    the load generator's health — and, when the main process is reading the generators'
    finished records more than :data:`~abtui.runner.health.BEHIND_NOTE_S` late (``behind_s``,
    ``waiting`` records; the summary's note says it afterwards), that too; ``▒ profiling``
    while a profiling window is open (``profiling``). Narrower, it
    shortens rather than wraps, least needed first: compact words, the load description (the
    segment says the level's load), the 'abtui' mark, the session name cut, the state's
    detail, the segment's load, 'req', the name cut shorter, then gone; only then is the line
    cut with '…'."""
    late = lag_s > LAG_MAX_LIMIT_S  # the summary's generator_behind rule on the largest lag
    behind = behind_s > BEHIND_NOTE_S

    def parts(k: int) -> list[tuple[str, str]]:  # k: how hard it is squeezed (0: not at all)
        seg = segment.label(squeeze=0 if k < 1 else 1 if k < 6 else 2) if segment else ""
        if late:
            health = f"gen LATE {fmt_s(lag_s)}" if k else f"generator LATE (lag {fmt_s(lag_s)})"
        else:
            health = "gen ok" if k else "generator ok"
        st = state if k < 5 else _short_state(state)
        nm = name if k < 4 else _cut(name, 16) if k < 8 else _cut(name, 8) if k < 9 else ""
        out = [
            ("abtui" if k < 3 else "", "bold"),
            (nm, ""),
            (st, ""),
            (f"{elapsed_s:6.1f}s" if k == 0 else f"{elapsed_s:.1f}s", ""),
            (f"{done}/{planned}" + (" req" if k < 7 else ""), ""),
            (seg, "bold"),
            ("" if not profiling else "▒ profiling" if k < 7 else "▒ prof", "bold magenta"),
            (load if k < 2 else _short_load(load) if k < 7 else "", ""),
            (health, "bold red" if late else "green"),
            (
                ""
                if not behind
                else f"reading {behind_s:.1f}s behind"
                if k
                else f"reading records {behind_s:.1f}s behind ({waiting} waiting)",
                "bold yellow",
            ),
        ]
        return [(t, st) for t, st in out if t]

    def size(its) -> int:
        return sum(len(t) for t, _ in its) + 3 * (len(its) - 1)

    def joined(its) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        for i, (txt, style) in enumerate(its):
            if i:
                t.append(" · ")
            t.append(txt, style or None)
        return t

    k = 0
    while size(its := parts(k)) > width and k < 9:
        k += 1
    t = joined(its)
    if len(t) > width:  # cut what comes before the health, which stays whole where it can
        tail = its[-(2 if behind else 1) :]
        room = width - size(tail) - 3
        if room >= 8:
            t = joined(its[: -len(tail)])
            t.truncate(room, overflow="ellipsis")
            t = joined([(t, None), *tail])
        else:
            t.truncate(max(1, width), overflow="ellipsis")
    return t


MIN_PANE = 26  # columns of an arm's pane at least: three fit at 80, six at 160; more are paged


def page_size(n_arms: int, width: int) -> int:
    """Candidates shown at once: all of them where every arm's pane fits ``width`` at
    :data:`MIN_PANE` columns, else as many as fit beside the baseline's (at least one)."""
    fit = max(2, width // MIN_PANE)
    return max(0, n_arms - 1) if n_arms <= fit else fit - 1


def page_of(n_arms: int, width: int, page: int) -> tuple[list[int], int, int]:
    """(the arms shown — the baseline, then the page's candidates —, the page, the pages) for
    page ``page`` (wrapped round) of ``n_arms`` arms at ``width``."""
    per = page_size(n_arms, width)
    cands = list(range(1, n_arms))
    pages = max(1, -(-len(cands) // per)) if per else 1
    page %= pages
    return [0, *cands[page * per : (page + 1) * per]][:n_arms], page, pages


COMPARE_STRIP_ROWS = 40  # from this height the strip stays under the compare view of 4+ arms
SPARK_LABEL = 18  # "tok/s 10s   1,944 ", "good  run     249 ": the sparklines in one column
WINDOW = {True: "run", False: "10s"}  # the rates' window: the verdict's whole run, or 10 s


class ArmPane(VerticalScroll):
    """One arm's column: the rows of :func:`~abtui.tui.widgets.pane.pane_plan` for its height,
    each one line that never wraps, so the pane never needs its own scrollbar and every arm's
    rows line up; its border's title is the arm's letter."""

    ROWS = (
        "title",
        "counts",
        "ttft",
        "tpot",
        "spark",
        "gpu",
        "gauges",
        "engine",
        "phase",
        "errors",
    )

    def __init__(self, index: int, name: str, url: str, model: str) -> None:
        super().__init__(id=f"arm-{index}", classes="arm")
        self.arm_name, self.url, self.model = name, url, model
        self.border_title = letter(index)  # as the compare view draws this arm
        self.plan: PanePlan | None = None

    def compose(self) -> ComposeResult:
        for row in self.ROWS:
            yield Chart(classes=row)

    def on_mount(self) -> None:
        name, model = self.arm_name, self.model
        self.query_one(".title", Chart).show(lambda w: title_text(name, model, w))

    def on_resize(self) -> None:
        """Taller or shorter (the strip below gained or lost a row on a page turn, the
        terminal was resized): the rows are planned again for the new height at once, not at
        the next progress (a replay paused at its end has none)."""
        if self.plan is not None and pane_plan(self.content_size.height) != self.plan:
            redraw = getattr(self.screen, "redraw", None)
            if redraw is not None:
                self.call_after_refresh(redraw)

    def apply(self, plan: PanePlan) -> None:
        """Each row's height for ``plan`` (only when it changed: a relayout costs CPU)."""
        if plan == self.plan:
            return
        self.plan = plan
        heights = {
            "ttft": plan.hist_lines,
            "tpot": plan.hist_lines,
            "spark": 1 + plan.good,
            "gpu": int(plan.gpu),
            "gauges": HISTORY_ROWS * plan.history,
            "engine": int(plan.engine),
            "phase": plan.phase_lines,
            "errors": int(plan.errors),
        }
        for row, h in heights.items():
            w = self.query_one(f".{row}", Chart)
            w.styles.height = h
            w.display = h > 0


class LiveScreen(Screen):
    HELP, HELP_TITLE = keys.LIVE, "the live panes"
    BINDINGS = [
        ("v", "app.show_verdict", "verdict"),
        ("c", "compare", "compare"),
        Binding("right_square_bracket", "page(1)", "next arms", show=False),
        Binding("left_square_bracket", "page(-1)", "previous arms", show=False),
        Binding("escape", "app.leave", "list", show=False),  # a session from the start screen
    ]

    def __init__(self, info: RunInfo, initial: RunProgress | None = None, status: str = "") -> None:
        super().__init__(id="live")
        self.info = info
        self.last: RunProgress | None = None
        self.verdict_pairs = None  # the verdict's PairVerdicts, once computed (set_verdict)
        self._status: str | None = None
        self._seq_shown: str | None = None  # --until-decided: the status line in the note
        self._initial = (initial, status)  # a stored session's figures (abtui open)
        self.page = 0
        self.shown: list[int] = list(range(len(info.arm_names)))  # the arms on screen
        self.comparing = False  # the compare view instead of the panes

    def on_mount(self) -> None:
        self._fit_columns()
        name = self.info.session_name
        self.query_one("#header", Chart).show(
            lambda w: Text(f"abtui · session {name} · starting…", no_wrap=True, overflow="ellipsis")
        )
        msg, status = self._initial
        if msg is not None:
            self.show_progress(msg, status)

    def _fit_columns(self) -> None:
        """Show the baseline and the current page's candidates; the last column's border says
        which page it is and how to turn it."""
        panes = list(self.query(ArmPane))
        self.shown, self.page, pages = page_of(len(panes), self.size.width or 80, self.page)
        for i, pane in enumerate(panes):
            pane.display = i in self.shown
            pane.styles.width = "1fr"
            pane.border_subtitle = ""
        if pages > 1:
            hint = "] next" if self.page == 0 else "[ back" if self.page == pages - 1 else "[ ]"
            panes[self.shown[-1]].border_subtitle = f"page {self.page + 1}/{pages} {hint}"

    def compose(self) -> ComposeResult:
        yield Chart(id="header")
        with Horizontal(id="arms"):
            for i, (n, u, m) in enumerate(
                zip(self.info.arm_names, self.info.arm_urls, self.info.arm_models, strict=True)
            ):
                yield ArmPane(i, n, u, m)
        yield Chart(id="compare")
        yield Chart(id="delta")
        yield Static("", id="note")
        yield Footer()

    def on_resize(self) -> None:
        self._fit_columns()
        if self.last is not None:
            self.call_after_refresh(self.show_progress, self.last, self._status)

    def redraw(self) -> None:
        """Draw the last figures again (after a layout change)."""
        if self.last is not None:
            self.show_progress(self.last, self._status)

    def action_page(self, step: int) -> None:
        """The next (``step`` 1) or previous (-1) page of candidates, where they are paged."""
        _, page, pages = page_of(len(self.info.arm_names), self.size.width or 80, self.page)
        if pages < 2:
            return
        self.page = (page + step) % pages
        self._fit_columns()
        if self.last is not None:
            self.call_after_refresh(self.show_progress, self.last, self._status)

    def action_compare(self) -> None:
        """The compare view (every arm overlaid) instead of the panes, or back."""
        self.comparing = not self.comparing
        self.query_one("#arms").display = not self.comparing
        self.query_one("#compare", Chart).display = self.comparing
        # with four arms or more on a short screen the chart needs the strip's rows (its
        # table has every arm's figures); c again brings the strip back with the panes
        short = len(self.info.arm_names) > 3 and (self.size.height or 24) < COMPARE_STRIP_ROWS
        self.query_one("#delta", Chart).display = not (self.comparing and short)
        if self.last is not None:
            self.call_after_refresh(self.show_progress, self.last, self._status)

    def note(self, text: str) -> None:
        self.query_one("#note", Static).update(Text(text, "italic"))

    def show_progress(self, msg: RunProgress, status: str | None = None) -> None:
        self.last = msg
        self._status = status
        if msg.sequential and msg.sequential != self._seq_shown:  # a new look: its status
            self._seq_shown = msg.sequential
            self.note(msg.sequential)
        done = sum(a.progress.done for a in msg.arms)
        planned = sum(a.progress.planned for a in msg.arms)
        lag = max((a.progress.schedule_lag_max_s for a in msg.arms), default=0.0)
        behind = max((a.progress.reading_behind_s for a in msg.arms), default=0.0)
        waiting = sum(a.progress.records_waiting for a in msg.arms)
        state = status or msg.phase
        name, load, seg = self.info.session_name, self.info.load, msg.segment
        self.query_one("#header", Chart).show(
            lambda w: header_text(
                name,
                state,
                msg.elapsed_s,
                done,
                planned,
                load,
                seg,
                lag,
                w,
                behind_s=behind,
                waiting=waiting,
                profiling=msg.profiling,
            )
        )
        whole = self.strip_mode() == VERDICT  # the verdict's figures everywhere, not the 10 s
        views = [a.view for a in msg.arms]
        if whole:
            views = verdict_views(self.verdict_pairs, views)
        if self.comparing:
            view = self.query_one("#compare", Chart)
            names, rate = [a.progress.name for a in msg.arms], f"tok/s {WINDOW[whole]}"
            view.show(lambda w: compare_text(names, views, w, view.content_size.height or 20, rate))
        else:  # one axis for every arm (the hidden pages' too: a page turn keeps the axis)
            ttft_rng = shared_range([v.ttft for v in views])
            tpot_rng = shared_range([v.tpot for v in views])
            for i, st in enumerate(msg.arms):
                if i in self.shown:
                    self._show_arm(i, st, views[i], ttft_rng, tpot_rng, WINDOW[whole])
        self._show_delta(msg.arms, msg.look)

    def _show_arm(self, i: int, st: ArmState, v, ttft_rng, tpot_rng, window: str) -> None:
        """Arm ``i``'s pane from its progress and ``v``, its view (the verdict's figures once
        they are in); ``window``: the rates' window, said on their labels."""
        pane = self.query_one(f"#arm-{i}", ArmPane)
        p = st.progress
        plan = pane_plan(pane.content_size.height)
        pane.apply(plan)
        rows, marks, axis = plan.bars, plan.marks, plan.axes
        ttfo = None if v.ttfo is None else ("TTFO", v.ttfo)  # once a response reasoned
        split = [  # reasoning and answer TPOT beside TPOT, as TTFO beside TTFT
            (METRICS[k].short, h)
            for k, h in (("tpot_reasoning", v.tpot_reasoning), ("tpot_answer", v.tpot_answer))
            if h is not None
        ]
        pane.query_one(".counts", Chart).show(lambda w: counts_text(p, w))
        pane.query_one(".ttft", Chart).show(
            lambda w: histogram_text(
                "TTFT", v.ttft, ttft_rng, w, rows, marks=marks, axis=axis, also=ttfo
            )
        )
        pane.query_one(".tpot", Chart).show(
            lambda w: histogram_text(
                "TPOT", v.tpot, tpot_rng, w, rows, marks=marks, axis=axis, also=split
            )
        )

        def spark(w: int) -> Text:
            # both labels SPARK_LABEL wide, both series w - SPARK_LABEL long: "good" was one
            # cell longer than "tok/s", so its line wrapped (the sparkline went to a hidden
            # row) once the series filled the row
            t = Text(no_wrap=True, overflow="ellipsis")
            tok = "n/a" if not math.isfinite(v.out_tok_s) else f"{v.out_tok_s:,.0f}"
            t.append(f"{'tok/s':<6}{window:<4}{tok:>7} ", "bold")
            t.append(sparkline(v.throughput, w - SPARK_LABEL), "cyan")
            if not plan.good:
                return t
            t.append("\n")
            if v.goodput is None:
                return t.append("goodput: no SLO given", "dim")
            good = "n/a" if not math.isfinite(v.good_tok_s) else f"{v.good_tok_s:,.0f}"
            t.append(f"{'good':<6}{window:<4}{good:>7} ", "bold")
            return t.append(sparkline(v.goodput, w - SPARK_LABEL), "green")

        pane.query_one(".spark", Chart).show(spark)
        hist = p.history.series()
        util = None if plan.history else util_series(hist)  # the GPU line's own short history
        pane.query_one(".gpu", Chart).show(lambda w: gpu_line(p.telemetry, w, util))
        if plan.history:
            pane.query_one(".gauges", Chart).show(lambda w: gauge_rows(p.telemetry, hist, w))
        pane.query_one(".engine", Chart).show(lambda w: engine_line(p.telemetry, w, v.cache_hit))
        bar = plan.phase_bar
        pane.query_one(".phase", Chart).show(
            lambda w: phase_bar(v.ttft_mean_s, v.decode_mean_s, v.lag_mean_s, w, bar)
        )
        pane.query_one(".errors", Chart).show(lambda w: error_line(p, w))

    def set_verdict(self, pairs) -> None:
        """The verdict is computed (its ``PairVerdict`` list): the strip of the finished run
        shows the verdict's figures from now on."""
        self.verdict_pairs = pairs
        self.redraw()  # the panes and the compare view take the verdict's figures too

    def strip_mode(self) -> str:
        """What the strip shows: the running estimates, or (the run over, the verdict in) the
        verdict's figures."""
        return VERDICT if self.verdict_pairs is not None else LIVE

    def _show_delta(self, arms: list[ArmState], look: SeqLook | None = None) -> None:
        base = arms[0].progress.name if arms else ""
        if look is not None:  # --until-decided: the intervals the decision uses, live and after
            self.query_one("#delta", Chart).show(lambda w: sequential_text(base, look, w))
            return
        mode = self.strip_mode()
        if len(arms) < 2:
            rows = []
        elif mode == VERDICT:
            rows = verdict_rows(self.verdict_pairs, self.info.arm_names)
        else:
            d, dt = self.info.delta, self.info.delta_tail
            rows = [(st.progress.name, deltas(arms[0].view, st.view, d, dt)) for st in arms[1:]]
        # the candidates of the page on screen (each against the baseline, in its first column)
        on_page = {self.info.arm_names[i] for i in self.shown[1:] if i < len(self.info.arm_names)}
        rows = [r for r in rows if r[0] in on_page]
        fixed = frozenset({"throughput"}) if self.info.fixed_rate else frozenset()
        self.query_one("#delta", Chart).show(lambda w: delta_text(base, rows, w, mode, fixed))
