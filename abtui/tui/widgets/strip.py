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

from rich.text import Text

from abtui.metrics.live import (
    BETTER,
    DELTA_ROWS,
    FEW,
    NA,
    SAME,
    UNDECIDED,
    WORSE,
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
WIDE_LEGEND = {  # under the strip in words, one line per candidate
    LIVE: "provisional running estimates (binned quantiles, last-10 s rates; ✓ better, ✗ worse, "
    "≈ within ±δ, n<…: too few yet); the verdict decides",
    REPLAY: "replayed running estimates at t (binned quantiles, last-10 s rates; ✓ better, "
    "✗ worse, ≈ within ±δ, n<…: too few); the verdict: v",
    VERDICT: "the verdict's figures (✓ improved, ✗ regressed, ≈ unchanged, ? undecided)",
}
LEGENDS = {  # the compact strip's last line, the longest that fits
    LIVE: (
        "vs {base} · TTFT, TPOT: P50 P99 · provisional binned estimates; ≈ within ±δ",
        "vs {base} · TTFT, TPOT: P50 P99 · provisional; ≈ within ±δ",
        "vs {base} · P50 P99 · provisional",
    ),
    REPLAY: (
        "vs {base} · TTFT, TPOT: P50 P99 · replayed binned estimates at t; ≈ within ±δ",
        "vs {base} · TTFT, TPOT: P50 P99 · replayed at t; ≈ within ±δ",
        "vs {base} · P50 P99 · replayed at t",
    ),
    VERDICT: (
        "vs {base} · TTFT, TPOT: P50 P99 · the verdict's figures (? undecided, ≈ unchanged)",
        "vs {base} · TTFT, TPOT: P50 P99 · the verdict's figures",
        "vs {base} · P50 P99 · the verdict's",
    ),
}
OUTCOME_STATE = {
    "IMPROVED": BETTER,
    "REGRESSED": WORSE,
    "EQUIVALENT": SAME,
    "INCONCLUSIVE": UNDECIDED,
}


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(0, n - 1)] + "…"


def cell(d: Delta) -> tuple[str, str, str]:
    """(figure, mark, style) of one delta: ``-24.2%`` ``✓``; ``n<1000`` when too few yet."""
    mark, style = MARKS[d.state]
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


def delta_text(
    base: str, rows: list[tuple[str, list[Delta]]], width: int, mode: str = LIVE
) -> Text:
    """The B-vs-A strip: per candidate, its deltas against the baseline ``base``, and a line
    saying what they are (``mode``: provisional live estimates, replayed ones, or the
    verdict's). Where a candidate's line in words (``TTFT P50 -24.2% ✓``…) does not fit
    ``width``, one line per candidate (at 80 columns it took two each, and with three arms the
    panes lost their lower half): the figures in aligned columns under short group labels
    (``TTFT -24.2%✓ -55.3%✓``: P50 then P99), the candidate's name cut to make room, and the
    baseline and the P50/P99 order said once on the last line. Every figure and mark is kept
    at any width."""
    t = Text()
    if not rows:
        return t
    full = [
        (
            f"{name} vs {base}: ",
            [(f"{d.label} {f} {m}".rstrip() + "  ", st) for d in ds for f, m, st in [cell(d)]],
        )
        for name, ds in rows
    ]
    if all(len(head) + len("".join(x for x, _ in its).rstrip()) <= width for head, its in full):
        for head, its in full:
            t.append(head, "bold")
            for x, st in its:
                t.append(x, st)
            t.append("\n")
        return t.append(WIDE_LEGEND[mode], "dim")
    # one line per candidate: columns of figures, each as wide as its widest
    cells = [[(f + m, st) for f, m, st in map(cell, ds)] for _, ds in rows]
    labels = [SHORT_DELTA.get(d.label, d.label) for d in rows[0][1]]
    cols = [max(len(r[k][0]) for r in cells) for k in range(len(labels))]
    figures = sum(cols) + sum(len(lab) + 3 if lab else 1 for lab in labels)  # "  lab " or " "
    name_w = max(3, min(max(len(n) for n, _ in rows), width - figures))
    for (name, _), row in zip(rows, cells, strict=True):
        t.append(_cut(name, name_w).ljust(name_w), "bold")
        for lab, (x, st), w in zip(labels, row, cols, strict=True):
            t.append(f"  {lab} " if lab else " ", "dim" if lab else "")
            t.append(x.rjust(w), st)
        t.append("\n")
    legends = LEGENDS[mode]
    legend = next(
        (f for lg in legends if len(f := lg.format(base=base)) <= width),
        legends[-1].format(base=_cut(base, 8)),
    )
    return t.append(legend, "dim")
