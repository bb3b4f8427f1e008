"""GO / NO-GO / INCONCLUSIVE for each candidate against the baseline (docs/methods.md §7).

For each candidate (and, with several, each candidate against the previous one: the ablation
ladder, reported but not part of the exit code):

1. :func:`abtui.stats.effects.compare` gives every effect with its CI and bootstrap p-value.
2. δ per row: ``policy.delta`` (means, medians, rates, cost) or ``policy.delta_tail`` (P90/P95/P99),
   raised to the A/A noise floor of that row when ``policy.noise_floor`` names an A/A session.
3. Families: the primary objective and the guardrails are the *primary* family (Holm); every other
   row is a breakdown (Benjamini–Hochberg). Rows refused by the small-sample tail rule are left
   out of both.
4. Each row gets IMPROVED / REGRESSED / EQUIVALENT / INCONCLUSIVE (:mod:`abtui.stats.decide`).
5. The pair's result:

   - **NO-GO** when a guardrail or the primary REGRESSED, or the candidate's error rate is
     significantly higher (one-sided Fisher exact, p < α);
   - **GO** when the primary IMPROVED, **every guardrail is shown non-inferior** (its CI's
     bound on the worse side lies inside δ: :func:`guardrail_checks`; a guardrail that cannot be
     called yet — a P99 below its small-sample minimum, a CI that reaches past δ, a metric not
     measured — blocks GO, and the reason names it and the n that would decide), and none of
     these holds: a NO-GO reason; a higher error rate at all; a load generator whose lag could
     explain the result (:mod:`abtui.stats.lagguard`: an arm that did not get the offered load,
     or baseline stalls large enough to fake the primary's gain or a guardrail's non-inferiority
     — judged in proportion to the inter-arrival gap, the metric and δ); a session that did not
     complete (the plan was not carried out); a quality suite not shown non-inferior;
   - **INCONCLUSIVE** otherwise, saying what more is needed.

The overall result: NO-GO if any candidate is NO-GO, GO if every candidate is GO, otherwise
INCONCLUSIVE. Exit codes: :data:`EXIT_CODES`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np

from abtui.cost import ArmCost, arm_cost, arm_prices
from abtui.jsonable import json_ready
from abtui.metrics import request as request_metrics
from abtui.metrics.catalogue import latency_keys
from abtui.metrics.keys import unique_ints
from abtui.metrics.table import RequestTable
from abtui.quality.gates import QualityVerdict, evaluate_quality
from abtui.stats import decide, lagguard
from abtui.stats.classical import error_rate_higher_p
from abtui.stats.effects import Comparison, compare
from abtui.stats.labels import describe, label, pct
from abtui.stats.multiple import benjamini_hochberg, holm
from abtui.stats.reasons import Code, Reason, code_of, codes
from abtui.stats.sweep import SweepSummary, sweep_summary
from abtui.store.schema import COMPLETE
from abtui.verdict.comparable import Finding, length_finding, rate_set_notes, usage_finding
from abtui.verdict.resolved import Policy, resolve_policy

if TYPE_CHECKING:
    from abtui.verdict.ablation import Factorial


class Result(StrEnum):
    """A pair's or a session's verdict (a ``str``: the JSON holds the same words)."""

    GO = "GO"
    NO_GO = "NO-GO"
    INCONCLUSIVE = "INCONCLUSIVE"
    CALIBRATED = "CALIBRATED"  # an A/A session without a significant change (verdict.session)


GO, NO_GO, INCONCLUSIVE, CALIBRATED = Result
EXIT_CODES = {GO: 0, NO_GO: 3, INCONCLUSIVE: 4, CALIBRATED: 0}


class GuardState(StrEnum):
    """Where a guardrail stands (:func:`guardrail_checks`)."""

    SHOWN = "shown"  # shown non-inferior
    REGRESSED = "regressed"  # its outcome is REGRESSED: NO-GO
    UNDECIDED = "undecided"  # neither: GO is not possible, the reason says what would decide
    MISSING = "missing"  # not measured in this session


@dataclass(frozen=True, slots=True)
class Guardrail:
    """One guardrail's non-inferiority check."""

    key: str
    state: GuardState
    delta: float | None  # its δ (None: not measured)
    bound: float | None  # its CI's bound on the worse side
    samples_needed: int | None  # per arm, when undecided and estimable
    reason: Reason  # why it is not shown (said when it blocks GO)


