"""The verdict's quality gates (docs/methods.md §4): non-inferiority per suite, in three states.

For each suite, with margin ``m`` (default 1 pp, ``quality.margin``; per suite
``quality.margins``) and ``[lo, hi]`` the score interval of Δacc (:mod:`abtui.quality.paired`):

- **pass** — non-inferiority shown: ``lo ≥ −m``, on at least :data:`MIN_ITEMS` paired items;
- **fail** (NO-GO) — the suite is shown worse than the margin: ``hi < −m``, or the drop is
  significant (``hi < 0``) and its estimate is beyond the margin (``Δacc < −m``). The reason
  names the drop, its CI, McNemar's p and the length bucket that lost most
  ("niah −12.5 pp [−20.8, −4.2] at 32k");
- **inconclusive** otherwise — neither shown; the pair cannot be GO, and the reason says how
  many items would decide at the flip rates seen ("underpowered: about 1,600 items would
  decide"). With zero flips a 1 pp margin needs about 380 items (the interval is
  ±z²/(n + z²)); with 2 % of answers flipping each way, about 1,600.
- **blind** (reported as inconclusive) — the baseline's own accuracy is no more than the margin,
  so a drop of the margin's size cannot happen: the suite would pass whatever the candidate
  did (a tiny random-weight model scores 0 % on niah; so would a broken candidate). It cannot
  vouch for the candidate, and no number of items changes that.

Before, a failing lower bound was NO-GO even when nothing had dropped, and a suite with no
flipped answer passed at any size (its bootstrap CI was [0, 0]): a 10 pp drop on 12 items
passed in 29 % of runs, and a true Δ = 0 with 2 % flips each way was NO-GO in 81 % of runs at
300 items (scripts/bench_verdict_calibration.py). A bucket that dropped significantly (its CI
wholly below zero) while its suite passed is a warning, not a gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import NamedTuple

from abtui.quality.config import DEFAULT_MARGIN
from abtui.quality.paired import LEVEL, QualityRow, paired
from abtui.quality.ppl import FLAT, Perplexity
from abtui.stats.classical import paired_difference_ci
from abtui.stats.decide import MAX_SAMPLES_HINT


class GateState(StrEnum):
    """A quality gate's state (a ``str``: the verdict's JSON holds these words)."""

    PASS = "pass"
    FAIL = "fail"
    UNDECIDED = "inconclusive"


PASS, FAIL, UNDECIDED = GateState
MIN_ITEMS = 30  # fewer paired items never pass a suite, whatever the interval says


@dataclass(frozen=True, slots=True)
class SuiteGate:
    """One suite's gate: its margin, the interval of Δacc (None: no item scored on both arms),
    its state, and the items that would decide it (None: passed, blind, or none would)."""

    suite: str
    margin: float
    lo: float | None
    hi: float | None
    state: GateState
    passed: bool
    items_needed: int | None
    blind: bool

    def to_dict(self) -> dict:
        return {
            "suite": self.suite,
            "margin": self.margin,
            "lo": self.lo,
            "hi": self.hi,
            "state": self.state,
            "passed": self.passed,
            "items_needed": self.items_needed,
            "blind": self.blind,
        }

    @classmethod
    def from_dict(cls, d: dict) -> SuiteGate:
        """A stored gate; one stored before the third state existed has only ``passed``."""
        state = d.get("state") or (PASS if d["passed"] else FAIL)
        return cls(
            d["suite"],
            d["margin"],
            d.get("lo"),
            d.get("hi"),
            GateState(state),
            d["passed"],
            d.get("items_needed"),
            d.get("blind", False),
        )


@dataclass(frozen=True, slots=True)
class QualityVerdict:
    """A pair's quality section (:func:`evaluate_quality`): the paired rows per suite and per
    length bucket, the items left out, each suite's gate and the sentences. ``no_go``: failed
    suites (the pair is NO-GO); ``undecided``: suites neither passed nor failed (the pair cannot
    be GO). ``logprob_line`` and ``ppl`` (arm name → its perplexity) come from the session's
    meta (:func:`abtui.quality.attach.attach`); ``ppl`` None: not attached, and the JSON has
    neither key."""

    suites: tuple[QualityRow, ...]
    buckets: tuple[QualityRow, ...]
    unpaired: int
    gates: tuple[SuiteGate, ...]
    no_go: tuple[str, ...]
    undecided: tuple[str, ...]
    warnings: tuple[str, ...]
    logprob_line: str | None = None
    ppl: dict[str, Perplexity] | None = None

    def gate(self, suite: str) -> SuiteGate | None:
        return next((g for g in self.gates if g.suite == suite), None)

    def suite(self, suite: str) -> QualityRow | None:
        return next((r for r in self.suites if r.suite == suite), None)

    def with_notes(
        self, logprob_line: str | None, ppl: dict[str, Perplexity], warning: str | None
    ) -> QualityVerdict:
        """This section with the session's logprob sentence, perplexities and a warning."""
        warnings = (*self.warnings, warning) if warning else self.warnings
        return replace(self, logprob_line=logprob_line, ppl=dict(ppl), warnings=warnings)

    def to_dict(self) -> dict:
        """The verdict's JSON section (non-finite floats left to the verdict's ``json_ready``)."""
        d = {
            "suites": [q.to_dict() for q in self.suites],
            "buckets": [q.to_dict() for q in self.buckets],
            "unpaired": self.unpaired,
            "gates": [g.to_dict() for g in self.gates],
            "no_go": list(self.no_go),
            "undecided": list(self.undecided),
            "warnings": list(self.warnings),
        }
        if self.ppl is not None:
            d["logprob_line"] = self.logprob_line
            d["ppl"] = {n: m.to_dict() for n, m in self.ppl.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict | None) -> QualityVerdict | None:
        """A stored section (None: none)."""
        if d is None:
            return None
        ppl = d.get("ppl")
        return cls(
            tuple(QualityRow.from_dict(q) for q in d.get("suites") or []),
            tuple(QualityRow.from_dict(q) for q in d.get("buckets") or []),
            d.get("unpaired") or 0,
            tuple(SuiteGate.from_dict(g) for g in d.get("gates") or []),
            tuple(d.get("no_go") or []),
            tuple(d.get("undecided") or []),
            tuple(d.get("warnings") or []),
            d.get("logprob_line"),
            None if ppl is None else {n: Perplexity.from_dict(m) for n, m in ppl.items()},
        )


