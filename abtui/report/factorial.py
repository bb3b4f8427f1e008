"""The factorial ablation in words and tables: one plain-text grid per metric (the terminal
report and the TUI's ablation view), the Markdown and HTML sections. Everything comes from the
verdict's ``factorial`` dict (:mod:`abtui.verdict.ablation`); nothing is computed here."""

from __future__ import annotations

import textwrap

from abtui.metrics.catalogue import is_latency
from abtui.stats.labels import pct
from abtui.verdict.ablation import headline_keys
from abtui.verdict.policy import Policy

MAX_FINDINGS_TEXT = 3  # findings printed in the terminal; the reports carry every one


def _ci(d: dict | None) -> str:
    if not d or d.get("ratio") is None:
        return "n/a"
    return f"{pct(d['ratio'])} [{pct(d.get('lo'))}, {pct(d.get('hi'))}]"


def _p(x) -> str:
    return "n/a" if x is None else (f"{x:.2g}" if x >= 1e-3 else "<0.001")


def _value(key: str, v) -> str:
    if v is None:
        return "n/a"
    if is_latency(key):
        return f"{v * 1e3:.1f} ms" if v < 10 else f"{v:.2f} s"
    return f"{v:,.3g}"


def interaction_line(inter: dict) -> str:
    how = "BH" if (inter.get("family") or "").endswith("breakdown") else "Holm"
    return f"interaction {inter['term']} {_ci(inter)} {inter['outcome']}, {how} p {_p(inter.get('p_adj'))}"


def _cell(row: dict, fac: dict, levels: dict) -> str:
    """One arm's cell: the baseline's value, or the arm's effect against the baseline."""
    arm = next(a for a in fac["arms"] if a["levels"] == levels)
    if not any(levels.values()):
        return f"{arm['name']} {_value(row['key'], row['values'].get(arm['name']))}"
    on = [f for f, x in levels.items() if x]
    d = (row.get("alone") or {}).get(arm["name"]) if len(on) == 1 else None
    if d is None and arm["name"] == fac["combination"]:
        d = row.get("combined")
    if d is None:  # a two-factor arm of a 2×2×2: its value against the baseline's
        b, v = row["values"].get(fac["arms"][0]["name"]), row["values"].get(arm["name"])
        return pct(v / b - 1) if b and v is not None else "n/a"
    return _ci(d)


def grid_lines(fac: dict, key: str, width: int = 78) -> list[str]:
    """The 2×2 (or two 2×2 for three factors) of one metric row: each arm's change against the
    baseline with its CI, then each interaction line. Fits ``width`` ≥ 60 columns."""
    row = next((r for r in fac.get("rows") or [] if r["key"] == key), None)
    if row is None:
        return [f"{key}: not measured"]
    f = fac["factors"]
    col = max(18, (width - 12) // 2)
    out = [
        f"{row['label']} (lower is better)"
        if row["lower_is_better"]
        else f"{row['label']} (higher is better)"
    ]
    for third in [{}] if len(f) == 2 else [{f[2]: 0}, {f[2]: 1}]:
        if third:
            out.append(f"  {f[2]} {'on' if third[f[2]] else 'off'}:")
        out.append(f"{'':12}{(f[1] + ' off')[:col]:<{col}}{(f[1] + ' on')[:col]}")
        for a in (0, 1):
            cells = [_cell(row, fac, {f[0]: a, f[1]: b, **third}) for b in (0, 1)]
            head = f"{f[0]} {'on' if a else 'off'}"[:11]
            out.append((f"{head:<12}" + "".join(f"{c[: col - 1]:<{col}}" for c in cells)).rstrip())
    pred = row.get("predicted") or {}
    if len(f) == 2:
        out.append(
            f"parts multiplied {pct(pred.get('product'))}, added {pct(pred.get('sum'))}; "
            f"measured {_ci(row.get('combined'))}"
        )
    out += [interaction_line(i) for i in row["interactions"]]
    return [
        w
        for line in out
        for w in (
            textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False) or [""]
        )
    ]


def _pp(x) -> str:
    return "n/a" if x is None else f"{x * 100:+.1f}"


def _pp_ci(d: dict | None, est: str = "estimate") -> str:
    """``−8.7 pp [−13.0, −5.2]``."""
    if not d or d.get(est) is None:
        return "n/a"
    return f"{_pp(d[est])} pp [{_pp(d.get('lo'))}, {_pp(d.get('hi'))}]"


