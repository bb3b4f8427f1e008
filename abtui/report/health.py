"""The load generators' stored health in words, for every place that shows a session: the
summary ``abtui run`` / ``abtui report`` print (abtui.report.console) and the verdict screen.
One source for the words, so that the two cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass, field

from abtui.stats.reasons import Reason, read_reason

DEGRADED_TAG = "DEGRADED SESSION"
DEGRADED_WHY = (
    "the load generator did not keep its schedule; the arms did not get the load "
    "asked for, and no GO can be drawn from it."
)


@dataclass(frozen=True)
class StoredHealth:
    degraded: bool = False
    reasons: list[Reason | str] = field(default_factory=list)  # why it is degraded, one a line
    notes: list[Reason | str] = field(default_factory=list)  # a generator on a core, a backlog…


def stored_health(meta: dict) -> StoredHealth:
    """The session's ``degraded`` mark and ``generator_health`` reasons and notes (written by
    abtui.runner.health), each a :class:`~abtui.stats.reasons.Reason` with the code stored beside
    it. A file may come from anyone: what is not a list is taken as none, a code that is not one
    leaves the words alone, and the strings are returned as stored — the caller shows them
    inert (``printable``/``term``)."""
    if not isinstance(meta, dict):
        return StoredHealth()
    h = meta.get("generator_health")
    h = h if isinstance(h, dict) else {}

    def strings(key: str, code_key: str) -> list[Reason | str]:
        got, got_codes = h.get(key), h.get(code_key)
        if not isinstance(got, list):
            return []
        if not isinstance(got_codes, list) or len(got_codes) != len(got):
            got_codes = [None] * len(got)
        return [read_reason(str(x), c) for x, c in zip(got, got_codes, strict=True)]

    return StoredHealth(
        bool(meta.get("degraded")),
        strings("reasons", "reason_codes"),
        strings("notes", "note_codes"),
    )
