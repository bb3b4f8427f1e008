"""The recent sessions of a folder, one short row each (for ``abtui``'s start screen).

Cheap by design: a file is opened read-only with :class:`~abtui.store.reader.SessionReader`
and only its ``meta`` keys, arm names, a request count and the latest stored verdict word are
read. A file another process is writing (DuckDB's lock) is *not* copied, as the reader would
do to read it: it is listed as ``running`` with what its name says. A file that cannot be read
is listed as ``unreadable`` with the reader's message; nothing here raises for a bad file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from abtui.errors import AbtuiError
from abtui.store.reader import (
    WRITER_OTHER,
    WRITER_THIS,
    SessionReader,
    file_writer,
    was_killed,
)
from abtui.store.schema import COMPLETE, FAILED, INTERRUPTED, RUNNING, STATUSES, WRITE_FAILED

SUFFIX = ".duckdb"
# what a row says for each stored status; a "running" file nobody writes was killed or crashed
# (abtui.store.reader.was_killed, the one definition shared with the report and the TUI)
STATUS_WORDS = {
    COMPLETE: "finished",
    INTERRUPTED: "interrupted",
    FAILED: "failed",
    WRITE_FAILED: "write failed",
}
RUNNING_NOW = "running"
KILLED = "killed"  # status "running" but no writer holds the file (reader.was_killed)
UNREADABLE = "unreadable"


@dataclass
class SessionRow:
    path: Path
    name: str
    mtime: float  # the file's modification time (rows are sorted newest first by it)
    status: str  # finished | interrupted | failed | write failed | running | killed | unreadable
    created: str | None = None  # ISO time the session started
    arms: list[str] = field(default_factory=list)
    requests: int | None = None  # measured requests stored (warm-up excluded), all arms
    per_arm: list[int] = field(default_factory=list)  # the same, per arm (in arm order)
    degraded: bool = False  # the load generators lagged: meta "degraded" (report.health)
    verdict: str | None = None  # the latest stored verdict's word (GO, NO-GO, …)
    error: str | None = None  # why an unreadable file could not be read

    @property
    def openable(self) -> bool:
        return self.status != UNREADABLE


def read_row(path: str | os.PathLike) -> SessionRow:
    """One session file's row; never raises for a bad or busy file."""
    path = Path(path)
    try:
        mtime = path.stat().st_mtime
    except OSError as e:
        return SessionRow(path, path.stem, 0.0, UNREADABLE, error=str(e))
    writer = file_writer(path)
    if writer == WRITER_OTHER:
        return SessionRow(path, path.stem, mtime, RUNNING_NOW)
    try:
        with SessionReader(path) as rd:
            meta = rd.meta()
            arms = [a["name"] for a in rd.arms()]
            counts = dict(
                rd.query("SELECT arm, count(*) FROM requests WHERE NOT warmup GROUP BY arm")
            )
            ids = [a["arm"] for a in rd.arms()]
            last = rd.query("SELECT result FROM verdicts ORDER BY created DESC LIMIT 1")
    except AbtuiError as e:
        return SessionRow(path, path.stem, mtime, UNREADABLE, error=e.message)
    except (duckdb.Error, OSError, ValueError, KeyError, TypeError) as e:
        return SessionRow(path, path.stem, mtime, UNREADABLE, error=f"{path}: {e}")
    verdict = None
    if last:
        try:
            verdict = (json.loads(last[0][0]) or {}).get("result")
        except (ValueError, TypeError, AttributeError):
            verdict = None
    status = meta.get("status")
    if status not in STATUSES:  # not a status abtui writes: never closed, as "running" is
        status = RUNNING
    word = STATUS_WORDS.get(status) or (KILLED if was_killed(status, writer) else RUNNING_NOW)
    created = meta.get("created")
    return SessionRow(
        path,
        str(meta.get("session_name") or path.stem),
        mtime,
        word,
        created=created if isinstance(created, str) else None,
        arms=arms,
        requests=int(sum(counts.values())),
        per_arm=[int(counts.get(i, 0)) for i in ids],
        verdict=verdict if isinstance(verdict, str) else None,
        degraded=bool(meta.get("degraded")),
    )


def list_sessions(folder: str | os.PathLike, limit: int = 50) -> list[SessionRow]:
    """The ``limit`` most recently modified session files of ``folder``, newest first; an
    empty list when the folder does not exist."""
    folder = Path(folder)
    try:
        files = [p for p in folder.iterdir() if p.name.endswith(SUFFIX) and p.is_file()]
    except OSError:
        return []

    def mtime(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0

    files.sort(key=mtime, reverse=True)
    return [read_row(p) for p in files[:limit]]


def delete_session(folder: str | os.PathLike, path: str | os.PathLike) -> list[Path]:
    """Delete the session file ``path`` of ``folder`` and its DuckDB write-ahead log; returns
    what was removed. Refuses (:class:`~abtui.errors.AbtuiError`, nothing removed) anything but
    a ``*.duckdb`` file directly in ``folder``, and a file a running abtui is writing. Reports
    written next to it (``.md``, ``.html``) are left."""
    folder, path = Path(folder).resolve(), Path(path)
    where = path.resolve()
    if where.parent != folder or not where.name.endswith(SUFFIX) or not where.is_file():
        raise AbtuiError(
            f"not deleted: {path} is not a session file of {folder}",
            "only the *.duckdb files listed in the folder can be deleted",
        )
    if file_writer(where) in (WRITER_OTHER, WRITER_THIS):
        raise AbtuiError(
            f"not deleted: {path} is being written by a running abtui",
            "stop that run first (q in its window), then delete it",
        )
    gone = []
    for p in (where, where.with_name(where.name + ".wal")):
        try:
            p.unlink()
        except FileNotFoundError:
            continue
        except OSError as e:
            raise AbtuiError(f"cannot delete {p}: {e.strerror or e}") from None
        gone.append(p)
    return gone
