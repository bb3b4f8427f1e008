"""The verdict of a run that looked at its data as it went (``--until-decided``,
docs/verdict.md §11 "In a run").

Such a run stopped at a data-dependent time, so the fixed-n intervals computed afterwards are
not valid for it (they assume the sample size was fixed in advance); the latency decision is the
anytime-valid one the run stored (meta ``sequential``, :mod:`abtui.runner.until`), whatever the
stopping time: the run's own stop, its budget, or Ctrl-C. What the sequential rule does not
cover still applies: errors that rose (by an anytime-valid interval of the paired error
difference, :func:`error_rise`: a fixed-n test read at a data-dependent stop would call a rise
more often than α) or a failed quality gate make it NO-GO; a rise not yet shown, an undecided
quality gate, a lost or lagging load generator, arms that did different work, or a failed run
forbid GO.
"""

from __future__ import annotations

import math

import numpy as np

from abtui.client.records import ERROR, OK
from abtui.quality.seqgate import SequentialQuality
from abtui.stats.betting import bounded_mean_cs
from abtui.stats.labels import label
from abtui.stats.seqdecide import SequentialRun
from abtui.verdict.policy import GO, INCONCLUSIVE, NO_GO, Policy, Verdict

SEQ_GO, SEQ_NO_GO, SEQ_NO_GAIN = "GO", "NO-GO", "NO-GAIN"
STOPPED = {
    "decided": "stopped when decided",
    "budget": "ran its whole budget",
    "interrupted": "stopped early by the user",
    "failed": "ended by a failure",
}


def applies(seq: SequentialRun | None, policy: Policy) -> bool:
    """Whether the stored sequential design is the one ``policy`` asks for (an override of the
    primary, guardrails or α at report time leaves the fixed verdict, with a note)."""
    if seq is None or seq.last is None:
        return False
    return (
        seq.primary == policy.primary
        and list(seq.guardrails) == list(policy.guardrails)
        and math.isclose(float(seq.alpha), float(policy.alpha))
    )


def headline(seq: SequentialRun) -> str:
    """One line: how the run ended and what the anytime-valid verdict says."""
    n, looks = seq.pairs, len(seq.looks)
    how = STOPPED.get(seq.stop_reason or "", "ended")
    budget = seq.budget_pairs
    of = f" of a {budget:,}-pair budget" if budget else ""
    return (
        f"anytime-valid verdict ({how} at {n:,} pairs{of}, {looks} look(s)): "
        f"{seq.decision}: {seq.reason}"
    )


def would_decide(seq: SequentialRun) -> str:
    """What more data would decide, in pairs and time at the run's pace."""
    more = seq.more
    if more is None:  # no row heads for GO or NO-GO (an A/A), or the effect sits at δ
        return (
            "no decision in sight: at the current effects no row heads for GO or NO-GO, so "
            "more pairs are not expected to decide"
        )
    rem = seq.remaining_s
    at = f", about {_minutes(rem)} at this run's pace" if rem is not None else ""
    prim = seq.rows[0] if seq.rows else None
    if prim is not None and prim.more == more and "NO-GAIN" in prim.note:
        return (
            f"about {more:,} more pairs per arm would show that {label(prim.key)} "
            f"cannot improve by δ (nothing to gain; still not GO){at}"
        )
    return f"about {more:,} more pairs per arm would decide at the current effects{at}"