@dataclass(frozen=True, slots=True)
class ErrorRates:
    """The pair's error rates and whether B's is significantly higher."""

    rate_a: float
    rate_b: float
    p_higher: float  # one-sided Fisher exact


@dataclass(frozen=True, slots=True)
class ArmLoad:
    """One arm's load generator in a pair (:mod:`abtui.stats.lagguard`): its dispatch lag, the
    schedule's mean gap, whether it kept the offered load, and — for the pair's baseline — the
    flattery of each bounded row (how much slower its stalls could make it look; ``None`` where
    a stored verdict's JSON has ``null``, read as the row not bounded)."""

    lag_p99_s: float
    lag_max_s: float
    behind: bool
    gap_s: float
    load_kept: bool | None
    flattery: dict[str, float | None] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The JSON record. JSON has no infinity, so the rows whose flattery is unbounded
        (``inf``: the stalls could account for the whole statistic) are listed under
        ``flattery_unbounded`` beside their ``null``, which alone means "not bounded"."""
        d = json_ready(asdict(self))
        unbounded = sorted(k for k, f in self.flattery.items() if f == math.inf)
        if unbounded:
            d["flattery_unbounded"] = unbounded
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ArmLoad:
        """A stored :meth:`to_dict` (a float's ``null`` back as NaN, ``flattery`` as written,
        the ``flattery_unbounded`` rows back as ``inf``); a key an older verdict lacks reads as
        nothing measured."""
        nan = lambda k: math.nan if d.get(k) is None else d[k]  # noqa: E731
        flattery = dict(d.get("flattery") or {})
        flattery.update(dict.fromkeys(d.get("flattery_unbounded") or [], math.inf))
        return cls(
            nan("lag_p99_s"),
            nan("lag_max_s"),
            bool(d.get("behind")),
            nan("gap_s"),
            d.get("load_kept"),
            flattery,
        )


@dataclass(frozen=True, slots=True)
class PairOutcome:
    """What the policy makes of one pair's comparison (:func:`_pair_result`)."""

    result: Result
    reasons: list[Reason]
    errors: ErrorRates
    generator: dict[str, ArmLoad]  # per arm name
    guardrails: list[Guardrail]


@dataclass
class PairVerdict:
    baseline: str
    candidate: str
    a: int
    b: int
    result: Result
    reasons: list[Reason]
    comparison: Comparison
    errors: ErrorRates
    generator: dict[str, ArmLoad]  # per arm name
    cost: dict[str, ArmCost] | None = None  # per arm name, when a GPU price is given
    quality: QualityVerdict | None = None  # evaluate_quality, when quality was measured
    guardrails: list[Guardrail] | None = None  # guardrail_checks: each one's non-inferiority
    # what makes the pair's speed rows not compare like with like (abtui.verdict.comparable)
    findings: list[Finding] | None = None

    def to_dict(self) -> dict:
        """The JSON pair: each reason's code beside the words (``reason_codes``, one per
        reason, null for one without; ``reason_code`` in each guardrail and finding)."""
        d: dict = {}
        for k, v in asdict(self).items():
            if k != "comparison":
                d[k] = v
            if k == "reasons":
                d["reason_codes"] = codes(self.reasons)
        for g in d["guardrails"] or []:
            g["reason_code"] = code_of(g["reason"])
        if self.findings is not None:
            d["findings"] = [f.to_dict() for f in self.findings]
        if self.cost is not None:
            d["cost"] = {n: c.to_dict() for n, c in self.cost.items()}
        if self.quality is not None:
            d["quality"] = self.quality.to_dict()
        d["comparison"] = self.comparison.to_dict()
        return json_ready(d)


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """Which session a verdict is of: its name, file, load (in words) and arm names, and its
    status. A verdict of a session file has all of them; one of a bare request table (a test's,
    a synthetic one's) only the status, and its JSON only ``status``."""

    name: str | None = None
    path: str | None = None
    load: str | None = None
    arms: tuple[str, ...] | None = None
    status: str | None = None

    def to_dict(self) -> dict:
        """The JSON ``session``: name, path, load and arms when the arms are known, then the
        status."""
        d: dict = {}
        if self.arms is not None:
            d.update(name=self.name, path=self.path, load=self.load, arms=list(self.arms))
        d["status"] = self.status
        return d

    @classmethod
    def from_dict(cls, d: dict) -> SessionInfo:
        arms = d.get("arms")
        return cls(
            d.get("name"),
            d.get("path"),
            d.get("load"),
            None if arms is None else tuple(str(a) for a in arms),
            d.get("status"),
        )


