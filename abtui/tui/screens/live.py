"""The live run: a header, one column per arm, and the provisional B-vs-A delta strip.

Widgets only render what abtui.metrics.live computed (copied into ``RunProgress``)."""

from __future__ import annotations

import math

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import HorizontalScroll, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from abtui.metrics.live import Delta, deltas, shared_range
from abtui.runner.health import BEHIND_NOTE_S
from abtui.runner.observer import RunInfo
from abtui.runner.segments import Position
from abtui.tui.messages import ArmState, RunProgress
from abtui.tui.widgets.charts import (
    Chart,
    fmt_s,
    histogram_text,
    phase_bar,
    set_content,
    sparkline,
)

GPU_FIELDS = (  # (metric suffix, label, format)
    ("gpu.mem_used_bytes", "mem", lambda v: f"{v / 2**30:.1f}G"),
    ("gpu.busy", "util", lambda v: f"{v:.0%}"),
    ("gpu.sm_active", "SM", lambda v: f"{v:.0%}"),
    ("gpu.dram_active", "DRAM", lambda v: f"{v:.0%}"),
    ("gpu.power_w", "power", lambda v: f"{v:.0f}W"),
)


def gpu_line(telemetry: dict[str, float]) -> Text:
    """GPU gauges from the arm's latest telemetry, or a plain 'no GPU telemetry' line."""
    t = Text()
    for src in ("nvml", "dcgm"):
        got = {k.split(":", 1)[1]: v for k, v in telemetry.items() if k.startswith(src + ":")}
        if not got:
            continue
        t.append(f"GPU ({src}) ", "bold")
        parts = []
        for key, lab, f in GPU_FIELDS:
            if key in got and math.isfinite(got[key]):
                val = f(got[key])
                total = got.get("gpu.mem_total_bytes") or (
                    got["gpu.mem_used_bytes"] + got["gpu.mem_free_bytes"]
                    if "gpu.mem_free_bytes" in got and key == "gpu.mem_used_bytes"
                    else None
                )
                if key == "gpu.mem_used_bytes" and total:
                    val += f"/{total / 2**30:.0f}G"
                parts.append(f"{lab} {val}")
        return t.append(" · ".join(parts) or "no GPU fields reported")
    return t.append("no GPU telemetry", "dim")


def engine_line(telemetry: dict[str, float]) -> Text:
    """The server's own queue: running / waiting requests and KV-cache use, when scraped."""
    for eng in ("vllm", "sglang", "tgi", "llamacpp"):
        got = {k.split(":", 1)[1]: v for k, v in telemetry.items() if k.startswith(eng + ":")}
        parts = [f"{lab} {f(got[k])}" for k, lab, f in (
            ("running", "running", lambda v: f"{v:.0f}"),
            ("waiting", "waiting", lambda v: f"{v:.0f}"),
            ("kv_usage", "KV", lambda v: f"{v:.0%}"),
        ) if k in got and math.isfinite(got[k])]  # fmt: skip
        if parts:
            return Text.assemble((f"server ({eng}) ", "bold"), " · ".join(parts))
    return Text("server queue: not scraped", "dim")


def error_line(state: ArmState) -> Text:
    p = state.progress
    t = Text()
    if not p.errors and not p.cancelled:
        return t.append("errors: none", "dim")
    t.append("errors: ", "bold red")
    t.append(", ".join(f"{k} {v}" for k, v in sorted(p.errors.items())) or "none")
    if p.cancelled:
        t.append(f"; cancelled {p.cancelled}")
    return t


