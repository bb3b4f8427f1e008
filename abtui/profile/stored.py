"""A session's profiles: analysed once, when the run picks the traces up, and stored in the
session file (the ``profile`` meta key) so that ``abtui open`` and every report show them
without the traces; and the lines, bars and JSON the reports make of the stored document.

The document: ``classes`` (key → label, in the reports' order), ``optimises`` and ``factor``,
``arms`` (per arm: ``traces``, ``error``, ``profile``: :func:`abtui.profile.render.profile_json`
with each phase's ``share_of_time``, ``roofline``), ``diff`` (each candidate against the
baseline, phase by phase) and ``amdahl`` (per candidate: the bound of an optimisation of the
targeted classes on the baseline's profile, beside the candidate's measured time per step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from abtui.errors import AbtuiError
from abtui.profile import render
from abtui.profile.amdahl import amdahl
from abtui.profile.analyse import PhaseProfile, Profile, analyse, compare, merge
from abtui.profile.classes import IDLE, ClassTable
from abtui.profile.read import read_trace

SHOWN_PHASES = ("prefill", "decode", "mixed", "all")  # what the reports show (not unmarked)


@dataclass
class ArmTraces:
    """One arm's trace files as the run found them (``error``: why there are none)."""

    arm: int
    name: str
    paths: list[str] = field(default_factory=list)
    error: str | None = None
    hardware: dict | None = None  # gpu, model_preset / model_config, dtype, kv_dtype, tp


def time_shares(ph: PhaseProfile) -> dict[str, float]:
    """Each class's share of the phase's time (busy plus gaps; with ``idle``): sums to 1."""
    total = ph.total_busy + (ph.idle_us or 0.0)
    if total <= 0:
        return {}
    out = {c: us / total for c, us in ph.busy_us.items()}
    if ph.idle_us is not None:
        out[IDLE] = ph.idle_us / total
    return out


def _profile_doc(p: Profile) -> dict:
    doc = render.profile_json(p)
    for name, ph in p.phases.items():
        doc["phases"][name]["share_of_time"] = {c: round(v, 6) for c, v in time_shares(ph).items()}
    return doc


def _roofline(p: Profile, hw: dict | None) -> tuple[list[dict], str | None]:
    if not hw or not hw.get("gpu") or not (hw.get("model_preset") or hw.get("model_config")):
        return [], None
    from abtui.hardware.gpus import get_gpu
    from abtui.hardware.models import get_model, load_hf_config
    from abtui.profile.roofline import roofline_checks

    try:
        gpu = get_gpu(hw["gpu"])
        model = (
            get_model(hw["model_preset"])
            if hw.get("model_preset")
            else load_hf_config(hw["model_config"])
        )
    except (AbtuiError, KeyError, ValueError, OSError):
        return [], None
    dtype, kv, tp = hw.get("dtype") or "bf16", hw.get("kv_dtype") or "bf16", hw.get("tp") or 1
    checks = roofline_checks(p, gpu, model, dtype, kv, 2048, tp)
    return render.roofline_json(checks), f"{gpu.name}, {model.name}, {dtype} weights, {kv} KV"


def analyse_session(
    arms: list[ArmTraces],
    table: ClassTable,
    optimises: tuple[str, ...] = (),
    factor: float = 2.0,
    top: int = 5,
) -> dict:
    """The stored document of the arms' traces (the first arm is the baseline). A trace that
    cannot be read is that arm's ``error``; the others are analysed all the same."""
    profiles: dict[int, Profile] = {}
    out_arms = []
    for a in arms:
        entry: dict = {"arm": a.arm, "name": a.name, "traces": a.paths, "error": a.error}
        if a.paths and a.error is None:
            try:
                ranks = [analyse(read_trace(Path(f)), table, None, top) for f in a.paths]
            except AbtuiError as e:
                entry["error"] = e.message
            except (OSError, ValueError, KeyError, TypeError) as e:  # a trace past its schema
                entry["error"] = f"{a.paths[0]}: cannot be analysed ({type(e).__name__}: {e})"
            else:
                p = profiles[a.arm] = merge(ranks, a.name, top)
                entry["profile"] = _profile_doc(p)
                entry["roofline"], entry["roofline_setup"] = _roofline(p, a.hardware)
        out_arms.append(entry)
    doc = {
        "classes": {c: table.label(c) for c in (*table.order, IDLE)},
        "optimises": list(optimises),
        "factor": factor,
        "arms": out_arms,
        "diff": [],
        "amdahl": [],
    }
    base = profiles.get(arms[0].arm) if arms else None
    if base is None:
        return doc
    for a in arms[1:]:
        b = profiles.get(a.arm)
        if b is None:
            continue
        diffs = compare(base, b)
        doc["diff"].append(render.diff_json(base, b, diffs))
        if optimises:
            measured = {
                d.phase: (d.speedup, f"time / step, {a.name} against {base.name}")
                for d in diffs
                if d.speedup is not None
            }
            lines = amdahl(base, optimises, factor, measured)
            doc["amdahl"].append({"candidate": a.name, "lines": render.amdahl_json(lines)})
    if optimises and not doc["amdahl"]:  # no candidate profile: the bound alone
        doc["amdahl"].append(
            {"candidate": None, "lines": render.amdahl_json(amdahl(base, optimises, factor))}
        )
    return doc


