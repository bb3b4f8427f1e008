"""The compare view (``c`` on the live panes): every arm in one chart, so "which arm is better"
needs no eye travel between columns. The TTFT and TPOT CDFs of all arms overlaid on one shared
log axis (each arm drawn with its letter, in its colour: the letter says it where colour
cannot), and a table of every arm's figures under them — the grouped view of a 4–8-arm run.

Only renders what :mod:`abtui.metrics.live` computed (the arms' binned histograms, the same the
panes draw): live while a run goes, and in ``abtui open`` at the playhead's time.
"""

from __future__ import annotations

import math

import numpy as np
from rich.cells import cell_len
from rich.text import Text

from abtui.metrics.catalogue import METRICS
from abtui.metrics.live import ArmView, HistView, rebin, shared_range

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
COLOURS = ("cyan", "magenta", "yellow", "green", "bright_blue", "bright_red", "white", "orange3")
SEVERAL = "+"  # several arms rising through the same cell
FLAT = "·"  # every arm there sits at 0 % or 100 % (none rising): drawn faintly
Y_LABEL = 5  # "100%┤"
MIN_PLOT_ROWS = 3
SIDE_BY_SIDE = 60  # from this many columns the two CDFs stand side by side


def letter(i: int) -> str:
    return LETTERS[i % len(LETTERS)]


def colour(i: int) -> str:
    return COLOURS[i % len(COLOURS)]


def _fmt_s(v: float) -> str:
    from abtui.tui.widgets.charts import fmt_s

    return fmt_s(v)


def _rows_of(cdf: np.ndarray, rows: int) -> np.ndarray:
    """The plot row (0 at the bottom) each column's cumulative share falls in."""
    return np.clip(np.ceil(cdf * rows - 1e-9).astype(int) - 1, 0, rows - 1)


def cdf_chart(title: str, hists: list[HistView], width: int, height: int) -> Text:
    """``height`` lines: the title, the overlaid CDFs of ``hists`` (arm ``i`` drawn with
    :func:`letter` ``(i)``) on their shared log axis, and the axis' ends. Each curve is joined
    column to column (a steep rise is a vertical run of its letter); where several arms rise
    through one cell it shows :data:`SEVERAL`; plateaus at 0 % and 100 % are faint dots."""
    out = Text(no_wrap=True, overflow="ellipsis")
    rows = max(1, height - 2)
    pw = max(4, width - Y_LABEL)
    out.append(_cut(title, width) + "\n", "bold")
    rng = shared_range(hists)
    if rng is None:
        out.append("no samples yet" + "\n" * rows, "dim")
        return out
    cells: list[list[set[int]]] = [[set() for _ in range(pw)] for _ in range(rows)]
    flat: list[list[bool]] = [[False] * pw for _ in range(rows)]
    edges = None
    for i, h in enumerate(hists):
        if h.n == 0:
            continue
        counts, edges = rebin(h.counts, rng[0], rng[1], pw)
        cdf = np.cumsum(counts) / max(1, counts.sum())
        ys = _rows_of(cdf, rows)
        prev = 0
        for x in range(pw):
            y = int(ys[x])
            if cdf[x] <= 0 or (cdf[x] >= 1 and (x == 0 or cdf[x - 1] >= 1)):
                flat[y][x] = True  # before its first sample or after its last
            else:
                for r in range(prev + 1, y + 1) if y > prev else (y,):
                    cells[r][x].add(i)
            prev = y
    half = int(_rows_of(np.array([0.5]), rows)[0])
    for r in range(rows - 1, -1, -1):
        lab = "100%" if r == rows - 1 else "50%" if r == half else "0%" if r == 0 else ""
        out.append(f"{lab:>4}┤", "dim")
        run, run_style = [], None  # consecutive cells of one style are appended as one run
        for x in range(pw):
            got = cells[r][x]
            if len(got) == 1:
                (i,) = got
                ch, style = letter(i), f"bold {colour(i)}"
            elif got:
                ch, style = SEVERAL, "bold"
            else:
                ch, style = FLAT if flat[r][x] else " ", "dim"
            if style != run_style and run:
                out.append("".join(run), run_style)
                run = []
            run.append(ch)
            run_style = style
        out.append("".join(run), run_style)
        out.append("\n")
    lo, hi = _fmt_s(edges[0]), _fmt_s(edges[-1])
    pad = pw - len(lo) - len(hi) - 4
    axis = (
        lo + " " * pad + hi + " log" if pad >= 1 else lo + " " * max(1, pw - len(lo) - len(hi)) + hi
    )
    out.append(" " * Y_LABEL + axis[:pw], "dim")
    return out


def _cut(text: str, n: int) -> str:
    return text if cell_len(text) <= n else text[: max(0, n - 1)] + "…"


TABLE_HEAD = ("n", "TTFT P50", "P99", "TPOT P50", "P99", "tok/s")