@dataclass
class Verdict:
    result: Result
    pairs: list[PairVerdict]
    ladder: list[PairVerdict]
    policy: Policy
    session: SessionInfo
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    sweep: SweepSummary | None = None  # with two or more load levels
    factorial: Factorial | None = None  # with [ablation] factors

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.result]

    def to_dict(self) -> dict:
        return {
            "result": self.result,
            "exit_code": self.exit_code,
            "created": self.created,
            "policy": self.policy.to_dict(),
            "session": self.session.to_dict(),
            "pairs": [p.to_dict() for p in self.pairs],
            "ladder": [p.to_dict() for p in self.ladder],
            "sweep": json_ready(self.sweep.to_dict()) if self.sweep else None,
            "factorial": self.factorial.to_dict() if self.factorial else None,
        }


def apply_policy(
    comp: Comparison,
    policy: Policy,
    noise_floor: dict[str, float] | None = None,
    not_comparable: dict[str, str] | None = None,
) -> None:
    """Set δ, family, corrected p and outcome on every row of ``comp`` (in place). Rows in
    ``not_comparable`` (key → why: :mod:`abtui.verdict.comparable`) are not called: outside
    their family, INCONCLUSIVE, the reason their note."""
    not_comparable = not_comparable or {}
    primary_keys = {policy.primary, *policy.guardrails}
    alpha = policy.alpha
    n_min = {e.key: min(e.n_a, e.n_b) for e in comp.effects}
    callable_rows = []
    for e in comp.effects:
        base = policy.delta_tail if e.stat in decide.TAIL_Q else policy.delta
        e.delta = max(base, (noise_floor or {}).get(e.key.partition("@")[0], 0.0))  # @…: base row
        e.family = "primary" if e.key in primary_keys else "breakdown"
        if (
            decide.callable_row(n_min[e.key], e.stat, e.n_eff, e.min_eff, e.paired)
            and math.isfinite(e.p)
            and e.key not in not_comparable
        ):
            callable_rows.append(e)
    for fam, adjust in (("primary", holm), ("breakdown", benjamini_hochberg)):
        rows = [e for e in callable_rows if e.family == fam]
        for e, p in zip(rows, adjust([e.p for e in rows]), strict=True):
            e.p_adj = float(p)
    for e in comp.effects:
        d = decide.decide(
            e.ratio,
            e.lo,
            e.hi,
            e.p_adj if math.isfinite(e.p_adj) else None,
            e.delta,
            lower_is_better=e.lower_is_better,
            n=n_min[e.key],
            stat=e.stat,
            alpha=alpha,
            n_eff=e.n_eff,
            min_eff=e.min_eff,
            paired=e.paired,
        )
        e.outcome, e.significant, e.samples_needed, e.note = (
            d.outcome,
            d.significant,
            d.samples_needed,
            d.note,
        )
        if e.key in not_comparable:
            e.outcome, e.significant, e.samples_needed = decide.INCONCLUSIVE, False, None
            e.note = not_comparable[e.key]


