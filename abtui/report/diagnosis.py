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


def diagnosis_markdown(doc: dict, escape) -> list[str]:
    """The report's "Diagnosis" section from ``doc["diagnosis"]`` (``escape``: md escaping)."""
    diags = doc.get("diagnosis") or []
    if not diags:
        return []
    lines = ["## Diagnosis: where the time went", ""]
    for d in diags:
        lines.append(f"**{escape(d['name'])}**")
        lines += [f"- {escape(x.strip())}" for x in d["lines"]] + [""]
    return lines


def diagnosis_html(doc: dict, escape) -> str:
    diags = doc.get("diagnosis") or []
    if not diags:
        return ""
    h = ["<h2>Diagnosis: where the time went</h2>"]
    for d in diags:
        items = "".join(f"<li>{escape(x.strip())}</li>" for x in d["lines"])
        h.append(f"<h3>{escape(d['name'])}</h3><ul>{items}</ul>")
    return "".join(h)
