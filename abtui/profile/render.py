"""A profile, its comparison and its Amdahl lines as plain text or JSON.

Names from the trace are shown on one line (line breaks and tabs as ``\\n``, ``\\t``) and cut
to a width; the caller makes the text inert for a terminal
(:func:`abtui.report.untrusted.inert`). JSON escapes every control character itself.
"""

from __future__ import annotations

import json
import math

from abtui.profile.amdahl import AmdahlLine
from abtui.profile.analyse import PhaseDiff, Profile
from abtui.profile.classes import IDLE

FORMATS = {
    "chrome": "Chrome trace",
    "nsys-sqlite": "Nsight Systems SQLite export",
    "nsys-kern-sum": "Nsight Systems kernel summary",
    "ncu-csv": "Nsight Compute CSV",
}


def one_line(name: str, width: int = 72) -> str:
    text = name.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return text if len(text) <= width else text[: width - 1] + "…"


def duration(us: float | None) -> str:
    if us is None:
        return "n/a"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def times(x: float) -> str:
    return "∞" if math.isinf(x) else f"×{x:.2f}"


def _rows(label: str, cells: list[str]) -> str:
    return f"  {label:<22}" + "".join(f"{c:>14}" for c in cells)


def profile_text(profile: Profile) -> list[str]:
    t = profile.trace
    n = len(t.activities)
    named = profile.name != t.path.replace("\\", "/").rsplit("/", 1)[-1]
    head = [f"{one_line(profile.name)}: {one_line(t.path)}" if named else one_line(t.path)]
    steps = sum(p.steps for p in profile.phases.values())
    what = (
        ("kernel or copy", "kernels and copies")
        if t.side == "device"
        else ("host operator", "host operators")
    )
    facts = [f"{FORMATS.get(t.format, t.format)} ({t.version})", f"{n:,} {what[n != 1]}"]
    if t.timeline:
        facts.append(f"{steps:,} steps" if steps else "no step annotations: one phase")
    head.append("  " + " · ".join(facts))
    head += [f"  note: {one_line(x)}" for x in t.notes]
    phases = list(profile.phases.values())
    if not phases:
        return [*head, "  no activity to analyse"]
    lines = [*head, _rows("", [p.phase for p in phases])]
    if t.timeline:
        lines.append(_rows("steps", [str(p.steps) if p.steps else "-" for p in phases]))
        lines.append(_rows("time / step", [duration(p.per_step_us) for p in phases]))
        lines.append(_rows("busy", [duration(p.total_busy) for p in phases]))
    shown = [c for c in profile.table.order if any(p.busy_us.get(c) for p in phases)]
    lines += [_rows(profile.table.label(c), [pct(p.share(c)) for p in phases]) for c in shown]
    if t.timeline:
        lines.append(_rows(profile.table.label(IDLE), [pct(p.share(IDLE)) for p in phases]))
        lines.append("  (classes: share of busy time; idle: share of the steps' time)")
    if profile.between_us:
        lines.append(f"  between steps (in no phase): {duration(profile.between_us)}")
    lines += _top_text(profile)
    lines += _metrics_text(profile)
    return lines


def _top_text(profile: Profile) -> list[str]:
    out = []
    for p in profile.phases.values():
        if not p.top or p.total_busy <= 0:
            continue
        out.append(f"  top in {p.phase}:")
        for name, cls, busy, n in p.top:
            out.append(
                f"    {busy / p.total_busy:6.1%}  {profile.table.label(cls):<18} "
                f"{n:>7,}×  {one_line(name, 60)}"
            )
    return out


def _metrics_text(profile: Profile) -> list[str]:
    if not profile.class_metrics:
        return []
    out = [
        "  Nsight Compute, per class (duration-weighted):",
        _rows("", ["launches", "DRAM", "occupancy"]),
    ]
    for cls in profile.table.order:
        if cls in profile.class_metrics:
            dram, occ, n = profile.class_metrics[cls]
            cells = [
                str(n),
                "n/a" if dram is None else f"{dram:.1f} %",
                "n/a" if occ is None else f"{occ:.1f} %",
            ]
            out.append(_rows(profile.table.label(cls), cells))
    return out


def _change(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f} %".replace("-", "−")


def diff_text(a: Profile, b: Profile, diffs: list[PhaseDiff]) -> list[str]:
    out = [f"{one_line(b.name)} against {one_line(a.name)}:"]
    if not diffs:
        return [*out, "  no phase in common"]
    for d in diffs:
        unit = "per step" if d.per_step else "totals, comparable only over the same work"
        out.append(f"  {d.phase}, {unit}:")
        if d.per_step:
            out.append(
                f"    {'time / step':<22}{duration(d.a_time):>11} → {duration(d.b_time):<11}"
                f"{_change(d.change):>10}"
            )
        for c in d.classes:
            out.append(
                f"    {a.table.label(c.cls):<22}{duration(c.a_us):>11} → {duration(c.b_us):<11}"
                f"{_change(c.change):>10}"
            )
    return out


