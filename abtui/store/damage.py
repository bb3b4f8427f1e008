"""The validation layer of a session file: what the reader checks on open, the connection its
queries go through, and the error a damaged file is (docs/session-file.md, A damaged file).

- :func:`check_tables`, :func:`check_meta`, :func:`check_rows`: every table and column the
  code reads, every JSON value of ``meta``/``arms``/``verdicts`` (:func:`loads`: bad JSON,
  nesting over :data:`MAX_JSON_DEPTH`), the types of what reads it, arm numbers, request times
  in range. Each raises :class:`Damaged` in words; the reader turns it into :func:`damaged`.
- :class:`Checked`: a DuckDB connection whose errors (a corrupt block, an overflow) are
  :func:`damaged`, the chunk passes' too; :func:`times` checks a slice of chunk times.
- :func:`reading`: around a command that reads a file, what still fails is an error naming it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import duckdb
import numpy as np

from abtui.errors import AbtuiError, StoreError
from abtui.store.schema import DDL, STATUSES

DAMAGED_HINT = (
    "the file was cut short or edited after abtui wrote it: a copy from where it "
    "was written may be whole"
)
MAX_NS = 1 << 62  # a perf_counter_ns time is far below (146 years); differences stay in int64


def damaged(path: str | os.PathLike | None, what: str) -> StoreError:
    """The error for the session file at ``path`` that is damaged as ``what`` says."""
    return StoreError(f"session file {path} is damaged: {what}", DAMAGED_HINT)


def times(col, path: str | os.PathLike | None, what: str) -> np.ndarray:
    """A fetched column of ns times as int64, or :func:`damaged` if one is NULL or out of
    ``[0, MAX_NS)`` (a difference of two would overflow, or mean nothing)."""
    if isinstance(col, np.ma.MaskedArray) and np.ma.getmaskarray(col).any():
        raise damaged(path, f"{what} is NULL")
    t = np.asarray(col, dtype=np.int64)
    if len(t) and (int(t.min()) < 0 or int(t.max()) >= MAX_NS):
        raise damaged(path, f"{what} out of range (not a time in ns)")
    return t


MAX_JSON_DEPTH = 64  # a stored JSON value nests a few levels; far deeper is damage (or a bomb)
# columns a file of an older abtui may lack (each reader defaults them), and a table
_OPTIONAL = {
    ("requests", c)
    for c in (
        "level",
        "block",
        "connect_ns",
        "first_output_ns",
        "reasoning_tokens",
        "cached_tokens",
        "conversation_id",
        "turn",
    )
} | {("items", c) for c in ("images", "conversation_id", "turn", "think_s", "turn_messages")}
_OPTIONAL_TABLES = {"server_timings"}
# JSON types of the meta values the code reads (a key may be absent)
_META_TYPES: dict[str, type | tuple[type, ...]] = {
    "schema_version": int,
    "abtui_version": str,
    "status": str,
    "created": str,
    "ended": str,
    "session_name": str,
    "load": str,
    "mode": str,
    "spec_text": str,
    "spec": dict,
    "host": dict,
    "clock_anchor": dict,
    "levels": list,
    "segments": list,
    "generator_health": dict,
    "telemetry": dict,
    "ray": dict,
    "connections": (dict, list),
    "quality_mode": str,
    "quality_ppl": dict,
    "quality_logprobs": dict,
}
# sections of meta["spec"] read with .get(): each an object when there
_SPEC_SECTIONS = (
    "workload",
    "load",
    "request",
    "slo",
    "policy",
    "cost",
    "quality",
    "store",
    "ray",
    "telemetry",
)


_NS_COLUMNS = (
    "scheduled_ns",
    "dispatched_ns",
    "first_byte_ns",
    "done_ns",
    "first_token_ns",
    "last_token_ns",
    "connect_ns",
    "first_output_ns",
)


def _columns_of_schema() -> dict[str, list[str]]:
    out = {}
    for ddl in DDL:
        m = re.match(r"\s*CREATE TABLE IF NOT EXISTS (\w+) \((.*)\)\s*$", ddl, re.S)
        out[m[1]] = [line.split()[0] for line in m[2].split(",\n") if line.strip()]
    return out


SCHEMA_COLUMNS = _columns_of_schema()


class Damaged(Exception):
    """What is damaged, in words (raised inside the checks, turned into a StoreError)."""


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


def _depth(obj: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """How deep ``obj`` nests (lists and objects), counted up to ``limit`` + 1."""
    depth, level = 0, [obj]
    while level and depth <= limit:
        nxt = []
        for x in level:
            if isinstance(x, dict):
                nxt.extend(x.values())
            elif isinstance(x, list):
                nxt.extend(x)
        if not nxt:
            break
        depth, level = depth + 1, nxt
    return depth


def loads(text: str | None, where: str = "a JSON value") -> Any:
    """``text`` decoded; bad JSON or too deep a value is :class:`Damaged`, naming ``where``."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise Damaged(f"{where} is not JSON text")
    try:  # (Python's decoder recurses: a bracket bomb ends in RecursionError, caught)
        value = json.loads(text)
    except RecursionError:
        raise Damaged(f"{where} nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:
        raise Damaged(f"{where} is not valid JSON ({e})") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise Damaged(f"{where} nests deeper than {MAX_JSON_DEPTH} levels")
    return value


_JSON_NAMES = {
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true/false",
    type(None): "null",
}


def _type_words(t: type | tuple[type, ...]) -> str:
    ts = t if isinstance(t, tuple) else (t,)
    return " or ".join(_JSON_NAMES.get(x, x.__name__) for x in ts)


def check_meta(meta: dict) -> None:
    for key, want in _META_TYPES.items():
        v = meta.get(key)
        if v is None:
            continue
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            raise Damaged(f"meta {key!r} should be {_type_words(want)}, not {_type_words(type(v))}")
    if meta.get("status") is not None and meta["status"] not in STATUSES:
        raise Damaged(f"meta 'status' is {meta['status']!r}, not one of {', '.join(STATUSES)}")
    spec = meta.get("spec") or {}
    for sec in _SPEC_SECTIONS:
        if spec.get(sec) is not None and not isinstance(spec[sec], dict):
            raise Damaged(
                f"meta 'spec': [{sec}] should be an object, not {_type_words(type(spec[sec]))}"
            )
    if spec.get("arms") is not None and not (
        isinstance(spec["arms"], list) and all(isinstance(a, dict) for a in spec["arms"])
    ):
        raise Damaged("meta 'spec': arms should be a list of objects")
    anchor = meta.get("clock_anchor")
    if anchor is not None and not all(
        isinstance(anchor.get(k), int) and abs(anchor[k]) < 1 << 62
        for k in ("perf_counter_ns", "wall_ns")
    ):
        raise Damaged("meta 'clock_anchor' should hold perf_counter_ns and wall_ns in ns")


def table_columns(con) -> dict[str, set[str]]:
    """The file's tables, each with its columns (one catalog query)."""
    have: dict[str, set[str]] = {}
    for t, c in con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE schema_name = 'main'"
    ).fetchall():
        have.setdefault(t, set()).add(c)
    return have


