"""Writers of the formats the readers take, from a plain description of a timeline: for the
tests' fixtures, and for whatever simulates a server's profile.

Each follows the schema its reader's module names (:mod:`.chrome`, :mod:`.nsys`, :mod:`.ncu`):
Kineto's Chrome trace (complete events, µs, a ``cuda_runtime`` launch call per kernel tied by
``args.correlation``, ``gpu_user_annotation`` projections), Nsight Systems' SQLite export (ns,
names through ``StringIds``) and ``cuda_gpu_kern_sum`` CSV, Nsight Compute's CSV (both pages).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import sqlite3
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Kernel:
    """A device activity: ``cat`` ``kernel``, ``gpu_memcpy`` or ``gpu_memset``; ``launch``
    the host time of its launch call (``None``: no launch recorded). Times in µs."""

    name: str
    start: float
    dur: float
    launch: float | None = None
    cat: str = "kernel"
    stream: int = 7


@dataclass(frozen=True)
class Op:
    """A host operator (``cpu_op``)."""

    name: str
    start: float
    dur: float
    tid: int = 1


@dataclass(frozen=True)
class Annotation:
    """A ``record_function`` range (``user_annotation``) and, with ``gpu``, its projection on
    the device (``gpu_user_annotation``)."""

    name: str
    start: float
    dur: float
    gpu: bool = False


PID = 4242


def chrome_trace(
    kernels: list[Kernel] = (),
    ops: list[Op] = (),
    annotations: list[Annotation] = (),
    meta: dict | None = None,
) -> dict:
    """A Kineto-style Chrome trace document."""
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}}
    ]
    for a in annotations:
        events.append(_x("user_annotation", a.name, PID, 1, a.start, a.dur, {}))
        if a.gpu:
            events.append(_x("gpu_user_annotation", a.name, 0, 7, a.start, a.dur, {}))
    for o in ops:
        events.append(_x("cpu_op", o.name, PID, o.tid, o.start, o.dur, {"External id": 1}))
    for corr, k in enumerate(kernels, 1):
        args = {"device": 0, "stream": k.stream, "correlation": corr}
        if k.launch is not None:
            events.append(_x("cuda_runtime", "cudaLaunchKernel", PID, 1, k.launch, 2.0, args))
        events.append(_x(k.cat, k.name, 0, k.stream, k.start, k.dur, args))
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Simulated GPU"}]}
    doc.update(meta or {})
    doc |= {"traceEvents": events, "displayTimeUnit": "ms"}
    return doc


def _x(cat: str, name: str, pid: int, tid: int, ts: float, dur: float, args: dict) -> dict:
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    return event | ({"args": args} if args else {})


def write_chrome(path: str | Path, doc: dict | list) -> Path:
    """Write ``doc`` as JSON, gzipped when the name ends in ``.gz``."""
    p = Path(path)
    data = json.dumps(doc).encode()
    p.write_bytes(gzip.compress(data) if p.suffix == ".gz" else data)
    return p


_NSYS_TABLES = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
    shortName INTEGER NOT NULL, mangledName INTEGER, gridX INTEGER, blockX INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
    eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER,
    nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL,
    copyKind INTEGER NOT NULL);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
    rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
    endGlobalTid INTEGER, textId INTEGER REFERENCES StringIds(id), domainId INTEGER);
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
"""

_GLOBAL_PID = 4242 << 24  # a serialized globalPid: the process id above 24 thread bits


def ns(us: float) -> int:
    return round(us * 1000)


