"""Write a session file: create it, then append batches that are durable at every flush.

The writer lives in the main process (the load generators send it record batches). It is not
thread-safe: use it from one thread.

Durability: :meth:`SessionWriter.flush` inserts everything buffered in one transaction and
commits it, so the rows are in DuckDB's write-ahead log (``<file>.wal``) when it returns. A process
killed right after (SIGKILL, OOM, power cut after the OS wrote the WAL) leaves a file that opens
with every flushed row: DuckDB replays the WAL on open. Callers call :meth:`maybe_flush` often;
it flushes at most every ``FLUSH_INTERVAL_S``, so a crash loses at most about that much.

Bulk inserts use DuckDB replacement scans of local dicts of numpy arrays
(``INSERT INTO chunks SELECT ... FROM chunk_df``), about 100x faster than ``executemany``;
NULL-able integer columns are numpy masked arrays (DuckDB maps masked entries to NULL).

Secrets never reach the file: every meta value, event message and arm row passes the writer's
:class:`~abtui.client.redact.Scrubber` (the run's secret values, credential keys dropped at any
depth, URL user info cut), the one scrubber of :mod:`abtui.client.redact`. Request records are
scrubbed by the load generators, before they leave their process.

A full disk (or an I/O error) while running ends the session ``write_failed``, recorded in the
file with every earlier commit (:mod:`abtui.store.ending`), and the run with
:class:`~abtui.errors.StoreWriteError` (exit code 5), not as a killed session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from abtui import __version__
from abtui.client.images import elide
from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.client.redact import Scrubber, scrub_url
from abtui.errors import StoreError, StoreWriteError
from abtui.hardware.host import host_fingerprint
from abtui.store.columns import nullable, objects, record_columns, timing_rows
from abtui.store.ending import STORAGE_ERRORS, close_quietly, make_reserve, record_end
from abtui.store.schema import (
    COMPLETE,
    DDL,
    FAILED,
    INTERRUPTED,
    ITEM_COLUMNS,
    REQUEST_COLUMNS,
    RUNNING,
    SCHEMA_VERSION,
    STATUSES,
    TIMING_COLUMNS,
    WRITE_FAILED,
)

FLUSH_INTERVAL_S = 0.5  # maybe_flush flushes when this much time passed since the last flush
FLUSH_RECORDS = 20_000  # ... or when this many requests are buffered
FLUSH_CHUNKS = 500_000  # ... or this many chunks
# After each checkpoint DuckDB keeps the blocks it wrote cached until its memory limit (80 % of
# RAM) pushes them out, so an append-only writer grew by about the file's size (docs/
# reliability.md, Soak). A momentary limit this low evicts them; see _drop_block_cache.
CACHE_TRIM_LIMIT = "8MB"
# While items are written: unlimited, DuckDB kept every written prompt's blocks (100,000 items
# of 512 tokens: 614 MB); under this it evicts them (64 MB: 186-190, 32 MB: 157-158; ~0.5 s slower).
ITEMS_MEMORY_LIMIT = "32MB"

# meta keys that hold configuration, whose credential-named keys are dropped (api_key, hf_token,
# headers); every other value keeps its keys (quality_logprobs is keyed by token text) and has
# only its strings scrubbed
CONFIG_META = ("spec",)


def _now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def _if_turn(it: Item, value):
    """``value`` for a conversation's turn, None (NULL) for a request on its own."""
    return None if it.conversation is None else value


def added_messages(it: Item) -> list[dict] | None:
    """The messages ``it`` stores, each image's data URL elided (only what it was): for a
    conversation's turn after the first whose prompt carries its history (``turn_messages >
    0``), only what its prompt adds to the previous turn's — the answer to that turn, then its
    own messages — so a conversation's text is stored once, not once per later turn (the
    reader rebuilds the whole prompt); else all."""
    msgs = elide(it.messages, it.images)  # over the whole prompt: images are counted in it
    if msgs is None or it.conversation is None or it.turn == 0 or not it.turn_messages:
        return msgs
    return msgs[-(it.turn_messages + 1) :]


def _stored_messages(it: Item, dumps) -> str | None:
    msgs = added_messages(it)
    return None if msgs is None else dumps(msgs)