def file_key(path: str | os.PathLike) -> tuple | None:
    """What identifies the file's contents as last checked: the file's and its WAL's size and
    modification time (a writer changes one or the other); None when it cannot be read."""
    try:
        st = os.stat(path)
        wal = os.stat(f"{path}.wal") if os.path.exists(f"{path}.wal") else None
    except OSError:
        return None
    return (
        os.path.realpath(path),
        st.st_size,
        st.st_mtime_ns,
        wal and (wal.st_size, wal.st_mtime_ns),
    )


def check_tables(have: dict[str, set[str]]) -> None:
    """Every table and column the code reads is there (older files lack a few, defaulted);
    ``have``: :func:`table_columns`."""
    tables = set(have)
    for table, cols in SCHEMA_COLUMNS.items():
        if table not in tables:
            if table in _OPTIONAL_TABLES:
                continue
            raise Damaged(f"it has no {table} table")
        missing = [c for c in cols if c not in have.get(table, ()) and (table, c) not in _OPTIONAL]
        if missing:
            raise Damaged(f"table {table} has no column {', '.join(missing)}")


def check_rows(con, have: dict[str, set[str]]) -> None:
    """The JSON of arms and verdicts, and that every request belongs where it
    says (an arm of the file)."""
    arms = set()
    rows = con.execute("SELECT arm, config FROM arms").fetchall()
    for arm, config in rows:
        if arm is None or not 0 <= arm < 1 << 16:
            raise Damaged(f"arms: arm number {arm!r} (0 is the baseline, then 1, 2, …)")
        if not isinstance(loads(config, f"arms: the config of arm {arm}") or {}, dict):
            raise Damaged(f"arms: the config of arm {arm} should be an object")
        arms.add(arm)
    n_arms = len(rows)
    if arms != set(range(n_arms)):
        raise Damaged(f"arms are numbered {sorted(arms)}, not 0 to {n_arms - 1} once each")
    for k, (policy, result) in enumerate(
        con.execute("SELECT policy, result FROM verdicts").fetchall(), 1
    ):
        for col, text in (("policy", policy), ("result", result)):
            if not isinstance(loads(text, f"verdicts row {k}: {col}") or {}, dict):
                raise Damaged(f"verdicts row {k}: {col} should be an object")
    # times are differenced in SQL: one out of range (a bit flipped, an edit) overflows. One
    # min/max pass (DuckDB answers it from its column statistics: ~5 ms for 200k requests)
    cols = [c for c in _NS_COLUMNS if c in have["requests"]]
    got = con.execute(
        "SELECT min(arm), max(arm), "
        + ", ".join(f"min({c}), max({c})" for c in cols)
        + " FROM requests"
    ).fetchone()
    for c, lo, hi in zip(cols, got[2::2], got[3::2], strict=True):
        if lo is not None and not (0 <= lo and hi < MAX_NS):
            raise Damaged(
                f"requests: {c} holds {lo if lo < 0 else hi}, out of range (not a time in ns)"
            )
    if n_arms and got[0] is not None and (got[0] < 0 or got[1] >= n_arms):
        stray = got[0] if got[0] < 0 else got[1]
        raise Damaged(f"requests name arm {stray}, which table arms does not have")


