"""The live panes' figures rebuilt from a saved session (``abtui open``): the same
:class:`abtui.metrics.live.LiveArm` fed with the stored requests in completion order, so a
session re-opened later shows what its run showed at the end. Telemetry gauges are the mean
over the session (the last reading of a finished run is the idle GPU)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from abtui.client.records import RequestRecord
from abtui.metrics.table import NA
from abtui.runner.observer import ArmProgress, RunInfo
from abtui.store.reader import SessionReader


@dataclass
class StoredRun:
    info: RunInfo
    arms: list[ArmProgress]
    elapsed_s: float
    status: str


def _telemetry_means(tel: dict[str, np.ndarray], arm: int) -> dict[str, float]:
    out: dict[str, float] = {}
    if not len(tel.get("arm", [])):
        return out
    sel = tel["arm"] == arm
    keys = np.char.add(np.char.add(tel["source"][sel].astype(str), ":"),
                       tel["metric"][sel].astype(str))  # fmt: skip
    vals = tel["value"][sel]
    for k in np.unique(keys):
        v = vals[keys == k]
        v = v[np.isfinite(v)]
        if len(v):
            out[str(k)] = float(v.mean())
    return out


def stored_run(path: str | Path) -> StoredRun:
    """Per-arm counts and live figures from the session file at ``path``."""
    with SessionReader(path) as rd:
        meta = rd.meta()
        arms = rd.arms()
        t = rd.request_table()
        tel = rd.telemetry()
    slo = (meta.get("spec") or {}).get("slo") or {}
    out: list[ArmProgress] = []
    for a in arms:
        i = a["arm"]
        at = t.for_arm(i)
        p = ArmProgress(name=a["name"], planned=len(at), finished=True)
        p.live.slo = dict(slo)
        for k in np.argsort(at.done_ns, kind="stable"):
            status = str(at.status[k])
            p.done += 1
            if status == "ok":
                p.ok += 1
                p.output_tokens += int(at.n_output[k]) if at.n_output[k] != NA else 0
            elif status == "cancelled":
                p.cancelled += 1
            else:
                cls = at.error_class[k] or "other"
                p.errors[cls] = p.errors.get(cls, 0) + 1
            first, last = int(at.first_token_ns[k]), int(at.last_token_ns[k])
            p.live.add(RequestRecord(
                arm=i, item=int(at.item[k]), scheduled_ns=int(at.scheduled_ns[k]),
                dispatched_ns=int(at.dispatched_ns[k]), done_ns=int(at.done_ns[k]),
                chunk_ns=[first, last] if NA not in (first, last) else [], status=status,
                n_output=int(at.n_output[k]) if at.n_output[k] != NA else None,
            ))  # fmt: skip
        p.telemetry = _telemetry_means(tel, i)
        out.append(p)
    ok = t.valid("done_ns") if len(t) else np.zeros(0, bool)
    elapsed = float((t.done_ns[ok].max() - t.scheduled_ns.min()) / 1e9) if ok.any() else 0.0
    info = RunInfo(
        session_name=meta.get("session_name") or Path(path).stem,
        session_path=str(path),
        arm_names=[a["name"] for a in arms],
        arm_urls=[a["url"] for a in arms],
        arm_models=[a["model"] for a in arms],
        planned_per_arm=max((p.planned for p in out), default=0),
        load=meta.get("load") or "",
    )
    return StoredRun(info, out, elapsed, meta.get("status") or "unknown")
