"""The requests a profiling window slowed: the ``profile_window`` meta key (a sweep:
``profile_windows``, one per level) holds, per arm,
the window in which its server was profiling (``start_ns``, ``end_ns``: the perf-counter
clock of every ``*_ns`` column); an item any of whose measured requests ran while its arm's
server profiled is *profiled*. A profiler slows a server (vLLM's worker records every
operator; writing the trace stalls it), so the profiled items are left out of every latency
figure, on every arm, as warm-up is (docs/profile.md): the pairs stay whole."""

from __future__ import annotations

import json

import duckdb

_NEVER = (1 << 63) - 1  # a request with no end yet ran past any window


def _meta(con: duckdb.DuckDBPyConnection, key: str):
    row = con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    if row is None:
        return None
    try:
        return json.loads(row[0])
    except (TypeError, ValueError):
        return None


def window_times(doc) -> list[tuple[int, int, int]]:
    """``(arm, start_ns, end_ns)`` of each arm's window in one stored window document."""
    out = []
    for w in (doc or {}).get("arms") or [] if isinstance(doc, dict) else []:
        try:
            arm, lo, hi = int(w["arm"]), int(w["start_ns"]), int(w["end_ns"])
        except (KeyError, TypeError, ValueError):
            continue  # a window that never opened has no times
        out.append((arm, lo, hi))
    return out


def windows(con: duckdb.DuckDBPyConnection) -> list[tuple[int, int, int]]:
    """``(arm, start_ns, end_ns)`` of each window the session stored (none: []): the one of
    ``profile_window``, and those of ``profile_windows`` (a sweep: one per level)."""
    out = window_times(_meta(con, "profile_window"))
    levels = _meta(con, "profile_windows")
    for doc in levels if isinstance(levels, list) else []:
        out += window_times(doc)
    return out


def overlap_sql(wins: list[tuple[int, int, int]], t: str = "") -> str:
    """SQL true for a request (``t``: the table's alias and a dot) that ran inside its arm's
    window."""
    return " OR ".join(
        f"({t}arm = {a} AND COALESCE({t}dispatched_ns, {t}scheduled_ns) <= {hi} "
        f"AND COALESCE({t}done_ns, {_NEVER}) >= {lo})"
        for a, lo, hi in wins
    )


def _profiled_sql(wins: list[tuple[int, int, int]]) -> str:
    return (
        "EXISTS (SELECT 1 FROM requests p WHERE p.run = requests.run AND p.item = "
        f"requests.item AND NOT p.warmup AND ({overlap_sql(wins, 'p.')}))"
    )


def outside_sql(con: duckdb.DuckDBPyConnection) -> str:
    """A ``WHERE`` clause's term (``AND …``) leaving out the profiled items; "" when none."""
    wins = windows(con)
    if not wins:
        return ""
    return f" AND NOT {_profiled_sql(wins)}"


def profiled_counts(
    con: duckdb.DuckDBPyConnection, wins: list[tuple[int, int, int]] | None = None
) -> dict[int, int]:
    """Per arm, its measured requests left out as profiled (every arm's rows of a profiled
    item); {} when the session has no window. ``wins``: these windows only (one level's)."""
    wins = windows(con) if wins is None else wins
    if not wins:
        return {}
    rows = con.execute(
        f"SELECT arm, count(*) FROM requests WHERE NOT warmup AND {_profiled_sql(wins)} "
        "GROUP BY arm"
    ).fetchall()
    return {int(a): int(n) for a, n in rows}
