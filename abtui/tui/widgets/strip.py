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
    HistView,
)
from abtui.runner.until import duration_text

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
    "tpot_reasoning.p50",  # as TTFO
    "tpot_reasoning.p99",
    "tpot_answer.p50",
    "tpot_answer.p99",
)


def _figures(h: HistView | None, f: dict[str, float], metric: str) -> HistView | None:
    """``h`` with the verdict's P50 and P99 of ``metric`` (n/a where it has none)."""
    if h is None:
        return None
    return replace(h, p50=f.get(f"{metric}.p50", math.nan), p99=f.get(f"{metric}.p99", math.nan))


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
                ttfo=_figures(v.ttfo, f, "ttfo"),
                tpot_reasoning=_figures(v.tpot_reasoning, f, "tpot_reasoning"),
                tpot_answer=_figures(v.tpot_answer, f, "tpot_answer"),
                out_tok_s=f.get("throughput.output_tokens", nan),
                good_tok_s=None if v.good_tok_s is None else f.get("goodput.output_tokens", nan),
            )
        )
    return out


# --until-decided: the strip shows the anytime-valid intervals instead of the running estimates
SEQ = "anytime"
SEQ_MARKS = {  # row state (abtui.stats.seqdecide): (mark, word, style)
    "IMPROVED": ("✓", "improved", "green"),
    "SHOWN": ("✓", "within δ", "green"),
    "REGRESSED": ("✗", "regressed", "red"),
    "NO-GAIN": ("≈", "no gain", "cyan"),
    "UNDECIDED": ("?", "open", "yellow"),
}
SEQ_MAX_LINES = 3  # of rows; the legend line comes under them


def _bound(x: float, digits: int, unit: str) -> str:
    if math.isnan(x):
        return "?"
    if math.isinf(x):
        return "+∞" if x > 0 else "-∞"
    return f"{x * 100:+.{digits}f}{unit}"


def _seq_label(key: str, level: int) -> str:
    """``e2e.p50`` → ``E2E P50`` (``E2E50`` at the tightest level)."""
    metric, _, stat = key.partition(".")
    m = {"ttft_user": "TTFT(u)"}.get(metric, metric.upper())
    s = stat.upper() if stat.startswith("p") else stat
    return f"{m}{s[1:]}" if level >= 2 and stat.startswith("p") else f"{m} {s}"


def seq_cell(row, level: int) -> tuple[str, str, str]:
    """(text, mark, style) of one anytime-valid row at a detail ``level`` (0: in words, 2: the
    tightest): ``E2E P50 -20.1% [-25.3%, -14.2%]`` ``✓ improved``; an undecided row says how
    far its decision is in pairs (``? ~760 more pairs``; ``?760``)."""
    mark, word, style = SEQ_MARKS.get(row.state, SEQ_MARKS["UNDECIDED"])
    name = _seq_label(row.key, level)
    if not math.isfinite(row.effect):
        return f"{name} n/a", "", "dim"
    digits, unit, sep = ((1, "%", ", "), (1, "", ","), (0, "", ","))[level]
    lo, hi = _bound(row.lo, digits, unit), _bound(row.hi, digits, unit)
    text = f"{name} {row.effect * 100:+.{digits}f}% [{lo}{sep}{hi}]"
    if row.state != "UNDECIDED":
        return text, f"{mark} {word}" if level == 0 else mark, style
    if row.more is None:
        return text, mark, style
    return text, f"{mark} ~{row.more:,} more pairs" if level == 0 else f"{mark}{row.more:,}", style


def _seq_legend(base: str, look, width: int) -> str:
    """The strip's last line: what the figures are, where the run stands, what is left."""
    v = look.verdict
    n = f"{v.pairs:,}/{look.budget_pairs:,} pairs"
    if look.stop_reason is not None or v.stop:
        how = {
            "budget": "budget spent",
            "interrupted": "stopped by the user",
            "failed": "the run failed",
        }.get(look.stop_reason or "decided")
        if how is None:  # the run stops itself on a decision
            states = [f"stopped: decided {v.decision} at {v.pairs:,} pairs"]
        else:
            states = [f"{how} at {v.pairs:,} pairs: {v.decision}"]
        states.append(f"{v.decision} at {v.pairs:,} pairs")
    else:
        left = "no stop in sight at these effects: runs to its budget"
        if v.more is not None:
            left = f"~{v.more:,} more pairs"
            if look.remaining_s is not None:
                left += f" (~{duration_text(look.remaining_s)})"
        states = [f"{n} · {v.decision.lower()} · {left}".rstrip(" ·"), f"{n} · {left}".rstrip(" ·")]
    heads = (
        f"vs {base} · anytime-valid intervals (α {v.alpha:g}), valid at any stop · ",
        f"vs {base} · anytime-valid, α {v.alpha:g} · ",
        f"vs {base} · anytime-valid · ",
        "anytime-valid · ",
    )
    for st in states:
        for head in heads:
            if len(head + st) <= width:
                return head + st
    return _cut(heads[-1] + states[-1], width)


def sequential_text(base: str, look, width: int) -> Text:
    """The strip of a ``--until-decided`` run: per primary/guardrail row its anytime-valid
    interval of B/A − 1 (the one the decision uses, so valid to act on at any moment), its
    state (✓ improved / within δ, ✗ regressed, ≈ no gain, ? open with the pairs its decision
    needs at the current effect), in columns that fit ``width`` within :data:`SEQ_MAX_LINES`
    lines, the most words that fit; then one line with the pairs so far and the budget, the
    pair's decision and the pairs and time left to it at the run's pace. The primary is the
    first cell."""
    rows = look.verdict.rows
    t = Text()
    for level in (0, 1, 2):
        cells = [seq_cell(r, level) for r in rows]
        texts = [c[0] for c in cells]
        marks = [c[1] for c in cells]
        tw = max(len(x) for x in texts)
        mw = max(len(m) for m in marks)
        cw = tw + 1 + mw
        cols = max(1, (width + 2) // (cw + 2))
        if -(-len(rows) // cols) <= SEQ_MAX_LINES or level == 2:
            break
    for k, (x, m, st) in enumerate(cells):
        if k % cols:
            t.append("  ")
        t.append(x.ljust(tw) if cols > 1 else x, "bold" if k == 0 else "")
        t.append(" ")
        t.append(m.ljust(mw) if (k % cols) < cols - 1 and k < len(cells) - 1 else m, st)
        if k % cols == cols - 1 or k == len(cells) - 1:
            t.append("\n")
    return t.append(_seq_legend(base, look, width), "dim")