# ------------------------------------------------------------------------ shown from the doc


def _change(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f} %".replace("-", "−")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def phase_bars(doc: dict) -> list[tuple[str, str, list[tuple[str, str, float]]]]:
    """``(arm, phase, [(class, label, share of the phase's time)])`` for every arm and shown
    phase with time in it, classes in the reports' order, idle last: what a stacked bar
    draws."""
    labels = doc.get("classes") or {}
    out = []
    for a in doc.get("arms") or []:
        phases = ((a.get("profile") or {}).get("phases")) or {}
        for phase in SHOWN_PHASES:
            shares = (phases.get(phase) or {}).get("share_of_time") or {}
            if not shares:
                continue
            order = [c for c in labels if c in shares] + [c for c in shares if c not in labels]
            parts = [(c, labels.get(c, c), float(shares[c])) for c in order if shares[c] > 0]
            out.append((a["name"], phase, parts))
    return out


def _phase_line(name: str, phase: str, ph: dict, labels: dict) -> str:
    shares = ph.get("share_of_time") or {}
    ranked = sorted(shares.items(), key=lambda kv: -kv[1])
    parts = [f"{labels.get(c, c)} {_pct(v)}" for c, v in ranked if v >= 0.005]
    steps = ph.get("steps") or 0
    per = render.duration(ph.get("per_step_us"))
    when = f" ({steps} step{'s' * (steps != 1)}, {per} / step)" if steps else ""
    return f"  {render.one_line(name, 32)} {phase}{when}: " + ", ".join(parts)


def level_name(doc: dict) -> str:
    """A sweep level as the reports name it: ``level 2 (10 req/s)``, ``level 1 (concurrency
    4)``."""
    text = f"level {int(doc.get('level') or 0) + 1}"
    if doc.get("rate") is not None:
        return text + f" ({doc['rate']:g} req/s)"
    if doc.get("concurrency") is not None:
        return text + f" (concurrency {doc['concurrency']})"
    return text


def _window_line(window: dict | None, excluded: dict[str, int] | None) -> str:
    if not window:
        return "Profile (the traces' share of time per class, phase by phase):"
    arms = window.get("arms") or []
    spans = [
        (w["end_ns"] - w["start_ns"]) / 1e9 for w in arms if w.get("start_ns") and w.get("end_ns")
    ]
    span = f"{max(spans):.1f} s" if spans else "no"
    after = window.get("after_s")
    text = f"Profile: a window of {span} per arm"
    into = "the measured phase"
    if window.get("level") is not None:  # a sweep: one window per level
        text = f"Profile, {level_name(window)}: a window of {span} per arm"
        into = "the level"
    if after is not None and spans:
        text += f", {after:g} s into {into}"
    if excluded:
        n = max(excluded.values())
        text += (
            f"; {n} request{'s' * (n != 1)} per arm ran in it and "
            "are left out of the latency figures (profiling slows a server)"
        )
    return text + ":"


