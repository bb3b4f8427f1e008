"""The factorial ablation in words and tables: one plain-text grid per metric (the terminal
report and the TUI's ablation view), the Markdown and HTML sections. Everything comes from the
verdict's :class:`~abtui.verdict.ablation.Factorial`; nothing is computed here."""

from __future__ import annotations

import math
import textwrap

from abtui.metrics.catalogue import is_latency
from abtui.stats.labels import pct
from abtui.verdict.ablation import (
    AccuracyGate,
    AccuracyTerm,
    Factorial,
    FactorialRow,
    LatencyTerm,
    Span,
    headline_keys,
)
from abtui.verdict.policy import Policy

MAX_FINDINGS_TEXT = 3  # findings printed in the terminal; the reports carry every one


def _shown(x: float | None) -> float | None:
    """``x``, or None where it is not a finite number (what the JSON has: null)."""
    return x if x is not None and math.isfinite(x) else None


def _ci(d: Span | LatencyTerm | None) -> str:
    if d is None or _shown(d.ratio) is None:
        return "n/a"
    return f"{pct(d.ratio)} [{pct(d.lo)}, {pct(d.hi)}]"


def _p(x) -> str:
    x = _shown(x)
    return "n/a" if x is None else (f"{x:.2g}" if x >= 1e-3 else "<0.001")


def _value(key: str, v) -> str:
    v = _shown(v)
    if v is None:
        return "n/a"
    if is_latency(key):
        return f"{v * 1e3:.1f} ms" if v < 10 else f"{v:.2f} s"
    return f"{v:,.3g}"


def interaction_line(inter: LatencyTerm) -> str:
    how = "BH" if inter.family.endswith("breakdown") else "Holm"
    return f"interaction {inter.term} {_ci(inter)} {inter.outcome}, {how} p {_p(inter.p_adj)}"


def _cell(row: FactorialRow, fac: Factorial, levels: dict) -> str:
    """One arm's cell: the baseline's value, or the arm's effect against the baseline."""
    arm = next(a for a in fac.arms if a.levels == levels)
    if not any(levels.values()):
        return f"{arm.name} {_value(row.key, row.values.get(arm.name))}"
    on = [f for f, x in levels.items() if x]
    d = row.alone.get(arm.name) if len(on) == 1 else None
    if d is None and arm.name == fac.combination:
        d = row.combined
    if d is None:  # a two-factor arm of a 2×2×2: its value against the baseline's
        b, v = _shown(row.values.get(fac.arms[0].name)), _shown(row.values.get(arm.name))
        return pct(v / b - 1) if b and v is not None else "n/a"
    return _ci(d)


def grid_lines(fac: Factorial, key: str, width: int = 78) -> list[str]:
    """The 2×2 (or two 2×2 for three factors) of one metric row: each arm's change against the
    baseline with its CI, then each interaction line. Fits ``width`` ≥ 60 columns."""
    row = fac.row(key)
    if row is None:
        return [f"{key}: not measured"]
    f = fac.factors
    col = max(18, (width - 12) // 2)
    out = [
        f"{row.label} (lower is better)"
        if row.lower_is_better
        else f"{row.label} (higher is better)"
    ]
    for third in [{}] if len(f) == 2 else [{f[2]: 0}, {f[2]: 1}]:
        if third:
            out.append(f"  {f[2]} {'on' if third[f[2]] else 'off'}:")
        out.append(f"{'':12}{(f[1] + ' off')[:col]:<{col}}{(f[1] + ' on')[:col]}")
        for a in (0, 1):
            cells = [_cell(row, fac, {f[0]: a, f[1]: b, **third}) for b in (0, 1)]
            head = f"{f[0]} {'on' if a else 'off'}"[:11]
            out.append((f"{head:<12}" + "".join(f"{c[: col - 1]:<{col}}" for c in cells)).rstrip())
    if len(f) == 2:
        out.append(
            f"parts multiplied {pct(row.product)}, added {pct(row.sum)}; "
            f"measured {_ci(row.combined)}"
        )
    out += [interaction_line(i) for i in row.interactions]
    return [
        w
        for line in out
        for w in (
            textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False) or [""]
        )
    ]


def _pp(x) -> str:
    x = _shown(x)
    return "n/a" if x is None else f"{x * 100:+.1f}"


def _pp_ci(d: AccuracyTerm | AccuracyGate | None) -> str:
    """``−8.7 pp [−13.0, −5.2]``: a term's estimate or a gate's change."""
    est = None if d is None else _shown(d.estimate if isinstance(d, AccuracyTerm) else d.delta)
    if est is None:
        return "n/a"
    return f"{_pp(est)} pp [{_pp(d.lo)}, {_pp(d.hi)}]"