def guardrail_checks(
    comp: Comparison, policy: Policy, not_comparable: dict[str, str] | None = None
) -> list[Guardrail]:
    """Each guardrail (other than the primary) and whether it was **shown non-inferior**
    (:func:`abtui.stats.decide.non_inferiority`): ``state`` is ``shown``, ``regressed`` (its
    outcome is REGRESSED: NO-GO), ``undecided`` (neither: GO is not possible, the reason says
    what would decide; a row in ``not_comparable`` is never shown) or ``missing`` (not measured
    in this session)."""
    out = []
    not_comparable = not_comparable or {}
    for key in dict.fromkeys(policy.guardrails):
        if key == policy.primary:
            continue
        e = comp.get(key)
        if e is None:
            out.append(
                Guardrail(
                    key,
                    GuardState.MISSING,
                    None,
                    None,
                    None,
                    Reason(
                        Code.GUARDRAIL_MISSING,
                        f"guardrail {label(key)} was not measured in this session",
                    ),
                )
            )
            continue
        d = decide.non_inferiority(
            e.ratio,
            e.lo,
            e.hi,
            e.delta,
            lower_is_better=e.lower_is_better,
            n=min(e.n_a, e.n_b),
            stat=e.stat,
            n_eff=e.n_eff,
            min_eff=e.min_eff,
            paired=e.paired,
        )
        if e.outcome == decide.REGRESSED:
            state = GuardState.REGRESSED
        elif key in not_comparable:
            state = GuardState.UNDECIDED
            d = decide.Decision(decide.INCONCLUSIVE, False, None, not_comparable[key])
        else:
            state = GuardState.SHOWN if d.significant else GuardState.UNDECIDED
        out.append(
            Guardrail(
                key,
                state,
                e.delta,
                e.hi if e.lower_is_better else e.lo,
                d.samples_needed,
                Reason(
                    Code.GUARDRAIL_UNDECIDED,
                    f"guardrail {label(key)} not shown non-inferior: {pct(e.ratio)} "
                    f"[{pct(e.lo)}, {pct(e.hi)}]; {d.note}",
                ),
            )
        )
    return out


def _bound_words(g: Guardrail, lower_is_better: bool) -> str:
    return f"{label(g.key)} {'≤' if lower_is_better else '≥'} {pct(g.bound)}"


def _generator_checks(
    table: RequestTable,
    comp: Comparison,
    policy: Policy,
    names: list[str],
    guards: list[Guardrail],
    machine_note: str | None,
) -> tuple[list[Reason], dict[str, ArmLoad]]:
    """The generator rule (:mod:`abtui.stats.lagguard`): per arm, was the offered load kept; for
    the baseline of the pair, could its stalls have produced the primary's gain or a guardrail's
    non-inferiority. Returns the reasons that forbid GO and the figures per arm."""
    blockers: list[Reason] = []
    generator: dict[str, ArmLoad] = {}
    delta = policy.delta
    measured = {}
    for s, arm in zip(comp.summaries, (comp.a, comp.b), strict=True):
        measured[arm] = (table.arm == arm) & ~table.warmup
        gap = lagguard.mean_gap_s(table, measured[arm])  # no copy of the arm's rows
        kept = lagguard.load_kept(s.lag_p99_s, gap, s.e2e.p50, delta)
        generator[names[arm]] = ArmLoad(s.lag_p99_s, s.lag_max_s, s.generator_behind, gap, kept)
        if not kept:
            blockers.append(
                Reason(
                    Code.LOAD_NOT_KEPT,
                    f"the load generator of {names[arm]} fell behind its schedule: "
                    f"{lagguard.load_words(s.lag_p99_s, gap, s.e2e.p50, delta)}; this run "
                    "cannot be GO",
                )
            )
    sa, name_a = comp.summaries[0], names[comp.a]
    m = measured[comp.a]
    lag = request_metrics.diff_s(table.dispatched_ns[m], table.scheduled_ns[m])
    ok = None  # the baseline's ok rows (positions), found only when a row is to be bounded
    lagged = f"lag P99 {sa.lag_p99_s * 1e3:.1f} ms, max {sa.lag_max_s * 1e3:.1f} ms"
    checks = [(policy.primary, "primary")] + [
        (g.key, "guardrail") for g in guards if g.state == GuardState.SHOWN
    ]
    unbounded, explained = [], []
    shared: dict = {}  # what the rows' bounds share (lagguard.flattery)
    flattery: dict[str, float] = {}  # the baseline's, per bounded row
    for key, role in checks:
        e = comp.get(key)
        if e is None or (role == "primary" and e.outcome != decide.IMPROVED):
            continue
        if ok is None:  # positions, not a copy of the rows (190 B a request: 0.2 s at 10⁶)
            ok = np.flatnonzero(m & table.ok)
        f = lagguard.flattery(table, key, lag, ok, shared)
        if f is None:
            unbounded.append(key)
            continue
        flattery[key] = f
        if f <= 1.0:
            continue
        r, lo, hi = lagguard.adjusted(e.ratio, e.lo, e.hi, f, e.lower_is_better)
        n = min(e.n_a, e.n_b)
        if role == "primary":
            d = decide.decide(
                r,
                lo,
                hi,
                e.p_adj if math.isfinite(e.p_adj) else None,
                e.delta,
                lower_is_better=e.lower_is_better,
                n=n,
                stat=e.stat,
                alpha=policy.alpha,
                n_eff=e.n_eff,
                min_eff=e.min_eff,
                paired=e.paired,
            )
            holds, what = d.outcome == decide.IMPROVED, f"beyond δ {e.delta:.0%}"
        else:
            d = decide.non_inferiority(
                r,
                lo,
                hi,
                e.delta,
                lower_is_better=e.lower_is_better,
                n=n,
                stat=e.stat,
                n_eff=e.n_eff,
                min_eff=e.min_eff,
                paired=e.paired,
            )
            holds, what = d.significant, f"inside δ {e.delta:.0%}"
        if not holds:
            bound, moved = (e.hi, hi) if e.lower_is_better else (e.lo, lo)
            explained.append(
                f"{_times(f)} on {label(key)} (the {role}'s CI bound {pct(bound)} "
                f"would then be {pct(moved)}, not {what})"
            )
    generator[name_a] = replace(generator[name_a], flattery=flattery)
    if explained:
        blockers.append(
            Reason(
                Code.LAG_EXPLAINS,
                f"the load generator of {name_a} fell behind its schedule ({lagged}) by enough "
                "to explain the result: its stalls may have made it look slower by up to "
                + ", ".join(explained)
                + "; this run cannot be GO",
            )
        )
    if unbounded and sa.generator_behind:  # rows not bounded: the fixed limits, as before
        blockers.append(
            Reason(
                Code.LAG_UNBOUNDED,
                f"the load generator of {name_a} fell behind its schedule ({lagged}): its "
                f"latencies include client-side delay, and "
                f"{', '.join(label(k) for k in unbounded)} cannot be bounded for it, so this "
                "run cannot be GO",
            )
        )
    if blockers and machine_note:
        blockers.append(Reason(Code.MACHINE_BUSY, machine_note))
    return blockers, generator


