"""Nsight Compute's CSV (``ncu --csv``): per kernel launch, its duration, DRAM throughput and
achieved occupancy.

Two layouts, as current ``ncu`` versions print them (after any ``==PROF==`` progress lines;
the header varies — with or without ``Block Size``…``CC``, ``Kernel Time``, the ``Rule``
columns — and abtui needs only ``ID``, ``Kernel Name`` and the metric columns):

- the default (``--page details``), one row per (launch, metric): ``"ID"``, ``"Kernel
  Name"``, …, ``"Section Name"``, ``"Metric Name"``, ``"Metric Unit"``, ``"Metric Value"``;
- ``--page raw``, one row per launch, a column per metric and a second row of units.

The metrics, by their raw names (``--metrics``) or the section names the default sets show:
duration ``gpu__time_duration.sum`` / "Duration"; DRAM throughput
``dram__throughput.avg.pct_of_peak_sustained_elapsed`` (or ``gpu__dram_throughput…``) /
"DRAM Throughput"; achieved occupancy ``sm__warps_active.avg.pct_of_peak_sustained_active``
/ "Achieved Occupancy". Values may be grouped by thousands (``1,234.5``); ``n/a`` is no value.
"""

from __future__ import annotations

import csv
import io

from abtui.profile.model import Activity, KernelMetrics, ProfileError, Trace

DURATION = ("gpu__time_duration.sum", "Duration")
DRAM = (
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "DRAM Throughput",
)
OCCUPANCY = ("sm__warps_active.avg.pct_of_peak_sustained_active", "Achieved Occupancy")
_TIME_UNIT = {
    "nsecond": 1e-3,
    "ns": 1e-3,
    "usecond": 1.0,
    "us": 1.0,
    "msecond": 1e3,
    "ms": 1e3,
    "second": 1e6,
    "s": 1e6,
}


def ncu_header(row: list[str]) -> bool:
    return "Kernel Name" in [c.strip() for c in row]


def _value(cell: str, where: str) -> float | None:
    text = cell.strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return None
    try:
        v = float(text)
    except ValueError:
        raise ProfileError(f"{where} is {cell[:40]!r}, not a number") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise ProfileError(f"{where} is {cell[:40]!r}, not a finite number")
    return v


def _duration_us(value: float | None, unit: str, where: str) -> float | None:
    if value is None:
        return None
    scale = _TIME_UNIT.get(unit.strip())
    if scale is None:
        raise ProfileError(f"{where}: unit {unit[:20]!r} is not a time unit abtui knows")
    return value * scale


class _Launch:
    def __init__(self, name: str) -> None:
        self.name = name
        self.duration: float | None = None
        self.dram: float | None = None
        self.occupancy: float | None = None

    def set(self, metric: str, value: float | None, unit: str, where: str) -> None:
        if metric in DURATION:
            self.duration = _duration_us(value, unit, where)
        elif metric in DRAM:
            self.dram = value
        elif metric in OCCUPANCY:
            self.occupancy = value


def _long(rows: list[list[str]], header: list[str], first: int, where: str) -> list[_Launch]:
    need = ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")
    missing = [c for c in need if c not in header]
    if missing:
        raise ProfileError(f"{where}: line {first}: the header lacks {', '.join(missing)}")
    at = {c: header.index(c) for c in need}
    launches: dict[str, _Launch] = {}
    for n, row in enumerate(rows, first + 1):
        if not any(c.strip() for c in row) or row[0].startswith("=="):
            continue
        if len(row) < len(header):
            raise ProfileError(
                f"{where}: line {n}: {len(row)} fields, the header has {len(header)}"
            )
        launch = launches.setdefault(row[at["ID"]], _Launch(row[at["Kernel Name"]]))
        metric = row[at["Metric Name"]].strip()
        value = _value(row[at["Metric Value"]], f"{where}: line {n}: {metric[:60]}")
        launch.set(metric, value, row[at["Metric Unit"]], f"{where}: line {n}")
    return list(launches.values())


def _wide(rows: list[list[str]], header: list[str], first: int, where: str) -> list[_Launch]:
    units = rows[0] if rows and not (rows[0] and rows[0][0].strip().isdigit()) else None
    body = rows[1:] if units is not None else rows
    name_at = header.index("Kernel Name")
    wanted = [
        (i, c.strip()) for i, c in enumerate(header) if c.strip() in DURATION + DRAM + OCCUPANCY
    ]
    out = []
    for n, row in enumerate(body, first + (2 if units is not None else 1)):
        if not any(c.strip() for c in row) or row[0].startswith("=="):
            continue
        if len(row) < len(header):
            raise ProfileError(
                f"{where}: line {n}: {len(row)} fields, the header has {len(header)}"
            )
        launch = _Launch(row[name_at])
        for i, metric in wanted:
            unit = units[i] if units is not None and i < len(units) else "nsecond"
            launch.set(
                metric, _value(row[i], f"{where}: line {n}: {metric}"), unit, f"{where}: line {n}"
            )
        out.append(launch)
    return out


def read_ncu_csv(text: str, where: str) -> Trace:
    """A Trace (no timeline) from ``ncu --csv`` output: one activity per kernel launch, with
    its metrics."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, r in enumerate(rows[:200]) if ncu_header(r)), None)
    if start is None:
        raise ProfileError(f'{where}: no ncu CSV header (a "Kernel Name" column)')
    header = [c.strip() for c in rows[start]]
    reader = _long if "Metric Name" in header else _wide
    launches = reader(rows[start + 1 :], header, start + 1, where)
    if not launches:
        raise ProfileError(f"{where}: the ncu CSV lists no kernel")
    acts = [Activity(k.name, "kernel", 0.0, 0.0, k.duration or 0.0) for k in launches]
    metrics = [KernelMetrics(k.name, k.duration, k.dram, k.occupancy) for k in launches]
    notes = ["a summary: per-launch figures under ncu's replay, no timeline"]
    if all(k.duration is None for k in launches):
        notes.append("no duration metric (gpu__time_duration.sum): no time shares")
    return Trace(
        path=where,
        format="ncu-csv",
        version=f"ncu --csv, {'details' if reader is _long else 'raw'} page (current columns)",
        side="device",
        timeline=False,
        activities=acts,
        metrics=metrics,
        notes=notes,
    )
