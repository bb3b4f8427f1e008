"""What one arm's live pane holds, row by row, and how it fits a small terminal.

Every row is one line that never wraps (a wrapped line pushed the pane's lower rows out of
sight and gave each pane its own scrollbar at 80×24, so two arms scrolled apart). Each builder
takes the width and picks the longest form that fits, then the row is cut with "…" (never
inside a number where a shorter form exists). Which rows a pane has is decided from its height
alone (:func:`pane_plan`), never from its data, so every arm has the same rows at the same
heights and the panes stay row-aligned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from rich.cells import cell_len
from rich.text import Text

MAX_BAR_ROWS = 10  # a histogram's height at most (10 at 160×48 and 200×50)
HISTORY_ROWS = 4  # the gauges' histories: GPU util, DRAM, memory, KV (abtui.tui.widgets.gauges)
HISTORY_MIN_BARS = 4  # the histories are shown only while the histograms keep this many rows

CONDENSE_ORDER = (
    # (field of PanePlan set False, what goes), least needed first. Before any of these the
    # histograms' bars shrink to one row each.
    ("phase_bar", "the time split's bar (its percentages stay, on one line)"),
    ("errors", "the errors-by-class line (the counts line keeps the error total)"),
    ("axes", "the histograms' axis ends (P50 and P99 stay in each title)"),
    ("engine", "the server-queue line"),
    ("gpu", "the GPU line"),
    ("marks", "the histograms' ▲P50 △P99 marker lines"),
    ("phase", "the time split"),
    ("good", "the goodput sparkline (the strip keeps the goodput delta)"),
)


@dataclass(frozen=True)
class PanePlan:
    """The rows of an arm's pane for one height: every arm's pane gets the same plan."""

    bars: int = MAX_BAR_ROWS  # histogram bar rows (each of TTFT and TPOT)
    history: bool = True  # the gauges' histories (HISTORY_ROWS rows)
    phase_bar: bool = True
    errors: bool = True
    axes: bool = True
    engine: bool = True
    gpu: bool = True
    marks: bool = True
    phase: bool = True
    good: bool = True

    @property
    def hist_lines(self) -> int:
        return 1 + self.bars + self.marks + self.axes

    @property
    def phase_lines(self) -> int:
        return 0 if not self.phase else 2 if self.phase_bar else 1

    @property
    def lines(self) -> int:
        """The rows the pane needs: title, counts, two histograms, sparklines and the rest."""
        return (
            2
            + 2 * self.hist_lines
            + 1
            + self.good
            + self.gpu
            + self.engine
            + HISTORY_ROWS * self.history
            + self.phase_lines
            + self.errors
        )


def pane_plan(height: int) -> PanePlan:
    """The fullest plan whose rows fit ``height`` (the pane's content height): the gauges'
    histories go first, where they would leave the histograms fewer than
    :data:`HISTORY_MIN_BARS` rows (the GPU line keeps the latest values, and a short
    utilisation history where it has room); then the bars shrink (down to one row), then rows go
    in :data:`CONDENSE_ORDER`. At 160×48 the histories and 10-row histograms fit; at 80×24 with
    two arms (16 rows) only the time split's bar goes besides the histories; under a sweep's
    timeline or with three arms (15), the errors line too."""
    plan = PanePlan()
    spare = height - replace(plan, bars=0).lines
    if spare // 2 < HISTORY_MIN_BARS:
        plan = replace(plan, history=False)
        spare = height - replace(plan, bars=0).lines
    plan = replace(plan, bars=max(1, min(MAX_BAR_ROWS, spare // 2)))
    for name, _ in CONDENSE_ORDER:
        if plan.lines <= height:
            break
        plan = replace(plan, **{name: False})
    return plan


def fit(forms: list[Text], width: int) -> Text:
    """The first of ``forms`` (longest first) that fits ``width`` cells, else the last cut
    with '…'; never wraps."""
    for t in forms:
        if cell_len(t.plain) <= width:
            break
    t = t.copy()
    t.no_wrap, t.overflow = True, "ellipsis"
    if cell_len(t.plain) > width:
        t.truncate(max(1, width), overflow="ellipsis")
    return t


GPU_FIELDS = (  # (metric suffix, label, short label, format)
    ("gpu.mem_used_bytes", "mem", "mem", lambda v: f"{v / 2**30:.1f}G"),
    ("gpu.busy", "util", "util", lambda v: f"{v:.0%}"),
    ("gpu.sm_active", "SM", "SM", lambda v: f"{v:.0%}"),
    ("gpu.dram_active", "DRAM", "DRAM", lambda v: f"{v:.0%}"),
    ("gpu.power_w", "power", "", lambda v: f"{v:.0f}W"),
)


def gpu_line(
    telemetry: dict[str, float], width: int = 200, util: tuple[str, list[float]] | None = None
) -> Text:
    """GPU gauges from the arm's latest telemetry, or a plain 'no GPU telemetry' line. Narrower:
    short labels and separators, no source, then the last gauges go (power first). ``util``:
    (metric, recent readings) of the utilisation (``gpu.busy``, else ``gpu.sm_active``: see
    :func:`abtui.tui.widgets.gauges.util_series`), drawn after its figure where the line has
    room (4 to 12 cells: a history even at 80×24, where the pane has no gauges' rows)."""
    line = _gpu_line(telemetry, width)
    metric, vals = util or ("", [])
    label = {"gpu.busy": " util ", "gpu.sm_active": " SM "}.get(metric, "")
    room = min(12, width - cell_len(line.plain) - 1)
    if vals and room >= 4 and "…" not in line.plain and label and label in line.plain:
        from abtui.tui.widgets.gauges import bars

        spark = bars(vals, room, 1.0)
        line = _gpu_line(telemetry, width, (metric, spark))  # the same form, with the spark
        line.highlight_words([spark], "cyan")
    return line


def _gpu_line(telemetry: dict[str, float], width: int, spark: tuple[str, str] = ("", "")) -> Text:
    for src in ("nvml", "dcgm"):
        got = {k.split(":", 1)[1]: v for k, v in telemetry.items() if k.startswith(src + ":")}
        if not got:
            continue
        parts = []  # (label, short label, value)
        for key, lab, short, f in GPU_FIELDS:
            if key in got and math.isfinite(got[key]):
                val = f(got[key])
                total = got.get("gpu.mem_total_bytes") or (
                    got["gpu.mem_used_bytes"] + got["gpu.mem_free_bytes"]
                    if "gpu.mem_free_bytes" in got and key == "gpu.mem_used_bytes"
                    else None
                )
                if key == "gpu.mem_used_bytes" and total:
                    val += f"/{total / 2**30:.0f}G"
                if key == spark[0]:
                    val += f" {spark[1]}"
                parts.append((lab, short, val))
        if not parts:
            return fit([Text.assemble((f"GPU ({src}) ", "bold"), "no GPU fields reported")], width)
        full = " · ".join(f"{lab} {v}" for lab, _, v in parts)
        forms = [
            Text.assemble((f"GPU ({src}) ", "bold"), full),
            Text.assemble(("GPU ", "bold"), full),
        ]
        for k in range(len(parts), 0, -1):
            short = " ".join(f"{s} {v}".strip() for _, s, v in parts[:k])
            forms.append(Text.assemble(("GPU ", "bold"), short))
        return fit(forms, width)
    return fit([Text("no GPU telemetry", "dim")], width)


def engine_line(
    telemetry: dict[str, float], width: int = 200, cache_hit: float | None = None
) -> Text:
    """The server's own queue: running / waiting requests and KV-cache use, when scraped; and
    ``cache_hit``, the prefix-cache hit rate the responses said, once one said it hit (a
    server that reports 0 cached tokens on every request, like the simulator behind unique
    prompts, shows nothing more)."""
    cache = [("prefix cache", "cache", f"{cache_hit:.0%}")] if cache_hit else []
    for eng in ("vllm", "sglang", "tgi", "llamacpp"):
        got = {k.split(":", 1)[1]: v for k, v in telemetry.items() if k.startswith(eng + ":")}
        parts = [
            (lab, short, f(got[k]))
            for k, lab, short, f in (
                ("running", "running", "run", lambda v: f"{v:.0f}"),
                ("waiting", "waiting", "wait", lambda v: f"{v:.0f}"),
                ("kv_usage", "KV", "KV", lambda v: f"{v:.0%}"),
            )
            if k in got and math.isfinite(got[k])
        ] + cache
        if len(parts) > len(cache):
            return fit(
                [
                    Text.assemble(
                        (f"server ({eng}) ", "bold"),
                        " · ".join(f"{lab} {v}" for lab, _, v in parts),
                    ),
                    Text.assemble((f"{eng} ", "bold"), " · ".join(f"{s} {v}" for _, s, v in parts)),
                    Text.assemble((f"{eng} ", "bold"), " ".join(f"{s} {v}" for _, s, v in parts)),
                ],
                width,
            )
    if cache:
        return fit([Text(f"prefix cache {cache[0][2]}"), Text(f"cache {cache[0][2]}")], width)
    return fit(
        [Text("server queue: not scraped", "dim"), Text("server: not scraped", "dim")], width
    )


def error_line(p, width: int = 200) -> Text:
    """Errors by class (and cancelled requests) of an arm's progress ``p``."""
    if not p.errors and not p.cancelled:
        return fit([Text("errors: none", "dim")], width)
    forms = []
    for head, canc in (("errors: ", "cancelled"), ("err: ", "canc")):
        t = Text(head, "bold red")
        t.append(", ".join(f"{k} {v}" for k, v in sorted(p.errors.items())) or "none")
        if p.cancelled:
            t.append(f"; {canc} {p.cancelled}")
        forms.append(t)
    return fit(forms, width)


def counts_text(p, width: int) -> Text:
    """The arm's counts on one line of ``width``: done/planned, ok, errors (when there are any:
    the by-class line is the first row a small pane drops), in flight or finished. Narrower,
    the words shorten, then the ok count goes when errors are shown (ok is done less errors and
    cancelled), then the in-flight count; a line is never cut inside a number (at 80×24 it lost
    the in-flight count's digits)."""
    err = sum(p.errors.values())

    def items(short: bool) -> list[tuple[str, str]]:
        return [
            (f"{p.done}/{p.planned}" + ("" if short else " done"), ""),
            (f"ok {p.ok}", ""),
            *([(f"{'err' if short else 'errors'} {err}", "bold red")] if err else []),
            ("finished", "")
            if p.finished
            else ((f"{p.in_flight} in flight" if short else f"in flight {p.in_flight}"), ""),
        ]

    def joined(its) -> Text:
        out = Text()
        for k, (t, style) in enumerate(its):
            if k:
                out.append(" · ")
            out.append(t, style)
        return out

    short = items(True)
    forms = [items(False), short]
    if err:
        forms.append(short[:1] + short[2:])  # no ok
    forms.append(forms[-1][:-1])  # no in-flight / finished
    return fit([joined(f) for f in forms], width)


def title_text(name: str, model: str, width: int) -> Text:
    return fit([Text.assemble((name, "bold"), f"  {model}")], width)