def _minutes(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min"


def error_rise(table, a: int, b: int, alpha: float) -> tuple[int, float, float] | None:
    """The anytime-valid interval of how much more often arm ``b``'s requests failed than arm
    ``a``'s on the same items: per item both sent (in schedule order), ``failed_b − failed_a``
    in {−1, 0, 1}, and the betting confidence sequence of its mean (:mod:`abtui.stats.betting`)
    at ``alpha`` a side. ``(items, lower, upper)``; None without a paired item."""
    sent = (table.status == OK) | (table.status == ERROR)
    keys: dict[int, dict] = {}
    for arm in (a, b):
        rows = np.flatnonzero(sent & (table.arm == arm))
        k = list(zip(table.run[rows].tolist(), table.item[rows].tolist(), strict=True))
        keys[arm] = dict(zip(k, (table.status[rows] == ERROR).tolist(), strict=True))
    both = sorted(keys[a].keys() & keys[b].keys())
    if not both:
        return None
    fails = [int(keys[b][k]) - int(keys[a][k]) for k in both]
    lo, hi = bounded_mean_cs(fails, alpha, alpha)
    return len(both), lo, hi


def _errors(pair, rise) -> tuple[list[str], list[str]]:
    """(NO-GO, blockers) from the error rates: NO-GO when the anytime-valid interval of the
    paired rise is above 0, a blocker when the candidate's rate is higher but not shown so."""
    err = pair.errors
    ra, rb = getattr(err, "rate_a", None), getattr(err, "rate_b", None)
    if ra is None or rb is None or not rb > ra:
        return [], []
    said = f"errors rose: {rb:.1%} of requests vs {ra:.1%}"
    if rise is None:
        return [], [said]
    n, lo, hi = rise
    text = f"{said} (paired rise {lo:+.1%} … {hi:+.1%} over {n:,} items, anytime-valid)"
    return ([text], []) if lo > 0 else ([], [text + ": not shown"])


def quality_of(seq: SequentialRun) -> SequentialQuality | None:
    """The anytime-valid quality gate of a run that sent its items until decided (``meta``'s
    ``sequential.quality`` document, read once here); None without one."""
    return SequentialQuality.from_dict(seq.quality) if isinstance(seq.quality, dict) else None


def _others(
    pair, seq: SequentialRun, policy: Policy, meta: dict, rise=None
) -> tuple[list[str], list[str]]:
    """(NO-GO reasons, GO blockers) of the pair that the sequential rule does not cover."""
    no_go, block = _errors(pair, rise)
    # the run's own anytime-valid quality gate when it sent items until decided (the fixed
    # gate's interval is not valid after that optional stop); else the fixed gate
    q = quality_of(seq) or pair.quality
    no_go += list(q.no_go if q else ())
    block += list(q.undecided if q else ())
    block += [f.reason for f in pair.findings or [] if f.blocks]
    block += _generator_blockers(pair, seq)
    if (meta.get("ray") or {}).get("lost"):
        block.append("a load generator was lost")
    if meta.get("status") == "failed":
        block.append("the session failed")
    return no_go, block


def _generator_blockers(pair, seq: SequentialRun) -> list[str]:
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
    for r in seq.rows:
        if r.state not in ("IMPROVED", "SHOWN") or not math.isfinite(r.hi):
            continue
        f = flattery.get(r.key)
        if f is None:
            unknown.append(r.key)
            continue
        limit = -r.delta if r.state == "IMPROVED" else r.delta
        moved = (1.0 + r.hi) * f - 1.0
        if f > 1.0 and moved >= limit:
            explained.append(f"{label(r.key)} (bound {r.hi:+.1%} would be {moved:+.1%})")
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


def apply_sequential(verdict: Verdict, seq: SequentialRun, meta: dict, table=None) -> None:
    """Replace the latency decision of the run's pair with the stored anytime-valid one (see
    the module's docstring); the fixed-n reasons follow, marked as descriptive. ``table``: the
    session's requests, for the anytime-valid error check (without it, a higher error rate
    only forbids GO)."""
    if not applies(seq, verdict.policy):
        note = (
            "this run stopped on the anytime-valid rule for "
            f"{label(str(seq.primary))}; the policy here differs, so the fixed-n "
            "intervals below are not valid after that optional stop"
        )
        for p in verdict.pairs:
            p.reasons = [*p.reasons, note]
        return
    for pair in verdict.pairs:
        rise = None
        if table is not None:
            rise = error_rise(table, 0, _arm_of(verdict, pair), verdict.policy.alpha)
        _apply_pair(pair, seq, verdict.policy, meta, rise)
    results = [p.result for p in verdict.pairs]
    if NO_GO in results:
        verdict.result = NO_GO
    elif results and all(r == GO for r in results):
        verdict.result = GO
    else:
        verdict.result = INCONCLUSIVE


def _arm_of(verdict: Verdict, pair) -> int:
    """The candidate's arm number (a run --until-decided has one candidate: arm 1)."""
    session = getattr(verdict, "session", None)
    names = list(session.arms or ()) if session is not None else []
    cand = getattr(pair, "candidate", None)
    return names.index(cand) if cand in names else 1


def _apply_pair(pair, seq: SequentialRun, policy: Policy, meta: dict, rise=None) -> None:
    decision = seq.decision
    no_go, block = _others(pair, seq, policy, meta, rise)
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
