"""The B-vs-A strip under the live panes: each candidate's deltas against the baseline.

While a run goes (and in a replay before its end) the figures are running estimates from
:func:`abtui.metrics.live.deltas` — binned quantiles and rates over the last ten seconds, not the
verdict's estimators — and the strip says so: *provisional* live, *replayed* in a replay. A row
waits for its minimum sample (``n<30``; a P99 for the verdict's 1000) and a change within ±δ is
``≈``, not ✓ or ✗. Once the verdict is computed, the strip of a finished run (and a replay at
its end state) shows the verdict's own figures and outcomes (:func:`verdict_rows`), so the
last thing the strip says is what the verdict says.
"""

from __future__ import annotations

import math
from dataclasses import replace

from rich.text import Text

from abtui.metrics.live import (
    BETTER,
    DELTA_ROWS,
    FEW,
    NA,
    SAME,
    UNDECIDED,
    WORSE,
    ArmView,
    Delta,
)

SHORT_DELTA = {  # the compact strip's group labels: a P99 follows its P50 under one label
    "TTFT P50": "TTFT",
    "TTFT P99": "",
    "TPOT P50": "TPOT",
    "TPOT P99": "",
    "throughput": "tok/s",
    "goodput": "good",
}
MARKS = {  # state: (mark, style); the mark says it in words where colour cannot
    BETTER: ("✓", "green"),
    WORSE: ("✗", "red"),
    SAME: ("≈", "cyan"),
    UNDECIDED: ("?", "yellow"),
    FEW: ("", "dim"),
    NA: ("", "dim"),
}

LIVE, REPLAY, VERDICT = "live", "replay", "verdict"
WIDE_LEGEND = {  # under the strip in words, one line per candidate: the longest that fits
    LIVE: (
        "provisional running estimates: binned P50, P99 over the run so far, tok/s and good over "
        "the last 10 s; ✓ better, ✗ worse, ≈ within ±δ, n<…: too few yet; the verdict decides",
        "provisional running estimates: binned P50, P99 so far, rates last 10 s; ✓ better, "
        "✗ worse, ≈ within ±δ, n<…: too few yet",
    ),
    REPLAY: (
        "replayed running estimates at t: binned P50, P99 over the run so far, tok/s and good "
        "over the last 10 s; ✓ better, ✗ worse, ≈ within ±δ, n<…: too few; the verdict: v",
        "replayed running estimates at t: binned P50, P99 so far, rates last 10 s; ✓ better, "
        "✗ worse, ≈ within ±δ, n<…: too few",
    ),
    VERDICT: (
        "the verdict's figures over the whole run (✓ improved, ✗ regressed, ≈ unchanged, "
        "? undecided: v says why)",
    ),
}
WIDE_FIXED = ("; throughput unmarked: the open-loop rate sets it", "; throughput: fixed rate")
# The compact strip's last line: "vs BASE · " and the longest of these combinations that fits
# (each list longest first): what the figures are and over which window, then what the marks
# mean, then (open loop) why throughput has no mark.
LEGEND_WINDOW = {
    LIVE: (
        "binned P50 P99 so far, rates last 10 s",
        "P50 P99 so far, rates last 10 s",
        "P50 P99 so far, rates 10 s",
        "P50 P99",
    ),
    REPLAY: ("binned P50 P99 at t, rates last 10 s", "P50 P99 at t, rates last 10 s", "P50 P99"),
    VERDICT: (
        "TTFT, TPOT: P50 P99 · the verdict's figures, whole run",
        "P50 P99 · the verdict's figures, whole run",
        "P50 P99 · the verdict's figures",
        "P50 P99 · the verdict's",
    ),
}
LEGEND_MODE = {
    LIVE: (" · provisional; ≈ within ±δ", " · provisional"),
    REPLAY: (" · replayed; ≈ within ±δ", " · replayed"),
    VERDICT: (" (? undecided: v says why)", " (? undecided, ≈ unchanged)", ""),
}
LEGEND_FIXED = (" · tok/s unmarked: fixed rate", " · tok/s: fixed rate")
OUTCOME_STATE = {
    "IMPROVED": BETTER,
    "REGRESSED": WORSE,
    "EQUIVALENT": SAME,
    "INCONCLUSIVE": UNDECIDED,
}


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(0, n - 1)] + "…"


def cell(d: Delta, fixed: bool = False) -> tuple[str, str, str]:
    """(figure, mark, style) of one delta: ``-24.2%`` ``✓``; ``n<1000`` when too few yet;
    ``fixed``: a quantity the design sets (throughput under an open-loop rate), never marked
    better or worse."""
    mark, style = MARKS[d.state]
    if fixed and d.state not in (FEW, NA):
        mark, style = "", "dim"
    if d.state == FEW:
        return f"n<{d.need}", "", style
    if d.state == NA or not math.isfinite(d.ratio):
        return "n/a", "", "dim"
    return f"{d.ratio:+.1%}", mark, style


def verdict_rows(pairs, arm_names: list[str]) -> list[tuple[str, list[Delta]]]:
    """The strip's rows from the verdict's pairs (``PairVerdict``: each candidate against the
    baseline): the same rows as the live strip, with the verdict's point estimates and
    outcomes."""
    out = []
    for pair in pairs:
        comp, ds = pair.comparison, []
        for label, _get, _dir, key, _stat in DELTA_ROWS:
            e = comp.get(key)
            if e is None or not math.isfinite(e.ratio):
                ds.append(Delta(label, math.nan, math.nan, math.nan, NA))
            else:
                ds.append(Delta(label, e.a, e.b, e.ratio, OUTCOME_STATE.get(e.outcome, UNDECIDED)))
        name = arm_names[pair.b] if pair.b < len(arm_names) else pair.candidate
        out.append((name, ds))
    return out


