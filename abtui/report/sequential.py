"""The anytime-valid section of a report (a run ``--until-decided``): one line per row of the
stored sequential verdict, its interval valid at whatever time the run stopped."""

from __future__ import annotations

import math

from abtui.stats.labels import label


def _pct(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x * 100:+.1f}%" if math.isfinite(x) else ("+inf" if x > 0 else "−inf")


def row_lines(seq: dict | None) -> list[str]:
    """``[]`` for a fixed-design session; else a heading and one line per row."""
    if not isinstance(seq, dict) or not seq.get("rows"):
        return []
    alpha = seq.get("alpha")
    out = [
        f"  anytime-valid intervals (confidence sequences, α {alpha}; valid at any stop), "
        f"{seq.get('pairs', 0):,} pairs:"
    ]
    for r in seq["rows"]:
        key = str(r.get("key"))
        name = label(key) if "." in key else key
        note = f"; {r['note']}" if r.get("note") else ""
        out.append(
            f"    {name} ({r.get('role')}): {_pct(r.get('effect'))} "
            f"[{_pct(r.get('lo'))}, {_pct(r.get('hi'))}] δ {float(r.get('delta') or 0):.0%} "
            f"→ {r.get('state')}{note}"
        )
    return out
