"""The ``factorial`` section of a verdict: the terms of :mod:`abtui.stats.factorial` per metric
row, each single factor's gain alone and the combination's (from the pair verdicts against the
baseline), the findings in words, and the combination's NO-GO reason.

Shape (the JSON report's top-level ``factorial`` key; docs/ablation.md)::

    {"factors": ["fp8", "spec"],
     "arms": [{"name": "base", "arm": 0, "levels": {"fp8": 0, "spec": 0}}, …],
     "combination": "fp8+spec",
     "design": {"k": 2, "scale": "log ratio", "families": {…}, "resampling": "…"},
     "rows": [{"key": "tpot.p50", "label": "P50 TPOT", "lower_is_better": true,
               "values": {"base": …, "fp8": …},              # each arm's statistic
               "alone": {"fp8": {"ratio", "lo", "hi"}, …},    # each factor on the baseline
               "combined": {"ratio", "lo", "hi"},             # the full combination on it
               "predicted": {"product": …, "sum": …},         # from the single gains
               "main": [{term, ratio, lo, hi, p, p_adj, family, delta, outcome}, …],
               "interactions": [{term, ratio, lo, hi, log, log_lo, log_hi, p, p_adj,
                                 family, delta, outcome, note, finding}, …]}, …],
     "quality": null | {                                      # when quality suites ran
         "scale", "interval", "family",                       # what the numbers are, in words
         "suites": [{"suite": "niah", "label", "n": 300,      # items scored on every arm
                     "clusters", "unpaired", "margin": 0.01,
                     "accuracy": {"base": 0.93, "fp8": …},    # on those items
                     "alone": {"fp8": {"delta", "lo", "hi", "n", "state"}, …},  # pair gates
                     "combined": {"delta", "lo", "hi", "n", "state"},
                     "predicted": {"sum": …},                 # the single changes added
                     "only_combination": {"lost", "gained", "lost_items", "gained_items"},
                     "main": [{term, estimate, lo, hi, p, p_adj, family, outcome, …}, …],
                     "interactions": [{term, estimate, lo, hi, p, p_adj, family, margin,
                                       outcome, state, items_needed, counts, deff, n,
                                       note, finding}, …]}, …],
         "findings": [...], "no_go": [...], "undecided": [...]},   # sentences
     "findings": ["fp8+spec: P50 TPOT −18.0% [−21.0%, −15.0%] …"],  # latency and quality
     "no_go": "the combination … is worse than the best single factor …" | null,
     "error": null | "why no factorial could be computed"}

The accuracy terms (:mod:`abtui.quality.factorial`) are fractions (0.01 = 1 pp); ``state`` of
an interaction is ``fail`` (a NO-GO reason for the combination, in ``quality.no_go``),
``clear`` or ``undecided`` (said in ``quality.undecided`` and the combination's reasons).
"""

from __future__ import annotations

import math

from abtui.jsonable import json_ready
from abtui.quality import factorial as quality_factorial
from abtui.stats import factorial as stats_factorial
from abtui.stats.labels import label, pct
from abtui.stats.reasons import Code, Reason
from abtui.verdict.resolved import Policy

_TERM_FIELDS = (
    "term",
    "ratio",
    "lo",
    "hi",
    "log",
    "log_lo",
    "log_hi",
    "p",
    "p_adj",
    "family",
    "delta",
    "outcome",
    "significant",
    "block_len",
    "n",
    "note",
)


def _ci(e) -> dict | None:
    return None if e is None else {"ratio": e.ratio, "lo": e.lo, "hi": e.hi, "outcome": e.outcome}


