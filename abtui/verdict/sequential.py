"""The verdict of a run that looked at its data as it went (``--until-decided``,
docs/verdict.md §11 "In a run").

Such a run stopped at a data-dependent time, so the fixed-n intervals computed afterwards are
not valid for it (they assume the sample size was fixed in advance); the latency decision is the
anytime-valid one the run stored (meta ``sequential``, :mod:`abtui.runner.until`), whatever the
stopping time: the run's own stop, its budget, or Ctrl-C. What the sequential rule does not
cover still applies, from the fixed verdict's checks of the same pair: errors that rose
significantly or a failed quality gate make it NO-GO; an undecided quality gate, a lost or
lagging load generator, arms that did different work, or a failed run forbid GO.
"""

from __future__ import annotations

import math

from abtui.stats.labels import label
from abtui.verdict.policy import GO, INCONCLUSIVE, NO_GO, Policy, Verdict

SEQ_GO, SEQ_NO_GO, SEQ_NO_GAIN = "GO", "NO-GO", "NO-GAIN"
STOPPED = {
    "decided": "stopped when decided",
    "budget": "ran its whole budget",
    "interrupted": "stopped early by the user",
    "failed": "ended by a failure",
}


def applies(seq: dict | None, policy: Policy) -> bool:
    """Whether the stored sequential design is the one ``policy`` asks for (an override of the
    primary, guardrails or α at report time leaves the fixed verdict, with a note)."""
    if not isinstance(seq, dict) or "decision" not in seq:
        return False
    return (
        seq.get("primary") == policy.primary
        and list(seq.get("guardrails") or []) == list(policy.guardrails)
        and math.isclose(float(seq.get("alpha") or 0), float(policy.alpha))
    )


def headline(seq: dict) -> str:
    """One line: how the run ended and what the anytime-valid verdict says."""
    n, looks = seq.get("pairs") or 0, len(seq.get("looks") or [])
    how = STOPPED.get(seq.get("stop_reason") or "", "ended")
    budget = seq.get("budget_pairs")
    of = f" of a {budget:,}-pair budget" if budget else ""
    return (
        f"anytime-valid verdict ({how} at {n:,} pairs{of}, {looks} look(s)): "
        f"{seq.get('decision')}: {seq.get('reason')}"
    )


def would_decide(seq: dict) -> str:
    """What more data would decide, in pairs and time at the run's pace."""
    more = seq.get("more")
    if more is None:  # no row heads for GO or NO-GO (an A/A), or the effect sits at δ
        return (
            "no decision in sight: at the current effects no row heads for GO or NO-GO, so "
            "more pairs are not expected to decide"
        )
    rem = seq.get("remaining_s")
    at = f", about {_minutes(rem)} at this run's pace" if rem is not None else ""
    rows = seq.get("rows") or [{}]
    prim = rows[0]
    if prim.get("more") == more and "NO-GAIN" in str(prim.get("note")):
        return (
            f"about {more:,} more pairs per arm would show that {label(str(prim.get('key')))} "
            f"cannot improve by δ (nothing to gain; still not GO){at}"
        )
    return f"about {more:,} more pairs per arm would decide at the current effects{at}"


