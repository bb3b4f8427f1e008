"""The ``factorial`` section of a verdict: the terms of :mod:`abtui.stats.factorial` per metric
row, each single factor's gain alone and the combination's (from the pair verdicts against the
baseline), the findings in words, and the combination's NO-GO reason.

A verdict holds it as a :class:`Factorial` (frozen records: :class:`FactorialRow` with its
:class:`LatencyTerm` s, :class:`FactorialArm`, :class:`FactorialQuality` with its
:class:`AccuracySuite` s); a non-finite figure stays NaN or inf there and is ``null`` in its
:meth:`Factorial.to_dict`, whose shape (the JSON report's top-level ``factorial`` key;
docs/ablation.md) is::

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
from dataclasses import dataclass, fields, replace

from abtui.jsonable import json_ready
from abtui.quality import factorial as quality_factorial
from abtui.quality.factorial import OnlyCombination
from abtui.stats import factorial as stats_factorial
from abtui.stats.labels import label, pct
from abtui.stats.reasons import Code, Reason
from abtui.verdict.resolved import Policy

_DESIGN_TEXT = {
    "scale": "log ratio",
    "resampling": "the pair comparisons' units, one weight matrix for every arm",
    "families": {
        "interaction": "Holm over the interactions of the primary and guardrails",
        "interaction-breakdown": "Benjamini–Hochberg over the other rows' interactions",
        "main": "Holm over the main effects of the primary and guardrails",
        "main-breakdown": "Benjamini–Hochberg over the other rows' main effects",
    },
}
_QUALITY_TEXT = {
    "scale": "accuracy, percentage points (per-item contrasts of 0/1 answers)",
    "interval": "score interval of the mean contrast (Tango's, generalised), items of one "
    "context counted once per design effect",
    "family": "interactions join the `interaction` Holm family, main effects `main`",
}


def _read(cls, d: dict):
    """A record of ``cls`` from its stored :meth:`to_dict` (flat fields only): ``null`` in a
    field that is always a float back as NaN; keys the JSON leaves out take their default."""
    kw = {}
    for f in fields(cls):
        if f.name in d:
            v = d[f.name]
            kw[f.name] = math.nan if v is None and f.type == "float" else v
    return cls(**kw)


def _flat(rec) -> dict:
    return json_ready({f.name: getattr(rec, f.name) for f in fields(rec)})


@dataclass(frozen=True, slots=True)
class Span:
    """An arm's change against the baseline (its pair verdict's effect on one row)."""

    ratio: float
    lo: float
    hi: float
    outcome: str

    def to_dict(self) -> dict:
        return _flat(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> Span | None:
        return None if d is None else _read(cls, d)


@dataclass(frozen=True, slots=True)
class LatencyTerm:
    """A main effect or an interaction of one metric row (:class:`abtui.stats.factorial.Term`
    decided); ``finding``: an interaction's sentence when it is significant and beyond δ."""

    term: str
    ratio: float
    lo: float
    hi: float
    log: float
    log_lo: float
    log_hi: float
    p: float
    p_adj: float
    family: str
    delta: float
    outcome: str
    significant: bool
    block_len: int
    n: int
    note: str
    finding: str | None = None

    @classmethod
    def of(cls, t: stats_factorial.Term) -> LatencyTerm:
        return cls(**{f.name: getattr(t, f.name) for f in fields(cls) if f.name != "finding"})

    def to_dict(self, with_finding: bool) -> dict:
        d = _flat(self)
        if not with_finding:  # a main effect has no finding
            del d["finding"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> LatencyTerm:
        return _read(cls, d)


@dataclass(frozen=True, slots=True)
class FactorialRow:
    """One metric row: each arm's statistic, each factor alone and the combination against the
    baseline, what the single gains predict, and the terms."""

    key: str
    label: str
    lower_is_better: bool
    values: dict[str, float]  # arm name → its statistic
    alone: dict[str, Span | None]  # single-factor arm → its change
    combined: Span | None
    product: float  # the single gains multiplied
    sum: float  # and added
    main: tuple[LatencyTerm, ...]
    interactions: tuple[LatencyTerm, ...]

    def to_dict(self) -> dict:
        return json_ready(
            {
                "key": self.key,
                "label": self.label,
                "lower_is_better": self.lower_is_better,
                "values": dict(self.values),
                "alone": {n: s and s.to_dict() for n, s in self.alone.items()},
                "combined": self.combined and self.combined.to_dict(),
                "predicted": {"product": self.product, "sum": self.sum},
                "main": [t.to_dict(False) for t in self.main],
                "interactions": [t.to_dict(True) for t in self.interactions],
            }
        )

    @classmethod
    def from_dict(cls, d: dict) -> FactorialRow:
        nan = lambda v: math.nan if v is None else v  # noqa: E731
        return cls(
            d["key"],
            d["label"],
            d["lower_is_better"],
            {n: nan(v) for n, v in d["values"].items()},
            {n: Span.from_dict(s) for n, s in d["alone"].items()},
            Span.from_dict(d["combined"]),
            nan(d["predicted"]["product"]),
            nan(d["predicted"]["sum"]),
            tuple(LatencyTerm.from_dict(t) for t in d["main"]),
            tuple(LatencyTerm.from_dict(t) for t in d["interactions"]),
        )


@dataclass(frozen=True, slots=True)
class FactorialArm:
    name: str
    arm: int  # its index in the session
    levels: dict[str, int]  # factor → 0 / 1

    @property
    def on(self) -> int:
        """How many factors the arm switches on."""
        return sum(self.levels.values())

    def to_dict(self) -> dict:
        return {"name": self.name, "arm": self.arm, "levels": dict(self.levels)}

    @classmethod
    def from_dict(cls, d: dict) -> FactorialArm:
        return cls(d["name"], d["arm"], dict(d["levels"]))


@dataclass(frozen=True, slots=True)
class AccuracyGate:
    """A pair verdict's accuracy change on one suite (its gate's interval and state)."""

    delta: float
    lo: float
    hi: float
    n: int
    state: str | None

    def to_dict(self) -> dict:
        return _flat(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> AccuracyGate | None:
        return None if d is None else _read(cls, d)


@dataclass(frozen=True, slots=True)
class AccuracyTerm:
    """A decided :class:`abtui.quality.factorial.QualityTerm` (fractions; reported in pp);
    ``counts``: contrast value (as written, ``"-1"``) → items."""

    suite: str
    term: str
    order: int
    n: int
    clusters: int
    deff: float
    estimate: float
    lo: float
    hi: float
    p: float
    margin: float
    vmin: float
    vmax: float
    counts: dict[str, float]
    p_adj: float
    family: str
    outcome: str
    state: str
    items_needed: int | None
    note: str
    finding: str | None

    @classmethod
    def of(cls, t) -> AccuracyTerm:
        return _read(cls, t.to_dict())

    def to_dict(self) -> dict:
        return _flat(self)

    @classmethod
    def from_dict(cls, d: dict) -> AccuracyTerm:
        return _read(cls, d)


@dataclass(frozen=True, slots=True)
class AccuracySuite:
    """One quality suite across the arms (the items scored on every arm)."""

    suite: str
    label: str
    n: int
    clusters: int
    unpaired: int
    margin: float
    accuracy: dict[str, float]  # arm name → accuracy
    alone: dict[str, AccuracyGate | None]
    combined: AccuracyGate | None
    predicted_sum: float | None  # the single changes added; None: one is not measured
    only_combination: OnlyCombination | None
    main: tuple[AccuracyTerm, ...]
    interactions: tuple[AccuracyTerm, ...]

    def to_dict(self) -> dict:
        oc = self.only_combination
        return json_ready(
            {
                "suite": self.suite,
                "label": self.label,
                "n": self.n,
                "clusters": self.clusters,
                "unpaired": self.unpaired,
                "margin": self.margin,
                "accuracy": dict(self.accuracy),
                "alone": {n: g and g.to_dict() for n, g in self.alone.items()},
                "combined": self.combined and self.combined.to_dict(),
                "predicted": {"sum": self.predicted_sum},
                "only_combination": oc and oc.to_dict(),
                "main": [t.to_dict() for t in self.main],
                "interactions": [t.to_dict() for t in self.interactions],
            }
        )

    @classmethod
    def from_dict(cls, d: dict) -> AccuracySuite:
        return cls(
            d["suite"],
            d["label"],
            d["n"],
            d["clusters"],
            d["unpaired"],
            d["margin"],
            dict(d["accuracy"]),
            {n: AccuracyGate.from_dict(g) for n, g in d["alone"].items()},
            AccuracyGate.from_dict(d["combined"]),
            d["predicted"]["sum"],
            OnlyCombination.from_dict(d["only_combination"]),
            tuple(AccuracyTerm.from_dict(t) for t in d["main"]),
            tuple(AccuracyTerm.from_dict(t) for t in d["interactions"]),
        )


@dataclass(frozen=True, slots=True)
class FactorialQuality:
    """The accuracy terms per suite and their sentences: findings, NO-GO reasons for the
    combination, and the undecided interactions."""

    suites: tuple[AccuracySuite, ...]
    findings: tuple[str, ...]
    no_go: tuple[str, ...]
    undecided: tuple[str, ...]

    def to_dict(self) -> dict:
        return {
            **_QUALITY_TEXT,
            "suites": [s.to_dict() for s in self.suites],
            "findings": list(self.findings),
            "no_go": list(self.no_go),
            "undecided": list(self.undecided),
        }

    @classmethod
    def from_dict(cls, d: dict | None) -> FactorialQuality | None:
        if d is None:
            return None
        return cls(
            tuple(AccuracySuite.from_dict(s) for s in d["suites"]),
            tuple(d["findings"]),
            tuple(d["no_go"]),
            tuple(d["undecided"]),
        )


@dataclass(frozen=True, slots=True)
class Factorial:
    """The ``factorial`` section of a verdict (module docstring); ``error``: why none could be
    computed (then only ``factors`` is set)."""

    factors: tuple[str, ...]
    arms: tuple[FactorialArm, ...] = ()
    combination: str = ""
    rows: tuple[FactorialRow, ...] = ()
    quality: FactorialQuality | None = None
    findings: tuple[str, ...] = ()
    no_go: str | None = None
    error: str | None = None

    @classmethod
    def failed(cls, factors, why: str) -> Factorial:
        return cls(tuple(factors), error=why)

    @property
    def k(self) -> int:
        return len(self.factors)

    @property
    def singles(self) -> list[str]:
        """The single-factor arms' names, in the session's order."""
        return [a.name for a in self.arms if a.on == 1]

    def row(self, key: str) -> FactorialRow | None:
        return next((r for r in self.rows if r.key == key), None)

    def to_dict(self) -> dict:
        if self.error:
            return {"factors": list(self.factors), "error": self.error, "rows": [], "findings": []}
        return {
            "factors": list(self.factors),
            "arms": [a.to_dict() for a in self.arms],
            "combination": self.combination,
            "design": {"k": self.k, "arms": 2**self.k, **_DESIGN_TEXT},
            "rows": [r.to_dict() for r in self.rows],
            "quality": self.quality and self.quality.to_dict(),
            "findings": list(self.findings),
            "no_go": self.no_go,
            "error": None,
        }

    @classmethod
    def from_dict(cls, d: dict | None) -> Factorial | None:
        """A stored :meth:`to_dict`."""
        if d is None:
            return None
        if d.get("error"):
            return cls.failed(d["factors"], d["error"])
        return cls(
            tuple(d["factors"]),
            tuple(FactorialArm.from_dict(a) for a in d["arms"]),
            d["combination"],
            tuple(FactorialRow.from_dict(r) for r in d["rows"]),
            FactorialQuality.from_dict(d.get("quality")),
            tuple(d["findings"]),
            d.get("no_go"),
        )


def _ci(e) -> Span | None:
    return None if e is None else Span(e.ratio, e.lo, e.hi, e.outcome)


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
) -> Factorial:
    """The :class:`Factorial` of a session whose arms form ``design``; ``quality``: the
    session's stored quality rows (the accuracy terms, per suite)."""
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
    rows = _rows(terms, point, design, names, by_pair)
    no_go = stats_factorial.combination_worse(design, ladder, names, pol.primary)
    qual = _quality(q_suites, design, names, by_pair) if q_suites else None
    first = {pol.primary, *pol.guardrails}
    rows, finds = findings(rows, design, names, first)
    if qual:  # after the primary's and guardrails' findings, before the breakdown rows'
        at = sum(1 for r in rows if r.key in first for i in r.interactions if i.finding)
        finds[at:at] = qual.findings
    return Factorial(
        tuple(design.factors),
        tuple(
            FactorialArm(names[i], i, dict(zip(design.factors, lv, strict=True)))
            for lv, i in sorted(design.arm_of.items(), key=lambda kv: kv[1])
        ),
        names[design.full],
        tuple(rows),
        qual,
        tuple(finds),
        no_go,
    )


def _rows(terms: list, point: dict, design, names: list[str], by_pair: dict) -> list[FactorialRow]:
    """The metric rows, in the order of their first term, without findings."""
    singles = design.singles()
    heads: dict[str, FactorialRow] = {}
    main: dict[str, list] = {}
    inters: dict[str, list] = {}
    for t in terms:
        if t.key not in heads:
            comp = {
                i: by_pair[i].comparison.get(t.key) if i in by_pair else None
                for i in [*singles, design.full]
            }
            ratios = [comp[i].ratio if comp[i] is not None else math.nan for i in singles]
            heads[t.key] = FactorialRow(
                t.key,
                label(t.key),
                t.lower_is_better,
                {names[i]: v for i, v in point.get(t.key, {}).items()},
                {names[i]: _ci(comp[i]) for i in singles},
                _ci(comp[design.full]),
                math.prod(1 + r for r in ratios) - 1,
                sum(ratios),
                (),
                (),
            )
            main[t.key], inters[t.key] = [], []
        (main if t.order == 1 else inters)[t.key].append(LatencyTerm.of(t))
    return [
        replace(r, main=tuple(main[k]), interactions=tuple(inters[k])) for k, r in heads.items()
    ]


def _gate(pair, suite: str) -> AccuracyGate | None:
    """A pair verdict's accuracy change on ``suite`` (its gate's interval and state)."""
    q = getattr(pair, "quality", None)
    row = q.suite(suite) if q else None
    if row is None:
        return None
    gate = q.gate(suite)
    return AccuracyGate(row.delta, row.lo, row.hi, row.n, gate.state if gate else None)


def _quality(
    suites: list[quality_factorial.SuiteEstimate],
    design: stats_factorial.Design,
    names: list[str],
    by_pair: dict,
) -> FactorialQuality:
    """The quality part of the factorial: per suite the accuracy of each arm, each factor alone
    and the combination against the baseline (the pair verdicts' gates), the predicted sum, the
    combination-only flips, the terms; and the sentences."""
    singles = [names[i] for i in design.singles()]
    combo = names[design.full]
    out, finds, no_go, undecided = [], [], [], []
    for s in suites:
        alone = {names[i]: _gate(by_pair.get(i), s.suite) for i in design.singles()}
        combined = _gate(by_pair.get(design.full), s.suite)
        deltas = [
            g.delta if g and math.isfinite(g.delta) else None for g in map(alone.get, singles)
        ]
        main, inters = [], []
        for t in s.terms:
            if t.order > 1:
                f, ng, und = quality_factorial.sentences(
                    s, t, combo, alone, combined, singles, design.k
                )
                t.finding = f
                finds += [f] if f else []
                no_go += [ng] if ng else []
                undecided += [und] if und else []
            (main if t.order == 1 else inters).append(AccuracyTerm.of(t))
        out.append(
            AccuracySuite(
                s.suite,
                f"{s.suite} accuracy",
                s.n,
                s.clusters,
                s.unpaired,
                s.margin,
                {names[a]: v for a, v in s.accuracy.items()},
                alone,
                combined,
                sum(deltas) if all(x is not None for x in deltas) else None,
                s.only_combination,
                tuple(main),
                tuple(inters),
            )
        )
    return FactorialQuality(tuple(out), tuple(finds), tuple(no_go), tuple(undecided))


def combination_reasons(fac: Factorial | None) -> tuple[list[Reason], list[Reason]]:
    """``(no_go, notes)`` of the factorial for the full combination's pair verdict: the
    combination worse than the best single factor, and each quality interaction beyond the
    margin, are NO-GO reasons; an undecided quality interaction is said (it does not block GO:
    the combination's own quality gates decide that)."""
    if not fac or fac.error:
        return [], []
    q = fac.quality
    no_go = [Reason(Code.COMBINATION_WORSE, fac.no_go)] if fac.no_go else []
    no_go += [Reason(Code.INTERACTION, r) for r in (q.no_go if q else ())]
    return no_go, [Reason(Code.INTERACTION, r) for r in (q.undecided if q else ())]


def headline_keys(fac: Factorial, policy: Policy) -> list[str]:
    """The rows a report shows first: the primary, then the guardrails, as measured."""
    present = {r.key for r in fac.rows}
    keys = [policy.primary, *policy.guardrails]
    return [k for k in dict.fromkeys(keys) if k in present]


def finding(
    row: FactorialRow, inter: LatencyTerm, design_k: int, names_alone: list[str], combo: str
) -> str:
    """One interaction in words (significant and beyond δ)."""
    worse = inter.outcome == stats_factorial.ANTAGONISTIC
    tail = (
        "less than its parts multiplied (antagonistic)"
        if worse
        else "more than its parts multiplied (synergistic)"
    )
    ci = f"{pct(inter.ratio)} [{pct(inter.lo)}, {pct(inter.hi)}]"
    if design_k == 2:
        comb = row.combined
        parts = ", ".join(
            f"{n} alone {pct(a.ratio if (a := row.alone.get(n)) else None)}" for n in names_alone
        )
        return (
            f"{combo}: {row.label} {pct(comb and comb.ratio)} [{pct(comb and comb.lo)}, "
            f"{pct(comb and comb.hi)}] against the baseline; {parts} would give "
            f"{pct(row.product)} together ({pct(row.sum)} as a sum): interaction "
            f"{ci}, the combination gains {tail}"
        )
    return f"{inter.term}: {row.label} interaction {ci}: the combination gains {tail}"


def findings(
    rows: list[FactorialRow], design: stats_factorial.Design, names: list[str], first: set[str]
) -> tuple[list[FactorialRow], list[str]]:
    """The rows with each interaction's finding set (significant and beyond δ), and the
    findings in order: the primary's and guardrails' rows first."""
    out: list[str] = []
    by_key = {}
    singles = [names[i] for i in design.singles()]
    for row in sorted(rows, key=lambda r: r.key not in first):
        inters = []
        for inter in row.interactions:
            f = None
            if inter.outcome in (stats_factorial.ANTAGONISTIC, stats_factorial.SYNERGISTIC):
                f = finding(row, inter, design.k, singles, names[design.full])
                out.append(f)
            inters.append(replace(inter, finding=f))
        by_key[row.key] = replace(row, interactions=tuple(inters))
    return [by_key[r.key] for r in rows], out