class Checked:
    """A DuckDB connection whose errors (executing or fetching) are :func:`damaged` errors
    naming the file: what the reader and the passes over a table's chunks query through."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: str | os.PathLike) -> None:
        self._con, self._path = con, path

    def _run(self, fn, *args):
        try:
            return fn(*args)
        except duckdb.Error as e:
            raise damaged(self._path, first_line(e)) from e

    def execute(self, sql: str, params: Any = None) -> Checked:
        self._run(self._con.execute, sql, params) if params is not None else self._run(
            self._con.execute, sql
        )
        return self

    def fetchall(self) -> list:
        return self._run(self._con.fetchall)

    def fetchone(self):
        return self._run(self._con.fetchone)

    def fetchnumpy(self) -> dict:
        return self._run(self._con.fetchnumpy)

    def close(self) -> None:
        self._con.close()

    def __getattr__(self, name: str):
        return getattr(self._con, name)


@contextmanager
def reading(path: str | os.PathLike) -> Iterator[None]:
    """Around a command that reads the session file at ``path``: an error that is not abtui's
    own — a value of a damaged file that the reader's checks did not foresee — becomes a
    :class:`~abtui.errors.StoreError` naming the file (exit code 2), not a traceback.
    ``ABTUI_DEBUG=1`` lets it through, traceback and all."""
    try:
        yield
    except AbtuiError:
        raise
    except Exception as e:
        if os.environ.get("ABTUI_DEBUG") == "1":
            raise
        raise StoreError(
            f"cannot read session file {path}: {type(e).__name__}: {first_line(e)}",
            "the file may be damaged (cut short or edited); if it is whole, this is a bug in "
            "abtui: ABTUI_DEBUG=1 shows where",
        ) from e
