"""The HTML report: one self-contained file (inline CSS and SVG, no scripts, no external assets).

Reading order (what a team decides from comes first): the degraded mark, the summary cards and
the run's metadata (:mod:`abtui.report.overview`); why each candidate got its result, in words;
the key plots (:mod:`abtui.report.plots`: latency CDFs per phase, latency over time, and for a
load sweep latency-vs-load, latency-vs-throughput and the cost/latency Pareto front, with λ*);
then the tables (metrics, quality, cost, factorial, sweep, SLO attainment), the configuration
differences, the workload's length histograms, the diagnosis and the policy.

Every string that did not come from abtui itself (arm names, URLs, models, parameters, notes
built from them) goes through :func:`esc` (``html.escape`` with quotes), in text and in SVG
alike.
"""

from __future__ import annotations

from abtui.report.document import FLOOR_COLUMNS, floor_section, policy_line
from abtui.report.svg import esc, style_rule
from abtui.report.verdict_text import (
    SWEEP_COLUMNS,
    error_rates_line,
    p_text,
    policy_first,
    role_of,
    sweep_cells,
    sweep_line,
    value,
)
from abtui.stats.labels import label, pct
from abtui.store.reader import SessionReader
from abtui.verdict.policy import Policy
from abtui.verdict.saved import SessionVerdict

