"""Read a session file, including one whose writer crashed or is still running.

How the file is opened (DuckDB 1.x/2.x behaviour, checked on 2.0.1):

1. ``duckdb.connect(path, read_only=True)``. A leftover ``.wal`` from a killed writer is
   replayed in memory by DuckDB; the file is not modified.
2. If another *process* holds the file open for writing, DuckDB refuses with a lock error.
   The reader then copies the file and its ``.wal`` into a private temporary directory and opens
   the copy (read-write, so DuckDB may replay the WAL into the copy; the original is never
   touched). The copy is a snapshot: rows committed after it are not seen; reopen to refresh.
   The copy is deleted on :meth:`SessionReader.close`, or later with the last request table
   that streams its chunks from it.
3. If *this* process already has a read-write connection to the file (the TUI reading the
   session its own writer is writing), DuckDB refuses a read-only connection with a different
   configuration; the reader then connects with the default configuration, which shares the
   process's database instance and sees every committed row. The reader never writes.

:meth:`SessionReader.request_table` leaves the chunks in the file: the table streams them
from it, one pass at a time on a connection of its own, when ITL is asked for
(:mod:`abtui.store.request_table`, :mod:`abtui.metrics.gaps`).

Errors a user can act on (missing file, not a DuckDB file, not an abtui session, a session
written by a newer abtui) are :class:`~abtui.errors.StoreError`.

**A damaged file** (truncated, edited, from someone else) is one too, naming the file and what
is damaged; nothing read from it reaches the code above as a traceback. The reader is the one
validation layer (:mod:`abtui.store.damage`): on open it checks every table and column the code
reads, decodes every JSON value of ``meta``, ``arms`` and ``verdicts`` (bad JSON, too deep, the
wrong type for what reads it), and that every request names an arm the file has and times in
range; every query it runs (also those of a table's chunk passes) turns a DuckDB error (a
corrupt block, a value out of range) into the same error. What still slips through (a value the
checks did not foresee) is caught by ``damage.reading``, around each command that reads one.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from abtui.client.items import Item
from abtui.errors import StoreError
from abtui.metrics.table import NA, RequestTable
from abtui.store.damage import (
    Checked,
    Damaged,
    check_meta,
    check_rows,
    check_tables,
    damaged,
    file_key,
    loads,
    table_columns,
)
from abtui.store.request_table import read_request_table
from abtui.store.schema import COMPLETE, ITEM_COLUMNS, RUNNING, SCHEMA_VERSION, TIMING_COLUMNS

COPY_ATTEMPTS = 3
_CHECKED: set[tuple] = set()  # files (damage.file_key) whose tables and rows passed the checks


def _plain(col: np.ndarray, fill: Any = None) -> np.ndarray:
    """A fetchnumpy column as a plain array (masked entries → ``fill``)."""
    if isinstance(col, np.ma.MaskedArray):
        if col.dtype == object:
            out = np.asarray(col.data, dtype=object).copy()
            out[np.ma.getmaskarray(col)] = fill
            return out
        return col.filled(fill)
    return np.asarray(col)


WRITER_OTHER = "other"  # another process holds the file for writing (DuckDB's lock)
WRITER_THIS = "this"  # this process writes it (a read-only connection is refused)
WRITER_UNKNOWN = "unknown"  # the file could not be opened to tell (missing, corrupt, …)


def file_writer(path: str | os.PathLike) -> str | None:
    """Who holds the session file open for writing: :data:`WRITER_OTHER`,
    :data:`WRITER_THIS`, None (nobody), or :data:`WRITER_UNKNOWN` when DuckDB could not open
    it for another reason (:class:`SessionReader` then says why). Opens and closes one
    read-only connection; never raises."""
    try:
        duckdb.connect(str(path), read_only=True).close()
    except duckdb.IOException as e:
        return WRITER_OTHER if "lock" in str(e).lower() else WRITER_UNKNOWN
    except duckdb.ConnectionException as e:
        return WRITER_THIS if "different configuration" in str(e) else WRITER_UNKNOWN
    except duckdb.Error:
        return WRITER_UNKNOWN
    return None


def was_killed(status: str | None, writer: str | None) -> bool:
    """The one definition of a killed session: its stored status is still ``running`` (the
    writer never closed it: SIGKILL, crash, power loss) and no process holds the file for
    writing (``writer`` from :func:`file_writer`). A live run holds it, so a running session
    is never called killed; a file that cannot be opened is not either."""
    return status == RUNNING and writer is None


def never_closed(path: str | os.PathLike, status: str | None) -> bool:
    """Whether the session at ``path`` (stored status ``status``) was killed: :func:`was_killed`
    with the file's current writer (asked only of a running one: a closed file is not opened)."""
    return status == RUNNING and was_killed(status, file_writer(path))


