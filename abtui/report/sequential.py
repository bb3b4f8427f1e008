"""The anytime-valid section of a report (a run ``--until-decided``): one line per row of the
stored sequential verdict, its interval valid at whatever time the run stopped."""

from __future__ import annotations

import math

from abtui.stats.labels import label
from abtui.stats.seqdecide import SequentialRun


def _pct(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x * 100:+.1f}%" if math.isfinite(x) else ("+inf" if x > 0 else "−inf")


def row_lines(seq: SequentialRun | None) -> list[str]:
    """``[]`` for a fixed-design session; else a heading and one line per row."""
    if seq is None or not seq.rows:
        return []
    out = [
        f"  anytime-valid intervals (confidence sequences, α {seq.alpha}; valid at any stop), "
        f"{seq.pairs:,} pairs:"
    ]
    for r in seq.rows:
        name = label(r.key) if "." in r.key else r.key
        note = f"; {r.note}" if r.note else ""
        out.append(
            f"    {name} ({r.role}): {_pct(r.effect)} [{_pct(r.lo)}, {_pct(r.hi)}] "
            f"δ {r.delta:.0%} → {r.state}{note}"
        )
    out += quality_lines(seq.quality)
    return out


def quality_lines(doc: dict | None) -> list[str]:
    """The anytime-valid quality gate of a run that sent items until decided (its stored
    ``meta.sequential.quality``): per suite and length bucket its interval of Δacc and state;
    ``[]`` without one."""
    from abtui.quality.seqgate import SequentialQuality

    q = SequentialQuality.from_dict(doc) if isinstance(doc, dict) else None
    if not q or not q.suites:
        return []
    out = [
        f"  anytime-valid quality gate ({q.rounds} round(s), "
        f"{q.items_per_arm:,} items per arm, stopped: {q.stop_reason}):"
    ]
    for s in q.suites:
        out.append(f"    {s.suite}: {s.state} (margin −{float(s.margin) * 100:g} pp)")
        for b in s.buckets:
            more = b.more_clusters
            tail = f", ~{more:,} more clusters" if more else ""
            out.append(
                f"      {b.bucket}: {_acc(b.acc_a)} → {_acc(b.acc_b)}, Δacc "
                f"{_pp(b.delta)} [{_pp(b.lo)}, {_pp(b.hi)}] "
                f"({b.items} items, {b.clusters} clusters) → {b.state}{tail}"
            )
    return out


def _pp(x) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x * 100:+.1f} pp"


def _acc(x) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.1%}"


def fixed_n_heading(seq: SequentialRun | None, policy) -> str | None:
    """The line over the fixed-n notes of a run that stopped on the anytime-valid rule (their
    "requests per arm would decide" are a fixed design's, not this run's); None otherwise."""
    from abtui.verdict.sequential import applies

    if not applies(seq, policy):
        return None
    return (
        "fixed-n notes (descriptive: this run stopped on the anytime-valid rule, so its n was "
        "not fixed):"
    )
