"""The engine A/Bs' results as table rows and finding lines (``scripts/engine_ab.py`` prints
them for docs/engine.md)."""

from __future__ import annotations

from abtui.engine.experiments import EXPERIMENTS, ExperimentResult


def _pct(e: dict | None) -> str:
    if not e or e.get("ratio") is None:
        return "—"
    return f"{e['ratio'] * 100:+.1f}% [{e['lo'] * 100:+.1f}, {e['hi'] * 100:+.1f}]"


def factorial_lines(
    res: ExperimentResult,
    keys: tuple[str, ...] = ("tpot.p50", "e2e.p50", "throughput.output_tokens"),
) -> list[str]:
    """A factorial experiment's rows in words: each factor alone, the combination, what the
    parts multiplied predict, and the interaction with its CI and outcome."""
    fac = res.report.get("factorial") or {}
    if fac.get("error"):
        return [f"factorial: {fac['error']}"]
    out = []
    for row in fac.get("rows", []):
        if row["key"] not in keys:
            continue
        alone = ", ".join(f"{n} alone {_pct(c)}" for n, c in row["alone"].items())
        inter = row["interactions"][0] if row["interactions"] else None
        out.append(
            f"{row['label']}: {alone}; {fac['combination']} {_pct(row['combined'])}; "
            f"parts multiplied {row['predicted']['product'] * 100:+.1f}%; interaction "
            f"{_pct(inter)} {inter['outcome'] if inter else ''}"
        )
    return out + list(fac.get("findings") or []) + ([fac["no_go"]] if fac.get("no_go") else [])


def ppl_cell(res: ExperimentResult) -> str:
    """``24.60 → 26.15 (×1.063 ± 0.016)``: baseline → candidate, or — when not measured."""
    c = res.ppl
    if c is None:
        return "—"
    return (
        f"{c.base.ppl:.2f} → {c.cand.ppl:.2f} (×{c.ratio:.3f} ± {c.ratio_err:.3f}), "
        f"KLD {c.kld:.4f}, same top {c.same_top:.1%}"
    )


def _right(row: dict, arm: str) -> str:
    """``5/6``: the items an arm got right of the row's pairs."""
    return f"{round(row[f'acc_{arm}'] * row['n'])}/{row['n']}"


def quality_cell(q: dict | None) -> str:
    """Each suite's right answers on both arms, overall and per bucket (length), and its gate."""
    if not q:
        return "—"
    gates = {g["suite"]: g["state"] for g in q.get("gates", [])}
    out = []
    for s in q.get("suites", []):
        per = ", ".join(
            f"{b['bucket']} {_right(b, 'a')} → {_right(b, 'b')}"
            for b in q.get("buckets", [])
            if b["suite"] == s["suite"]
        )
        out.append(
            f"{s['suite']} {_right(s, 'a')} → {_right(s, 'b')} ({s['delta'] * 100:+.1f} pp, "
            f"{gates.get(s['suite'], '?')}{'; ' + per if per else ''})"
        )
    return "; ".join(out) or "—"


def table_rows(res: ExperimentResult) -> list[dict[str, str]]:
    """One row per level (a sweep) or one row: the figures docs/engine.md tabulates."""
    exp = EXPERIMENTS[res.key]
    base, cand = exp.baseline.name, exp.candidate.name
    cb, cc = res.counters[base], res.counters[cand]
    diag = {d["name"]: d for d in res.report.get("diagnosis") or []}

    def gap(arm: str) -> str:  # the server's own prompt time against abtui's TTFT (means)
        t = (diag.get(arm) or {}).get("timings") or {}
        if not t.get("n"):
            return "—"
        return f"{t['client_ttft_ms']:.1f} vs {t['server_prompt_ms']:.1f}"

    stream_acc = ((diag.get(cand) or {}).get("timings") or {}).get("stream_acceptance")
    levels: list[int | None] = list(range(len(exp.sweep))) if exp.sweep else [None]
    rows = []
    for lv in levels:
        rows.append(
            {
                "A/B": exp.key + (f" @ concurrency {exp.sweep[lv]}" if lv is not None else ""),
                "verdict": res.pair["result"],
                "primary": f"{exp.primary} {_pct(res.effect(exp.primary, lv))}",
                "TTFT P50": _pct(res.effect("ttft.p50", lv)),
                "TPOT P50": _pct(res.effect("tpot.p50", lv)),
                "E2E P50": _pct(res.effect("e2e.p50", lv)),
                "out tok/s": _pct(res.effect("throughput.output_tokens", lv)),
                "deferred peak": f"{cb.peak.get('llamacpp:requests_deferred', 0):g} / "
                f"{cc.peak.get('llamacpp:requests_deferred', 0):g}",
                "acceptance": "—"
                if cc.acceptance != cc.acceptance
                else (
                    f"{cc.acceptance:.1%} (streams {stream_acc:.1%})"
                    if stream_acc is not None
                    else f"{cc.acceptance:.1%}"
                )
                + f"; {cc.drafted_share:.0%} of output",
                "TTFT client vs server prompt (ms)": f"{gap(base)} / {gap(cand)}",
                "server CPU ms/token": f"{cb.cpu_ms_per_token:.1f} / {cc.cpu_ms_per_token:.1f}",
                "llama_decode calls": f"{cb.delta('llamacpp:n_decode_total'):g} / "
                f"{cc.delta('llamacpp:n_decode_total'):g}",
                "PPL (llama-perplexity)": ppl_cell(res),
            }
        )
    return rows