def legend(base: str, mode: str, width: int, fixed: bool = False) -> str:
    """The compact strip's last line: the longest form that fits ``width``."""
    for win in LEGEND_WINDOW[mode]:
        for md in LEGEND_MODE[mode]:
            for fx in LEGEND_FIXED if fixed else ("",):
                if len(text := f"vs {base} · {win}{md}{fx}") <= width:
                    return text
    return _cut(f"vs {_cut(base, 8)} · {LEGEND_WINDOW[mode][-1]}", width)


def delta_text(
    base: str,
    rows: list[tuple[str, list[Delta]]],
    width: int,
    mode: str = LIVE,
    fixed: frozenset[str] = frozenset(),
) -> Text:
    """The B-vs-A strip: per candidate, its deltas against the baseline ``base``, and a line
    saying what they are and over which window (``mode``: provisional live estimates, replayed
    ones, or the verdict's). Where a candidate's line in words (``TTFT P50 -24.2% ✓``…) does
    not fit ``width``, one line per candidate (at 80 columns it took two each, and with three
    arms the panes lost their lower half): the figures in aligned columns under short group
    labels (``TTFT -24.2%✓ -55.3%✓``: P50 then P99), the candidate's name cut to make room, and
    the baseline and the P50/P99 order said once on the last line. Every figure and mark is
    kept at any width. ``fixed``: the rows' labels the design sets (``throughput`` under an
    open-loop rate), shown without a mark."""
    t = Text()
    if not rows:
        return t

    def cells(ds: list[Delta]) -> list[tuple[str, str, str]]:
        return [cell(d, d.label in fixed) for d in ds]

    full = [
        (
            f"{name} vs {base}: ",
            [
                (f"{d.label} {f} {m}".rstrip() + "  ", st)
                for d, (f, m, st) in zip(ds, cells(ds), strict=True)
            ],
        )
        for name, ds in rows
    ]
    forms = [w + fx for w in WIDE_LEGEND[mode] for fx in (WIDE_FIXED if fixed else ("",))]
    words = next((w for w in forms if len(w) <= width), None)
    if words is not None and all(
        len(head) + len("".join(x for x, _ in its).rstrip()) <= width for head, its in full
    ):
        for head, its in full:
            t.append(head, "bold")
            for x, st in its:
                t.append(x, st)
            t.append("\n")
        return t.append(words, "dim")
    # one line per candidate: columns of figures, each as wide as its widest
    table = [[(f + m, st) for f, m, st in cells(ds)] for _, ds in rows]
    labels = [SHORT_DELTA.get(d.label, d.label) for d in rows[0][1]]
    cols = [max(len(r[k][0]) for r in table) for k in range(len(labels))]
    figures = sum(cols) + sum(len(lab) + 3 if lab else 1 for lab in labels)  # "  lab " or " "
    name_w = max(3, min(max(len(n) for n, _ in rows), width - figures))
    for (name, _), row in zip(rows, table, strict=True):
        t.append(_cut(name, name_w).ljust(name_w), "bold")
        for lab, (x, st), w in zip(labels, row, cols, strict=True):
            t.append(f"  {lab} " if lab else " ", "dim" if lab else "")
            t.append(x.rjust(w), st)
        t.append("\n")
    return t.append(legend(base, mode, width, bool(fixed)), "dim")


VIEW_ROWS = (  # the verdict's row keys a pane, the compare view and the strip show
    "ttft.p50",
    "ttft.p99",
    "tpot.p50",
    "tpot.p99",
    "throughput.output_tokens",
    "goodput.output_tokens",
    "ttfo.p50",  # where a response reasoned (else the comparison has no TTFO rows)
    "ttfo.p99",
)


def verdict_views(pairs, views: list[ArmView]) -> list[ArmView]:
    """Each arm's view with the verdict's whole-run figures (P50, P99, tok/s and good tok/s,
    from its pairs: the baseline's ``a``, each candidate's ``b``) in place of the running
    estimates, so that the panes and the compare view say what the verdict says. The
    histograms' counts stay (their bars are the samples); a figure the verdict has not is
    ``n/a``, never a running one beside the verdict's."""
    got: dict[int, dict[str, float]] = {}
    for pair in pairs:
        for key in VIEW_ROWS:
            e = pair.comparison.get(key)
            if e is not None:
                got.setdefault(pair.a, {})[key] = e.a
                got.setdefault(pair.b, {})[key] = e.b
    out = []
    for i, v in enumerate(views):
        f = got.get(i)
        if f is None:
            out.append(v)
            continue
        nan = math.nan
        out.append(
            replace(
                v,
                ttft=replace(v.ttft, p50=f.get("ttft.p50", nan), p99=f.get("ttft.p99", nan)),
                tpot=replace(v.tpot, p50=f.get("tpot.p50", nan), p99=f.get("tpot.p99", nan)),
                ttfo=None
                if v.ttfo is None
                else replace(v.ttfo, p50=f.get("ttfo.p50", nan), p99=f.get("ttfo.p99", nan)),
                out_tok_s=f.get("throughput.output_tokens", nan),
                good_tok_s=None if v.good_tok_s is None else f.get("goodput.output_tokens", nan),
            )
        )
    return out
