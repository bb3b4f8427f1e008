"""A server's own per-request ``timings`` object (llama.cpp's ``llama-server``), checked.

llama-server ends a streamed response with ``timings`` (``server_slot_stats::to_json`` in
``tools/server/server-common.cpp``); :func:`parse_timings` keeps the fields of
:data:`~abtui.client.records.TIMING_FIELDS` that are well-formed and names the rest, so a
broken or hostile server's value is never stored as if measured and never fails the request.
"""

from __future__ import annotations

from abtui.client import records


def _timing_problem(key: str, v: object) -> str | None:
    """Why ``v`` is not a valid value of the timings field ``key`` (None when it is)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return f"{key} is not a number ({str(v)[:40]!r})"
    if not (v == v and abs(v) != float("inf")):
        return f"{key} is not finite"
    if v < 0 or v >= 2**63:
        return f"{key} is out of range ({v!r})"
    if key in records.TIMING_COUNTS and isinstance(v, float) and not v.is_integer():
        return f"{key} is not a whole number ({v!r})"
    return None


def parse_timings(raw: object) -> tuple[dict[str, float] | None, str | None]:
    """A server's ``timings`` object (llama.cpp) → (the well-formed fields of
    :data:`~abtui.client.records.TIMING_FIELDS`, a note on what was dropped). Never raises:
    a bad value is left out and named in the note, as a bad ``usage`` count is left out."""
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        return None, f"timings is not an object ({type(raw).__name__})"
    out: dict[str, float] = {}
    notes: list[str] = []
    for key in records.TIMING_FIELDS:
        if key not in raw:
            continue
        v = raw[key]
        why = _timing_problem(key, v)
        if why:
            notes.append(why)
        else:
            out[key] = int(v) if key in records.TIMING_COUNTS else float(v)
    if out.get("draft_n_accepted", 0) > out.get("draft_n", out.get("draft_n_accepted", 0)):
        notes.append(f"draft_n_accepted {out['draft_n_accepted']} > draft_n {out['draft_n']}")
        del out["draft_n"], out["draft_n_accepted"]
    note = ("timings: " + "; ".join(notes))[:300] if notes else None
    return out or None, note
