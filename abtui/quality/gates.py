"""The verdict's quality gates (METHODS.md §4): non-inferiority per suite.

A suite passes when the lower bound of its Δacc CI is at or above ``−margin`` (default 1 pp,
``quality.margin``; per suite ``quality.margins``). A suite that fails makes the pair NO-GO,
with the reason in words: the drop and its CI, McNemar's p, and the length bucket that lost most
("niah −12.5 pp [−20.8, −4.2] at 32k"). A failing lower bound with a point estimate inside the
margin is still NO-GO — non-inferiority was not shown — and the reason says more items would
decide. A bucket that dropped significantly (its CI wholly below zero) while its suite passed is
a warning, not a gate.
"""

from __future__ import annotations

import math

from abtui.quality.config import DEFAULT_MARGIN
from abtui.quality.paired import QualityRow, paired


def pp(x: float) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x * 100:+.1f} pp"


def _ci(q: QualityRow) -> str:
    return f"[{pp(q.lo)}, {pp(q.hi)}]"


def margin_of(qspec: dict, suite: str) -> float:
    m = (qspec.get("margins") or {}).get(suite)
    return float(m if m is not None else qspec.get("margin", DEFAULT_MARGIN))


def evaluate_quality(rows: list[dict], a: int, b: int, qspec: dict | None, *, resamples: int,
                     seed: int) -> dict | None:  # fmt: skip
    """The pair's quality section: ``{"suites", "buckets", "unpaired", "gates", "no_go",
    "warnings"}`` (lists of dicts / sentences), or None when no quality rows were stored."""
    if not any(r["arm"] in (a, b) for r in rows):
        return None
    qspec = qspec or {}
    st = paired(rows, a, b, resamples=min(resamples, 10_000), seed=seed)
    gates, no_go, warnings = [], [], []
    for q in st["suites"]:
        m = margin_of(qspec, q.suite)
        ok = math.isfinite(q.lo) and q.lo >= -m
        gates.append({"suite": q.suite, "margin": m, "lo": q.lo, "passed": ok})
        if ok:
            continue
        worst = min((x for x in st["buckets"] if x.suite == q.suite and math.isfinite(x.delta)),
                    key=lambda x: x.delta, default=None)  # fmt: skip
        where = (f"; worst at {worst.bucket}: {pp(worst.delta)} {_ci(worst)}"
                 if worst is not None and worst.delta < 0 else "")  # fmt: skip
        head = (f"quality: {q.suite} accuracy {q.acc_a:.1%} → {q.acc_b:.1%}, Δacc {pp(q.delta)} "
                f"{_ci(q)} (McNemar p = {q.p:.3g}, {q.n} items)")  # fmt: skip
        if q.delta < -m:
            no_go.append(f"{head}: dropped beyond the −{m * 100:g} pp margin{where}")
        else:
            no_go.append(f"{head}: non-inferiority within −{m * 100:g} pp not shown "
                         f"(the CI's lower bound is below it; more items would decide){where}")  # fmt: skip
    passed = {g["suite"] for g in gates if g["passed"]}
    for x in st["buckets"]:
        if x.suite in passed and math.isfinite(x.hi) and x.hi < 0:
            warnings.append(f"quality: {x.suite} passed overall, but dropped {pp(x.delta)} "
                            f"{_ci(x)} at {x.bucket}")  # fmt: skip
    return {
        "suites": [q.to_dict() for q in st["suites"]],
        "buckets": [q.to_dict() for q in st["buckets"]],
        "unpaired": st["unpaired"],
        "gates": gates,
        "no_go": no_go,
        "warnings": warnings,
    }