def write_nsys_sqlite(
    path: str | Path, kernels: list[Kernel], ranges: list[Annotation] = (), runtime: bool = True
) -> Path:
    """An ``nsys export --type sqlite``-shaped file: kernels (and ``gpu_memcpy`` ones as
    MEMCPY rows), their launch calls, NVTX push/pop ranges (µs in, ns stored)."""
    p = Path(path)
    p.unlink(missing_ok=True)
    db = sqlite3.connect(p)
    db.execute("PRAGMA synchronous = OFF")  # a fixture: no need to wait for the disk
    db.executescript(_NSYS_TABLES)
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        if text not in strings:
            strings[text] = len(strings) + 1
            db.execute("INSERT INTO StringIds VALUES (?, ?)", (strings[text], text))
        return strings[text]

    launch = sid("cudaLaunchKernel_v7000")
    for corr, k in enumerate(kernels, 1):
        if k.cat == "gpu_memcpy":
            db.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,0,1,?,?,?,1024,2)",
                (ns(k.start), ns(k.start + k.dur), k.stream, corr, _GLOBAL_PID),
            )
        else:
            name = sid(k.name)
            db.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,0,1,?,?,?,?,?,NULL,1,128)",
                (ns(k.start), ns(k.start + k.dur), k.stream, corr, _GLOBAL_PID, name, name),
            )
        if runtime and k.launch is not None:
            db.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,1,?,?,?,0,NULL)",
                (ns(k.launch), ns(k.launch + 2), _GLOBAL_PID + 7, corr, launch),
            )
    for r in ranges:
        db.execute(
            "INSERT INTO NVTX_EVENTS VALUES (?,?,59,NULL,0,0,NULL,?,NULL,?,0)",
            (ns(r.start), ns(r.start + r.dur), _GLOBAL_PID + 7, sid(r.name)),
        )
    db.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.11.1')")
    db.commit()
    db.close()
    return p


def kern_sum_csv(kernels: list[Kernel]) -> str:
    """``nsys stats --report cuda_gpu_kern_sum --format csv`` of these kernels."""
    groups: dict[str, list[int]] = defaultdict(list)
    for k in kernels:
        if k.cat == "kernel":
            groups[k.name].append(round(k.dur * 1000))
    total = sum(sum(v) for v in groups.values()) or 1
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    w.writerow(
        ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)"]
        + ["Max (ns)", "StdDev (ns)", "Name"]
    )
    for name, d in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        s = sorted(d)
        w.writerow(
            [f"{100 * sum(d) / total:.1f}", sum(d), len(d), f"{sum(d) / len(d):.1f}"]
            + [s[len(s) // 2], s[0], s[-1], "0.0", name]
        )
    return out.getvalue()


@dataclass(frozen=True)
class Launch:
    """One kernel launch as Nsight Compute measures it (``None``: metric not collected)."""

    name: str
    duration_us: float | None
    dram_pct: float | None
    occupancy_pct: float | None


_NCU_HEAD = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context"]
_NCU_HEAD += ["Stream", "Block Size", "Grid Size", "Device", "CC"]


def _grouped(v: float) -> str:
    return f"{v:,.2f}"


def ncu_csv(launches: list[Launch], page: str = "details") -> str:
    """``ncu --csv`` (``page`` "details": a row per metric, section names as the default sets
    print them; "raw": a row per launch, raw metric names, a units row), with the
    ``==PROF==`` lines ncu prints first."""
    out = io.StringIO()
    out.write("==PROF== Connected to process 4242 (/usr/bin/python3)\n")
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    place = ["1", "7", "(128, 1, 1)", "(132, 1, 1)", "0", "9.0"]
    ids = [[str(i), "4242", "python3", "127.0.0.1", k.name, *place] for i, k in enumerate(launches)]
    if page == "raw":
        metrics = [
            ("gpu__time_duration.sum", "usecond", lambda k: k.duration_us),
            ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", lambda k: k.dram_pct),
            ("sm__warps_active.avg.pct_of_peak_sustained_active", "%", lambda k: k.occupancy_pct),
        ]
        w.writerow(_NCU_HEAD + [m for m, _, _ in metrics])
        w.writerow([""] * len(_NCU_HEAD) + [u for _, u, _ in metrics])
        for row, k in zip(ids, launches, strict=True):
            w.writerow(row + ["n/a" if f(k) is None else _grouped(f(k)) for _, _, f in metrics])
        return out.getvalue()
    w.writerow(_NCU_HEAD + ["Section Name", "Metric Name", "Metric Unit", "Metric Value"])
    for row, k in zip(ids, launches, strict=True):
        for section, metric, unit, v in (
            ("GPU Speed Of Light Throughput", "DRAM Throughput", "%", k.dram_pct),
            ("GPU Speed Of Light Throughput", "Duration", "msecond", _ms(k.duration_us)),
            ("Occupancy", "Achieved Occupancy", "%", k.occupancy_pct),
            ("Occupancy", "Theoretical Occupancy", "%", 100.0),
        ):
            w.writerow(row + [section, metric, unit, "n/a" if v is None else _grouped(v)])
    return out.getvalue()


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1000