def quality_interaction_line(inter: dict) -> str:
    """``interaction int4×spec −8.7 pp [−13.0, −5.2] ANTAGONISTIC, Holm p 0.0012``, and what
    the verdict makes of it."""
    state = inter.get("state")
    tail = {
        "fail": ": NO-GO for the combination",
        "clear": ": no combination-only drop beyond the margin",
    }.get(state, "")
    if state == "undecided":
        need = inter.get("items_needed")
        tail = ": undecided, " + (
            f"about {need:,} items would decide" if need else "more items would decide"
        )
    return (
        f"interaction {inter['term']} {_pp_ci(inter)} {inter['outcome']}, Holm p "
        f"{_p(inter.get('p_adj'))}{tail}"
    )


def quality_lines(fac: dict | None, width: int = 78) -> list[str]:
    """The accuracy terms per suite (the text report, the html and the TUI's ablation view):
    each arm's accuracy on the items scored on all arms, each factor alone and the combination
    against the baseline, the interaction with what the verdict makes of it, and the flips only
    the combination makes. Empty when no quality suite ran."""
    q = (fac or {}).get("quality") or {}
    if not q.get("suites"):
        return []
    arms = [a["name"] for a in fac["arms"]]
    singles = [a["name"] for a in fac["arms"] if sum(a["levels"].values()) == 1]
    margins = {s["margin"] for s in q["suites"]}
    one = len(margins) == 1
    out = [
        "quality: accuracy in pp; interaction = per-item difference in differences (0: the "
        "accuracy changes add up)" + (f", margin ±{margins.pop() * 100:g} pp" if one else "")
    ]
    for s in q["suites"]:
        if not s["n"]:
            out.append(f"{s['suite']}: no item scored on every arm ({s['unpaired']} left out)")
            continue
        acc = ", ".join(f"{a} {s['accuracy'][a] * 100:.1f}%" for a in arms if a in s["accuracy"])
        left = f", {s['unpaired']} left out" if s["unpaired"] else ""
        left += "" if one else f", margin ±{s['margin'] * 100:g} pp"
        out.append(f"{s['suite']} ({s['n']} items on all {len(arms)} arms{left}): {acc}")
        if len(fac["factors"]) == 2:
            alone = ", ".join(
                f"{n} alone {_pp_ci((s.get('alone') or {}).get(n), 'delta')}" for n in singles
            )
            out.append(
                f"  {alone}; added {_pp((s.get('predicted') or {}).get('sum'))} pp; "
                f"measured {_pp_ci(s.get('combined'), 'delta')}"
            )
        for inter in s["interactions"]:
            out.append("  " + quality_interaction_line(inter))
        oc = s.get("only_combination") or {}
        if oc:
            named = f" ({', '.join(oc['lost_items'][:3])}…)" if oc.get("lost_items") else ""
            out.append(
                f"  flips only {fac['combination']} makes: {oc['lost']} lost{named}, "
                f"{oc['gained']} gained"
            )
    return [
        w
        for line in out
        for w in (
            textwrap.wrap(line, width, subsequent_indent="    ", break_on_hyphens=False) or [""]
        )
    ]


def combination_no_go(fac: dict) -> list[str]:
    """Every NO-GO reason the factorial gives the combination (latency, then quality)."""
    q = fac.get("quality") or {}
    return ([fac["no_go"]] if fac.get("no_go") else []) + list(q.get("no_go") or [])


def text_lines(fac: dict | None, policy: Policy, width: int = 100) -> list[str]:
    """The terminal report's ablation section."""
    if not fac:
        return []
    if fac.get("error"):
        return [
            f"factorial ablation ({', '.join(fac.get('factors') or [])}): not computed — "
            f"{fac['error']}"
        ]
    out = [
        f"factorial ablation: {' × '.join(fac['factors'])} ({2 ** len(fac['factors'])} arms, "
        "paired; effects against the baseline, interactions on the log-ratio scale)"
    ]
    keys = headline_keys(fac, policy)[:2]
    for key in keys:
        out += [""] + ["  " + line for line in grid_lines(fac, key, min(width, 100) - 2)]
    ql = quality_lines(fac, min(width, 100) - 2)
    if ql:
        out += [""] + ["  " + line for line in ql]
    finds = fac.get("findings") or []
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
    out += [f"  NO-GO for {fac['combination']}: {r}" for r in combination_no_go(fac)]
    out += [f"  {r}" for r in (fac.get("quality") or {}).get("undecided") or []]
    return out


