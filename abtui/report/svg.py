"""Small charts as inline SVG for the HTML report: axes with nice ticks, lines, markers, a legend
that never covers the data. No scripts, no external assets, nothing but ``<svg>`` text.

- **Ticks** are round numbers (1, 2, 2.5, 5 × 10^k on a linear axis; 1, 2, 5 per decade on a
  log axis spanning more than ~1.5 decades, else the linear choice placed on the log scale), at
  least three per axis, and the axis is widened to the outer ticks so the data never sits past
  the last label.
- **Tail axis** (:data:`TAIL`): a percentile axis stretched towards the tail, position
  ``-log10(1 - p)`` (HdrHistogram's percentile plots): P50, P90, P99 and P99.9 are equally far
  apart, so a CDF shows its median and its tail at once.
- **Legend**: its own band under the x-axis label, wrapped over as many rows as it needs; it
  is never drawn inside the plot area.
- **Arm styles** (:func:`arm_style`): every arm keeps one colour and dash in every chart, by its
  position in the session (baseline first) — never by which arm did better. The palette is
  Okabe–Ito's colour-blind-safe set without its vermillion and yellow: no arm is ever drawn red,
  the colour the report keeps for REGRESSED rows and the degraded mark. The baseline is also
  dashed, so the arms are told apart in grey print too.

Every string drawn goes through :func:`esc` (``html.escape`` of :func:`printable`).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

import numpy as np

from abtui.report.untrusted import printable

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#000000")
PALETTE_NAMES = ("blue", "orange", "green", "purple", "sky blue", "black")
BASELINE_DASH = "6 3"
NEUTRAL = "#6e7781"  # reference lines (SLOs, the Pareto front): arm -1, dotted
EVERY_ARM = "#424a53"  # one series standing for every arm (identical data): arm -2, solid
LINEAR, LOG, TAIL = "linear", "log", "tail"
TAIL_TICKS = (
    (0.0, "min"),
    (0.5, "P50"),
    (0.75, "P75"),
    (0.9, "P90"),
    (0.95, "P95"),
    (0.99, "P99"),
    (0.999, "P99.9"),
    (0.9999, "P99.99"),
)


def esc(text) -> str:
    return html.escape(printable(text), quote=True)


def arm_style(k: int) -> tuple[str, str]:
    """(colour, dash array) of the arm at position ``k`` (0: the baseline, dashed)."""
    return PALETTE[k % len(PALETTE)], (BASELINE_DASH if k == 0 else "")


def style_rule(names: list[str]) -> str:
    """The colour rule in words, with each arm's colour: for the report's plots section."""
    each = ", ".join(
        f"{n} {PALETTE_NAMES[k % len(PALETTE)]}{' (dashed)' if k == 0 else ''}"
        for k, n in enumerate(names)
    )
    return (
        f"Colours: {each}. Each arm keeps its colour in every plot, by its place in the "
        "session (baseline first), whichever arm did better; no arm is drawn red (red marks "
        "only REGRESSED rows and a degraded session)."
    )


# ------------------------------------------------------------------------------- ticks


def _decimals(step: float) -> int:
    """Decimals that show ``step`` (2.5 → 1, 0.25 → 2, 50 → 0)."""
    d = 0
    while d < 6 and abs(round(step, d) - step) > 1e-9 * max(1.0, abs(step)):
        d += 1
    return d


def tick_label(v: float, decimals: int = 0) -> str:
    """``0.25``, ``1,000``, ``25k``, ``1.5M``."""
    if abs(v) >= 1e6:
        return f"{v / 1e6:g}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:,.{decimals}f}"


def nice_ticks(lo: float, hi: float, target: int = 5) -> tuple[list[float], int]:
    """Round-number ticks covering ``[lo, hi]`` (the first ≤ lo, the last ≥ hi), at least three,
    and the decimals their labels need."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 0.5, 1.0], 1
    if hi - lo <= 1e-12 * max(1.0, abs(hi)):
        pad = abs(hi) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / max(2, target - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * 0.999)
    first = math.floor(lo / step + 1e-9) * step
    ticks = []
    k = 0
    while True:
        t = first + k * step
        ticks.append(round(t, 12))
        if t >= hi - 1e-9 * step:
            break
        k += 1
    while len(ticks) < 3:
        ticks.append(round(ticks[-1] + step, 12))
    return ticks, _decimals(step)


