"""Two sessions side by side (the start screen's "compare two sessions"): each arm's headline
figures in session A and session B, arms matched by name, and B's change against A.

Descriptive only. Two sessions are two runs at different times: their requests are not paired
and the machine, the load and the servers may have drifted in between, so no CI and no verdict
is given here (a decision between two configurations is one session with both as arms). The
figures are the reports' own (:func:`abtui.metrics.summary.summarize` over each session's
measured requests, under that session's SLO).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from abtui.metrics.summary import ArmSummary, summarize
from abtui.stats.decide import DELTA_CENTRAL, DELTA_TAIL
from abtui.store.reader import SessionReader

# (label, what of an ArmSummary, better direction, format): the rows of the comparison
ROWS = (
    ("TTFT P50", lambda s: s.ttft.p50, "lower", "s"),
    ("TTFT P99", lambda s: s.ttft.p99, "lower", "s"),
    ("TPOT P50", lambda s: s.tpot.p50, "lower", "s"),
    ("TPOT P99", lambda s: s.tpot.p99, "lower", "s"),
    ("E2E P50", lambda s: s.e2e.p50, "lower", "s"),
    ("output tok/s", lambda s: s.output_tokens_per_s, "higher", "n"),
    ("goodput tok/s", lambda s: s.goodput_output_tokens_per_s, "higher", "n"),
    ("error rate", lambda s: s.n_errors / s.sent if s.sent else math.nan, "lower", "%"),
)
CAVEAT = (
    "two separate runs: not paired, no CI — differences include any drift between them; "
    "decide between configurations within one session"
)


@dataclass
class SessionSide:
    path: Path
    name: str
    created: str | None
    status: str
    verdict: str | None
    degraded: bool  # the load generators lagged (meta "degraded"): its figures are skewed
    summaries: dict[str, ArmSummary] = field(default_factory=dict)  # arm name → summary


@dataclass
class Compared:
    a: SessionSide
    b: SessionSide
    arms: list[str]  # every arm name of A, then B's new ones
    rows: list[dict]  # {"arm", "metric", "a", "b", "change", "better"} (change: b / a - 1)


def _side(path: str | Path) -> SessionSide:
    with SessionReader(path) as rd:
        meta = rd.meta()
        arms = rd.arms()
        table = rd.request_table()
        last = rd.query("SELECT result FROM verdicts ORDER BY created DESC LIMIT 1")
    try:
        verdict = (json.loads(last[0][0]) or {}).get("result") if last else None
    except (ValueError, TypeError, AttributeError):
        verdict = None
    slo = (meta.get("spec") or {}).get("slo") or {}
    created = meta.get("created")
    return SessionSide(
        Path(path),
        str(meta.get("session_name") or Path(path).stem),
        created if isinstance(created, str) else None,
        str(meta.get("status") or "unknown"),
        verdict if isinstance(verdict, str) else None,
        bool(meta.get("degraded")),
        {a["name"]: summarize(table, a["arm"], slo) for a in arms},
    )


def compare_sessions(a: str | Path, b: str | Path) -> Compared:
    """Session ``b``'s arms against session ``a``'s of the same name (raises the reader's
    :class:`~abtui.errors.AbtuiError` for a file it cannot read)."""
    sa, sb = _side(a), _side(b)
    names = list(sa.summaries) + [n for n in sb.summaries if n not in sa.summaries]
    rows = []
    for arm in names:
        xa, xb = sa.summaries.get(arm), sb.summaries.get(arm)
        for label, get, better, _fmt in ROWS:
            va = float(get(xa)) if xa is not None else math.nan
            vb = float(get(xb)) if xb is not None else math.nan
            ok = math.isfinite(va) and math.isfinite(vb) and va != 0
            change = vb / va - 1 if ok else math.nan
            rows.append(
                {"arm": arm, "metric": label, "a": va, "b": vb, "change": change, "better": better}
            )
    return Compared(sa, sb, names, rows)


def _fmt(v: float, kind: str) -> str:
    if not math.isfinite(v):
        return "—"
    if kind == "s":
        return f"{v * 1e3:.1f}ms" if v < 1 else f"{v:.2f}s"
    if kind == "%":
        return f"{v:.1%}"
    return f"{v:,.0f}"


def compare_lines(c: Compared) -> tuple[list[str], list[list[str]]]:
    """The comparison as a table: (header, rows) — arm, metric, A, B and B's change, with a
    word where it is beyond the verdict's default noise band (δ: 2 % for medians and rates,
    5 % for P99s): ``better`` or ``worse``, else ``≈``. A band, not a test (see
    :data:`CAVEAT`)."""
    kinds = {label: kind for label, _g, _b, kind in ROWS}
    head = ["arm", "metric", "A", "B", "B vs A"]
    out = []
    for r in c.rows:
        ch = r["change"]
        if not math.isfinite(ch):
            word = "—"
        else:
            band = DELTA_TAIL if "P99" in r["metric"] else DELTA_CENTRAL
            good = (ch < 0) == (r["better"] == "lower")
            word = f"{ch:+.1%} " + ("≈" if abs(ch) <= band else "better" if good else "worse")
        kind = kinds[r["metric"]]
        out.append([r["arm"], r["metric"], _fmt(r["a"], kind), _fmt(r["b"], kind), word])
    return head, out
