"""The load generators' stored health in words, for every place that shows a session: the
summary ``abtui run`` / ``abtui report`` print (abtui.report.console) and the verdict screen.
One source for the words, so that the two cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass, field

DEGRADED_TAG = "DEGRADED SESSION"
DEGRADED_WHY = (
    "the load generator did not keep its schedule; the arms did not get the load "
    "asked for, and no GO can be drawn from it."
)


@dataclass(frozen=True)
class StoredHealth:
    degraded: bool = False
    reasons: list[str] = field(default_factory=list)  # why it is degraded, one per line
    notes: list[str] = field(default_factory=list)  # a generator on most of a core, a backlog…


def stored_health(meta: dict) -> StoredHealth:
    """The session's ``degraded`` mark and ``generator_health`` reasons and notes (written by
    abtui.runner.health). A file may come from anyone: what is not a list is taken as none, and
    the strings are returned as stored — the caller shows them inert (``printable``/``term``)."""
    if not isinstance(meta, dict):
        return StoredHealth()
    h = meta.get("generator_health")
    h = h if isinstance(h, dict) else {}

    def strings(key: str) -> list[str]:
        got = h.get(key)
        return [str(x) for x in got] if isinstance(got, list) else []

    return StoredHealth(bool(meta.get("degraded")), strings("reasons"), strings("notes"))