def summarize_factorial(
    table,
    names: list[str],
    design: stats_factorial.Design,
    spec: dict,
    pol: Policy,
    pairs: list,
    ladder: list,
    *,
    noise_floor=None,
    usd=None,
    quality: list[dict] | None = None,
) -> dict:
    """The ``factorial`` dict (module docstring) of a session whose arms form ``design``;
    ``quality``: the session's stored quality rows (the accuracy terms, per suite)."""
    terms, point = stats_factorial.estimate(
        table,
        design,
        spec.get("slo") or {},
        resamples=int(pol.resamples),
        seed=int(pol.seed),
        usd=usd,
    )
    q_suites, q_terms = (
        quality_factorial.estimate(quality or [], design, spec.get("quality"))
        if quality
        else ([], [])
    )
    for qt in q_terms:
        qt.family = quality_factorial.family_of(qt)
    stats_factorial.decide_terms(terms, pol, noise_floor, extra=q_terms)
    quality_factorial.decide(q_terms, float(pol.alpha))
    by_pair = {p.b: p for p in pairs}
    singles = design.singles()
    rows: dict[str, dict] = {}
    for t in terms:
        row = rows.get(t.key)
        if row is None:
            comp = {
                i: by_pair[i].comparison.get(t.key) if i in by_pair else None
                for i in [*singles, design.full]
            }
            alone = {names[i]: _ci(comp[i]) for i in singles}
            ratios = [comp[i].ratio if comp[i] is not None else math.nan for i in singles]
            row = rows[t.key] = {
                "key": t.key,
                "label": label(t.key),
                "lower_is_better": t.lower_is_better,
                "values": {names[i]: v for i, v in point.get(t.key, {}).items()},
                "alone": alone,
                "combined": _ci(comp[design.full]),
                "predicted": {"product": math.prod(1 + r for r in ratios) - 1, "sum": sum(ratios)},
                "main": [],
                "interactions": [],
            }
        entry = {f: getattr(t, f) for f in _TERM_FIELDS}
        row["main" if t.order == 1 else "interactions"].append(entry)
    out_rows = list(rows.values())
    no_go = stats_factorial.combination_worse(design, ladder, names, pol.primary)
    qual = _quality(q_suites, design, names, by_pair) if q_suites else None
    first = {pol.primary, *pol.guardrails}
    finds = findings(out_rows, design, names, first)
    if qual:  # after the primary's and guardrails' findings, before the breakdown rows'
        at = sum(
            1 for r in out_rows if r["key"] in first for i in r["interactions"] if i["finding"]
        )
        finds[at:at] = qual["findings"]
    return json_ready(
        {
            "factors": design.factors,
            "arms": [
                {"name": names[i], "arm": i, "levels": dict(zip(design.factors, lv, strict=True))}
                for lv, i in sorted(design.arm_of.items(), key=lambda kv: kv[1])
            ],
            "combination": names[design.full],
            "design": {
                "k": design.k,
                "arms": 2**design.k,
                "scale": "log ratio",
                "resampling": "the pair comparisons' units, one weight matrix for every arm",
                "families": {
                    "interaction": "Holm over the interactions of the primary and guardrails",
                    "interaction-breakdown": "Benjamini–Hochberg over the other rows' interactions",
                    "main": "Holm over the main effects of the primary and guardrails",
                    "main-breakdown": "Benjamini–Hochberg over the other rows' main effects",
                },
            },
            "rows": out_rows,
            "quality": qual,
            "findings": finds,
            "no_go": no_go,
            "error": None,
        }
    )


def _gate(pair, suite: str) -> dict | None:
    """A pair verdict's accuracy change on ``suite`` (its gate's interval and state)."""
    q = getattr(pair, "quality", None) or {}
    row = next((r for r in q.get("suites") or [] if r["suite"] == suite), None)
    if row is None:
        return None
    gate = next((g for g in q.get("gates") or [] if g["suite"] == suite), {})
    return {
        "delta": row["delta"],
        "lo": row["lo"],
        "hi": row["hi"],
        "n": row["n"],
        "state": gate.get("state"),
    }