class SessionWriter:
    """Creates a session file and appends to it; see the module docstring.

    Use as a context manager: on a normal exit the session is closed "complete"; on
    ``KeyboardInterrupt`` "interrupted"; on any other exception "failed" (buffered rows are
    flushed in every case).
    """

    def __init__(
        self, path: str | os.PathLike, *, overwrite: bool = False, scrubber: Scrubber | None = None
    ) -> None:
        self.path = Path(path)
        # what it writes (not the records: their generators scrubbed them) passes this; a run
        # gives it its secret values (abtui.client.redact.secrets_of)
        self.scrubber = scrubber or Scrubber()
        wal = Path(str(self.path) + ".wal")
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a directory", "give a file name such as x.duckdb")
        self._reserve: Path | None = Path(str(self.path) + ".reserve")
        if self.path.exists() or wal.exists():
            if not overwrite:
                raise StoreError(
                    f"session file {self.path} already exists",
                    "choose another session name, or pass --overwrite to replace it",
                )
            for p in (self.path, wal):
                p.unlink(missing_ok=True)
        self._reserve.unlink(missing_ok=True)  # a killed run's, if any
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._con: duckdb.DuckDBPyConnection | None = duckdb.connect(str(self.path))
            self._con.execute("BEGIN TRANSACTION")  # one commit (~30 ms less than one each)
            for ddl in DDL:
                self._con.execute(ddl)
            self._con.execute("COMMIT")
        except (OSError, duckdb.Error) as e:
            raise StoreError(
                f"cannot create session file {self.path}: {e}",
                "check that the directory is writable and the disk is not full",
            ) from e
        self._reserve = make_reserve(self._reserve)
        self._records: list[RequestRecord] = []
        self._texts: list[str | None] = []
        self._n_chunks = 0
        self._events: list[tuple] = []
        self._telemetry: list[tuple] = []
        self._next_req = 0
        self._last_flush = time.monotonic()
        self._wal_bytes = 0  # size of the WAL after the last flush (it shrinks at a checkpoint)
        self.n_written = 0  # requests flushed so far
        anchor_ns = time.perf_counter_ns()
        wall_ns = time.time_ns()
        self.write_meta(
            abtui_version=__version__,
            schema_version=SCHEMA_VERSION,
            created=_now_iso(),
            host=host_fingerprint(),
            clock_anchor={
                "perf_counter_ns": anchor_ns,
                "wall_ns": wall_ns,
                "wall": datetime.fromtimestamp(wall_ns / 1e9).astimezone().isoformat(),
            },
            status=RUNNING,
        )

    # -- small, immediate writes ------------------------------------------------------------

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise StoreError(f"session file {self.path} is already closed")
        return self._con

    def _execute(self, sql: str, params: Any = None) -> None:
        try:
            self.con.execute(sql, params)
        except duckdb.Error as e:
            raise StoreError(f"cannot write session file {self.path}: {e}") from e

    def write_meta(self, **kv: Any) -> None:
        """Set meta keys (values are stored as JSON text), committed at once."""
        scrub = self.scrubber  # a config's credential keys dropped; data keeps its keys
        rows = [
            [k, json.dumps(scrub(v, keys=k in CONFIG_META), default=str)] for k, v in kv.items()
        ]
        with self._transaction() as con:
            con.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", rows)

    def set_status(self, status: str) -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown session status {status!r}; expected one of {STATUSES}")
        self.write_meta(status=status)

    def write_arms(self, arms: list[dict]) -> None:
        """One row per arm: keys arm, name, role, url, model, api, config (dict).

        Any other key goes into config. Secrets are dropped from config and URL.
        """
        cols = ("arm", "name", "role", "url", "model", "api")
        rows = []
        scrub = self.scrubber
        for a in arms:
            config = dict(a.get("config") or {})
            config.update({k: v for k, v in a.items() if k not in cols and k != "config"})
            rows.append(
                [
                    int(a["arm"]),
                    *(scrub(scrub_url(a.get(k)) if k == "url" else a.get(k)) for k in cols[1:]),
                    json.dumps(scrub(config), default=str),
                ]
            )
        if rows:
            with self._transaction() as con:
                con.executemany("INSERT INTO arms VALUES (?, ?, ?, ?, ?, ?, ?)", rows)

    def write_items(self, items: list[Item]) -> None:
        """The workload (or a batch of it: a session streams its items), in one bulk insert,
        under :data:`ITEMS_MEMORY_LIMIT`."""
        dumps = json.dumps
        item_df = {  # noqa: F841 (read by the replacement scan below)
            "item": np.fromiter((it.index for it in items), np.int32, len(items)),
            "id": objects([it.id for it in items]),
            "arrival_s": np.fromiter((it.arrival_s for it in items), np.float64, len(items)),
            "prompt": objects([it.prompt for it in items]),
            "messages": objects([_stored_messages(it, dumps) for it in items]),
            "max_tokens": nullable([it.max_tokens for it in items], np.int32),
            "n_input": nullable([it.n_input for it in items], np.int32),
            "expected": objects([it.expected for it in items]),
            "suite": objects([it.suite for it in items]),
            "tags": objects([dumps(list(it.tags or [])) for it in items]),
            "images": objects([dumps(it.images) if it.images else None for it in items]),
            "conversation_id": objects([it.conversation for it in items]),
            "turn": nullable([_if_turn(it, it.turn) for it in items], np.int32),
            "think_s": nullable([_if_turn(it, it.think_s) for it in items], np.float64),
            "turn_messages": nullable([_if_turn(it, it.turn_messages) for it in items], np.int32),
        }
        cols = ", ".join(ITEM_COLUMNS)
        sql = f"INSERT INTO items ({cols}) SELECT {cols} FROM item_df"
        limited = self._limit_memory(ITEMS_MEMORY_LIMIT)
        try:
            with self._transaction() as con:
                con.execute(sql)
        except duckdb.OutOfMemoryException:
            if not limited:
                raise
            self._limit_memory(None)  # a batch the limit cannot hold: again, with all of it
            with self._transaction() as con:
                con.execute(sql)
        finally:
            self._limit_memory(None)

    def _limit_memory(self, limit: str | None) -> bool:
        """Set DuckDB's memory limit (None: back to its default); whether it was set (not on a
        file a failed write closed)."""
        if self._con is None:
            return False
        try:
            self._con.execute(
                "RESET memory_limit" if limit is None else f"SET memory_limit = '{limit}'"
            )
        except duckdb.Error:
            return False
        return True

    def write_quality(self, rows: Iterable[dict]) -> None:
        """Quality rows: keys arm, item, run (default 0), score, correct, detail (str or dict)."""
        data = [
            [
                int(r["arm"]),
                int(r["item"]),
                int(r.get("run", 0)),
                r.get("score"),
                r.get("correct"),
                r["detail"] if isinstance(r.get("detail"), str | None) else json.dumps(r["detail"]),
            ]
            for r in rows
        ]
        if data:
            with self._transaction() as con:
                con.executemany("INSERT INTO quality VALUES (?, ?, ?, ?, ?, ?)", data)

    def write_verdict(self, policy: dict, result: dict) -> None:
        self._execute(
            "INSERT INTO verdicts VALUES (?, ?, ?)",
            [_now_iso(), json.dumps(policy, default=str), json.dumps(result, default=str)],
        )

    # -- buffered writes ----------------------------------------------------------------------

    def add_records(self, records: list[RequestRecord], store_text: bool = True) -> None:
        """Buffer request records (and their chunks) until the next flush."""
        self.con  # noqa: B018 (raises StoreError once closed)
        self._records.extend(records)
        self._texts.extend(r.text if store_text else None for r in records)
        self._n_chunks += sum(len(r.chunk_ns) for r in records)

    def event(self, kind: str, message: str, arm: int | None = None) -> None:
        """Buffer an event (e.g. "start", "arm_unhealthy", "interrupt") with the time now."""
        self.con  # noqa: B018 (raises StoreError once closed)
        message = self.scrubber.text(str(message))
        self._events.append((time.perf_counter_ns(), _now_iso(), kind, arm, message))

    def add_telemetry(self, rows: Iterable[tuple[int | None, str, int, str, float]]) -> None:
        """Buffer telemetry samples: (arm, source, t_ns, metric, value)."""
        self._telemetry.extend(rows)

    @property
    def pending(self) -> int:
        """Buffered rows not yet flushed."""
        return len(self._records) + len(self._events) + len(self._telemetry)

    def maybe_flush(self) -> bool:
        """Flush if ``FLUSH_INTERVAL_S`` passed since the last flush or the buffer is large."""
        if not self.pending:
            return False
        big = len(self._records) >= FLUSH_RECORDS or self._n_chunks >= FLUSH_CHUNKS
        if big or time.monotonic() - self._last_flush >= FLUSH_INTERVAL_S:
            self.flush()
            return True
        return False

    def flush(self) -> None:
        """Write everything buffered in one transaction and commit it (durable on return)."""
        self._last_flush = time.monotonic()
        if not self.pending:
            return
        records, texts = self._records, self._texts
        events, telemetry = self._events, self._telemetry
        # On failure the buffers are kept (the transaction is rolled back), so a retry can work.
        with self._transaction() as con:
            if records:
                req_df, chunk_df = record_columns(records, texts, self._next_req)
                cols = ", ".join(REQUEST_COLUMNS)
                con.execute(f"INSERT INTO requests ({cols}) SELECT {cols} FROM req_df")
                con.execute(
                    "INSERT INTO chunks (req, seq, t_ns, n_tokens) "
                    "SELECT req, seq, t_ns, n_tokens FROM chunk_df"
                )
                timings = timing_rows(records, self._next_req)
                if timings:
                    slots = ", ".join("?" * len(TIMING_COLUMNS))
                    con.executemany(
                        f"INSERT INTO server_timings ({', '.join(TIMING_COLUMNS)}) "
                        f"VALUES ({slots})",
                        timings,
                    )
            if events:
                con.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", events)
            if telemetry:
                tel_df = {  # noqa: F841 (read by the replacement scan below)
                    "arm": nullable([t[0] for t in telemetry], np.int32),
                    "source": objects([t[1] for t in telemetry]),
                    "t_ns": np.fromiter((t[2] for t in telemetry), np.int64, len(telemetry)),
                    "metric": objects([t[3] for t in telemetry]),
                    "value": np.fromiter(
                        (np.nan if t[4] is None else t[4] for t in telemetry),
                        np.float64,
                        len(telemetry),
                    ),
                }
                con.execute(
                    "INSERT INTO telemetry (arm, source, t_ns, metric, value) "
                    "SELECT arm, source, t_ns, metric, value FROM tel_df"
                )
        self._next_req += len(records)
        self.n_written += len(records)
        self._records, self._texts, self._n_chunks = [], [], 0
        self._events, self._telemetry = [], []
        try:
            wal = Path(str(self.path) + ".wal").stat().st_size
        except OSError:
            wal = 0
        if wal < self._wal_bytes:  # DuckDB checkpointed at this commit: the rows are in the file
            self._drop_block_cache()
        self._wal_bytes = wal

    def _drop_block_cache(self) -> None:
        """Evict DuckDB's cached copies of blocks already in the file (bounded memory): right
        after a checkpoint every row is in the file, so only clean copies go (nothing spilled or
        lost); the default limit is back before any other statement (queries, inserts)."""
        self._limit_memory(CACHE_TRIM_LIMIT)  # it evicts what it can; what is pinned stays
        self._limit_memory(None)

    @contextmanager
    def _transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        con = self.con
        try:
            con.execute("BEGIN TRANSACTION")
            yield con
            con.execute("COMMIT")
        except BaseException as e:
            try:
                con.execute("ROLLBACK")
            except duckdb.Error:
                pass
            if isinstance(e, STORAGE_ERRORS):
                raise self._write_failed(e) from e
            if isinstance(e, duckdb.Error):
                raise StoreError(
                    f"cannot write session file {self.path}: {e}",
                    "check free disk space and that nothing else writes the file",
                ) from e
            raise

    def _write_failed(self, e: Exception) -> StoreWriteError:
        """A write failed for want of disk (or an I/O error): drop what is buffered, free the
        reserve, record status ``write_failed`` with the error, close. The error to raise."""
        why = " ".join(str(e).split())[:300]
        self._records, self._texts, self._n_chunks = [], [], 0
        self._events, self._telemetry = [], []
        if self._reserve is not None:
            self._reserve.unlink(missing_ok=True)
            self._reserve = None
        con, recorded = record_end(self._con, self.path, WRITE_FAILED, why, _now_iso())
        close_quietly(con)
        self._con = None
        kept = f"the {self.n_written:,} requests committed before are kept"
        if recorded:
            hint = (
                f"free disk space (or give --sessions-dir on another disk) and run again; "
                f"{kept}, the session marked {WRITE_FAILED} (`abtui report {self.path}`)"
            )
        else:
            hint = (
                f"free disk space and run again; {kept}, but not even the session's end "
                "could be written: `abtui report` will call it killed"
            )
        return StoreWriteError(f"cannot write session file {self.path}: {why}", hint)

    # -- end ----------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._con is None

    def close(self, status: str = COMPLETE) -> None:
        """Flush, record ``status`` and the end time, checkpoint and close. Idempotent."""
        if self._con is None:
            return
        try:
            self.flush()
            self.write_meta(status=status, ended=_now_iso())
            with contextlib.suppress(duckdb.Error):  # a full disk: every commit is in the WAL
                self._con.execute("CHECKPOINT")
        finally:
            close_quietly(self._con)
            self._con = None
            if self._reserve is not None:
                self._reserve.unlink(missing_ok=True)
                self._reserve = None

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            status = COMPLETE
        elif issubclass(exc_type, KeyboardInterrupt | asyncio.CancelledError):
            status = INTERRUPTED
        else:
            status = FAILED
        if exc_type is not None and self._con is not None:
            self.event(status, f"{exc_type.__name__}: {exc}")
        self.close(status)
        return False
