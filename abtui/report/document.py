"""The facts every report shows, as data: ``report_data`` (also the ``--format json`` document),
the configuration differences between arms, the policy line, and which noise floor a report
shows. The Markdown (:mod:`abtui.report.export`) and HTML (:mod:`abtui.report.html`) renderings
both read these; neither imports the other.
"""

from __future__ import annotations

import json

from abtui.metrics.summary import summarize
from abtui.metrics.workload import workload_shape
from abtui.report.verdict_text import floor_method
from abtui.stats.labels import label
from abtui.stats.noise_floor import NoiseFloor
from abtui.store.reader import SessionReader
from abtui.verdict.saved import SessionVerdict


def config_diff(arms: list[dict], spec: dict) -> list[tuple[str, list[str]]]:
    """``(setting, value per arm)`` for every setting that differs between arms."""
    spec_arms = spec.get("arms") or []
    flat: list[dict[str, str]] = []
    for i, a in enumerate(arms):
        d = {"url": a.get("url"), "model": a.get("model"), "api": a.get("api")}
        for k, v in sorted((a.get("config") or {}).items()):
            if k == "params" and isinstance(v, dict):
                d.update({f"params.{pk}": pv for pk, pv in sorted(v.items())})
            else:
                d[k] = v
        sa = spec_arms[i] if i < len(spec_arms) else {}
        for k in ("gpu_price", "gpus"):
            d[k] = sa.get(k) if sa.get(k) is not None else (spec.get("cost") or {}).get(k)
        flat.append({k: json.dumps(v) if not isinstance(v, str) else v for k, v in d.items()})
    keys = sorted({k for d in flat for k in d})
    out = []
    for k in keys:
        vals = [d.get(k, "—") for d in flat]
        if len(set(vals)) > 1:
            out.append((k, vals))
    return out


def report_data(sv: SessionVerdict) -> dict:
    """Everything a report shows, as JSON-ready data (also the ``--format json`` document)."""
    with SessionReader(sv.path) as rd:
        table = rd.request_table()
        images = rd.item_images()
    slo = sv.spec.get("slo") or {}
    doc = sv.to_dict()
    doc["arms"] = [
        {k: a.get(k) for k in ("arm", "name", "role", "url", "model", "api", "config")}
        for a in sv.arms
    ]
    doc["summaries"] = {a["name"]: summarize(table, a["arm"], slo).to_dict() for a in sv.arms}
    doc["slo"] = slo
    doc["workload"] = workload_shape(sv.spec, table, images).to_dict()  # what was sent, measured
    doc["config_diff"] = [{"setting": k, "values": v} for k, v in config_diff(sv.arms, sv.spec)]
    doc["status"] = sv.meta.get("status")
    from abtui.report.quality import mode_info, mode_line

    mode = mode_info(sv.meta)  # which quality mode ran, next to every pair's quality results
    if mode is not None:
        mode = {**mode.to_dict(), "note": mode_line(mode)}
        doc["quality_mode"] = mode
        for p in doc.get("pairs", []) + doc.get("ladder", []):
            if p.get("quality"):
                p["quality"]["mode"] = mode
    if doc.get("sweep"):  # λ* with what it is worth (a lower bound when no level above failed)
        from abtui.report.verdict_text import capacity_detail

        sweep = doc["sweep"] = {**doc["sweep"]}
        sweep["capacity"] = {a: c.to_dict() for a, c in capacity_detail(sv.verdict.sweep).items()}
        sweep["points"] = [{**p, "level_number": p["level"] + 1} for p in sweep["points"]]
    from abtui.report.diagnosis import diagnosis_doc, prefix_cache_doc

    doc["diagnosis"] = diagnosis_doc(sv.path)
    doc["prefix_cache"] = prefix_cache_doc(doc["diagnosis"])
    from abtui.report.profile import profile_doc

    profile = profile_doc(sv.path, doc.get("pairs"))  # abtui run --profile
    if profile is not None:
        doc["profile"] = profile
    return doc


FLOOR_COLUMNS = ("metric", "bias", "bias SE", "spread τ", "floor", "block pairs")


def floor_section(sv: SessionVerdict) -> tuple[str, NoiseFloor | None]:
    """(title, noise floor) a report shows: the one this A/A session measured, else the one
    that raised δ (None: no floor)."""
    if sv.aa:
        return "Noise floor measured", sv.noise_floor_detail
    detail = sv.verdict.policy.noise_floor_detail
    if detail:
        return f"Noise floor applied (from {detail.path or '?'})", detail
    return "", None


def policy_line(doc: dict, floor: NoiseFloor | None) -> str:
    """The policy in a sentence; ``floor``: the noise floor that raised δ (the policy's)."""
    p = doc["policy"]
    design = doc["pairs"][0]["comparison"]["design"] if doc["pairs"] else {}
    return (
        f"Policy: primary {label(p['primary'])}; guardrails "
        f"{', '.join(label(g) for g in p['guardrails']) or 'none'}; α {p['alpha']}; "
        f"δ {p['delta']:.0%} (means, medians, rates, cost) / {p['delta_tail']:.0%} (P90–P99)"
        f"{' raised to the A/A noise floor' if p.get('noise_floor_values') else ''}"
        f"{f' ({floor_method(floor)})' if floor else ''}. "
        f"CIs: circular block bootstrap, {design.get('resamples', '?')} resamples, "
        f"{design.get('units', '?')} units; Holm over primary and guardrails, "
        "Benjamini–Hochberg over the rest; percentiles with fewer than 10 samples beyond them "
        "get no significance call."
    )