def quality_interaction_line(inter: AccuracyTerm) -> str:
    """``interaction int4×spec −8.7 pp [−13.0, −5.2] ANTAGONISTIC, Holm p 0.0012``, and what
    the verdict makes of it."""
    state = inter.state
    tail = {
        "fail": ": NO-GO for the combination",
        "clear": ": no combination-only drop beyond the margin",
    }.get(state, "")
    if state == "undecided":
        need = inter.items_needed
        tail = ": undecided, " + (
            f"about {need:,} items would decide" if need else "more items would decide"
        )
    return (
        f"interaction {inter.term} {_pp_ci(inter)} {inter.outcome}, Holm p {_p(inter.p_adj)}{tail}"
    )


def quality_lines(fac: Factorial | None, width: int = 78) -> list[str]:
    """The accuracy terms per suite (the text report, the html and the TUI's ablation view):
    each arm's accuracy on the items scored on all arms, each factor alone and the combination
    against the baseline, the interaction with what the verdict makes of it, and the flips only
    the combination makes. Empty when no quality suite ran."""
    q = fac.quality if fac else None
    if not q or not q.suites:
        return []
    arms = [a.name for a in fac.arms]
    singles = fac.singles
    margins = {s.margin for s in q.suites}
    one = len(margins) == 1
    out = [
        "quality: accuracy in pp; interaction = per-item difference in differences (0: the "
        "accuracy changes add up)" + (f", margin ±{margins.pop() * 100:g} pp" if one else "")
    ]
    for s in q.suites:
        if not s.n:
            out.append(f"{s.suite}: no item scored on every arm ({s.unpaired} left out)")
            continue
        acc = ", ".join(f"{a} {s.accuracy[a] * 100:.1f}%" for a in arms if a in s.accuracy)
        left = f", {s.unpaired} left out" if s.unpaired else ""
        left += "" if one else f", margin ±{s.margin * 100:g} pp"
        out.append(f"{s.suite} ({s.n} items on all {len(arms)} arms{left}): {acc}")
        if fac.k == 2:
            alone = ", ".join(f"{n} alone {_pp_ci(s.alone.get(n))}" for n in singles)
            out.append(f"  {alone}; added {_pp(s.predicted_sum)} pp; measured {_pp_ci(s.combined)}")
        for inter in s.interactions:
            out.append("  " + quality_interaction_line(inter))
        oc = s.only_combination
        if oc:
            named = f" ({', '.join(oc.lost_items[:3])}…)" if oc.lost_items else ""
            out.append(
                f"  flips only {fac.combination} makes: {oc.lost} lost{named}, {oc.gained} gained"
            )
    return [
        w
        for line in out
        for w in (
            textwrap.wrap(line, width, subsequent_indent="    ", break_on_hyphens=False) or [""]
        )
    ]


def combination_no_go(fac: Factorial) -> list[str]:
    """Every NO-GO reason the factorial gives the combination (latency, then quality)."""
    return ([fac.no_go] if fac.no_go else []) + list(fac.quality.no_go if fac.quality else [])


def _undecided(fac: Factorial) -> list[str]:
    return list(fac.quality.undecided) if fac.quality else []


def text_lines(fac: Factorial | None, policy: Policy, width: int = 100) -> list[str]:
    """The terminal report's ablation section."""
    if not fac:
        return []
    if fac.error:
        return [f"factorial ablation ({', '.join(fac.factors)}): not computed — {fac.error}"]
    out = [
        f"factorial ablation: {' × '.join(fac.factors)} ({2**fac.k} arms, "
        "paired; effects against the baseline, interactions on the log-ratio scale)"
    ]
    keys = headline_keys(fac, policy)[:2]
    for key in keys:
        out += [""] + ["  " + line for line in grid_lines(fac, key, min(width, 100) - 2)]
    ql = quality_lines(fac, min(width, 100) - 2)
    if ql:
        out += [""] + ["  " + line for line in ql]
    finds = fac.findings
    if finds:
        out.append("")
        out += [f"  finding: {f}" for f in finds[:MAX_FINDINGS_TEXT]]
        if len(finds) > MAX_FINDINGS_TEXT:
            out.append(
                f"  (+{len(finds) - MAX_FINDINGS_TEXT} more findings in the md/html/json report)"
            )
    else:
        out.append(
            "  no interaction significant and beyond δ: the gains compose as if independent "
            "(or the run cannot tell)"
        )
    out += [f"  NO-GO for {fac.combination}: {r}" for r in combination_no_go(fac)]
    out += [f"  {r}" for r in _undecided(fac)]
    return out