def pp(x: float) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x * 100:+.1f} pp"


def _ci(q: QualityRow) -> str:
    return f"[{pp(q.lo)}, {pp(q.hi)}]"


def margin_of(qspec: dict, suite: str) -> float:
    m = (qspec.get("margins") or {}).get(suite)
    return float(m if m is not None else qspec.get("margin", DEFAULT_MARGIN))


def gate_state(q: QualityRow, margin: float) -> GateState:
    """``pass`` / ``fail`` / ``inconclusive`` for one suite row (module docstring)."""
    if not (math.isfinite(q.lo) and math.isfinite(q.hi)):
        return UNDECIDED
    if q.hi < -margin or (q.hi < 0 and q.delta < -margin):
        return FAIL
    if blind(q, margin):
        return UNDECIDED
    if q.lo >= -margin and q.n >= MIN_ITEMS:
        return PASS
    return UNDECIDED


def blind(q: QualityRow, margin: float) -> bool:
    """The baseline scores no more than ``margin``: no drop of that size can be observed."""
    return math.isfinite(q.acc_a) and q.acc_a <= margin


def items_needed(q: QualityRow, margin: float) -> int | None:
    """Paired items at which the suite would be decided if its flip rates held: the smallest
    ``n'`` whose score interval, on the counts scaled by ``n' / n`` (and the same design effect),
    clears ``−margin`` on the side the estimate is (``lo ≥ −m`` above it, ``hi < −m`` below it).
    None when the estimate sits on the margin or no size up to 10⁹ decides."""
    if not (q.n and math.isfinite(q.delta)) or q.delta == -margin:
        return None
    above = q.delta > -margin

    def decided(n2: float) -> bool:
        k = n2 / q.n / q.deff
        lo, hi = paired_difference_ci(q.b * k, q.c * k, n2 / q.deff, LEVEL)
        return lo >= -margin if above else hi < -margin

    return smallest_deciding(q.n, decided)