_RESULT_COLOR = {"GO": "#1a7f37", "NO-GO": "#cf222e", "CALIBRATED": "#1a7f37"}
_OUTCOME_CLASS = {"IMPROVED": "imp", "REGRESSED": "reg", "EQUIVALENT": "eq"}
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em;color:#1f2328;max-width:1200px}
table{border-collapse:collapse;margin:.5em 0 1.2em;font-size:13px}
td,th{border:1px solid #d0d7de;padding:3px 7px;text-align:right}
td:first-child,th:first-child{text-align:left}
th{background:#f6f8fa}.imp{color:#1a7f37;font-weight:600}.reg{color:#cf222e;font-weight:600}
.eq{color:#0969da}.muted{color:#656d76;font-size:12px}.plots{display:flex;flex-wrap:wrap;gap:12px}
.verdict{font-size:22px;font-weight:700}
.degraded{background:#ffebe9;border:2px solid #cf222e;color:#82071e;padding:.6em 1em;font-weight:600}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:1em 0}
.card{border:1px solid #d0d7de;border-radius:6px;padding:.6em 1em;min-width:200px;flex:1}
.card h3{margin:0;font-size:13px;color:#656d76;font-weight:600}.card .value{font-size:20px;font-weight:700;margin:.2em 0}
table.meta td{text-align:left}
.plots svg{border:1px solid #eaeef2;border-radius:6px;background:#fff}
.lambda{font-weight:600}
table.metrics td,table.metrics th{white-space:nowrap}
ol.notes{font-size:12px;color:#656d76;margin:-.6em 0 1.2em;padding-left:2em}
"""


def _plots(sv: SessionVerdict, doc: dict) -> tuple[str, str]:
    """(the key plots section, the workload section) as HTML."""
    from abtui.report.plots import latency_cdfs, latency_over_time, length_histograms, sweep_plots

    with SessionReader(sv.path) as rd:
        table = rd.request_table()
    ok = table.select(table.ok)
    arms = sv.arms
    h = [
        '<h2 id="plots">Latency distributions</h2>',
        f'<p class="muted">{esc(style_rule([a["name"] for a in arms]))}</p>',
        '<div class="plots">' + "".join(latency_cdfs(ok, arms)) + "</div>",
        "<h2>Latency over time</h2>",
        '<div class="plots">' + "".join(latency_over_time(ok, arms)) + "</div>",
    ]
    sweep = sv.verdict.sweep
    if sweep:
        h += [
            "<h2>Load sweep</h2>",
            '<div class="plots">' + "".join(sweep_plots(sweep, arms, doc["slo"])) + "</div>",
            f'<p class="lambda">{esc(sweep_line(sweep))}</p>',
        ]
    workload = (
        '<h2 id="workload">Workload: request lengths</h2><div class="plots">'
        + "".join(length_histograms(table, arms))
        + "</div>"
    )
    return "\n".join(h), workload


def _fmt(x, scale: float, digits: int) -> str:
    return "n/a" if x is None else f"{x * scale:,.{digits}f}"


def to_html(sv: SessionVerdict, doc: dict) -> str:
    v = sv.verdict
    name = doc["session"]["name"]
    h = [
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>abtui report: {esc(name)}</title><style>{CSS}</style></head><body>",
        f"<h1>abtui report: {esc(name)}</h1>",
        f'<p class="verdict" style="color:{_RESULT_COLOR.get(v.result, "#9a6700")}">'
        f"{'A/A calibration' if sv.aa else 'Verdict'}: {esc(v.result)}</p>",
        f'<p class="muted">exit code {sv.exit_code}; session {esc(doc["status"])}; '
        f"load {esc(doc['session'].get('load'))}</p>",
        _html_overview(sv, doc),
    ]
    plots, workload = _plots(sv, doc)
    h.append('<h2 id="why">Why</h2>' if v.pairs else "")
    for pair in v.pairs + v.ladder:  # the reasons in words, before any plot or table
        kind = "ladder step" if pair in v.ladder else "candidate"
        h.append(
            f"<h3>{esc(pair.candidate)} vs {esc(pair.baseline)} ({kind}): "
            f"{esc(pair.result)}</h3><ul>"
        )
        h += [f"<li>{esc(r)}</li>" for r in pair.reasons]
        h.append(f"<li>{esc(error_rates_line(pair))}</li></ul>")
        if pair in v.pairs:  # a run --until-decided: its anytime-valid rows
            from abtui.report.sequential import row_lines

            rows = row_lines(sv.sequential)
            if rows:
                h.append(f"<p>{esc(rows[0].strip())}</p><ul>")
                h += [f"<li>{esc(x.strip())}</li>" for x in rows[1:]]
                h.append("</ul>")
    h.append(plots)
    for i, pair in enumerate(v.pairs + v.ladder):
        kind = "ladder step" if pair in v.ladder else "candidate"
        h.append(f"<h2>Metrics: {esc(pair.candidate)} vs {esc(pair.baseline)} ({kind})</h2>")
        h.append(_metrics_table(pair, v.policy, i))
        from abtui.report.quality import html as quality_html
        from abtui.report.quality import mode_info

        h.append(quality_html(pair.quality, mode_info(sv.meta)))
        if pair.cost:
            h.append(
                "<table><tr><th>cost</th>"
                + "".join(f"<th>{esc(n)}</th>" for n in pair.cost)
                + "</tr>"
            )
            for field, lab in (
                ("usd_per_hour", "$/hour"),
                ("usd_per_mtok_output", "$/Mtok output"),
                ("usd_per_mtok_total", "$/Mtok total"),
                ("usd_per_mtok_good", "$/Mtok good"),
                ("usd_per_1k_good_requests", "$ per 1k good requests"),
            ):
                shown = [c.shown(field) for c in pair.cost.values()]
                cells = "".join(f"<td>{'n/a' if x is None else f'${x:,.4f}'}</td>" for x in shown)
                h.append(f"<tr><td>{lab}</td>{cells}</tr>")
            h.append("</table>")
    from abtui.report.factorial import html as factorial_html

    h.append(factorial_html(v.factorial, v.policy, esc))
    if v.sweep:
        h.append(
            "<h2>Load sweep: per arm and level</h2><table><tr>"
            + "".join(f"<th>{esc(c)}</th>" for c in SWEEP_COLUMNS)
            + "</tr>"
        )
        for p in v.sweep.points:
            h.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in sweep_cells(p)) + "</tr>")
        h.append(f'</table><p class="muted">{esc(sweep_line(v.sweep))}</p>')
    names = list(doc["summaries"])
    h.append(
        "<h2>SLO attainment and throughput</h2><table><tr><th></th>"
        + "".join(f"<th>{esc(n)}</th>" for n in names)
        + "</tr>"
    )
    for lab, key, scale, digits in (
        ("SLO attainment %", "slo_attainment", 100, 1),
        ("goodput req/s", "goodput_requests_per_s", 1, 2),
        ("output tok/s", "output_tokens_per_s", 1, 0),
        ("schedule lag P99 ms", "lag_p99_s", 1e3, 2),
    ):
        cells = "".join(f"<td>{_fmt(doc['summaries'][n][key], scale, digits)}</td>" for n in names)
        h.append(f"<tr><td>{lab}</td>{cells}</tr>")
    h.append(
        "<tr><td>requests ok / sent</td>"
        + "".join(
            f"<td>{doc['summaries'][n]['ok']}/{doc['summaries'][n]['sent']}</td>" for n in names
        )
        + "</tr>"
    )
    h.append(
        "<tr><td>errors</td>"
        + "".join(
            f"<td>{esc(', '.join(f'{k} {c}' for k, c in doc['summaries'][n]['errors'].items()) or '0')}</td>"
            for n in names
        )
        + "</tr></table>"
    )
    slo = ", ".join(f"{k} ≤ {val * 1e3:g} ms" for k, val in doc["slo"].items()) or "none set"
    h.append(f'<p class="muted">SLOs: {esc(slo)}</p>')
    if doc["config_diff"]:
        h.append(
            "<h2>Configuration differences</h2><table><tr><th>setting</th>"
            + "".join(f"<th>{esc(a['name'])}</th>" for a in doc["arms"])
            + "</tr>"
        )
        for d in doc["config_diff"]:
            h.append(
                f"<tr><td>{esc(d['setting'])}</td>"
                + "".join(f"<td>{esc(x)}</td>" for x in d["values"])
                + "</tr>"
            )
        h.append("</table>")
    h.append(workload)
    from abtui.report.diagnosis import diagnosis_html

    h.append(diagnosis_html(doc, esc))
    from abtui.report.profile import profile_html

    h.append(profile_html(doc, esc))
    h.append(_html_floor(sv))
    h.append(
        f'<p class="muted">{esc(policy_line(doc, sv.verdict.policy.noise_floor_detail))}</p></body></html>'
    )
    return "\n".join(h)


def _metrics_table(pair, policy: Policy, tag: int) -> str:
    """One pair's metrics, one line each: the primary and guardrails first, each note a
    numbered footnote under the table (rows with the same note share its number)."""
    h = [
        '<table class="metrics"><tr><th>metric</th><th>role</th>'
        f"<th>{esc(pair.baseline)}</th><th>{esc(pair.candidate)}</th><th>Δ</th><th>95% CI</th>"
        "<th>δ</th><th>p (adj)</th><th>outcome</th></tr>"
    ]
    notes: dict[str, int] = {}
    for e in policy_first(pair.comparison.effects, policy):
        mark = ""
        if e.note:
            n = notes.setdefault(e.note, len(notes) + 1)
            mark = f'<sup><a href="#n{tag}-{n}">{n}</a></sup>'
        h.append(
            f"<tr><td>{esc(label(e.key))}{mark}</td><td>{role_of(e.key, policy)}</td>"
            f"<td>{esc(value(e, e.a))}</td><td>{esc(value(e, e.b))}</td><td>{pct(e.ratio)}</td>"
            f"<td>[{pct(e.lo)}, {pct(e.hi)}]</td><td>±{e.delta:.0%}</td>"
            f"<td>{p_text(e.p_adj)}</td>"
            f'<td class="{_OUTCOME_CLASS.get(e.outcome, "")}">{e.outcome}</td></tr>'
        )
    h.append("</table>")
    if notes:
        h.append('<ol class="notes">')
        h += [f'<li id="n{tag}-{n}">{esc(note)}</li>' for note, n in notes.items()]
        h.append("</ol>")
    return "".join(h)


def _html_floor(sv: SessionVerdict) -> str:
    """The noise floor measured (A/A session) or applied: bias, spread and floor per row."""
    from abtui.report.verdict_text import floor_left_out, floor_method, floor_rows

    title, detail = floor_section(sv)
    if not title:
        return ""
    h = [
        f"<h2>{esc(title)}</h2>",
        f'<p class="muted">{esc(floor_method(detail) or "none measured")}</p>',
    ]
    rows = floor_rows(detail)
    if rows:
        h.append("<table><tr>" + "".join(f"<th>{esc(c)}</th>" for c in FLOOR_COLUMNS) + "</tr>")
        h += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows]
        h.append("</table>")
    left = floor_left_out(detail)
    if left:
        h.append("<ul>" + "".join(f'<li class="muted">{esc(x)}</li>' for x in left) + "</ul>")
    return "".join(h)


def _html_overview(sv: SessionVerdict, doc: dict) -> str:
    """The degraded mark, the summary cards and the run's metadata (abtui.report.overview)."""
    from abtui.report.overview import cards, degraded_lines, metadata

    h = []
    deg = degraded_lines(sv)
    if deg:
        h.append(
            f'<div class="degraded" id="degraded"><p>{esc(deg[0])}</p><ul>'
            + "".join(f"<li>{esc(r)}</li>" for r in deg[1:])
            + "</ul></div>"
        )
    h.append('<div class="cards">')
    for c in cards(sv, doc):
        h.append(
            f'<div class="card"><h3>{esc(c.title)}</h3>'
            f'<p class="value">{esc(c.value)}</p>'
            f'<p class="muted">{esc(c.detail)}</p></div>'
        )
    h.append('</div><h2>Run</h2><table class="meta">')
    h += [f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in metadata(sv, doc)]
    h.append("</table>")
    return "\n".join(h)