def counts_text(p, width: int) -> Text:
    """The arm's counts in ``width`` columns: done/planned, ok, errors (when there are any: the
    by-class line is the pane's last, below the fold on a small terminal), in flight or
    finished. Narrower, the words shorten, then the ok count goes when errors are shown (ok is
    done less errors and cancelled); a line is never cut inside a number (at 80×24 it lost the
    in-flight count's digits), and wraps between items when even the short form does not fit."""
    err = sum(p.errors.values())

    def items(short: bool) -> list[tuple[str, str]]:
        return [
            (f"{p.done}/{p.planned}" + ("" if short else " done"), ""),
            (f"ok {p.ok}", ""),
            *([(f"{'err' if short else 'errors'} {err}", "bold red")] if err else []),
            ("finished", "") if p.finished else
            ((f"{p.in_flight} in flight" if short else f"in flight {p.in_flight}"), ""),
        ]  # fmt: skip

    def fits(its) -> bool:
        return sum(len(t) for t, _ in its) + 3 * (len(its) - 1) <= width

    chosen = items(False)
    if not fits(chosen):
        chosen = items(True)
        if not fits(chosen) and err:
            del chosen[1]  # ok: done less errors (and cancelled), near enough
    out, col = Text(), 0
    for k, (t, style) in enumerate(chosen):
        if k and col + 3 + len(t) > width:  # the next item on a line of its own
            out.append("\n")
            col = 0
        elif k:
            out.append(" · ")
            col += 3
        out.append(t, style)
        col += len(t)
    return out


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(0, n - 1)] + "…"


def _short_state(state: str) -> str:
    """``stored session, complete`` → ``complete``; a killed one (``… (killed: never
    closed)``) → ``killed``."""
    return "killed" if "(killed" in state else state.removeprefix("stored session, ").split(" (")[0]


def header_text(name: str, state: str, elapsed_s: float, done: int, planned: int, load: str,
                segment: Position | None, lag_s: float, width: int, *, behind_s: float = 0.0,
                waiting: int = 0) -> Text:  # fmt: skip
    """The run's header on one line of ``width``: session, state, elapsed, requests done/total,
    where the schedule is (sweep level, run, block and whose turn: ``segment``), the load and
    the load generator's health — and, when the main process is reading the generators'
    finished records more than :data:`~abtui.runner.health.BEHIND_NOTE_S` late (``behind_s``,
    ``waiting`` records; the summary's note says it afterwards), that too. Narrower, it
    shortens rather than wraps, least needed first: compact words, the load description (the
    segment says the level's load), the 'abtui' mark, the session name cut, the state's
    detail, the segment's load, 'req', the name cut shorter, then gone; only then is the line
    cut with '…'."""
    late = lag_s >= 0.1
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
            (load if k < 2 else "", ""),
            (health, "bold red" if late else "green"),
            ("" if not behind else f"reading {behind_s:.1f}s behind" if k else
             f"reading records {behind_s:.1f}s behind ({waiting} waiting)", "bold yellow"),
        ]  # fmt: skip
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


SHORT_DELTA = {  # the compact strip's group labels: a P99 follows its P50 under one label
    "TTFT P50": "TTFT", "TTFT P99": "", "TPOT P50": "TPOT", "TPOT P99": "",
    "throughput": "tok/s", "goodput": "good",
}  # fmt: skip
DELTA_LEGENDS = (  # the compact strip's last line, the longest that fits
    "vs {base} · TTFT, TPOT: P50 P99 · provisional running estimates (✓ better, ✗ worse); "
    "the verdict decides",
    "vs {base} · TTFT, TPOT: P50 P99 · provisional (✓ better, ✗ worse); the verdict decides",
    "vs {base} · TTFT, TPOT: P50 P99 · provisional (✓ better, ✗ worse)",
    "vs {base} · P50 P99 · provisional",
)


def _mark(d: Delta) -> tuple[str, str, str]:
    """(figure, mark, style) of one delta; the mark says it in words where colour cannot."""
    if not math.isfinite(d.ratio):
        return "n/a", "", "dim"
    mark = "≈" if d.better is None else "✓" if d.better else "✗"
    return f"{d.ratio:+.1%}", mark, "" if d.better is None else "green" if d.better else "red"