def smallest_deciding(n: int, decided) -> int | None:
    """The smallest item count ``n' ≥ max(n, MIN_ITEMS)`` with ``decided(n')`` (to within 0.5 %):
    doubling until it decides, then bisection. None when no size up to 10⁹ does."""
    lo_n, hi_n = n, max(n, MIN_ITEMS)
    while not decided(hi_n):
        lo_n, hi_n = hi_n, hi_n * 2
        if hi_n > MAX_SAMPLES_HINT:
            return None
    while hi_n - lo_n > max(1, lo_n // 200):  # to within 0.5 %
        mid = (lo_n + hi_n) // 2
        lo_n, hi_n = (lo_n, mid) if decided(mid) else (mid, hi_n)
    return int(max(hi_n, MIN_ITEMS))


class Unscored(NamedTuple):
    """A suite no item of which was scored on both arms."""

    items: int  # the baseline's items of the suite
    error: str  # the first error stored, or what was missing


def _unscored(rows: list[dict], a: int, b: int, scored: set[str]) -> dict[str, Unscored]:
    """Suites of arms ``a``/``b`` with no paired scored item: suite → :class:`Unscored`.
    (Every item failed — a prompt longer than the server's context, a 400 — or was never
    answered on one arm.) Such a suite is undecided, never silently absent from the gate."""
    import json

    out: dict[str, tuple[int, str]] = {}
    for r in rows:
        if r["arm"] not in (a, b):
            continue
        d = r["detail"] if isinstance(r["detail"], dict) else json.loads(r["detail"] or "{}")
        suite = d.get("suite")
        if not suite or suite in scored:
            continue
        n, err = out.get(suite, (0, ""))
        out[suite] = (n + (r["arm"] == a), err or str(d.get("error") or ""))
    return {k: Unscored(n, e or "no answer on one arm") for k, (n, e) in out.items()}


def evaluate_quality(rows: list[dict], a: int, b: int, qspec: dict | None) -> QualityVerdict | None:
    """The pair's quality section (:class:`QualityVerdict`), or None when no quality rows were
    stored."""
    if not any(r["arm"] in (a, b) for r in rows):
        return None
    qspec = qspec or {}
    st = paired(rows, a, b)
    gates, no_go, undecided, warnings = [], [], [], []
    for q in st.suites:
        m = margin_of(qspec, q.suite)
        state = gate_state(q, m)
        is_blind = state == UNDECIDED and blind(q, m)
        need = None if state == PASS or is_blind else items_needed(q, m)
        gates.append(SuiteGate(q.suite, m, q.lo, q.hi, state, state == PASS, need, is_blind))
        if state == PASS:
            continue
        head = (
            f"quality: {q.suite} accuracy {q.acc_a:.1%} → {q.acc_b:.1%}, Δacc {pp(q.delta)} "
            f"{_ci(q)} (McNemar p = {q.p:.3g}, {q.n} items)"
        )
        if state == FAIL:
            worst = min(
                (x for x in st.buckets if x.suite == q.suite and math.isfinite(x.delta)),
                key=lambda x: x.delta,
                default=None,
            )
            where = (
                f"; worst at {worst.bucket}: {pp(worst.delta)} {_ci(worst)}"
                if worst is not None and worst.delta < 0
                else ""
            )
            no_go.append(f"{head}: dropped beyond the −{m * 100:g} pp margin{where}")
            continue
        if is_blind:
            undecided.append(
                f"{head}: the baseline itself scores {q.acc_a:.1%}, no more than the "
                f"−{m * 100:g} pp margin, so no such drop could show: this suite cannot "
                f"vouch for the candidate (use one the baseline passes)"
            )
            continue
        why = (
            f"fewer than {MIN_ITEMS} paired items"
            if q.lo >= -m and q.n < MIN_ITEMS
            else f"the CI's lower bound is below −{m * 100:g} pp"
        )
        more = f"about {need:,} items would decide" if need else "more items would decide"
        undecided.append(
            f"{head}: non-inferiority within −{m * 100:g} pp not shown ({why}); "
            f"underpowered: {more}"
        )
    for suite, (n, err) in sorted(_unscored(rows, a, b, {q.suite for q in st.suites}).items()):
        gates.append(
            SuiteGate(suite, margin_of(qspec, suite), None, None, UNDECIDED, False, None, False)
        )
        undecided.append(
            f"quality: {suite}: no item was scored on both arms ({n} items; "
            f"first error: {err}): the suite cannot vouch for the candidate"
        )
    passed = {g.suite for g in gates if g.passed}
    for x in st.buckets:
        if x.suite in passed and math.isfinite(x.hi) and x.hi < 0:
            warnings.append(
                f"quality: {x.suite} passed overall, but dropped {pp(x.delta)} "
                f"{_ci(x)} at {x.bucket}"
            )
    return QualityVerdict(
        st.suites,
        st.buckets,
        st.unpaired,
        tuple(gates),
        tuple(no_go),
        tuple(undecided),
        tuple(warnings),
    )


def flat_ppl_warning(
    ppl: dict[str, Perplexity] | None, a: str, b: str, qual: QualityVerdict
) -> str | None:
    """A warning when PPL is flat but a suite's accuracy dropped: a failed gate ("PPL flat,
    but accuracy dropped: retrieval −6 pp"), or an undecided one whose estimate is past its
    margin ("… may have dropped: keys −5.6 pp (not yet shown)")."""
    if not ppl or a not in ppl or b not in ppl:
        return None
    pa, pb = ppl[a], ppl[b]
    if not (pa.supported and pb.supported):
        return None
    r = pb.ppl / pa.ppl - 1
    if abs(r) >= FLAT:
        return None

    def state(s: QualityRow) -> str:
        g = qual.gate(s.suite)
        st = "pass" if g is None else g.state
        if st == "inconclusive" and s.delta < -g.margin:  # NaN: never below
            return "maybe"
        return st

    failed = [s for s in qual.suites if state(s) == "fail"]
    maybe = [s for s in qual.suites if state(s) == "maybe"]
    if not (failed or maybe):
        return None
    drops = ", ".join(f"{s.suite} {s.delta * 100:+.1f} pp" for s in failed or maybe)
    verb = "dropped" if failed else "may have dropped"
    shown = "" if failed else " (not yet shown: more items would decide)"
    return f"PPL flat ({r:+.1%}), but accuracy {verb}: {drops}{shown} — never trust PPL alone"
