"""The diagnosis (:mod:`abtui.telemetry.diagnosis`: where each arm's time went) as the reports
show it: printed after a run, as JSON-ready data for the exports, and as their Markdown and HTML
sections."""

from __future__ import annotations

from abtui.jsonable import json_ready
from abtui.report.console import terminal_width
from abtui.report.untrusted import inert
from abtui.telemetry.diagnosis import ArmDiagnosis, diagnose, diagnosis_lines


def print_diagnosis(path, out, width: int | None = None) -> list[ArmDiagnosis]:
    """Print the diagnosis block of the session at ``path`` to ``out``, each line wrapped at
    word boundaries to ``width`` (default: the terminal's when ``out`` is one; else unwrapped)."""
    import textwrap

    width = width or terminal_width(out)
    diags = diagnose(path)
    print("", file=out)
    for line in diagnosis_lines(diags):
        if width and len(line) > width:
            indent = " " * (len(line) - len(line.lstrip()) + 2)
            line = textwrap.fill(
                line,
                width,
                subsequent_indent=indent,
                break_long_words=False,
                break_on_hyphens=False,
            )
        print(inert(line), file=out)
    return diags


def diagnosis_doc(path) -> list[dict]:
    """The diagnosis of the session at ``path`` as JSON-ready data (one dict per arm), with
    the printed lines under ``lines`` (what the md / html reports show)."""
    import dataclasses

    out = []
    for d in diagnose(path):
        item = dataclasses.asdict(d)
        item["roofline"] = [{**dataclasses.asdict(b), "label": b.label()} for b in d.roofline]
        item["lines"] = diagnosis_lines([d])[2:]  # without the title and the arm name
        out.append(json_ready(item))
    return out


def prefix_cache_doc(diagnosis: list[dict]) -> dict:
    """The report's ``prefix_cache`` key: per arm, the hit rate from its responses (overall and
    per turn, with its source and the TTFT split by cached share) and from its server's
    counters, out of the diagnosis data (:func:`diagnosis_doc`)."""
    from abtui.telemetry.prefix_cache import CACHED_SHARE

    arms = {}
    for d in diagnosis:
        pc = d.get("prefix_cache") or {}
        turns = [
            {
                **t,
                "hit_rate": t["cached_tokens"] / t["prompt_tokens"] if t["prompt_tokens"] else None,
            }
            for t in pc.get("turns") or []
        ]
        arms[d["name"]] = {
            "responses": {
                "source": pc.get("source"),
                "requests": pc.get("requests", 0),
                "measured": pc.get("measured", 0),
                "prompt_tokens": pc.get("prompt_tokens", 0),
                "cached_tokens": pc.get("cached_tokens", 0),
                "hit_rate": pc.get("hit_rate"),
                "turns": turns,
                "latency_turns": list(pc.get("latency_turns") or []),
                "ttft_p50_s": {
                    "cached": pc.get("ttft_cached_p50_s"),
                    "uncached": pc.get("ttft_uncached_p50_s"),
                    "n_cached": pc.get("n_cached", 0),
                    "n_uncached": pc.get("n_uncached", 0),
                },
            },
            "server": {
                "hit_rate": d.get("prompt_cached_share"),
                "source": d.get("prompt_cached_source"),
            },
        }
    return {
        "cached_share_threshold": CACHED_SHARE,
        "note": "hit rate = cached / prompt tokens of the measured responses that said "
        "(usage.prompt_tokens_details.cached_tokens, else llama.cpp timings.cache_n); "
        "server: the engine's counters in the measured windows; TTFT split at "
        f"{CACHED_SHARE:.0%} of the prompt cached",
        "arms": arms,
    }


TURNS_TITLE = "By turn: prefix-cache hit rate and TTFT"
TURNS_NOTE = (
    "per turn index of the conversations, each arm's hit rate (cached / prompt tokens of the "
    "measured responses that said; in brackets how many) and the median TTFT of its ok measured "
    "requests (service view); the last columns: each candidate's median against the "
    "baseline's (a description of the turn, no interval: the verdict's rows pair the whole run)"
)