def markdown(fac: Factorial | None, policy: Policy, e_) -> list[str]:
    if not fac:
        return []
    lines = ["## Factorial ablation", ""]
    if fac.error:
        return lines + [f"Not computed: {e_(fac.error)}", ""]
    names = [a.name for a in fac.arms]
    lines += [
        f"Factors {e_(', '.join(fac.factors))}; arms {e_(', '.join(names))}. "
        "Main effects: each factor's change averaged over the others' levels; "
        "interactions on the log-ratio scale (0: the gains multiply); families: "
        "Holm over the primary and guardrails, Benjamini–Hochberg over the rest.",
        "",
    ]
    lines += [f"- **finding:** {e_(f)}" for f in fac.findings]
    lines += [f"- **NO-GO for {e_(fac.combination)}:** {e_(r)}" for r in combination_no_go(fac)]
    lines += [f"- **undecided:** {e_(r)}" for r in _undecided(fac)]
    singles = names[1 : 1 + fac.k] if fac.k == 2 else fac.singles
    lines += [
        "",
        "| metric | "
        + " | ".join(f"{e_(s)} alone" for s in singles)
        + " | combined | parts multiplied | term | interaction | p (adj) | outcome |",
        "|---|" + "--:|" * (len(singles) + 4) + "---|",
    ]
    first = set(headline_keys(fac, policy))
    for row in sorted(fac.rows, key=lambda r: r.key not in first):
        for i in row.interactions:
            alone = " | ".join(_ci(row.alone.get(s)) for s in singles)
            lines.append(
                f"| {e_(row.label)} | {alone} | {_ci(row.combined)} | "
                f"{pct(row.product)} | {e_(i.term)} | "
                f"{_ci(i)} | {_p(i.p_adj)} | {i.outcome} |"
            )
    return lines + [""] + _quality_markdown(fac, e_)


def _quality_markdown(fac: Factorial, e_) -> list[str]:
    q = fac.quality
    if not q or not q.suites:
        return []
    arms = [a.name for a in fac.arms]
    lines = [
        "### Quality in the factorial",
        "",
        "Accuracy on the items scored on every arm; terms in percentage points, each item's "
        "contrast averaged (the 2×2 interaction: right on both single-factor arms and the "
        "baseline but wrong on the combination is −1), with a score interval; interactions "
        "in the Holm `interaction` family.",
        "",
        "| suite | items | "
        + " | ".join(e_(a) for a in arms)
        + " | term | estimate | p (adj) | outcome | verdict | only the combination: lost / gained |",
        "|---|--:|" + "--:|" * len(arms) + "---|--:|--:|---|---|--:|",
    ]
    for s in q.suites:
        acc = " | ".join(f"{s.accuracy[a] * 100:.1f}%" if a in s.accuracy else "n/a" for a in arms)
        oc = s.only_combination
        for t in s.main + s.interactions:
            state = t.state or "—"
            if state == "undecided" and t.items_needed:
                state += f" (about {t.items_needed:,} items would decide)"
            lines.append(
                f"| {e_(s.suite)} | {s.n} | {acc} | {e_(t.term)} | "
                f"{_pp_ci(t)} | {_p(t.p_adj)} | {t.outcome} | {state} | "
                + (f"{oc.lost if oc else 0} / {oc.gained if oc else 0} |" if t.order > 1 else "|")
            )
    return lines + [""]


def html(fac: Factorial | None, policy: Policy, esc) -> str:
    if not fac:
        return ""
    if fac.error:
        return f"<h2>Factorial ablation</h2><p>Not computed: {esc(fac.error)}</p>"
    h = [f"<h2>Factorial ablation: {esc(' × '.join(fac.factors))}</h2><ul>"]
    h += [f"<li><b>finding:</b> {esc(f)}</li>" for f in fac.findings]
    h += [
        f"<li><b>NO-GO for {esc(fac.combination)}:</b> {esc(r)}</li>"
        for r in combination_no_go(fac)
    ]
    h += [f"<li><b>undecided:</b> {esc(r)}</li>" for r in _undecided(fac)]
    h.append("</ul>")
    for key in headline_keys(fac, policy):
        h.append("<pre>" + esc("\n".join(grid_lines(fac, key, 100))) + "</pre>")
    ql = quality_lines(fac, 100)
    if ql:
        h.append("<pre>" + esc("\n".join(ql)) + "</pre>")
    h.append(
        "<table><tr><th>metric</th><th>term</th><th>interaction</th><th>p (adj)</th>"
        "<th>family</th><th>outcome</th></tr>"
    )
    for row in fac.rows:
        for i in row.interactions:
            h.append(
                f"<tr><td>{esc(row.label)}</td><td>{esc(i.term)}</td><td>{_ci(i)}</td>"
                f"<td>{_p(i.p_adj)}</td><td>{esc(i.family)}</td>"
                f"<td>{esc(i.outcome)}</td></tr>"
            )
    h.append("</table>")
    return "".join(h)
