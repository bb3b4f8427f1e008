"""Gauges with a history: GPU utilisation, DRAM bandwidth, memory and the server's KV-cache use,
each a row of its recent readings (as nvitop and btop draw them), from the arm's
:class:`~abtui.metrics.live.GaugeHistory` (live: the last readings; ``abtui open``: the readings
up to the playhead, or the measured run at its end state).

Each row is ``label  value  bars``: the bars on a fixed scale (0–100 % for the fractions, the
GPU's memory for memory), never on the series' own maximum, so a steady 97 % reads as full and
not as noise. Rows start their bars in the column the throughput sparklines start in.
"""

from __future__ import annotations

import math

from rich.text import Text

BLOCKS = " ▁▂▃▄▅▆▇█"  # 0 is blank: an idle GPU shows as nothing, not as a floor
GPU_SOURCES = ("nvml", "dcgm")
ENGINES = ("vllm", "sglang", "tgi", "llamacpp")
LABEL = 18  # "util          97% ": as wide as the live pane's sparkline labels (SPARK_LABEL)


def bars(values: list[float], width: int, top: float) -> str:
    """The last ``width`` of ``values`` as block characters on the scale 0..``top``."""
    vals = values[-width:] if width > 0 else []
    if not vals or not top > 0:
        return ""
    out = []
    for v in vals:
        lv = 0 if not math.isfinite(v) else round(min(max(v / top, 0.0), 1.0) * 8)
        out.append(BLOCKS[lv])
    return "".join(out)


def _find(series: dict[str, list[float]], sources: tuple[str, ...], metric: str):
    for src in sources:
        if vals := series.get(f"{src}:{metric}"):
            return src, vals
    return None, []


def _mem_total(telemetry: dict[str, float], src: str | None) -> float | None:
    if src is None:
        return None
    total = telemetry.get(f"{src}:gpu.mem_total_bytes")
    if not total and f"{src}:gpu.mem_free_bytes" in telemetry:
        total = (
            telemetry.get(f"{src}:gpu.mem_used_bytes", 0.0) + telemetry[f"{src}:gpu.mem_free_bytes"]
        )
    return total or None


def gauge_rows(telemetry: dict[str, float], series: dict[str, list[float]], width: int) -> Text:
    """Four rows, always (every arm's pane has the same rows): GPU utilisation (NVML's busy
    share; DCGM's SM activity, labelled ``SM``, where that is all there is), DRAM bandwidth,
    memory and KV-cache use, each with its history; a gauge nobody reported says so on its
    row."""
    pct = lambda v: f"{v:.0%}"  # noqa: E731
    gib = lambda v: f"{v / 2**30:.1f}G"  # noqa: E731
    busy = util_series(series)[0] or "gpu.busy"
    spec = [
        ("util" if busy == "gpu.busy" else "SM", GPU_SOURCES, busy, pct),
        ("DRAM", GPU_SOURCES, "gpu.dram_active", pct),
        ("mem", GPU_SOURCES, "gpu.mem_used_bytes", gib),
        ("KV", ENGINES, "kv_usage", pct),
    ]
    t = Text(no_wrap=True, overflow="ellipsis")
    room = max(0, width - LABEL)
    for i, (label, sources, metric, fmt) in enumerate(spec):
        if i:
            t.append("\n")
        src, vals = _find(series, sources, metric)
        if not vals:
            t.append(f"{label:<10}{'—':>7} ", "bold")
            t.append("not reported"[:room], "dim")
            continue
        now = telemetry.get(f"{src}:{metric}", vals[-1])
        top = _mem_total(telemetry, src) if metric == "gpu.mem_used_bytes" else 1.0
        if top is None:  # no total reported: the memory's own peak
            top = max(vals)
        t.append(f"{label:<10}{fmt(now):>7} ", "bold")
        t.append(bars(vals, room, top), "magenta" if metric == "kv_usage" else "cyan")
    return t


def util_series(series: dict[str, list[float]]) -> tuple[str, list[float]]:
    """(metric, readings) of the GPU's utilisation for the one-line GPU gauge: the busy share
    (NVML's, else DCGM's), else the SM activity; ("", []) when neither was reported."""
    for metric in ("gpu.busy", "gpu.sm_active"):
        if vals := _find(series, GPU_SOURCES, metric)[1]:
            return metric, vals
    return "", []