def delta_text(base: str, rows: list[tuple[str, list[Delta]]], width: int) -> Text:
    """The B-vs-A strip: per candidate, its running deltas against the baseline ``base``, and
    a line saying they are provisional. Where a candidate's line in words (``TTFT P50 -24.2%
    ✓``…) does not fit ``width``, one line per candidate (at 80 columns it took two each, and
    with three arms the panes lost their lower half): the figures in aligned columns under
    short group labels (``TTFT -24.2%✓ -55.3%✓``: P50 then P99), the candidate's name cut to
    make room, and the baseline and the P50/P99 order said once on the last line. Every figure
    and mark is kept at any width."""
    t = Text()
    if not rows:
        return t
    full = [
        (f"{name} vs {base}: ", [(f"{d.label} n/a  " if f == "n/a" else f"{d.label} {f} {m}  ", st)
                                 for d in ds for f, m, st in [_mark(d)]])
        for name, ds in rows
    ]  # fmt: skip
    if all(len(head) + len("".join(x for x, _ in its).rstrip()) <= width for head, its in full):
        for head, its in full:
            t.append(head, "bold")
            for x, st in its:
                t.append(x, st)
            t.append("\n")
        return t.append("provisional running estimates (✓ better, ✗ worse); the verdict decides",
                        "dim")  # fmt: skip
    # one line per candidate: columns of figures, each as wide as its widest
    cells = [[(f + m, st) for f, m, st in map(_mark, ds)] for _, ds in rows]
    labels = [SHORT_DELTA.get(d.label, d.label) for d in rows[0][1]]
    cols = [max(len(r[k][0]) for r in cells) for k in range(len(labels))]
    figures = sum(cols) + sum(len(lab) + 2 if lab else 1 for lab in labels)  # " lab " or " "
    name_w = max(3, min(max(len(n) for n, _ in rows), width - figures))
    for (name, _), row in zip(rows, cells, strict=True):
        t.append(_cut(name, name_w).ljust(name_w), "bold")
        for lab, (x, st), w in zip(labels, row, cols, strict=True):
            t.append(f"  {lab} " if lab else " ", "dim" if lab else "")
            t.append(x.rjust(w), st)
        t.append("\n")
    legend = next((f for lg in DELTA_LEGENDS if len(f := lg.format(base=base)) <= width),
                  DELTA_LEGENDS[-1].format(base=_cut(base, 8)))  # fmt: skip
    return t.append(legend, "dim")


FIXED_LINES = 15  # a pane's lines besides the histogram bars (titles, marks, axes, gauges…)
MAX_BAR_ROWS = 10  # a histogram's height at most (10 at 160×48 and 200×50, 5 at 100×34)
MIN_PANE = 26  # columns of an arm's pane at least: three fit at 80; more scroll sideways


def column_width(n_arms: int, width: int) -> int | None:
    """Each pane's width when ``n_arms`` panes of MIN_PANE columns do not fit in ``width``: as
    many as fit share it, the rest are scrolled to (Tab); None when all fit (they share it)."""
    fit = max(1, width // MIN_PANE)
    return None if n_arms <= fit else width // fit


class ArmPane(VerticalScroll):
    """One arm's column (scrolls with the arrow keys once focused, when the terminal is small)."""

    def __init__(self, index: int, name: str, url: str, model: str) -> None:
        super().__init__(id=f"arm-{index}", classes="arm")
        self.arm_name, self.url, self.model = name, url, model

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble((self.arm_name, "bold"), f"  {self.model}"), classes="title")
        yield Chart(classes="counts")
        yield Chart(classes="ttft")
        yield Chart(classes="tpot")
        yield Chart(classes="spark")
        yield Static("", classes="gpu")
        yield Static("", classes="engine")
        yield Chart(classes="phase")
        yield Static("", classes="errors")