def arms_table(
    names: list[str],
    views: list[ArmView],
    width: int,
    rate: str = TABLE_HEAD[-1],
    more_lines: int = 0,
) -> Text:
    """One row per arm: its letter and name, then n, TTFT (and TTFO, once a response reasoned
    before its answer) and TPOT P50/P99, tok/s (then the reasoning and answer TPOT, as TTFO;
    and the prefix-cache hit rate, once a response said it hit), in aligned columns (the name
    cut to make room; the last columns go where even that is too narrow, to a second block of
    as many lines under the first where ``more_lines`` allows, else out). ``rate``: the tok/s column's heading, with its window."""

    def num(v: float) -> str:
        return "n/a" if not math.isfinite(v) else f"{v:,.0f}"

    thinking = any(v.ttfo is not None for v in views)
    cache = any(v.cache_hit for v in views)  # some response said it hit the prefix cache

    def pair(h, fallback) -> tuple[str, str]:  # an arm that never reasoned: TTFO = TTFT, …
        h = h or fallback
        return (_fmt_s(h.p50), _fmt_s(h.p99)) if h is not None else ("n/a", "n/a")

    cells = [
        [
            str(v.ttft.n),
            _fmt_s(v.ttft.p50),
            _fmt_s(v.ttft.p99),
            *(pair(v.ttfo, v.ttft) if thinking else ()),
            _fmt_s(v.tpot.p50),
            _fmt_s(v.tpot.p99),
            num(v.out_tok_s),
            # after tok/s, which a narrow table keeps; an arm that never reasoned has no
            # reasoning TPOT, and its answer's TPOT is TPOT
            *((*pair(v.tpot_reasoning, None), *pair(v.tpot_answer, v.tpot)) if thinking else ()),
            *(("n/a" if v.cache_hit is None else f"{v.cache_hit:.0%}",) if cache else ()),
        ]
        for v in views
    ]
    split = (f"{METRICS['tpot_reasoning'].short} P50", "P99")
    split += (f"{METRICS['tpot_answer'].short} P50", "P99")
    head = (*TABLE_HEAD[:3], *(("TTFO P50", "P99") if thinking else ()), *TABLE_HEAD[3:-1], rate)
    head += split if thinking else ()
    head += ("cache",) if cache else ()
    cols = [max(len(h), *(len(r[k]) for r in cells)) for k, h in enumerate(head)]
    keep = len(cols)
    while keep > 1 and sum(cols[:keep]) + 2 * keep + 2 + 6 > width:
        keep -= 1
    name_w = max(4, min(max(len(n) for n in names), width - 2 - sum(c + 2 for c in cols[:keep])))
    t = _block(names, head, cells, cols, range(keep), name_w)
    if keep < len(cols) and more_lines >= len(names) + 1:  # the rest under it, as fits
        end = len(cols)
        while end > keep + 1 and sum(c + 2 for c in cols[keep:end]) + 2 + name_w > width:
            end -= 1
        t.append("\n")
        t.append_text(_block(names, head, cells, cols, range(keep, end), name_w))
    return t


def _block(names, head, cells, cols, ks: range, name_w: int) -> Text:
    """The table's columns ``ks``: a heading line and one line per arm, its letter and name
    first."""
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("  " + "arm".ljust(name_w), "bold")
    for k in ks:
        t.append("  " + head[k].rjust(cols[k]), "bold")
    for i, (nm, row) in enumerate(zip(names, cells, strict=True)):
        t.append("\n")
        t.append(letter(i) + " ", f"bold {colour(i)}")
        t.append(_cut(nm, name_w).ljust(name_w), "bold")
        for k in ks:
            t.append("  " + row[k].rjust(cols[k]))
    return t


def compare_text(
    names: list[str], views: list[ArmView], width: int, height: int, rate: str = TABLE_HEAD[-1]
) -> Text:
    """The compare view in ``width`` × ``height``: the TTFT and TPOT CDFs of every arm
    overlaid (side by side from :data:`SIDE_BY_SIDE` columns, else one above the other), a
    legend line, and the arms' table (``rate``: its tok/s heading, with the window)."""
    side = width >= SIDE_BY_SIDE
    # the table's columns that do not fit its width go under it where the CDFs keep their
    # least rows (the reasoning and answer TPOT at 80 columns)
    spare = height - (len(names) + 1) - 2 - (MIN_PLOT_ROWS + 2) * (1 if side else 2)
    table = arms_table(names, views, width, rate, more_lines=spare)
    legend = Text(
        "  ".join(f"{letter(i)} {n}" for i, n in enumerate(names))
        + f"  ({SEVERAL} several arms; left is faster)",
        "dim",
    )
    legend.truncate(width, overflow="ellipsis")
    room = height - len(table.plain.split("\n")) - 2  # the table, a blank line, the legend
    t = Text(no_wrap=True, overflow="ellipsis")
    if side:
        ch = max(MIN_PLOT_ROWS + 2, room)
        half = (width - 2) // 2
        left = cdf_chart("TTFT: share of requests by time", [v.ttft for v in views], half, ch)
        right = cdf_chart(
            "TPOT: share of requests by time", [v.tpot for v in views], width - 2 - half, ch
        )
        for a, b in zip(left.split("\n"), right.split("\n"), strict=False):
            t.append_text(a)
            t.append(" " * (half - a.cell_len + 2))
            t.append_text(b)
            t.append("\n")
    else:
        ch = max(MIN_PLOT_ROWS + 2, room // 2)
        t.append_text(cdf_chart("TTFT CDF", [v.ttft for v in views], width, ch))
        t.append("\n")
        t.append_text(cdf_chart("TPOT CDF", [v.tpot for v in views], width, ch))
        t.append("\n")
    t.append_text(legend)
    t.append("\n\n")
    t.append_text(table)
    return t