def _times(f: float) -> str:
    return "arbitrarily" if not math.isfinite(f) else f"{(f - 1) * 100:.1f}%"


def _pair_result(
    comp: Comparison,
    policy: Policy,
    status: str,
    names: list[str],
    table: RequestTable,
    machine_note: str | None = None,
    lost: list[str] | None = None,
    findings: list[Finding] | None = None,
) -> PairOutcome:
    sa, sb = comp.summaries
    alpha = policy.alpha
    blockers: list[Reason] = []  # cannot be GO
    no_go: list[Reason] = []
    rate_a = sa.n_errors / sa.sent if sa.sent else math.nan
    rate_b = sb.n_errors / sb.sent if sb.sent else math.nan
    p_err = error_rate_higher_p(sa.n_errors, sa.sent, sb.n_errors, sb.sent)
    errors = ErrorRates(rate_a, rate_b, p_err)
    if sb.sent and sa.sent and rate_b > rate_a:
        text = Reason(
            Code.ERRORS_ROSE,
            f"errors rose: {rate_b:.1%} of requests vs {rate_a:.1%} "
            f"(one-sided Fisher p = {p_err:.3g})",
        )
        (no_go if p_err < alpha else blockers).append(text)
    if status != COMPLETE:
        blockers.append(
            Reason(
                Code.INCOMPLETE,
                f"the session is {status}: the planned workload was not completed",
            )
        )
    for why in lost or []:  # a Ray node died under a generator (abtui.runner.ray.fleet)
        blockers.append(
            Reason(Code.GENERATOR_LOST, f"a load generator was lost: {why}; this run cannot be GO")
        )
    not_comparable: dict[str, str] = {}
    notes: list[Reason] = []  # said, not blocking
    for f in findings or []:
        not_comparable.update(f.notes)
        (blockers if f.blocks else notes).append(f.reason)
    guards = guardrail_checks(comp, policy, not_comparable)
    lag_blockers, generator = _generator_checks(table, comp, policy, names, guards, machine_note)
    blockers += lag_blockers
    for g in guards:
        if g.state == GuardState.REGRESSED:
            no_go.append(
                Reason(
                    Code.GUARDRAIL_REGRESSED,
                    f"{describe(comp.get(g.key))}, beyond the {g.delta:.0%} guardrail",
                )
            )
        elif g.state != GuardState.SHOWN:
            blockers.append(g.reason)
    prim = comp.get(policy.primary)
    if prim is None:
        blockers.append(
            Reason(
                Code.PRIMARY_MISSING,
                f"the primary objective {label(policy.primary)} was not measured "
                "(set SLOs for goodput, a GPU price for cost)",
            )
        )
    elif prim.outcome == decide.REGRESSED:
        no_go.append(
            Reason(
                Code.PRIMARY_REGRESSED,
                f"primary objective {describe(prim)}, beyond δ {prim.delta:.0%}",
            )
        )
    if no_go:
        return PairOutcome(NO_GO, no_go + blockers + notes, errors, generator, guards)
    if prim is not None and prim.outcome == decide.IMPROVED and not blockers:
        reasons = [
            Reason(
                Code.PRIMARY_IMPROVED,
                f"primary objective {describe(prim)}, beyond δ {prim.delta:.0%}",
            )
        ]
        if guards:
            reasons.append(
                Reason(
                    Code.GUARDRAILS_SHOWN,
                    "every guardrail shown non-inferior (its CI's worse bound inside δ): "
                    + ", ".join(_bound_words(g, comp.get(g.key).lower_is_better) for g in guards),
                )
            )
        return PairOutcome(GO, reasons + notes, errors, generator, guards)
    reasons = _primary_words(prim) + blockers + notes
    return PairOutcome(INCONCLUSIVE, reasons, errors, generator, guards)


