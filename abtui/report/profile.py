"""The session's profile (``abtui run --profile``: :mod:`abtui.profile.stored`) as the reports
show it: printed after a run, the JSON ``profile`` key, the Markdown section and the HTML one
with a stacked bar per arm and phase. Everything comes from the session file: the traces are
not needed."""

from __future__ import annotations

from abtui.jsonable import json_ready
from abtui.profile.stored import PHASE_METRICS, phase_bars, profile_lines
from abtui.report.untrusted import inert
from abtui.store.reader import SessionReader, reading


def _latency(pairs: list[dict] | None) -> dict[str, dict[str, tuple[str, float]]]:
    """Per candidate and phase, the verdict's change of the metric the phase sets."""
    from abtui.stats.labels import label

    out: dict[str, dict[str, tuple[str, float]]] = {}
    for p in pairs or []:
        effects = {e["key"]: e for e in (p.get("comparison") or {}).get("effects") or []}
        for phase, key in PHASE_METRICS.items():
            e = effects.get(key)
            if e is not None and e.get("ratio") is not None:
                out.setdefault(p["candidate"], {})[phase] = (label(key), e["ratio"])
    return out


def profile_doc(path, pairs: list[dict] | None = None) -> dict | None:
    """The stored profile of the session at ``path`` with its window, the requests the window
    left out per arm (``excluded``) and the lines the reports print; None without one.
    A sweep's (one window per level): ``levels``, each such a document with its ``level``,
    ``rate``, ``concurrency``, and ``excluded`` and ``lines`` over them all.
    ``pairs``: the verdict's (its latency changes go beside the Amdahl bounds). ``path``: or
    an open reader of the file (:func:`~abtui.store.reader.reading`)."""
    with reading(path) as rd:
        meta = rd.meta()
        names = {a["arm"]: a["name"] for a in rd.arms()}
        if isinstance(meta.get("profile_windows"), list):
            return _levels_doc(rd, meta, names)
        doc, window = meta.get("profile"), meta.get("profile_window")
        if not isinstance(doc, dict) and not isinstance(window, dict):
            return None
        counts = rd.profiled_counts()
    doc = dict(doc) if isinstance(doc, dict) else {}
    window = window if isinstance(window, dict) else None
    excluded = {names.get(k, str(k)): n for k, n in counts.items()}
    doc["window"] = window
    doc["excluded"] = excluded
    doc["lines"] = profile_lines(doc, window, excluded, _latency(pairs))
    return json_ready(doc)


def _levels_doc(rd, meta: dict, names: dict) -> dict:
    """A sweep's profile: a document per level profiled, its requests left out counted on
    its own window. The verdict's latency changes are the whole session's, not a level's:
    they are not set beside a level's Amdahl bounds."""
    from abtui.store.profiled import window_times

    docs = {d.get("level"): d for d in meta.get("profiles") or [] if isinstance(d, dict)}
    levels, lines = [], []
    for window in meta["profile_windows"]:
        if not isinstance(window, dict):
            continue
        doc = dict(docs.get(window.get("level")) or {})
        counts = rd.profiled_counts(window_times(window))
        excluded = {names.get(k, str(k)): n for k, n in counts.items()}
        doc |= {k: window.get(k) for k in ("level", "rate", "concurrency")}
        doc["window"] = window
        doc["excluded"] = excluded
        doc["lines"] = profile_lines(doc, window, excluded)
        levels.append(doc)
        lines += doc["lines"]
    total = {names.get(k, str(k)): n for k, n in rd.profiled_counts().items()}
    return json_ready({"levels": levels, "excluded": total, "lines": lines})


def print_profile(path, out) -> None:
    doc = profile_doc(path)
    if doc and doc["lines"]:
        print("", file=out)
        for line in doc["lines"]:
            print(inert(line), file=out)


def _blocks(p: dict) -> list[dict]:
    """The profile's blocks: one per sweep level, else the one."""
    return [b for b in p.get("levels") or [p] if b.get("lines")]


def profile_markdown(doc: dict, escape) -> list[str]:
    p = doc.get("profile")
    if not p or not p.get("lines"):
        return []
    lines = ["## Profile: where each server's time went", ""]
    for block in _blocks(p):
        head, *rest = block["lines"]
        lines += [escape(head), ""]
        lines += [f"- {escape(x.strip())}" for x in rest] + [""]
    return lines


def profile_html(doc: dict, escape) -> str:
    from abtui.report.svg import stacked_bars

    p = doc.get("profile")
    if not p or not p.get("lines"):
        return ""
    h = ["<h2>Profile: where each server's time went</h2>"]
    for k, block in enumerate(_blocks(p)):
        head, *rest = block["lines"]
        h.append(f"<p>{escape(head)}</p>")
        bars = phase_bars(block)
        if bars:
            rows = [(f"{arm} · {phase}", parts) for arm, phase, parts in bars]
            key = "profile-bars" if "level" not in block else f"profile-bars-{k}"
            h.append(
                stacked_bars(key, "Share of each phase's time, per class (idle: launch gaps)", rows)
            )
        h.append("<ul>" + "".join(f"<li>{escape(x.strip())}</li>" for x in rest) + "</ul>")
    return "".join(h)


def excluded_line(path, meta: dict) -> str | None:
    """The verdict's word on a profiling window: how many requests it left out of the
    latency figures, per arm (None: no window, or nothing in it)."""
    if not isinstance(meta.get("profile_window"), dict) and not meta.get("profile_windows"):
        return None
    try:
        with SessionReader(path) as rd:
            counts = rd.profiled_counts()
            names = {a["arm"]: a["name"] for a in rd.arms()}
    except (OSError, ValueError):  # the file moved since the verdict was read
        return None
    if not counts:
        return None
    each = ", ".join(f"{names.get(k, k)} {n}" for k, n in sorted(counts.items()))
    return (
        f"profiling: the requests that ran while the servers profiled ({each}) were slowed by "
        "it and are left out of these figures (docs/profile.md)"
    )