def _minutes(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min"


def _others(pair, seq: dict, policy: Policy, meta: dict) -> tuple[list[str], list[str]]:
    """(NO-GO reasons, GO blockers) of the pair that the sequential rule does not cover."""
    no_go: list[str] = []
    block: list[str] = []
    err = pair.errors
    ra, rb, p = (getattr(err, k, None) for k in ("rate_a", "rate_b", "p_higher"))
    if ra is not None and rb is not None and p is not None and rb > ra:
        text = f"errors rose: {rb:.1%} of requests vs {ra:.1%} (one-sided Fisher p = {p:.3g})"
        (no_go if p < policy.alpha else block).append(text)
    # the run's own anytime-valid quality gate when it sent items until decided (the fixed
    # gate's interval is not valid after that optional stop); else the fixed gate
    q = seq.get("quality") if isinstance(seq.get("quality"), dict) else pair.quality or {}
    no_go += list(q.get("no_go") or [])
    block += list(q.get("undecided") or [])
    block += [f.reason for f in pair.findings or [] if f.blocks]
    block += _generator_blockers(pair, seq)
    if (meta.get("ray") or {}).get("lost"):
        block.append("a load generator was lost")
    if meta.get("status") == "failed":
        block.append("the session failed")
    return no_go, block


def _generator_blockers(pair, seq: dict) -> list[str]:
    """The generator rule (docs/verdict.md §7) on the anytime-valid bounds: an arm whose
    generator did not keep the offered load forbids GO; so do the baseline's stalls when they
    could explain a row's bound (its flattery ``f``: the candidate's ratio may be up to ``f``
    times higher), or when the baseline fell behind and a row's flattery is not known."""
    gen = pair.generator or {}
    out = [
        f"the load generator of {name} fell behind its schedule: it did not keep the offered "
        "load; this run cannot be GO"
        for name, g in gen.items()
        if g.load_kept is False
    ]
    base = gen.get(pair.baseline)
    flattery = base.flattery if base else {}
    explained, unknown = [], []
    for r in seq.get("rows") or []:
        if r.get("state") not in ("IMPROVED", "SHOWN") or r.get("hi") is None:
            continue
        f = flattery.get(r["key"])
        if f is None:
            unknown.append(r["key"])
            continue
        limit = -r["delta"] if r["state"] == "IMPROVED" else r["delta"]
        moved = (1.0 + r["hi"]) * f - 1.0
        if f > 1.0 and moved >= limit:
            explained.append(f"{label(r['key'])} (bound {r['hi']:+.1%} would be {moved:+.1%})")
    if explained:
        out.append(
            f"the load generator of {pair.baseline} fell behind by enough to explain "
            + ", ".join(explained)
            + "; this run cannot be GO"
        )
    if unknown and base and base.behind:
        out.append(
            f"the load generator of {pair.baseline} fell behind its schedule and "
            f"{', '.join(label(k) for k in unknown)} cannot be bounded for it; this run "
            "cannot be GO"
        )
    return out


def apply_sequential(verdict: Verdict, seq: dict, meta: dict) -> None:
    """Replace the latency decision of the run's pair with the stored anytime-valid one (see
    the module's docstring); the fixed-n reasons follow, marked as descriptive."""
    if not applies(seq, verdict.policy):
        note = (
            "this run stopped on the anytime-valid rule for "
            f"{label(str(seq.get('primary')))}; the policy here differs, so the fixed-n "
            "intervals below are not valid after that optional stop"
        )
        for p in verdict.pairs:
            p.reasons = [*p.reasons, note]
        return
    for pair in verdict.pairs:
        _apply_pair(pair, seq, verdict.policy, meta)
    results = [p.result for p in verdict.pairs]
    if NO_GO in results:
        verdict.result = NO_GO
    elif results and all(r == GO for r in results):
        verdict.result = GO
    else:
        verdict.result = INCONCLUSIVE


def _apply_pair(pair, seq: dict, policy: Policy, meta: dict) -> None:
    decision = seq.get("decision")
    no_go, block = _others(pair, seq, policy, meta)
    fixed = f"fixed-n view (descriptive, not valid after optional stopping): {pair.result}"
    reasons = [headline(seq)]
    if decision == SEQ_NO_GO or no_go:
        result = NO_GO
        reasons += no_go
    elif decision == SEQ_GO and not block:
        result = GO
    else:
        result = INCONCLUSIVE
        if decision == SEQ_GO:
            reasons[0] += ", but:"
        elif decision == SEQ_NO_GAIN:
            reasons.append("nothing to gain: an improvement of δ or more is ruled out")
        more = would_decide(seq)
        if decision not in (SEQ_GO, SEQ_NO_GAIN):
            reasons.append(more)
    reasons += block
    pair.result, pair.reasons = result, [*reasons, fixed]
