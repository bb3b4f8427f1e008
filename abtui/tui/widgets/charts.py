"""Small text charts for the live panes. They only render data computed in abtui.metrics.live."""

from __future__ import annotations

import math

from rich.text import Text
from textual.widgets import Static

from abtui.metrics.live import HistView, column_of, rebin

BLOCKS = " ▁▂▃▄▅▆▇█"
SPARK = "▁▂▃▄▅▆▇█"


def fmt_s(v: float) -> str:
    """A duration, short: 850µs, 12.3ms, 1.25s; n/a when unknown."""
    if v is None or not math.isfinite(v):
        return "n/a"
    if v < 1e-3:
        return f"{v * 1e6:.0f}µs"
    if v < 1:
        return f"{v * 1e3:.1f}ms"
    return f"{v:.2f}s"


def histogram_text(
    title: str, view: HistView, rng: tuple[int, int] | None, width: int, rows: int = 3
) -> Text:
    """A title line (P50, P99, and the sample count where it fits), ``rows`` lines of bars over
    the shared axis, a line marking P50 (▲) and P99 (△), and the axis ends."""
    out = Text()
    head, n = f"{title} ▲P50 {fmt_s(view.p50)} △P99 {fmt_s(view.p99)}", f" n={view.n}"
    # the sample count where it fits (it is the counts line's ok figure): a wrapped title
    # took a line from each histogram at 80 columns
    out.append(head + (n if len(head) + len(n) <= width else "") + "\n", "bold")
    width = max(8, width)
    if rng is None or view.n == 0:
        out.append("no samples yet" + "\n" * (rows + 1), "dim")  # as tall as the bars, marks, axis
        return out
    counts, edges = rebin(view.counts, rng[0], rng[1], width)
    top = counts.max() or 1
    levels = [round(c / top * rows * 8) for c in counts]
    for r in range(rows - 1, -1, -1):
        line = "".join(BLOCKS[min(8, max(0, lv - r * 8))] for lv in levels)
        out.append(line + "\n", "cyan")
    marks = [" "] * width
    for q, ch in ((view.p99, "△"), (view.p50, "▲")):
        col = column_of(q, edges)
        if col is not None:
            marks[col] = ch
    out.append("".join(marks), "yellow")
    out.append("\n")
    lo, hi = fmt_s(edges[0]), fmt_s(edges[-1])
    out.append(lo + " " * max(1, width - len(lo) - len(hi) - 4) + hi + " log", "dim")
    return out


def sparkline(values: list[float], width: int) -> str:
    vals = values[-width:] if width > 0 else []
    if not vals:
        return ""
    top = max(vals) or 1.0
    return "".join(SPARK[min(7, int(v / top * 7.999))] for v in vals)


def phase_bar(ttft_s: float, decode_s: float, lag_s: float, width: int) -> Text:
    """Mean time of a request split into client wait (schedule lag), TTFT and decode."""
    parts = [("wait", lag_s, "magenta"), ("TTFT", ttft_s, "yellow"), ("decode", decode_s, "green")]
    total = sum(v for _, v, _ in parts if math.isfinite(v))
    t = Text()
    if not total > 0:
        return t.append("time split: no samples yet", "dim")
    width = max(10, width)
    chars = "░▒█"
    for (_name, v, style), ch in zip(parts, chars, strict=True):
        n = round((v if math.isfinite(v) else 0) / total * width)
        t.append(ch * n, style)
    t.append("\n")
    t.append(
        "  ".join(
            f"{ch}{name} {v / total:.0%}" for (name, v, _), ch in zip(parts, chars, strict=True)
        )
        + " (client view)",
        "dim",
    )
    return t


def set_content(widget: Static, content) -> None:
    """``widget.update(content)``, but the screen is laid out again only when the widget's
    width or the height its content needs changed since the last time. A live update changes
    the text of a dozen widgets, and each ``update()`` used to lay the whole screen out again
    (~50 ms a time at 160×48, profiled); that CPU is taken from the load generators on a small
    machine (``scripts/bench_tui.py --relayout`` measures the old way). Unchanged content is
    not even repainted."""
    if widget.is_mounted and widget.content == content:
        return  # unchanged (Text compares text and styles)
    widget.update(content, layout=False)
    width = widget.content_size.width
    need = (
        widget.get_content_height(widget.container_size, widget.app.size, width)
        if width and widget.is_mounted
        else None
    )
    if need is None or getattr(widget, "_laid_out_for", None) != (width, need):
        widget.refresh(layout=True)
        # and once more after the pending refresh: a layout request made while one is pending
        # does not invalidate Textual's cached size of the widget (it would keep the old height)
        widget.call_after_refresh(widget.refresh, layout=True)
    widget._laid_out_for = (width, need)


class Chart(Static):
    """A Static that re-renders its text from a builder at its current width."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__("", *args, **kwargs)
        self._build = None

    def show(self, build) -> None:
        """``build(width) -> Text``; kept so a resize re-renders at the new width."""
        self._build = build
        set_content(self, build(self._width()))

    def _width(self) -> int:
        return max(8, self.content_size.width or 40)

    def on_resize(self) -> None:
        if self._build is not None:
            set_content(self, self._build(self._width()))