def amdahl_text(profile: Profile, lines: list[AmdahlLine]) -> list[str]:
    if not lines:
        return []
    names = " + ".join(profile.table.label(c) for c in lines[0].classes)
    out = [f"Amdahl, for an optimisation of {names} (on {one_line(profile.name)}'s profile):"]
    for x in lines:
        of = "of the phase's time" if x.gaps_known else "of busy time (no gaps known)"
        text = (
            f"  {x.phase}: {pct(x.share)} {of} → at most {times(x.free)} if free, "
            f"{times(x.at_factor)} if {x.factor:g}× faster"
        )
        if x.measured is not None:
            text += f"; measured {times(x.measured)} ({x.measured_from})"
        out.append(text)
        if x.exceeds:
            out.append(
                f"    the measured {times(x.measured)} exceeds the bound: more than the targeted"
                " classes changed, or the profiles cover different work"
            )
        if x.warning:
            out.append(f"  warning: {x.warning}")
    return out


# ------------------------------------------------------------------------------- JSON


def _num(x: float | None) -> float | None:
    return None if x is None or math.isinf(x) or math.isnan(x) else round(x, 6)


def profile_json(profile: Profile) -> dict:
    t = profile.trace
    phases = {}
    for name, p in profile.phases.items():
        phases[name] = {
            "steps": p.steps,
            "wall_us": _num(p.wall_us),
            "idle_us": _num(p.idle_us),
            "per_step_us": _num(p.per_step_us),
            "busy_us": {c: _num(v) for c, v in p.busy_us.items()},
            "share_of_busy": {c: _num(p.share(c)) for c in p.busy_us},
            "idle_share": _num(p.share(IDLE)),
            "top": [
                {"name": n, "class": c, "busy_us": _num(b), "count": k} for n, c, b, k in p.top
            ],
        }
    return {
        "name": profile.name,
        "path": t.path,
        "format": t.format,
        "version": t.version,
        "side": t.side,
        "timeline": t.timeline,
        "activities": len(t.activities),
        "notes": t.notes,
        "between_steps_us": _num(profile.between_us),
        "phases": phases,
        "kernel_metrics_by_class": {
            c: {"dram_pct": _num(d), "occupancy_pct": _num(o), "launches": n}
            for c, (d, o, n) in profile.class_metrics.items()
        },
    }


def diff_json(a: Profile, b: Profile, diffs: list[PhaseDiff]) -> dict:
    return {
        "baseline": a.name,
        "candidate": b.name,
        "phases": [
            {
                "phase": d.phase,
                "per_step": d.per_step,
                "baseline_us": _num(d.a_time),
                "candidate_us": _num(d.b_time),
                "change": _num(d.change),
                "classes": [
                    {
                        "class": c.cls,
                        "baseline_us": _num(c.a_us),
                        "candidate_us": _num(c.b_us),
                        "change": _num(c.change),
                    }
                    for c in d.classes
                ],
            }
            for d in diffs
        ],
    }


def amdahl_json(lines: list[AmdahlLine]) -> list[dict]:
    return [
        {
            "phase": x.phase,
            "classes": list(x.classes),
            "share": _num(x.share),
            "bound_if_free": _num(x.free),
            "factor": x.factor,
            "bound_at_factor": _num(x.at_factor),
            "measured": _num(x.measured),
            "measured_from": x.measured_from or None,
            "gaps_known": x.gaps_known,
            "warning": x.warning,
            "exceeds_bound": x.exceeds,
        }
        for x in lines
    ]


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=True)


def roofline_text(profile: Profile, checks: list, setup: str) -> list[str]:
    """``checks``: :class:`abtui.profile.roofline.RooflineCheck`; ``setup`` names the GPU,
    model and dtypes."""
    if not checks:
        return [f"Roofline ({setup}): no step of {one_line(profile.name)} counts its tokens"]
    out = [f"Roofline ({setup}; on {one_line(profile.name)}'s profile):"]
    for c in checks:
        s = c.shape
        out.append(
            f"  {c.phase} (mean of {c.steps} step{'s' * (c.steps != 1)}: {s.tokens:,.0f} tokens, {s.kv_read:,.0f} KV "
            f"entries read): {c.bound}-bound, floor {duration(c.floor_s * 1e6)} / step; "
            f"measured {duration(None if c.measured_s is None else c.measured_s * 1e6)}"
            + (f" (the floor is {pct(c.floor_share)} of it)" if c.floor_share else "")
        )
        if c.gemm_rate is not None:
            what = (
                f"streams the weights at {c.gemm_rate / 1e12:.2f} TB/s"
                if c.bound == "memory"
                else f"runs at {c.gemm_rate / 1e12:.0f} TFLOP/s"
            )
            out.append(f"    GEMM/GEMV {what} ({pct(c.gemm_of_peak)} of peak)")
        out += [f"    note: {n}" for n in c.notes]
    return out


def roofline_json(checks: list) -> list[dict]:
    return [
        {
            "phase": c.phase,
            "steps": c.steps,
            "tokens": _num(c.shape.tokens),
            "kv_read": _num(c.shape.kv_read),
            "pairs": _num(c.shape.pairs),
            "bound": c.bound,
            "floor_us": _num(c.floor_s * 1e6),
            "measured_us": _num(None if c.measured_s is None else c.measured_s * 1e6),
            "gemm_rate": _num(c.gemm_rate),
            "gemm_of_peak": _num(c.gemm_of_peak),
            "bound_work_share": _num(c.bound_work_share),
            "notes": c.notes,
        }
        for c in checks
    ]