def markdown(fac: dict | None, policy: Policy, e_) -> list[str]:
    if not fac:
        return []
    lines = ["## Factorial ablation", ""]
    if fac.get("error"):
        return lines + [f"Not computed: {e_(fac['error'])}", ""]
    names = [a["name"] for a in fac["arms"]]
    lines += [
        f"Factors {e_(', '.join(fac['factors']))}; arms {e_(', '.join(names))}. "
        "Main effects: each factor's change averaged over the others' levels; "
        "interactions on the log-ratio scale (0: the gains multiply); families: "
        "Holm over the primary and guardrails, Benjamini–Hochberg over the rest.",
        "",
    ]
    lines += [f"- **finding:** {e_(f)}" for f in fac.get("findings") or []]
    lines += [f"- **NO-GO for {e_(fac['combination'])}:** {e_(r)}" for r in combination_no_go(fac)]
    lines += [
        f"- **undecided:** {e_(r)}" for r in (fac.get("quality") or {}).get("undecided") or []
    ]
    singles = (
        names[1 : 1 + len(fac["factors"])]
        if len(fac["factors"]) == 2
        else [a["name"] for a in fac["arms"] if sum(a["levels"].values()) == 1]
    )
    lines += [
        "",
        "| metric | "
        + " | ".join(f"{e_(s)} alone" for s in singles)
        + " | combined | parts multiplied | term | interaction | p (adj) | outcome |",
        "|---|" + "--:|" * (len(singles) + 4) + "---|",
    ]
    first = set(headline_keys(fac, policy))
    for row in sorted(fac["rows"], key=lambda r: r["key"] not in first):
        for i in row["interactions"]:
            alone = " | ".join(_ci((row.get("alone") or {}).get(s)) for s in singles)
            lines.append(
                f"| {e_(row['label'])} | {alone} | {_ci(row.get('combined'))} | "
                f"{pct((row.get('predicted') or {}).get('product'))} | {e_(i['term'])} | "
                f"{_ci(i)} | {_p(i.get('p_adj'))} | {i['outcome']} |"
            )
    return lines + [""] + _quality_markdown(fac, e_)


def _quality_markdown(fac: dict, e_) -> list[str]:
    q = fac.get("quality") or {}
    if not q.get("suites"):
        return []
    arms = [a["name"] for a in fac["arms"]]
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
    for s in q["suites"]:
        acc = " | ".join(
            f"{s['accuracy'][a] * 100:.1f}%" if a in s["accuracy"] else "n/a" for a in arms
        )
        oc = s.get("only_combination") or {}
        for t in s["main"] + s["interactions"]:
            state = t.get("state") or "—"
            if state == "undecided" and t.get("items_needed"):
                state += f" (about {t['items_needed']:,} items would decide)"
            lines.append(
                f"| {e_(s['suite'])} | {s['n']} | {acc} | {e_(t['term'])} | "
                f"{_pp_ci(t)} | {_p(t.get('p_adj'))} | {t['outcome']} | {state} | "
                + (f"{oc.get('lost', 0)} / {oc.get('gained', 0)} |" if t["order"] > 1 else "|")
            )
    return lines + [""]


def html(fac: dict | None, policy: Policy, esc) -> str:
    if not fac:
        return ""
    if fac.get("error"):
        return f"<h2>Factorial ablation</h2><p>Not computed: {esc(fac['error'])}</p>"
    h = [f"<h2>Factorial ablation: {esc(' × '.join(fac['factors']))}</h2><ul>"]
    h += [f"<li><b>finding:</b> {esc(f)}</li>" for f in fac.get("findings") or []]
    h += [
        f"<li><b>NO-GO for {esc(fac['combination'])}:</b> {esc(r)}</li>"
        for r in combination_no_go(fac)
    ]
    h += [
        f"<li><b>undecided:</b> {esc(r)}</li>"
        for r in (fac.get("quality") or {}).get("undecided") or []
    ]
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
    for row in fac["rows"]:
        for i in row["interactions"]:
            h.append(
                f"<tr><td>{esc(row['label'])}</td><td>{esc(i['term'])}</td><td>{_ci(i)}</td>"
                f"<td>{_p(i.get('p_adj'))}</td><td>{esc(i.get('family'))}</td>"
                f"<td>{esc(i['outcome'])}</td></tr>"
            )
    h.append("</table>")
    return "".join(h)