class LiveScreen(Screen):
    BINDINGS = [
        ("v", "app.show_verdict", "verdict"),
        Binding("escape", "app.leave", "list", show=False),  # a session from the start screen
    ]

    def __init__(self, info: RunInfo, initial: RunProgress | None = None, status: str = "") -> None:
        super().__init__(id="live")
        self.info = info
        self.last: RunProgress | None = None
        self._status: str | None = None
        self._initial = (initial, status)  # a stored session's figures (abtui open)

    def on_mount(self) -> None:
        self._fit_columns()
        name = self.info.session_name
        self.query_one("#header", Chart).show(
            lambda w: Text(
                f"abtui · session {name} · starting…", no_wrap=True, overflow="ellipsis"
            )  # fmt: skip
        )
        msg, status = self._initial
        if msg is not None:
            self.show_progress(msg, status)

    def _fit_columns(self) -> None:
        panes = list(self.query(ArmPane))
        w = column_width(len(panes), self.size.width or 80)
        for pane in panes:
            pane.styles.width = "1fr" if w is None else w

    def compose(self) -> ComposeResult:
        yield Chart(id="header")
        with HorizontalScroll(id="arms"):
            for i, (n, u, m) in enumerate(
                zip(self.info.arm_names, self.info.arm_urls, self.info.arm_models, strict=True)
            ):
                yield ArmPane(i, n, u, m)
        yield Chart(id="delta")
        yield Static("", id="note")
        yield Footer()

    def on_resize(self) -> None:
        self._fit_columns()
        if self.last is not None:
            self.call_after_refresh(self.show_progress, self.last, self._status)

    def note(self, text: str) -> None:
        self.query_one("#note", Static).update(Text(text, "italic"))

    def show_progress(self, msg: RunProgress, status: str | None = None) -> None:
        self.last = msg
        self._status = status
        done = sum(a.progress.done for a in msg.arms)
        planned = sum(a.progress.planned for a in msg.arms)
        lag = max((a.progress.schedule_lag_max_s for a in msg.arms), default=0.0)
        behind = max((a.progress.reading_behind_s for a in msg.arms), default=0.0)
        waiting = sum(a.progress.records_waiting for a in msg.arms)
        state = status or msg.phase
        name, load, seg = self.info.session_name, self.info.load, msg.segment
        self.query_one("#header", Chart).show(
            lambda w: header_text(name, state, msg.elapsed_s, done, planned, load, seg, lag, w,
                                  behind_s=behind, waiting=waiting)  # fmt: skip
        )
        ttft_rng = shared_range([a.view.ttft for a in msg.arms])
        tpot_rng = shared_range([a.view.tpot for a in msg.arms])
        for i, st in enumerate(msg.arms):
            self._show_arm(i, st, ttft_rng, tpot_rng)
        self._show_delta(msg.arms)

    def _show_arm(self, i: int, st: ArmState, ttft_rng, tpot_rng) -> None:
        pane = self.query_one(f"#arm-{i}", ArmPane)
        p, v = st.progress, st.view
        pane.query_one(".counts", Chart).show(lambda w: counts_text(p, w))
        # histogram bar rows: what the pane's height leaves after the fixed lines (1 at 80×24)
        rows = max(1, min(MAX_BAR_ROWS, (pane.content_size.height - FIXED_LINES) // 2))
        pane.query_one(".ttft", Chart).show(
            lambda w: histogram_text("TTFT", v.ttft, ttft_rng, w, rows)
        )
        pane.query_one(".tpot", Chart).show(
            lambda w: histogram_text("TPOT", v.tpot, tpot_rng, w, rows)
        )

        def spark(w: int) -> Text:
            t = Text()
            tok = "n/a" if not math.isfinite(v.out_tok_s) else f"{v.out_tok_s:,.0f}"
            t.append(f"tok/s {tok:>7} ", "bold")
            t.append(sparkline(v.throughput, w - 14) + "\n", "cyan")
            if v.goodput is None:
                return t.append("goodput: no SLO given", "dim")
            good = "n/a" if not math.isfinite(v.good_tok_s) else f"{v.good_tok_s:,.0f}"
            t.append(f"good   {good:>7} ", "bold")
            return t.append(sparkline(v.goodput, w - 14), "green")

        pane.query_one(".spark", Chart).show(spark)
        set_content(pane.query_one(".gpu", Static), gpu_line(p.telemetry))
        set_content(pane.query_one(".engine", Static), engine_line(p.telemetry))
        pane.query_one(".phase", Chart).show(
            lambda w: phase_bar(v.ttft_mean_s, v.decode_mean_s, v.lag_mean_s, w)
        )
        set_content(pane.query_one(".errors", Static), error_line(st))

    def _show_delta(self, arms: list[ArmState]) -> None:
        rows = [] if len(arms) < 2 else [
            (st.progress.name, deltas(arms[0].view, st.view)) for st in arms[1:]
        ]  # fmt: skip
        base = arms[0].progress.name if arms else ""
        self.query_one("#delta", Chart).show(lambda w: delta_text(base, rows, w))
