"""Small text charts for the live panes. They only render data computed in abtui.metrics.live."""

from __future__ import annotations

import math

from rich.text import Text

from abtui.metrics.live import HistView, column_of, rebin
from abtui.tui.widgets.inert import Static

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
    title: str,
    view: HistView,
    rng: tuple[int, int] | None,
    width: int,
    rows: int = 3,
    *,
    marks: bool = True,
    axis: bool = True,
    also: tuple[str, HistView] | list[tuple[str, HistView]] | None = None,
) -> Text:
    """A title line (P50, P99, and the sample count where it fits), ``rows`` lines of bars over
    the shared axis, a line marking P50 (▲) and P99 (△) and the axis ends (each left out when
    the pane is short: :func:`abtui.tui.widgets.pane.pane_plan`). Always exactly
    ``1 + rows + marks + axis`` lines, none wider than ``width``. ``also``: other metrics'
    (title, view), one or a list, whose P50 and P99 the title line adds where they fit, their
    P50 alone where only that fits (TTFO beside TTFT, the reasoning and answer TPOT beside
    TPOT, once a response reasoned)."""
    from abtui.tui.widgets.pane import fit

    out = Text(no_wrap=True, overflow="ellipsis")
    p50, p99 = fmt_s(view.p50), fmt_s(view.p99)
    head = f"{title} ▲P50 {p50} △P99 {p99}"
    short = f"{title} ▲{p50} △{p99}"
    # the sample count where it fits (it is the counts line's ok figure): a wrapped title
    # took a line from each histogram at 80 columns
    heads = [head + f" n={view.n}", head, short]
    more = [also] if isinstance(also, tuple) else list(also or ())
    if more:
        figs = [(name, fmt_s(v.p50), fmt_s(v.p99)) for name, v in more]
        full = " · ".join(f"{name} ▲P50 {a50} △P99 {a99}" for name, a50, a99 in figs)
        brief = " · ".join(f"{name} ▲{a50} △{a99}" for name, a50, a99 in figs)
        medians = " ".join(f"{name} ▲{a50}" for name, a50, _ in figs)
        # ``TPOT(r)`` → ``r▲6.0ms``: the letter alone where the names do not fit
        tight = " ".join(
            f"{name.partition('(')[2].rstrip(')') or name}▲{a50}" for name, a50, _ in figs
        )
        heads = [
            f"{head} · {full} n={view.n}",
            f"{head} · {full}",
            f"{short} · {brief}",
            f"{short} {medians}",
            *([f"{short} {tight}"] if len(figs) > 1 else []),
            short,
        ]
    out.append_text(fit([Text(h, "bold") for h in heads], width))
    out.append("\n")
    width = max(8, width)
    tail = marks + axis
    if rng is None or view.n == 0:
        out.append("no samples yet" + "\n" * (rows - 1 + tail), "dim")  # as tall as with samples
        return out
    counts, edges = rebin(view.counts, rng[0], rng[1], width)
    top = counts.max() or 1
    levels = [round(c / top * rows * 8) for c in counts]
    for r in range(rows - 1, -1, -1):
        line = "".join(BLOCKS[min(8, max(0, lv - r * 8))] for lv in levels)
        out.append(line + ("\n" if r or tail else ""), "cyan")
    if marks:
        cells = [" "] * width
        for q, ch in ((view.p99, "△"), (view.p50, "▲")):
            col = column_of(q, edges)
            if col is not None:
                cells[col] = ch
        out.append("".join(cells) + ("\n" if axis else ""), "yellow")
    if axis:
        lo, hi = fmt_s(edges[0]), fmt_s(edges[-1])
        pad = width - len(lo) - len(hi) - 4
        line = (
            lo + " " * pad + hi + " log"
            if pad >= 1
            else lo + " " * max(1, width - len(lo) - len(hi)) + hi
        )
        out.append(line[:width], "dim")
    return out


def sparkline(values: list[float], width: int) -> str:
    vals = values[-width:] if width > 0 else []
    if not vals:
        return ""
    top = max(vals) or 1.0
    return "".join(SPARK[min(7, int(v / top * 7.999))] for v in vals)


def phase_bar(ttft_s: float, decode_s: float, lag_s: float, width: int, bar: bool = True) -> Text:
    """Mean time of a request split into client wait (schedule lag), TTFT and decode: a bar
    and its percentages, or (``bar=False``, a short pane) the percentages on one line."""
    from abtui.tui.widgets.pane import fit

    parts = [("wait", lag_s, "magenta"), ("TTFT", ttft_s, "yellow"), ("decode", decode_s, "green")]
    total = sum(v for _, v, _ in parts if math.isfinite(v))
    if not total > 0:
        return fit([Text("time split: no samples yet", "dim")], width) + ("\n" if bar else "")
    share = [(name, (v if math.isfinite(v) else 0) / total) for name, v, _ in parts]
    chars = "░▒█"
    t = Text(no_wrap=True, overflow="ellipsis")
    if bar:
        width = max(10, width)
        line = Text()
        for (_name, v), (_, _, style), ch in zip(share, parts, chars, strict=True):
            line.append(ch * round(v * width), style)
        line.truncate(width)  # the rounding may give one cell too many
        t.append_text(line)
        t.append("\n")
        legend = [
            "  ".join(f"{ch}{name} {v:.0%}" for (name, v), ch in zip(share, chars, strict=True))
            + " (client view)",
            "  ".join(f"{ch}{name} {v:.0%}" for (name, v), ch in zip(share, chars, strict=True)),
        ]
    else:
        legend = [
            "time split: " + " · ".join(f"{n} {v:.0%}" for n, v in share) + " (client view)",
            "time split: " + " · ".join(f"{n} {v:.0%}" for n, v in share),
            "time: " + " · ".join(f"{n} {v:.0%}" for n, v in share),
            " ".join(f"{n} {v:.0%}" for n, v in share),
            "TTFT {1:.0%} dec {2:.0%} w {0:.0%}".format(*(v for _, v in share)),
        ]
    return t.append_text(fit([Text(x, "dim") for x in legend], width))


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
