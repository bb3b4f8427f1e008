"""How a session file ends when it can no longer be written (a full disk, an I/O error).

The writer keeps :data:`RESERVE_BYTES` of disk beside the file (``<file>.reserve``, made by
:func:`make_reserve` when the file is created, removed when it closes). When a write fails with
one of :data:`STORAGE_ERRORS`, the writer drops what it had buffered, deletes the reserve and
:func:`record_end` commits status ``write_failed``, the end time and the error (meta
``write_error``, an ``events`` row): a few KB of WAL, which the freed megabyte takes. Every
earlier commit is kept. Without this the status stayed ``running`` and a later ``abtui report``
called the session killed. A run killed outright leaves its ``.reserve`` behind (1 MiB).
"""

from __future__ import annotations

import contextlib
import errno
import json
import time
from pathlib import Path

import duckdb

RESERVE_BYTES = 1 << 20
# DuckDB errors that say the file could not be written, not that a statement was wrong
STORAGE_ERRORS = (duckdb.IOException, duckdb.TransactionException, duckdb.FatalException)


def make_reserve(path: Path) -> Path | None:
    """``path`` holding :data:`RESERVE_BYTES` of allocated disk, or None where there is not
    that much to spare (the run goes on; a write failure then may leave it ``running``)."""
    try:
        with path.open("wb") as fh:
            try:
                import os

                os.posix_fallocate(fh.fileno(), 0, RESERVE_BYTES)
            except (AttributeError, OSError) as e:
                if getattr(e, "errno", None) == errno.ENOSPC:
                    raise
                fh.write(bytes(RESERVE_BYTES))  # a file system without fallocate
        return path
    except OSError:
        path.unlink(missing_ok=True)
        return None


def close_quietly(con) -> None:
    if con is not None:
        with contextlib.suppress(duckdb.Error):
            con.close()


def record_end(con, path: Path, status: str, why: str, now_iso: str):
    """Commit ``status``, the end time ``now_iso``, ``why`` (meta ``write_error``) and an event,
    on ``con`` or, when DuckDB has invalidated it, on a fresh connection (which replays the
    WAL). Returns (the connection now open or None, whether it was written)."""
    rows = [
        [k, json.dumps(v)]
        for k, v in (("status", status), ("ended", now_iso), ("write_error", why))
    ]
    event = (time.perf_counter_ns(), now_iso, status, None, why)
    for attempt in (0, 1):
        try:
            if attempt:
                close_quietly(con)
                con = None
                con = duckdb.connect(str(path))
            con.execute("BEGIN TRANSACTION")
            con.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", rows)
            con.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)", event)
            con.execute("COMMIT")
            return con, True
        except (duckdb.Error, OSError):
            with contextlib.suppress(duckdb.Error, AttributeError):
                con.execute("ROLLBACK")
    return con, False
