"""What a report opens with: the degraded mark, four summary cards and the run's metadata.

A team decides from the first screen of a report (GuideLLM's and genai-bench's reports open
with their headline numbers and the run's configuration): the verdict, the primary effect with
its CI, cost and quality as cards; then when, how long, which abtui, where, which endpoints and
models, what workload, which SLOs and which policy. Computed once here from the verdict and the
report document; Markdown and HTML only lay it out. Stored strings are returned as stored — the
renderers escape them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from abtui.report.health import DEGRADED_TAG, DEGRADED_WHY, stored_health
from abtui.stats.labels import label, pct
from abtui.verdict.saved import SessionVerdict


def _money(x) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"${x:,.3f}"


@dataclass(frozen=True, slots=True)
class Card:
    """One summary card: a title, the headline value and a line of detail."""

    title: str
    value: str
    detail: str


def cards(sv: SessionVerdict, doc: dict) -> list[Card]:
    """The summary cards: verdict, primary Δ with CI, cost, quality."""
    v, pol = sv.verdict, sv.verdict.policy
    degraded = stored_health(sv.meta).degraded
    out = [
        Card(
            "A/A calibration" if sv.aa else "Verdict",
            v.result + (f" · {DEGRADED_TAG.split()[0]}" if degraded else ""),
            f"exit code {sv.exit_code}; session {doc.get('status')}",
        )
    ]
    pair = v.pairs[0] if v.pairs else None
    e = pair.comparison.get(pol.primary) if pair else None
    if e is None:
        out.append(Card("Primary Δ", "n/a", label(pol.primary)))
    else:
        out.append(
            Card(
                f"Primary Δ ({label(e.key)})",
                pct(e.ratio),
                f"95% CI [{pct(e.lo)}, {pct(e.hi)}] · {e.outcome} · δ ±{e.delta:.0%}"
                + (f" · {pair.candidate} vs {pair.baseline}" if len(v.pairs) > 1 else ""),
            )
        )
    cost = pair.cost if pair else None
    if cost:
        per = [(n, c.shown("usd_per_mtok_good")) for n, c in cost.items()]
        out.append(
            Card(
                "Cost ($/Mtok good)",
                _money(per[-1][1]) + f" {per[-1][0]}",
                " vs ".join(f"{n} {_money(x)}" for n, x in per),
            )
        )
    else:
        out.append(Card("Cost", "no price given", "set cost.gpu_price (and cost.gpus) in the spec"))
    q = pair.quality if pair else None
    if not q:
        out.append(Card("Quality", "not measured", "no quality suites"))
    else:
        state = "FAIL" if q.no_go else "undecided" if q.undecided else "pass"
        out.append(
            Card(
                "Quality",
                state,
                "; ".join(f"{g.suite} {g.state}" for g in q.gates) or "no gated suite",
            )
        )
    return out


def metadata(sv: SessionVerdict, doc: dict) -> list[tuple[str, str]]:
    """The run's metadata rows, (field, value), in reading order."""
    meta, spec = sv.meta, sv.spec or {}
    wl, ld = spec.get("workload") or {}, spec.get("load") or {}
    host = meta.get("host") if isinstance(meta.get("host"), dict) else {}
    sums = doc.get("summaries") or {}
    durations = [s.get("duration_s") for s in sums.values() if s.get("duration_s") is not None]
    rows = [
        ("date", str(meta.get("created") or "unknown")),
        ("duration", f"{max(durations):.1f} s (measured, longest arm)" if durations else "n/a"),
        ("abtui version", str(meta.get("abtui_version") or "unknown")),
        (
            "host",
            ", ".join(
                str(x)
                for x in (
                    host.get("hostname"),
                    host.get("platform"),
                    host.get("cpu_count") and f"{host['cpu_count']} CPUs",
                )
                if x
            )
            or "unknown",
        ),
    ]
    for a in doc.get("arms") or []:
        rows.append(
            (
                f"endpoint {a.get('name')}",
                f"{a.get('role') or 'arm'}: {a.get('url')} · model {a.get('model')}",
            )
        )
    shape = (doc.get("workload") or {}).get("text")  # abtui.metrics.workload: what was sent
    rows.append(("workload", shape or ("not recorded in the spec" if not wl else "n/a")))
    rows.append(
        (
            "requests",
            "; ".join(f"{n} {s.get('sent')} sent, {s.get('ok')} ok" for n, s in sums.items())
            or "n/a",
        )
    )
    arrival = str(meta.get("load") or "?")
    if ld.get("arrival") == "gamma":
        arrival += f" (gamma arrivals, cv {ld.get('burstiness', 1.0):g})"
    rows.append(("arrival process", arrival))
    slo = ", ".join(f"{k} ≤ {val * 1e3:g} ms" for k, val in (doc.get("slo") or {}).items())
    rows.append(("SLOs", slo or "none set"))
    p = sv.verdict.policy
    rows.append(
        (
            "policy",
            f"primary {label(p.primary)}; guardrails "
            f"{', '.join(label(g) for g in p.guardrails) or 'none'}; α {p.alpha:g}; "
            f"δ {p.delta:.0%} / {p.delta_tail:.0%} (tails)",
        )
    )
    if isinstance(meta.get("ray"), dict):  # a --ray run: its nodes, their clock offsets, losses
        from abtui.runner.ray.clocks import lines

        cluster = lines(meta["ray"])
        rows += [("ray cluster" if k == 0 else "", text.strip()) for k, text in enumerate(cluster)]
    return rows


def degraded_lines(sv: SessionVerdict) -> list[str]:
    """``[DEGRADED SESSION: why, reason…]`` for a degraded session, else ``[]``."""
    h = stored_health(sv.meta)
    return [f"{DEGRADED_TAG}: {DEGRADED_WHY}", *h.reasons] if h.degraded else []