MANTISSAS = ((1,), (1, 2, 5), (1, 2, 3, 5, 7), (1, 2, 3, 4, 5, 6, 7, 8, 9))


def log_ticks(lo: float, hi: float) -> tuple[float, float, list[float]]:
    """``(lo, hi, ticks)`` of a log axis over ``[lo, hi]`` (both > 0): the coarsest of powers of
    ten, 1-2-5, 1-2-3-5-7 or every digit per decade that puts at least three ticks inside;
    a range too narrow for that gets round linear steps (widened to them if fewer than two fall
    inside)."""
    d0, d1 = math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1
    for mants in MANTISSAS:
        ticks = [m * 10.0**d for d in range(d0, d1 + 1) for m in mants]
        cands = [float(f"{t:.6g}") for t in ticks]
        ticks = [t for t in cands if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
        if len(ticks) >= 3:
            span = math.log10(hi / lo)
            below = [t for t in cands if t < ticks[0]]
            above = [t for t in cands if t > ticks[-1]]
            if below and math.log10(lo / below[-1]) <= 0.25 * span:  # the next round number
                lo = below[-1]  # is near: the axis starts on a label
                ticks.insert(0, lo)
            if above and math.log10(above[0] / hi) <= 0.25 * span:
                hi = above[0]
                ticks.append(hi)
            return lo, hi, ticks
    ticks, _ = nice_ticks(lo, hi)
    inside = [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
    if len(inside) >= 2:
        return lo, hi, inside
    return ticks[0], ticks[-1], ticks  # narrow: lo > 0 keeps ticks[0] > 0 (step < lo)


@dataclass
class Axis:
    label: str
    kind: str = LINEAR  # LINEAR | LOG | TAIL
    ticks: list[float] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    lo: float = 0.0
    hi: float = 1.0

    @classmethod
    def fit(
        cls, label: str, values, kind: str = LINEAR, *, zero: bool = False, pad: float = 0.0
    ) -> Axis:
        """An axis over the finite ``values`` (positive ones on a log axis); ``zero``: a linear
        axis that starts at 0; ``pad``: room beyond the data at each end, as a fraction of its
        span (markers at the extremes are drawn whole)."""
        v = np.asarray([x for x in np.ravel(values) if x is not None], dtype=float)
        v = v[np.isfinite(v)]
        if kind == LOG:
            v = v[v > 0]
        if kind == TAIL:
            top = min(4.0, max(1.0, float(v.max()) if len(v) else 2.0))
            ticks = [p for p, _ in TAIL_TICKS if -math.log10(1 - p) <= top + 1e-9]
            labs = [lab for p, lab in TAIL_TICKS if p in ticks]
            return cls(label, TAIL, ticks, labs, 0.0, top)
        if not len(v):
            lo, hi = (1.0, 10.0) if kind == LOG else (0.0, 1.0)
        else:
            lo, hi = float(v.min()), float(v.max())
        if kind == LOG:
            if hi / lo < 1.0 + 1e-6:
                lo, hi = lo / 1.5, hi * 1.5
            if pad:
                f = (hi / lo) ** pad
                lo, hi = lo / f, hi * f
            lo, hi, ticks = log_ticks(lo, hi)
            return cls(label, kind, ticks, [tick_label(t, _decimals(t)) for t in ticks], lo, hi)
        if pad and hi > lo:
            lo, hi = lo - pad * (hi - lo), hi + pad * (hi - lo)
        if zero:
            lo = min(lo, 0.0)
        ticks, d = nice_ticks(lo, hi)
        return cls(label, kind, ticks, [tick_label(t, d) for t in ticks], ticks[0], ticks[-1])

    def frac(self, x) -> np.ndarray:
        """Position of ``x`` along the axis, 0 at ``lo`` and 1 at ``hi`` (NaN where undrawable)."""
        x = np.asarray(x, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.kind == LOG:
                return (np.log10(x) - math.log10(self.lo)) / (
                    math.log10(self.hi) - math.log10(self.lo)
                )
            if self.kind == TAIL:
                return -np.log10(1 - x) / (self.hi - self.lo)
            return (x - self.lo) / (self.hi - self.lo)

    def tick_fracs(self) -> list[float]:
        return [float(f) for f in self.frac(self.ticks)]


# ------------------------------------------------------------------------------- charts


@dataclass
class Series:
    name: str
    arm: int  # position in the session (style); -1: a reference line; -2: every arm at once
    x: np.ndarray
    y: np.ndarray
    mode: str = "line"  # "line" | "markers" | "line+markers" | "step"
    labels: list[str] | None = None  # one per point, drawn beside its marker
    filled: list[bool] | None = None  # markers: filled (True) or hollow
    width: float = 1.8
    opacity: float = 1.0
    legend: bool = True


@dataclass
class HLine:
    """A horizontal reference line (an SLO), labelled at its right end."""

    y: float
    label: str


@dataclass
class Chart:
    plot_id: str  # the svg's data-plot (tests and readers find a plot by it)
    title: str
    x: Axis
    y: Axis
    series: list[Series]
    hlines: list[HLine] = field(default_factory=list)
    note: str = ""  # a line under the title (what the plot shows, how to read it)
    width: int = 440
    plot_height: int = 190


LEFT, RIGHT, TOP = 56, 24, 40
LEGEND_ROW = 15


def _legend_rows(items: list[tuple[str, Series]], usable: float) -> list[list[tuple[str, Series]]]:
    rows: list[list[tuple[str, Series]]] = [[]]
    used = 0.0
    for name, s in items:
        w = 30 + 6.2 * len(name) + 14
        if rows[-1] and used + w > usable:
            rows.append([])
            used = 0.0
        rows[-1].append((name, s))
        used += w
    return rows if rows[0] else []


def _style(s: Series) -> tuple[str, str]:
    if s.arm == -2:
        return EVERY_ARM, ""
    if s.arm < 0:
        return NEUTRAL, "2 2"
    return arm_style(s.arm)


def _segments(px: np.ndarray, py: np.ndarray) -> list[list[tuple[float, float]]]:
    """Runs of drawable points (a NaN breaks the line)."""
    out, cur = [], []
    for a, b in zip(px, py, strict=True):
        if math.isfinite(a) and math.isfinite(b):
            cur.append((a, b))
        elif cur:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def render(c: Chart) -> str:
    """The chart as one ``<svg class="plot" data-plot=…>``; each series a ``<g class="series"
    data-series=NAME>``, the legend a ``<g class="legend">`` below the axes."""
    pw = c.width - LEFT - RIGHT
    ph = c.plot_height
    items = [(s.name, s) for s in c.series if s.legend]
    rows = _legend_rows(items, pw)
    bottom = 42 + LEGEND_ROW * len(rows)
    height = TOP + ph + bottom
    x0, y0 = LEFT, TOP  # plot area's top-left
    h = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" data-plot="{esc(c.plot_id)}" '
        f'width="{c.width}" height="{height}" viewBox="0 0 {c.width} {height}" role="img" '
        f'aria-label="{esc(c.title)}" font-family="system-ui,sans-serif">',
        f'<text x="{c.width / 2:.0f}" y="15" text-anchor="middle" font-size="13" '
        f'font-weight="600">{esc(c.title)}</text>',
    ]
    if c.note:
        h.append(
            f'<text x="{c.width / 2:.0f}" y="30" text-anchor="middle" font-size="10" '
            f'fill="#656d76">{esc(c.note)}</text>'
        )
    h.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#d0d7de"/>')
    h.append('<g class="axis x">')
    for f, lab in zip(c.x.tick_fracs(), c.x.labels, strict=True):
        xx = x0 + f * pw
        h.append(
            f'<line x1="{xx:.1f}" y1="{y0}" x2="{xx:.1f}" y2="{y0 + ph}" stroke="#eaeef2"/>'
            f'<text x="{xx:.1f}" y="{y0 + ph + 13}" font-size="10" text-anchor="middle">'
            f"{esc(lab)}</text>"
        )
    h.append(
        f'<text x="{x0 + pw / 2:.1f}" y="{y0 + ph + 28}" font-size="11" '
        f'text-anchor="middle">{esc(c.x.label)}</text></g><g class="axis y">'
    )
    for f, lab in zip(c.y.tick_fracs(), c.y.labels, strict=True):
        yy = y0 + (1 - f) * ph
        h.append(
            f'<line x1="{x0}" y1="{yy:.1f}" x2="{x0 + pw}" y2="{yy:.1f}" stroke="#eaeef2"/>'
            f'<text x="{x0 - 4}" y="{yy + 3.5:.1f}" font-size="10" text-anchor="end">'
            f"{esc(lab)}</text>"
        )
    h.append(
        f'<text transform="translate(12 {y0 + ph / 2:.1f}) rotate(-90)" font-size="11" '
        f'text-anchor="middle">{esc(c.y.label)}</text></g>'
    )
    for r in c.hlines:
        f = float(c.y.frac(r.y))
        if 0 <= f <= 1:
            yy = y0 + (1 - f) * ph
            h.append(
                f'<g class="ref"><line x1="{x0}" y1="{yy:.1f}" x2="{x0 + pw}" y2="{yy:.1f}" '
                f'stroke="{NEUTRAL}" stroke-dasharray="2 3"/><text x="{x0 + pw - 3}" '
                f'y="{yy - 3:.1f}" font-size="9" text-anchor="end" fill="{NEUTRAL}">'
                f"{esc(r.label)}</text></g>"
            )
    h.append(
        f'<clipPath id="clip-{esc(c.plot_id)}"><rect x="{x0 - 4}" y="{y0 - 4}" '
        f'width="{pw + 8}" height="{ph + 8}"/></clipPath>'
    )
    for s in c.series:
        h.append(_series(s, c, x0, y0, pw, ph))
    if rows:
        h.append('<g class="legend">')
        for i, row in enumerate(rows):
            yy = y0 + ph + 44 + i * LEGEND_ROW
            xx = float(x0)
            for name, s in row:
                color, dash = _style(s)
                dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
                if "line" in s.mode or s.mode == "step":
                    h.append(
                        f'<line x1="{xx:.1f}" y1="{yy - 4}" x2="{xx + 24:.1f}" y2="{yy - 4}" '
                        f'stroke="{color}" stroke-width="{max(s.width, 1.6)}" '
                        f'opacity="{s.opacity}"{dash_attr}/>'
                    )
                if "markers" in s.mode:
                    h.append(f'<circle cx="{xx + 12:.1f}" cy="{yy - 4}" r="3.5" fill="{color}"/>')
                h.append(f'<text x="{xx + 30:.1f}" y="{yy}" font-size="11">{esc(name)}</text>')
                xx += 30 + 6.2 * len(name) + 14
        h.append("</g>")
    h.append("</svg>")
    return "".join(h)


def _series(s: Series, c: Chart, x0: float, y0: float, pw: float, ph: float) -> str:
    color, dash = _style(s)
    px = x0 + c.x.frac(s.x) * pw
    py = y0 + (1 - c.y.frac(s.y)) * ph
    out = [
        f'<g class="series" data-series="{esc(s.name)}" clip-path="url(#clip-{esc(c.plot_id)})">'
        f"<title>{esc(s.name)}</title>"
    ]
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    if s.mode in ("line", "line+markers", "step"):
        for seg in _segments(px, py):
            if s.mode == "step":
                pts = [seg[0]]
                for a, b in seg[1:]:
                    pts += [(a, pts[-1][1]), (a, b)]
                seg = pts
            pts_txt = " ".join(f"{a:.1f},{b:.1f}" for a, b in seg)
            out.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="{s.width}" '
                f'opacity="{s.opacity}" stroke-linejoin="round"{dash_attr} '
                f'points="{pts_txt}"/>'
            )
    if "markers" in s.mode:
        for i, (a, b) in enumerate(zip(px, py, strict=True)):
            if not (math.isfinite(a) and math.isfinite(b)):
                continue
            fill = color if (s.filled is None or s.filled[i]) else "#ffffff"
            out.append(
                f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3.8" fill="{fill}" '
                f'stroke="{color}" stroke-width="1.5"/>'
            )
            if s.labels and s.labels[i]:  # beside the marker, inside the plot area
                left = a > x0 + pw - 30
                out.append(
                    f'<text x="{a - 6 if left else a + 6:.1f}" y="{max(b - 5, y0 + 9):.1f}" '
                    f'font-size="9" fill="{color}" '
                    f'text-anchor="{"end" if left else "start"}">{esc(s.labels[i])}</text>'
                )
    out.append("</g>")
    return "".join(out)


def no_data(plot_id: str, title: str, why: str, width: int = 440) -> str:
    """A placeholder the size of a chart that says why there is nothing to draw."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" data-plot="{esc(plot_id)}" '
        f'width="{width}" height="80" role="img" aria-label="{esc(title)}">'
        f'<text x="{width / 2:.0f}" y="15" text-anchor="middle" font-size="13" '
        f'font-weight="600">{esc(title)}</text><text x="{width / 2:.0f}" y="45" '
        f'text-anchor="middle" font-size="11" fill="#656d76">{esc(why)}</text></svg>'
    )


# a colour per operator class (not per arm): the stacked bars of the profile section
CLASS_COLOURS = {
    "gemm": "#0072B2",
    "attention": "#E69F00",
    "norm_elementwise": "#009E73",
    "sampling": "#CC79A7",
    "communication": "#56B4E9",
    "memcpy": "#8c6d31",
    "other": "#999999",
    "idle": "#d0d7de",
}
_MORE = ("#332288", "#117733", "#88CCEE", "#AA4499", "#44AA99", "#999933")


def stacked_bars(
    plot_id: str,
    title: str,
    rows: list[tuple[str, list[tuple[str, str, float]]]],
    width: int = 640,
) -> str:
    """Horizontal bars of shares adding to 1, one per ``(label, [(key, name, share)])``: a
    segment per key, coloured by :data:`CLASS_COLOURS` (others in turn), its percentage
    inside when it fits; the legend under the bars."""
    label_w, bar_h, gap, top = 170, 18, 8, 26
    keys: dict[str, str] = {}
    for _, parts in rows:
        for key, name, _ in parts:
            keys.setdefault(key, name)
    colour = {}
    extra = iter(_MORE * 4)
    for key in keys:
        colour[key] = CLASS_COLOURS.get(key) or next(extra, "#777777")
    plot_w = width - label_w - 10
    legend_y = top + len(rows) * (bar_h + gap) + 8
    per_row = max(1, plot_w // 150)
    height = legend_y + ((len(keys) + per_row - 1) // per_row) * 18 + 6
    out = [
        f'<svg id="{esc(plot_id)}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{esc(title)}" font-family="sans-serif" font-size="11">',
        f'<text x="4" y="15" font-size="13" font-weight="bold">{esc(title)}</text>',
    ]
    for i, (label, parts) in enumerate(rows):
        y = top + i * (bar_h + gap)
        short = label if len(label) <= 28 else label[:27] + "…"
        out.append(f'<text x="4" y="{y + 13}">{esc(short)}</text>')
        x = float(label_w)
        for key, name, share in parts:
            w = max(0.0, share) * plot_w
            out.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                f'fill="{colour[key]}"><title>{esc(name)} {100 * share:.1f} %</title></rect>'
            )
            if w >= 34:
                ink = "#000" if key in ("idle", "other") else "#fff"
                out.append(
                    f'<text x="{x + 3:.1f}" y="{y + 13}" fill="{ink}">{100 * share:.0f}%</text>'
                )
            x += w
    for k, (key, name) in enumerate(keys.items()):
        lx = label_w + (k % per_row) * 150
        ly = legend_y + (k // per_row) * 18
        out.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{colour[key]}"/>')
        out.append(f'<text x="{lx + 16}" y="{ly + 10}">{esc(name)}</text>')
    out.append("</svg>")
    return "".join(out)
