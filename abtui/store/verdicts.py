"""Append a verdict to a finished session file (the ``verdicts`` table).

A verdict is computed after the run (``abtui run``) or on demand (``abtui report``), when the
session's writer is closed. Each row is ``(created, policy JSON, result JSON)``; a row identical
in policy and result to the latest one is not appended again, so re-reporting a session does not
grow the file. If another process holds the file open for writing, nothing is stored and the
caller is told (the verdict is still printed); so is it when the file cannot be written.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import duckdb


def _dump(obj) -> str:
    return json.dumps(obj, default=str, sort_keys=True, allow_nan=False)


def append_verdict(path: str | os.PathLike, policy: dict, result: dict) -> bool:
    """Store ``result`` under ``policy``; False when the file is locked by a writer.

    ``result["created"]`` is ignored when comparing with the latest row."""
    try:
        con = duckdb.connect(str(path))
    except (duckdb.Error, OSError):
        return False  # a running writer holds the lock, or the file is read-only

    try:
        body = {k: v for k, v in result.items() if k != "created"}
        last = con.execute(
            "SELECT policy, result FROM verdicts ORDER BY created DESC LIMIT 1"
        ).fetchone()
        if last is not None:
            old = json.loads(last[1])
            old.pop("created", None)
            if last[0] == _dump(policy) and _dump(old) == _dump(body):
                return True
        # the result keeps its keys' order (arms, rows, rank tests): a reader reuses it as it is
        ordered = json.dumps(result, default=str, allow_nan=False)
        con.execute(
            "INSERT INTO verdicts VALUES (?, ?, ?)",
            [datetime.now(UTC).isoformat(), _dump(policy), ordered],
        )
        return True
    except duckdb.Error:
        return False  # e.g. a read-only file system: the verdict is still reported
    finally:
        con.close()