def _quality(
    suites: list[dict], design: stats_factorial.Design, names: list[str], by_pair: dict
) -> dict:
    """The ``quality`` part of the factorial dict: per suite the accuracy of each arm, each
    factor alone and the combination against the baseline (the pair verdicts' gates), the
    predicted sum, the combination-only flips, the terms; and the sentences."""
    singles = [names[i] for i in design.singles()]
    combo = names[design.full]
    out, finds, no_go, undecided = [], [], [], []
    for s in suites:
        alone = {names[i]: _gate(by_pair.get(i), s["suite"]) for i in design.singles()}
        combined = _gate(by_pair.get(design.full), s["suite"])
        deltas = [(alone[n] or {}).get("delta") for n in singles]
        main, inters = [], []
        for t in s["terms"]:
            d = t.to_dict()
            if t.order > 1:
                f, ng, und = quality_factorial.sentences(
                    s, t, combo, alone, combined, singles, design.k
                )
                d["finding"] = t.finding = f
                finds += [f] if f else []
                no_go += [ng] if ng else []
                undecided += [und] if und else []
            (main if t.order == 1 else inters).append(d)
        out.append(
            {
                "suite": s["suite"],
                "label": f"{s['suite']} accuracy",
                "n": s["n"],
                "clusters": s.get("clusters", 0),
                "unpaired": s["unpaired"],
                "margin": s["margin"],
                "accuracy": {names[a]: v for a, v in s["accuracy"].items()},
                "alone": alone,
                "combined": combined,
                "predicted": {"sum": sum(deltas) if all(x is not None for x in deltas) else None},
                "only_combination": s["only_combination"],
                "main": main,
                "interactions": inters,
            }
        )
    return {
        "scale": "accuracy, percentage points (per-item contrasts of 0/1 answers)",
        "interval": "score interval of the mean contrast (Tango's, generalised), items of one "
        "context counted once per design effect",
        "family": "interactions join the `interaction` Holm family, main effects `main`",
        "suites": out,
        "findings": finds,
        "no_go": no_go,
        "undecided": undecided,
    }


def combination_reasons(fac: dict | None) -> tuple[list[Reason], list[Reason]]:
    """``(no_go, notes)`` of the factorial for the full combination's pair verdict: the
    combination worse than the best single factor, and each quality interaction beyond the
    margin, are NO-GO reasons; an undecided quality interaction is said (it does not block GO:
    the combination's own quality gates decide that)."""
    if not fac or fac.get("error"):
        return [], []
    q = fac.get("quality") or {}
    no_go = [Reason(Code.COMBINATION_WORSE, fac["no_go"])] if fac.get("no_go") else []
    no_go += [Reason(Code.INTERACTION, r) for r in q.get("no_go") or []]
    return no_go, [Reason(Code.INTERACTION, r) for r in q.get("undecided") or []]


def headline_keys(fac: dict, policy: Policy) -> list[str]:
    """The rows a report shows first: the primary, then the guardrails, as measured."""
    present = {r["key"] for r in fac.get("rows") or []}
    keys = [policy.primary, *policy.guardrails]
    return [k for k in dict.fromkeys(keys) if k in present]


def finding(row: dict, inter: dict, design_k: int, names_alone: list[str], combo: str) -> str:
    """One interaction in words (significant and beyond δ)."""
    worse = inter["outcome"] == stats_factorial.ANTAGONISTIC
    tail = (
        "less than its parts multiplied (antagonistic)"
        if worse
        else "more than its parts multiplied (synergistic)"
    )
    ci = f"{pct(inter['ratio'])} [{pct(inter['lo'])}, {pct(inter['hi'])}]"
    if design_k == 2:
        comb = row.get("combined") or {}
        alone = row.get("alone") or {}
        parts = ", ".join(
            f"{n} alone {pct((alone.get(n) or {}).get('ratio'))}" for n in names_alone
        )
        pred = row["predicted"]
        return (
            f"{combo}: {row['label']} {pct(comb.get('ratio'))} [{pct(comb.get('lo'))}, "
            f"{pct(comb.get('hi'))}] against the baseline; {parts} would give "
            f"{pct(pred['product'])} together ({pct(pred['sum'])} as a sum): interaction "
            f"{ci}, the combination gains {tail}"
        )
    return f"{inter['term']}: {row['label']} interaction {ci}: the combination gains {tail}"


def findings(
    rows: list[dict], design: stats_factorial.Design, names: list[str], first: set[str]
) -> list[str]:
    out = []
    ordered = sorted(rows, key=lambda r: r["key"] not in first)
    for row in ordered:
        for inter in row["interactions"]:
            inter["finding"] = None
            if inter["outcome"] in (stats_factorial.ANTAGONISTIC, stats_factorial.SYNERGISTIC):
                inter["finding"] = finding(
                    row, inter, design.k, [names[i] for i in design.singles()], names[design.full]
                )
                out.append(inter["finding"])
    return out