def _primary_words(prim) -> list[Reason]:
    """What an INCONCLUSIVE pair says first about its primary objective (nothing when it was
    not measured: a blocker says so)."""
    if prim is None:
        return []
    if prim.outcome == decide.IMPROVED:
        return [Reason(Code.PRIMARY_IMPROVED_BUT, f"primary objective {describe(prim)}, but:")]
    if prim.outcome == decide.EQUIVALENT:
        return [
            Reason(
                Code.PRIMARY_EQUIVALENT,
                f"primary objective {describe(prim)}: within ±{prim.delta:.0%}, nothing to gain",
            )
        ]
    more = f" ({prim.note})" if prim.note else ""
    return [Reason(Code.PRIMARY_UNDECIDED, f"primary objective {describe(prim)}{more}")]


def evaluate(
    table: RequestTable,
    arms: list[dict],
    spec: dict,
    *,
    status: str = COMPLETE,
    policy: dict | None = None,
    noise_floor: dict[str, float] | None = None,
    session: SessionInfo | None = None,
    levels: list[dict] | None = None,
    quality: list[dict] | None = None,
    lost: list[str] | None = None,
    machine_note: str | None = None,
) -> Verdict:
    """The verdict of a session: ``arms`` as stored (index 0 = baseline), ``spec`` the resolved
    spec dict (SLOs, cost, policy). ``policy`` overrides ``spec["policy"]``. ``machine_note``:
    what the machine was doing while measuring (:func:`abtui.runner.machine.machine_words`),
    added to the reasons when the generator rule forbids GO."""
    pol = resolve_policy(policy if policy is not None else spec.get("policy"))
    slo = spec.get("slo") or {}
    names = [a["name"] for a in arms]
    prices = arm_prices(spec, len(arms))
    usd = [p * g for p, g in prices] if prices else None

    def pair(a: int, b: int) -> PairVerdict:
        comp = compare(
            table,
            a,
            b,
            slo,
            resamples=int(pol.resamples),
            seed=int(pol.seed),
            prices=(usd[a], usd[b]) if usd else None,
            metrics=latency_keys(table, (pol.primary, *pol.guardrails)),
        )
        findings = [
            f
            for f in (
                length_finding(comp, pol, (names[a], names[b])),
                usage_finding(table, comp, names),
            )
            if f
        ]
        not_comparable = {k: v for f in findings for k, v in f.notes.items()}
        # throughput under open-loop arrivals: the design sets it (no call, nothing to extrapolate)
        fixed = {k: v for k, v in rate_set_notes(spec.get("load")).items() if comp.get(k)}
        apply_policy(comp, pol, noise_floor, fixed | not_comparable)
        out = _pair_result(comp, pol, status, names, table, machine_note, lost, findings)
        result, reasons = out.result, out.reasons
        qual = evaluate_quality(quality or [], a, b, spec.get("quality"))
        if qual and qual.no_go:  # a quality gate failed: NO-GO whatever the latencies say
            result = NO_GO
            reasons = [Reason(Code.QUALITY_NO_GO, r) for r in qual.no_go] + reasons
        elif qual and qual.undecided:  # quality not shown non-inferior: cannot be GO
            if result == GO:
                but = Reason(Code.PRIMARY_IMPROVED_BUT, reasons[0].rstrip(":") + ", but:")
                result, reasons = INCONCLUSIVE, [but] + reasons[1:]
            reasons = reasons + [Reason(Code.QUALITY_UNDECIDED, r) for r in qual.undecided]
        cost = None
        if prices:
            cost = {
                names[x]: arm_cost(s, *prices[x])
                for x, s in ((a, comp.summaries[0]), (b, comp.summaries[1]))
            }
        return PairVerdict(
            names[a],
            names[b],
            a,
            b,
            result,
            reasons,
            comp,
            out.errors,
            out.generator,
            cost,
            qual,
            out.guardrails,
            findings or None,
        )

    present = set(unique_ints(table.arm).tolist())
    idx = [i for i in range(len(arms)) if i in present]
    pairs = [pair(0, b) for b in idx if b != 0] if 0 in present else []
    factors = (spec.get("ablation") or {}).get("factors") or []
    design, why = _design(factors, names, present)
    if design is not None:  # the steps of a factorial: each single factor → the combination
        ladder = [pair(s, design.full) for s in design.singles()]
    else:
        ladder = [pair(idx[k - 1], idx[k]) for k in range(2, len(idx))] if len(idx) > 2 else []
    factorial = None
    if design is not None:
        from abtui.verdict.ablation import combination_reasons, summarize_factorial

        factorial = summarize_factorial(
            table,
            names,
            design,
            spec,
            pol,
            pairs,
            ladder,
            noise_floor=noise_floor,
            usd=usd,
            quality=quality,
        )
        # the combination worse than the best single factor, or losing accuracy its parts
        # keep: NO-GO for it; an undecided accuracy interaction is said
        no_go, notes = combination_reasons(factorial)
        combo = next(p for p in pairs if p.b == design.full)
        if no_go:
            combo.result, combo.reasons = NO_GO, [*no_go, *combo.reasons]
        combo.reasons = [*combo.reasons, *notes]
    elif factors:
        from abtui.verdict.ablation import Factorial

        factorial = Factorial.failed(factors, why)
    results = [p.result for p in pairs]
    if not results:
        overall = INCONCLUSIVE
    elif NO_GO in results:
        overall = NO_GO
    elif all(r == GO for r in results):
        overall = GO
    else:
        overall = INCONCLUSIVE
    if noise_floor:
        pol = replace(pol, noise_floor_values=noise_floor)
    arm_rows = [dict(a, arm=i) for i, a in enumerate(arms)]
    sweep = sweep_summary(table, arm_rows, slo, levels, prices)
    return Verdict(
        overall,
        pairs,
        ladder,
        pol,
        replace(session or SessionInfo(), status=status),
        sweep=sweep,
        factorial=factorial,
    )


def _design(factors: list[str], names: list[str], present: set[int]):
    """The factorial design of the arms (None, why: not one, or an arm has no requests)."""
    if not factors:
        return None, None
    from abtui.stats.factorial import design_of

    design, why = design_of(names, factors)
    if design is not None and not set(design.arm_of.values()) <= present:
        return None, "an arm of the factorial has no requests"
    return design, why
