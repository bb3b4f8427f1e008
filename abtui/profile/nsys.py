"""Nsight Systems: the SQLite export (``nsys export --type sqlite``) and the CUDA GPU kernel
summary (``nsys stats --report cuda_gpu_kern_sum --format csv``).

SQLite, as the export schema reference describes it (read on its 2021.5 page, and checked
against current SQL recipes that join the same columns; columns abtui does not use are
ignored, optional ones may be missing): ``StringIds(id, value)``;
``CUPTI_ACTIVITY_KIND_KERNEL(start, end, deviceId, streamId, correlationId, globalPid,
shortName, demangledName)`` with the names as ``StringIds`` ids and times in ns;
``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET`` (``start, end, deviceId, streamId,
correlationId``); ``CUPTI_ACTIVITY_KIND_RUNTIME(start, correlationId, globalTid)``, the launch
calls; ``NVTX_EVENTS(start, end, text, textId)``, the ranges that hold the steps (vLLM's
``VLLM_NVTX_SCOPES_FOR_PROFILING``, a user's own). A table the report lacks is skipped, except
the kernels'.

The kernel summary CSV (the ``cuda_gpu_kern_sum`` report of Nsight Systems 2024: ``Time
(%)``, ``Total Time (ns)``, ``Instances``, ``Avg (ns)``, ``Med (ns)``, ``Min (ns)``, ``Max
(ns)``, ``StdDev (ns)``, ``Name``; ``--timeunit`` changes the unit, and a ``Total Time``
without one is read as ns): totals per kernel name, no timeline.
"""

from __future__ import annotations

import csv
import io
import re
import sqlite3
from pathlib import Path

from abtui.profile.model import Activity, ProfileError, Trace
from abtui.profile.phases import find_steps

_PID_MASK = ~0xFFFFFF  # a serialized globalTid with its thread bits off is its globalPid


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f'PRAGMA table_info("{table}")')}