class _Copy:
    """A private copy of a session file (in a temporary directory), deleted with this object:
    when the reader closes, or later, with the last table that streams its chunks from it."""

    def __init__(self, name: str) -> None:
        tmpdir = tempfile.mkdtemp(prefix="abtui-session-")
        self.path = Path(tmpdir) / name
        self._done = weakref.finalize(self, shutil.rmtree, tmpdir, ignore_errors=True)


class SessionReader:
    """Read-only view of a session file (see the module docstring for how it is opened)."""

    def __init__(self, path: str | os.PathLike, keep_tables: bool = False) -> None:
        """``keep_tables``: the file is not written while this reader is open (a finished
        session that one report prints: summary, diagnosis, verdict); :meth:`request_table`
        reads it once per set of arguments and hands every caller that same table."""
        self.path = Path(path)
        self._tables: dict[tuple, RequestTable] | None = {} if keep_tables else None
        self.snapshot = False  # True when reading a copy (the file was locked by a writer)
        self._copy: _Copy | None = None
        self._shared = False  # connected to this process's own (writing) instance
        if not self.path.exists():
            raise StoreError(
                f"session file {self.path} does not exist",
                "check the path; sessions are written under sessions/ by default",
            )
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a directory, not a session file")
        self._con = Checked(self._connect(), self.path)
        try:
            self._check()
        except BaseException:
            self.close()
            raise

    # -- opening --------------------------------------------------------------------------------

    def _connect(self) -> duckdb.DuckDBPyConnection:
        path = str(self.path)
        try:
            return duckdb.connect(path, read_only=True)
        except duckdb.ConnectionException as e:
            if "different configuration" not in str(e):
                raise self._open_error(e) from e
            try:  # this process writes the file: share its database instance
                self._shared = True
                return duckdb.connect(path)
            except duckdb.Error as e2:
                raise self._open_error(e2) from e2
        except duckdb.Error as e:
            text = str(e)
            if "not a valid DuckDB database" in text or "does not exist" in text:
                raise self._open_error(e) from e
            return self._connect_copy(e)  # locked by a writing process (or a WAL problem)

    def _connect_copy(self, cause: Exception) -> duckdb.DuckDBPyConnection:
        self._copy = _Copy(self.path.name)
        copy = self._copy.path
        wal = Path(str(self.path) + ".wal")
        error: Exception = cause
        for _ in range(COPY_ATTEMPTS):  # a copy taken mid-checkpoint may not open: retry
            try:
                Path(str(copy) + ".wal").unlink(missing_ok=True)
                shutil.copyfile(self.path, copy)
                if wal.exists():
                    shutil.copyfile(wal, str(copy) + ".wal")
                con = duckdb.connect(str(copy))
            except (OSError, duckdb.Error) as e:
                error = e
                time.sleep(0.05)
                continue
            self.snapshot = True
            return con
        raise self._open_error(error, cause)

    def _open_error(self, e: Exception, cause: Exception | None = None) -> StoreError:
        text = str(e)
        if self._copy is not None:  # DuckDB names the private copy: say the user's file
            text = text.replace(str(self._copy.path), str(self.path))
        if "not a valid DuckDB database" in text:
            return StoreError(
                f"{self.path} is not a DuckDB file",
                "give a session file written by abtui (sessions/<name>.duckdb)",
            )
        if re.search(r"read enough bytes|[Cc]orrupt|checksum|truncat|not a valid|magic", text):
            line = (text.strip().splitlines() or [type(e).__name__])[0][:300]
            return damaged(self.path, f"it cannot be opened ({line})")
        extra = f" (first attempt: {cause})" if cause is not None else ""
        denied = re.search(r"[Pp]ermission denied|EACCES|[Rr]ead-only file system", text + extra)
        return StoreError(
            f"cannot open session file {self.path}: {text}{extra}",
            "check the file's permissions"
            if denied
            else "the file may be damaged (cut short or edited) or locked by a running abtui: "
            "wait for the writer, or use a copy from where it was written",
        )

    def _check(self) -> None:
        columns = table_columns(self._con)
        tables = set(columns)
        if not {"meta", "requests", "chunks"} <= tables:
            raise StoreError(
                f"{self.path} is a DuckDB file but not an abtui session",
                "give a session file written by abtui (sessions/<name>.duckdb)",
            )
        try:
            self._meta = self._read_meta()
        except Damaged as e:
            raise damaged(self.path, str(e)) from None
        version = self._meta.get("schema_version")
        if not isinstance(version, int):
            raise StoreError(f"{self.path} is not an abtui session (no schema version)")
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} uses session schema {version}, newer than this abtui's "
                f"({SCHEMA_VERSION})",
                "upgrade abtui to read it",
            )
        key = file_key(self.path)  # a report opens the file a few times: checked once
        try:
            check_meta(self._meta)
            if key is None or key not in _CHECKED:
                check_tables(columns)
                check_rows(self._con, columns)
                if key is not None:
                    _CHECKED.add(key)
        except Damaged as e:
            raise damaged(self.path, str(e)) from None

    def _read_meta(self) -> dict:
        rows = self._con.execute("SELECT key, value FROM meta").fetchall()
        return {k: loads(v, f"meta {k!r}") for k, v in rows}

    # -- reading ----------------------------------------------------------------------------------

    def meta(self) -> dict:
        """Every meta key, JSON-decoded (re-read each call: a live writer may change status)."""
        try:
            self._meta = self._read_meta()
        except Damaged as e:
            raise damaged(self.path, str(e)) from None
        return dict(self._meta)

    @property
    def status(self) -> str | None:
        return self.meta().get("status")

    @property
    def complete(self) -> bool:
        """Whether the writer closed the session normally ("running" = crashed or still going)."""
        return self.status == COMPLETE

    def to_wall(self, t_ns: int) -> datetime:
        """A monotonic ``*_ns`` value of this session as local wall time (via the clock anchor)."""
        anchor = self._meta["clock_anchor"]
        wall_ns = anchor["wall_ns"] + (int(t_ns) - anchor["perf_counter_ns"])
        return datetime.fromtimestamp(wall_ns / 1e9).astimezone()

    def arms(self) -> list[dict]:
        rows = self._con.execute(
            "SELECT arm, name, role, url, model, api, config FROM arms ORDER BY arm"
        ).fetchall()
        keys = ("arm", "name", "role", "url", "model", "api", "config")
        out = [dict(zip(keys, r, strict=True)) for r in rows]
        for a in out:
            a["config"] = self._json(a["config"], f"arms: the config of arm {a['arm']}") or {}
        return out

    def items(self) -> list[Item]:
        """The workload, each conversation turn's whole prompt rebuilt from the turns before
        it (a turn stores only what its prompt adds to the previous turn's:
        :func:`abtui.store.writer.added_messages`)."""
        have = self.columns("items")  # an older file lacks the newer columns
        cols = ", ".join(c if c in have else f"NULL AS {c}" for c in ITEM_COLUMNS)
        rows = self._con.execute(f"SELECT {cols} FROM items ORDER BY item").fetchall()
        out = []
        last: dict[str, Item] = {}  # each conversation's latest turn read
        for (
            i,
            id_,
            arrival,
            prompt,
            messages,
            max_tokens,
            n_input,
            expected,
            suite,
            tags,
            images,
            conv,
            turn,
            think_s,
            turn_messages,
        ) in rows:
            it = Item(
                index=i,
                id=id_,
                arrival_s=arrival,
                prompt=prompt,
                messages=self._json(messages, f"items: the messages of item {i}"),
                max_tokens=128 if max_tokens is None else max_tokens,
                n_input=n_input,
                expected=expected,
                suite=suite,
                tags=[]
                if tags in (None, "[]")
                else self._json(tags, f"items: the tags of item {i}"),
                images=None if images is None else self._json(images, f"items: images of {i}"),
            )
            if conv is not None:
                it.conversation, it.turn = conv, turn or 0
                it.think_s, it.turn_messages = think_s or 0.0, turn_messages or 0
                self._whole_prompt(it, last.get(conv))
                last[conv] = it
            out.append(it)
        return out

    def _whole_prompt(self, it: Item, prev: Item | None) -> None:
        """``it`` (a turn) with its whole prompt: the previous turn's, then what it stored."""
        if it.turn == 0 or not it.turn_messages or it.messages is None:
            return
        if prev is None or prev.turn != it.turn - 1 or prev.messages is None:
            raise damaged(
                self.path,
                f"items: item {it.index} is turn {it.turn} of conversation "
                f"{it.conversation!r}, but turn {it.turn - 1} is not stored before it (a "
                "turn's prompt is stored as what it adds to the previous turn's)",
            )
        if not isinstance(it.messages, list) or len(it.messages) != it.turn_messages + 1:
            raise damaged(
                self.path,
                f"items: the messages of item {it.index} should be the previous turn's "
                f"answer and {it.turn_messages} message(s) of its own",
            )
        it.messages = prev.messages + it.messages

    def item_images(self) -> list[list[dict] | None]:
        """Per measured item (not warm-up), in order: the images it sent (``items.images``:
        format, width, height, bytes, digest), None for none; ``[]`` for a file written
        before the column."""
        if "images" not in self.columns("items"):
            return []
        rows = self._con.execute(
            "SELECT item, images FROM items WHERE tags IS NULL OR tags NOT LIKE '%\"warmup\"%' "
            "ORDER BY item"
        ).fetchall()
        return [None if v is None else self._json(v, f"items: images of {i}") for i, v in rows]

    def columns(self, table: str) -> set[str]:
        """The columns ``table`` has in this file (an older file lacks the newer ones)."""
        return {
            r[0]
            for r in self._con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = ?", [table]
            ).fetchall()
        }

    def connect_sql(self, alias: str = "") -> str:
        """SQL for each request's connect phase in ns (``requests.connect_ns``; ``0`` in a file
        written before the column existed, whose TTFT held any connect time, as it then did).
        ``alias``: the ``requests`` table's alias in the query (``"r."``)."""
        return (
            f"COALESCE({alias}connect_ns, 0)" if "connect_ns" in self.columns("requests") else "0"
        )

    def profile_windows(self) -> list[tuple[int, int, int]]:
        """``(arm, start_ns, end_ns)`` of every profiling window the session stored (a sweep:
        one per level and arm); [] without one."""
        from abtui.store.profiled import windows

        return windows(self._con)

    def profiled_counts(self, wins: list[tuple[int, int, int]] | None = None) -> dict[int, int]:
        """Per arm, the measured requests a profiling window left out of the latency figures
        (:mod:`abtui.store.profiled`); {} without a window. ``wins``: these windows only."""
        from abtui.store.profiled import profiled_counts

        return profiled_counts(self._con, wins)

    def request_table(self, include_warmup: bool = False, chunks: bool = False) -> RequestTable:
        """All requests (warm-up excluded unless asked). Their chunks stay in the file unless
        ``chunks``: the table streams them from it when ITL is asked for, one pass at a time
        on a connection of its own (:mod:`abtui.store.request_table`)."""
        key = (include_warmup, chunks)
        if self._tables is not None and key in self._tables:
            return self._tables[key]
        table = read_request_table(
            self._con, self._opener(), self._copy, include_warmup, chunks, name=self.path
        )
        if self._tables is not None:
            self._tables[key] = table
        return table

    def _opener(self) -> Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]:
        """How a table read from this reader opens the file again for a pass over its chunks:
        as the reader did (read-only; this process's own instance; the private copy, kept
        while a table needs it), or a new private copy if another process locked the file."""
        copy = self._copy.path if self._copy is not None else None
        path, shared = str(copy or self.path), self._shared or copy is not None
        named = self.path  # errors name the user's file, not the copy

        @contextmanager
        def open_file() -> Iterator[duckdb.DuckDBPyConnection]:
            try:
                con = duckdb.connect(path) if shared else duckdb.connect(path, read_only=True)
            except duckdb.ConnectionException:  # this process opened it for writing since
                con = duckdb.connect(path)
            except duckdb.IOException:  # another process locked it since: read a copy
                with SessionReader(path) as rd:
                    yield rd._con
                return
            try:
                yield Checked(con, named)
            finally:
                con.close()

        return open_file

    def server_timings(self, include_warmup: bool = False) -> dict[str, np.ndarray]:
        """The servers' own per-request timings (llama.cpp), joined to their requests: columns
        req, arm, status and :data:`~abtui.store.schema.TIMING_COLUMNS` (numbers as float, NaN
        where NULL). Empty columns for a file written before the table existed."""
        num = TIMING_COLUMNS[1:-1]
        names = ("req", "arm", "status", *num, "note")
        has = self._con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'server_timings'"
        ).fetchone()[0]
        if not has:
            return {c: np.array([], dtype=float if c in num else object) for c in names}
        where = "" if include_warmup else "WHERE NOT r.warmup"
        cols = self._con.execute(
            "SELECT t.req, r.arm, r.status, "
            + ", ".join(f"t.{c}::DOUBLE AS {c}" for c in num)
            + f", t.note FROM server_timings t JOIN requests r ON t.req = r.req {where} "
            "ORDER BY t.req"
        ).fetchnumpy()
        out = {c: _plain(cols[c], np.nan if c in num else None) for c in names}
        for c in num:
            out[c] = np.asarray(out[c], dtype=float)
        return out

    def texts(self, include_warmup: bool = False) -> dict[int, str | None]:
        """Generated text per request id (None where it was not stored)."""
        where = "" if include_warmup else "WHERE NOT warmup"
        return dict(self._con.execute(f"SELECT req, text FROM requests {where}").fetchall())

    def events(self) -> list[dict]:
        rows = self._con.execute(
            "SELECT t_ns, wall, kind, arm, message FROM events ORDER BY t_ns"
        ).fetchall()
        keys = ("t_ns", "wall", "kind", "arm", "message")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def telemetry(self) -> dict[str, np.ndarray]:
        """Columns arm (NA for none), source, t_ns, metric, value, ordered by time."""
        cols = self._con.execute(
            f"SELECT COALESCE(arm, {NA}) AS arm, source, t_ns, metric, value "
            "FROM telemetry ORDER BY t_ns"
        ).fetchnumpy()
        return {k: _plain(v, np.nan if k == "value" else None) for k, v in cols.items()}

    def quality(self) -> list[dict]:
        rows = self._con.execute(
            "SELECT arm, item, run, score, correct, detail FROM quality ORDER BY arm, item, run"
        ).fetchall()
        keys = ("arm", "item", "run", "score", "correct", "detail")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def verdicts(self) -> list[dict]:
        rows = self._con.execute("SELECT created, policy, result FROM verdicts").fetchall()
        return [
            {
                "created": c,
                "policy": self._json(p, f"verdicts row {k}: policy"),
                "result": self._json(r, f"verdicts row {k}: result"),
            }
            for k, (c, p, r) in enumerate(rows, 1)
        ]

    def _json(self, text: str | None, where: str) -> Any:
        try:
            return loads(text, where)
        except Damaged as e:
            raise damaged(self.path, str(e)) from None

    def query(self, sql: str, params: Any = None) -> list[tuple]:
        """Run an ad-hoc read query (for exports and debugging)."""
        return self._con.execute(sql, params).fetchall()

    # -- end ------------------------------------------------------------------------------------

    def close(self) -> None:
        con, self._con = getattr(self, "_con", None), None
        self._tables = None if getattr(self, "_tables", None) is None else {}
        if con is not None:
            con.close()
        self._copy = None  # deleted now, or with the last table that reads its chunks

    def __enter__(self) -> SessionReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


@contextmanager
def reading(source: str | os.PathLike | SessionReader) -> Iterator[SessionReader]:
    """A reader of ``source``: the open :class:`SessionReader` given (left open: its owner
    closes it; one file opened once for a report's sections), else a new one of the path,
    closed after."""
    if isinstance(source, SessionReader):
        yield source
        return
    with SessionReader(source) as rd:
        yield rd