def turn_cache_table(doc: dict) -> tuple[list[str], list[list[str]]] | None:
    """(column headings after "turn", one row per turn index) from the report's
    ``prefix_cache`` key: each arm's hit rate and response count and its P50 TTFT, then each
    candidate's P50 TTFT change against the first arm's; None unless some arm's requests span
    more than one turn (a conversation run)."""
    arms = (doc.get("prefix_cache") or {}).get("arms") or {}
    hits = {
        name: {t["turn"]: t for t in (a.get("responses") or {}).get("turns") or []}
        for name, a in arms.items()
    }
    ttft = {
        name: {t["turn"]: t for t in (a.get("responses") or {}).get("latency_turns") or []}
        for name, a in arms.items()
    }
    turns = sorted({k for ts in (*hits.values(), *ttft.values()) for k in ts})
    if len(turns) < 2:
        return None

    def hit(t: dict | None) -> str:
        if t is None or t.get("hit_rate") is None:
            return "n/a"
        return f"{t['hit_rate']:.1%} ({t['requests']})"

    def p50(name: str, k: int) -> float | None:
        return (ttft[name].get(k) or {}).get("ttft_p50_s")

    def ms(x: float | None) -> str:
        return "n/a" if x is None else f"{x * 1e3:.1f} ms"

    def change(x: float | None, base: float | None) -> str:
        return "n/a" if x is None or not base else f"{x / base - 1:+.1%}"

    names = list(arms)
    heads = [h for n in names for h in (f"{n} hit", f"{n} TTFT P50")]
    heads += [f"{n} vs {names[0]}" for n in names[1:]]
    rows = []
    for k in turns:
        row = [str(k)]
        for n in names:
            row += [hit(hits[n].get(k)), ms(p50(n, k))]
        row += [change(p50(n, k), p50(names[0], k)) for n in names[1:]]
        rows.append(row)
    return heads, rows


def diagnosis_markdown(doc: dict, escape) -> list[str]:
    """The report's "Diagnosis" section from ``doc["diagnosis"]`` (``escape``: md escaping),
    with the prefix cache's hit rate turn by turn where the run had conversations."""
    diags = doc.get("diagnosis") or []
    if not diags:
        return []
    lines = ["## Diagnosis: where the time went", ""]
    for d in diags:
        lines.append(f"**{escape(d['name'])}**")
        lines += [f"- {escape(x.strip())}" for x in d["lines"]] + [""]
    table = turn_cache_table(doc)
    if table is not None:
        heads, rows = table
        lines += [f"### {TURNS_TITLE}", "", escape(TURNS_NOTE), ""]
        lines.append("| turn | " + " | ".join(escape(n) for n in heads) + " |")
        lines.append("|--:|" + "--:|" * len(heads))
        lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
    return lines


def diagnosis_html(doc: dict, escape) -> str:
    diags = doc.get("diagnosis") or []
    if not diags:
        return ""
    h = ["<h2>Diagnosis: where the time went</h2>"]
    for d in diags:
        items = "".join(f"<li>{escape(x.strip())}</li>" for x in d["lines"])
        h.append(f"<h3>{escape(d['name'])}</h3><ul>{items}</ul>")
    table = turn_cache_table(doc)
    if table is not None:
        heads, rows = table
        h.append(f'<h3>{TURNS_TITLE}</h3><p class="muted">{escape(TURNS_NOTE)}</p><table>')
        h.append("<tr><th>turn</th>" + "".join(f"<th>{escape(n)}</th>" for n in heads) + "</tr>")
        h += ["<tr>" + "".join(f"<td>{escape(x)}</td>" for x in r) + "</tr>" for r in rows]
        h.append("</table>")
    return "".join(h)