def _num(v: object, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ProfileError(f"{where} is {type(v).__name__} {str(v)[:40]!r}, not a number")
    return float(v)


def _strings(db: sqlite3.Connection, tables: set[str]) -> dict[int, str]:
    if "StringIds" not in tables:
        return {}
    return {i: str(v) for i, v in db.execute("SELECT id, value FROM StringIds")}


def _kernel_name(row: dict, strings: dict[int, str]) -> str:
    for key in ("shortName", "demangledName", "mangledName"):
        v = row.get(key)
        if isinstance(v, int) and v in strings:
            return strings[v]
        if isinstance(v, str) and v:
            return v
    return "(unnamed kernel)"


def _launches(db: sqlite3.Connection, tables: set[str]) -> dict[tuple, float]:
    """(correlationId, globalPid or None) → the launch call's start, in ns."""
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        return {}
    cols = _columns(db, "CUPTI_ACTIVITY_KIND_RUNTIME")
    if not {"start", "correlationId"} <= cols:
        return {}
    tid = "globalTid" if "globalTid" in cols else "NULL"
    out: dict[tuple, float] = {}
    for start, corr, gtid in db.execute(
        f"SELECT start, correlationId, {tid} FROM CUPTI_ACTIVITY_KIND_RUNTIME"
    ):
        if isinstance(start, int | float):
            pid = gtid & _PID_MASK if isinstance(gtid, int) else None
            out[(corr, pid)] = float(start)
            out.setdefault((corr, None), float(start))
    return out


def _device(db, table: str, kind: str, where: str, strings, launches) -> list[Activity]:
    cols = _columns(db, table)
    need = {"start", "end"}
    if not need <= cols:
        raise ProfileError(f"{where}: table {table} lacks {', '.join(sorted(need - cols))}")
    db.row_factory = sqlite3.Row
    out = []
    for n, r in enumerate(db.execute(f"SELECT * FROM {table} ORDER BY start"), 1):
        row = dict(r)
        start = _num(row["start"], f"{where}: {table} row {n}: start")
        end = _num(row["end"], f"{where}: {table} row {n}: end")
        if end < start:
            raise ProfileError(f"{where}: {table} row {n}: end before start")
        name = _kernel_name(row, strings) if kind == "kernel" else _copy_name(kind, row)
        corr, pid = row.get("correlationId"), row.get("globalPid")
        pid = pid & _PID_MASK if isinstance(pid, int) else None
        anchor = launches.get((corr, pid), launches.get((corr, None)))
        lane = f"{row.get('deviceId', '?')}/{row.get('streamId', '?')}"
        out.append(
            Activity(
                name,
                kind,
                start / 1e3,
                end / 1e3,
                (end - start) / 1e3,
                lane,
                None if anchor is None else anchor / 1e3,
            )
        )
    db.row_factory = None
    return out


def _copy_name(kind: str, row: dict) -> str:
    return "Memset" if kind == "memset" else f"Memcpy (copyKind {row.get('copyKind', '?')})"


def _nvtx(db, tables: set[str], strings: dict[int, str]) -> list[tuple[str, float, float]]:
    if "NVTX_EVENTS" not in tables:
        return []
    cols = _columns(db, "NVTX_EVENTS")
    text = "text" if "text" in cols else "NULL"
    text_id = "textId" if "textId" in cols else "NULL"
    out = []
    for start, end, t, tid in db.execute(
        f"SELECT start, end, {text}, {text_id} FROM NVTX_EVENTS WHERE end IS NOT NULL"
    ):
        name = t if isinstance(t, str) else strings.get(tid) if isinstance(tid, int) else None
        if name and isinstance(start, int | float) and isinstance(end, int | float):
            if end > start:
                out.append((name, start / 1e3, end / 1e3))
    return out


def _export_version(db, tables: set[str]) -> str:
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in tables and {"name", "value"} <= _columns(db, table):
            rows = dict(db.execute(f"SELECT name, value FROM {table}"))
            v = rows.get("EXPORT_SCHEMA_VERSION")
            if v is not None:
                return f"export schema {str(v)[:20]}"
    return "export schema (version not stated)"


def read_nsys_sqlite(path: Path, where: str) -> Trace:
    """A Trace from an ``nsys export --type sqlite`` file (opened read-only)."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return _read_db(db, where)
        finally:
            db.close()
    except sqlite3.Error as e:
        raise ProfileError(f"{where}: not a readable SQLite export ({e})") from None


def _read_db(db: sqlite3.Connection, where: str) -> Trace:
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        raise ProfileError(
            f"{where}: no CUPTI_ACTIVITY_KIND_KERNEL table: the report holds no CUDA kernels",
            "profile with `nsys profile --trace=cuda,nvtx …`, then `nsys export --type sqlite`",
        )
    strings = _strings(db, tables)
    launches = _launches(db, tables)
    acts = _device(db, "CUPTI_ACTIVITY_KIND_KERNEL", "kernel", where, strings, launches)
    for table, kind in (
        ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
        ("CUPTI_ACTIVITY_KIND_MEMSET", "memset"),
    ):
        if table in tables:
            acts += _device(db, table, kind, where, strings, launches)
    acts.sort(key=lambda a: a.start)
    notes = (
        [] if launches else ["no CUDA runtime table: kernels placed in steps by their own start"]
    )
    return Trace(
        path=where,
        format="nsys-sqlite",
        version=_export_version(db, tables),
        side="device",
        timeline=True,
        activities=acts,
        steps=find_steps(_nvtx(db, tables, strings)),
        notes=notes,
    )


# ----------------------------------------------------------------- cuda_gpu_kern_sum (CSV)

_UNIT = {"ns": 1e-3, "us": 1.0, "μs": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}
_TOTAL = re.compile(r"Total Time(?: \((ns|us|μs|µs|ms|s)\))?$")


def kern_sum_header(row: list[str]) -> bool:
    cells = [c.strip() for c in row]
    return "Name" in cells and "Instances" in cells and any(_TOTAL.match(c) for c in cells)


def read_kern_sum(text: str, where: str) -> Trace:
    """A Trace (no timeline) from ``nsys stats --report cuda_gpu_kern_sum --format csv``."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, r in enumerate(rows[:50]) if kern_sum_header(r)), None)
    if start is None:
        raise ProfileError(
            f"{where}: no cuda_gpu_kern_sum header (Total Time, Instances, Name) in its first 50 lines"
        )
    header = [c.strip() for c in rows[start]]
    name_at, count_at = header.index("Name"), header.index("Instances")
    total_at = next(i for i, c in enumerate(header) if _TOTAL.match(c))
    scale = _UNIT[_TOTAL.match(header[total_at]).group(1) or "ns"]
    acts = []
    for n, row in enumerate(rows[start + 1 :], start + 2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise ProfileError(
                f"{where}: line {n}: {len(row)} fields, the header has {len(header)}"
            )
        total = _csv_number(row[total_at], f"{where}: line {n}: {header[total_at]}")
        _csv_number(row[count_at], f"{where}: line {n}: Instances")
        acts.append(Activity(row[name_at], "kernel", 0.0, 0.0, total * scale))
    return Trace(
        path=where,
        format="nsys-kern-sum",
        version="cuda_gpu_kern_sum CSV (Nsight Systems 2024 columns)",
        side="device",
        timeline=False,
        activities=acts,
        notes=["a summary: totals per kernel, no timeline (no steps, no gaps)"],
    )


def _csv_number(cell: str, where: str) -> float:
    try:
        v = float(cell.strip().replace(",", ""))
    except ValueError:
        raise ProfileError(f"{where} is {cell[:40]!r}, not a number") from None
    if not (v >= 0 and v != float("inf")):
        raise ProfileError(f"{where} is {cell[:40]!r}: not a finite number >= 0")
    return v