def _diff_lines(doc: dict, labels: dict) -> list[str]:
    out = []
    for d in doc.get("diff") or []:
        for ph in d.get("phases") or []:
            if ph["phase"] not in SHOWN_PHASES or not ph.get("per_step"):
                continue
            moved = sorted(
                (c for c in ph.get("classes") or [] if c.get("change") is not None),
                key=lambda c: -abs(c["candidate_us"] - c["baseline_us"]),
            )[:3]
            parts = [f"{labels.get(c['class'], c['class'])} {_change(c['change'])}" for c in moved]
            out.append(
                f"  {render.one_line(d['candidate'], 32)} against "
                f"{render.one_line(d['baseline'], 32)}, {ph['phase']}: "
                f"{render.duration(ph['baseline_us'])} → {render.duration(ph['candidate_us'])} "
                f"/ step ({_change(ph.get('change'))}): " + ", ".join(parts)
            )
    return out


# the latency figure each phase's time sets: what the verdict measured beside the bound
PHASE_METRICS = {"decode": "tpot.p50", "prefill": "ttft.p50"}


def _amdahl_lines(doc: dict, labels: dict, latency: dict | None = None) -> list[str]:
    out = []
    targeted = " + ".join(labels.get(c, c) for c in doc.get("optimises") or [])
    base = (doc.get("arms") or [{}])[0].get("name", "the baseline")
    for block in doc.get("amdahl") or []:
        for x in block.get("lines") or []:
            if x["phase"] not in SHOWN_PHASES:
                continue
            free = x.get("bound_if_free")
            text = (
                f"  Amdahl, {targeted} on {render.one_line(base, 32)}: {x['phase']} "
                f"{_pct(x['share'])} of the time → at most "
                f"{'∞' if free is None else render.times(free)} if free, "
                f"{render.times(x['bound_at_factor'])} if {x['factor']:g}× faster"
            )
            who = block.get("candidate")
            if x.get("measured") is not None:
                text += (
                    f"; {render.one_line(who or '', 32)} measured {render.times(x['measured'])}"
                    " / step"
                )
            seen = ((latency or {}).get(who) or {}).get(x["phase"])
            if seen is not None:
                text += f", {seen[0]} {_change(seen[1])}"
            out.append(text)
            if x.get("exceeds_bound"):
                out.append(
                    "    (measured beyond the bound: more than the targeted classes changed)"
                )
            if x.get("warning"):
                out.append(f"  warning: {x['warning']}")
    return out


def _roofline_lines(doc: dict) -> list[str]:
    out = []
    for a in doc.get("arms") or []:
        for c in a.get("roofline") or []:
            if c["phase"] not in SHOWN_PHASES:
                continue
            rate = ""
            if c.get("gemm_of_peak") is not None:
                what = "streams the weights at" if c["bound"] == "memory" else "runs at"
                rate = f"; GEMM/GEMV {what} {_pct(c['gemm_of_peak'])} of peak"
            out.append(
                f"  roofline, {render.one_line(a['name'], 32)} {c['phase']}: {c['bound']}-bound, "
                f"floor {render.duration(c['floor_us'])} / step against "
                f"{render.duration(c['measured_us'])}{rate}"
            )
    return out


def profile_lines(
    doc: dict | None,
    window: dict | None = None,
    excluded: dict[str, int] | None = None,
    latency: dict[str, dict[str, tuple[str, float]]] | None = None,
) -> list[str]:
    """The profile block the headless output, the verdict screen and the Markdown report
    show (names as in the trace: the caller makes them inert); [] without a profile.
    ``latency``: per candidate and phase, the verdict's (label, change) of the metric the
    phase sets (:data:`PHASE_METRICS`), shown beside the Amdahl bound."""
    if not doc and not window:
        return []
    labels = (doc or {}).get("classes") or {}
    out = [_window_line(window, excluded)]
    for w in (window or {}).get("arms") or []:
        if w.get("error"):
            out.append(f"  {render.one_line(w['name'], 32)}: {render.one_line(w['error'], 200)}")
    for a in (doc or {}).get("arms") or []:
        if a.get("error"):
            out.append(f"  {render.one_line(a['name'], 32)}: no profile: {a['error']}")
            continue
        phases = (a.get("profile") or {}).get("phases") or {}
        for phase in SHOWN_PHASES:
            if phase in phases and phases[phase].get("share_of_time"):
                out.append(_phase_line(a["name"], phase, phases[phase], labels))
    if doc:
        out += _diff_lines(doc, labels) + _amdahl_lines(doc, labels, latency)
        out += _roofline_lines(doc)
    return out
