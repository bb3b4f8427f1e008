"""The HTML report's plots, drawn from the session's stored requests and the verdict's sweep
(:mod:`abtui.report.svg` draws them). Every plot overlays the arms, each in its own colour
(:func:`abtui.report.svg.arm_style`):

- **latency CDFs** per phase (TTFT, TPOT, E2E) on a tail-stretched percentile axis, so medians
  and P99s are read off one curve;
- **latency over time**: per time bin, each arm's P50 (thick) and P90 (thin) TTFT and E2E, by
  the request's dispatch time since the session's first — drift, warm-up and stalls show here;
- for a **load sweep**: P99 E2E and P99 TTFT against the offered load (the SLO as a reference
  line; GuideLLM's sweep report), P99 E2E against goodput (genai-bench's latency-vs-throughput
  curves) and the cost/latency Pareto scatter (filled: on the front), every point labelled with
  its level number as the TUI counts them (L1 = "level 1/N");
- **input and output length histograms** (log-spaced bins on a log axis): the workload's shape,
  one series when every arm got the same lengths.
"""

from __future__ import annotations

import numpy as np

from abtui.metrics import request as request_metrics
from abtui.metrics.table import RequestTable
from abtui.report.svg import LINEAR, LOG, TAIL, Axis, Chart, HLine, Series, no_data, render
from abtui.stats.sweep import LevelPoint, SweepSummary

PHASES = (
    ("ttft", "TTFT", request_metrics.ttft_s),
    ("tpot", "TPOT", request_metrics.tpot_s),
    ("e2e", "E2E", request_metrics.e2e_s),
)
CDF_POINTS = 240
MIN_BIN = 10  # requests in a time bin for its P90 (one beyond it)


def _unit(values_s) -> tuple[float, str]:
    """(scale, unit) for latencies in seconds: ms below 10 s, else s."""
    v = np.concatenate([np.ravel(x) for x in values_s]) if values_s else np.array([])
    v = v[np.isfinite(v)]
    return (1.0, "s") if len(v) and np.nanmax(v) >= 10 else (1e3, "ms")


def cdf(plot_id: str, title: str, series: list[tuple[str, int, np.ndarray]]) -> str:
    """Overlaid empirical CDFs of latencies (seconds) on a log x axis and a tail-stretched
    percentile axis; each curve stops at its own 1 − 1/n (no extrapolated tail)."""
    vals = [(n, k, np.sort(v[np.isfinite(v) & (v > 0)])) for n, k, v in series]
    present = [v for _, _, v in vals if len(v)]
    if not present:
        return no_data(plot_id, title, "no request measured this phase")
    scale, unit = _unit(present)
    top = min(3.0, max(np.log10(len(v)) for v in present))
    out = []
    for name, k, v in vals:
        if not len(v):
            continue
        u = np.linspace(0, min(top, np.log10(len(v))), CDF_POINTS)
        p = 1 - 10.0**-u
        out.append(Series(f"{name} (n={len(v):,})", k, np.quantile(v, p) * scale, p))
    x = Axis.fit(f"{unit} (log)", np.concatenate(present) * scale, LOG)
    y = Axis.fit("percentile", [top], TAIL)
    return render(
        Chart(plot_id, title, x, y, out, note="y: P50, P90, P99 equally spaced (tail-stretched)")
    )


def latency_cdfs(ok: RequestTable, arms: list[dict]) -> list[str]:
    return [
        cdf(
            f"cdf-{key}",
            f"{lab} distribution (CDF)",
            [(a["name"], k, fn(ok.for_arm(a["arm"]))) for k, a in enumerate(arms)],
        )
        for key, lab, fn in PHASES
    ]


def over_time(ok: RequestTable, arms: list[dict], key: str, lab: str, fn, bins: int = 0) -> str:
    """Each arm's P50 and P90 per time bin against the dispatch time since the session's
    first request (bins with fewer than :data:`MIN_BIN` requests are gaps)."""
    plot_id, title = f"time-{key}", f"{lab} over time (P50 thick, P90 thin)"
    if not len(ok):
        return no_data(plot_id, title, "no request measured")
    t0 = ok.dispatched_ns.min()
    t_s = (ok.dispatched_ns - t0) / 1e9
    lat = fn(ok)
    span = float(t_s.max()) if len(t_s) else 0.0
    per_arm = max(1, len(ok) // max(1, len(arms)))
    n_bins = bins or int(np.clip(per_arm // (3 * MIN_BIN), 4, 60))
    edges = np.linspace(0, span if span > 0 else 1.0, n_bins + 1)
    mids = (edges[:-1] + edges[1:]) / 2
    scale, unit = _unit([lat])
    out, drawn = [], []
    for k, a in enumerate(arms):
        mine = ok.arm == a["arm"]
        idx = np.clip(np.searchsorted(edges, t_s[mine], side="right") - 1, 0, n_bins - 1)
        v = lat[mine]
        p50, p90 = np.full(n_bins, np.nan), np.full(n_bins, np.nan)
        for b in range(n_bins):
            x = v[(idx == b) & np.isfinite(v)]
            if len(x) >= MIN_BIN:
                p50[b], p90[b] = np.quantile(x, 0.5), np.quantile(x, 0.9)
        out.append(Series(f"{a['name']} P50", k, mids, p50 * scale, width=2.2))
        out.append(Series(f"{a['name']} P90", k, mids, p90 * scale, width=1.0, opacity=0.55))
        drawn += [p50 * scale, p90 * scale]
    vals = np.concatenate(drawn)
    if not np.isfinite(vals).any():
        return no_data(plot_id, title, f"fewer than {MIN_BIN} requests in every time bin")
    x = Axis.fit("seconds since the first request", [0.0, span], LINEAR, zero=True)
    y = Axis.fit(f"{unit} (log)", vals, LOG)
    width = span / n_bins
    return render(
        Chart(plot_id, title, x, y, out, note=f"{n_bins} bins of {width:,.1f} s, by dispatch time")
    )


def latency_over_time(ok: RequestTable, arms: list[dict]) -> list[str]:
    return [over_time(ok, arms, key, lab, fn) for key, lab, fn in PHASES if key != "tpot"]


# ------------------------------------------------------------------------------ load sweep


def _by_arm(sweep: SweepSummary, arms: list[dict]) -> list[tuple[int, str, list[LevelPoint]]]:
    out = []
    for k, a in enumerate(arms):
        pts = sorted(
            (p for p in sweep.points if p.arm == a["name"]),
            key=lambda p: (p.shown("load_rps") or 0, p.level),
        )
        if pts:
            out.append((k, a["name"], pts))
    return out


def _arr(pts: list[LevelPoint], key: str, scale: float = 1.0) -> np.ndarray:
    return np.array([np.nan if (v := p.shown(key)) is None else v * scale for p in pts], float)


def _levels(pts: list[LevelPoint]) -> list[str]:
    return [f"L{p.level + 1}" for p in pts]


def sweep_vs_load(sweep: SweepSummary, arms: list[dict], key: str, lab: str, slo_s) -> str:
    """P99 ``key`` (``p99_e2e_s`` / ``p99_ttft_s``) against the load, one curve per arm."""
    plot_id, title = f"sweep-{lab.lower()}-vs-load", f"P99 {lab} vs load"
    groups = _by_arm(sweep, arms)
    ys = [_arr(pts, key) for _, _, pts in groups]
    if not groups or not any(np.isfinite(y).any() for y in ys):
        return no_data(plot_id, title, "no level measured")
    scale, unit = _unit(ys + ([np.array([slo_s])] if slo_s else []))
    out = [
        Series(name, k, _arr(pts, "load_rps"), y * scale, "line+markers", _levels(pts))
        for (k, name, pts), y in zip(groups, ys, strict=True)
    ]
    refs = [HLine(slo_s * scale, f"SLO {lab} ≤ {slo_s * scale:g} {unit}")] if slo_s else []
    vals = np.concatenate([s.y for s in out] + [np.array([r.y for r in refs])])
    x = Axis.fit("load (req/s)", np.concatenate([s.x for s in out]), LINEAR, zero=True, pad=0.05)
    y = Axis.fit(f"P99 {lab} ({unit}, log)", vals, LOG, pad=0.08)
    return render(
        Chart(
            plot_id, title, x, y, out, refs, note="L1, L2, …: sweep levels as the TUI numbers them"
        )
    )


def sweep_latency_vs_throughput(sweep: SweepSummary, arms: list[dict], slo: dict) -> str:
    """P99 E2E against goodput per arm: how much latency each arm pays for its throughput."""
    plot_id, title = "sweep-latency-vs-throughput", "P99 E2E vs throughput"
    groups = _by_arm(sweep, arms)
    ys = [_arr(pts, "p99_e2e_s") for _, _, pts in groups]
    if not groups or not any(np.isfinite(y).any() for y in ys):
        return no_data(plot_id, title, "no level measured")
    scale, unit = _unit(ys)
    out = [
        Series(name, k, _arr(pts, "goodput_tps"), y * scale, "line+markers", _levels(pts))
        for (k, name, pts), y in zip(groups, ys, strict=True)
    ]
    what = "goodput (output tok/s within the SLOs)" if slo else "output tok/s"
    x = Axis.fit(what, np.concatenate([s.x for s in out]), LINEAR, zero=True, pad=0.05)
    y = Axis.fit(f"P99 E2E ({unit}, log)", np.concatenate([s.y for s in out]), LOG, pad=0.08)
    return render(
        Chart(
            plot_id,
            title,
            x,
            y,
            out,
            note="down and right is better; a curve turning up is the knee",
        )
    )


def sweep_pareto(sweep: SweepSummary, arms: list[dict]) -> str:
    """Every (arm, level) at (P99 E2E, $/Mtok good) — goodput when unpriced — the points on
    the Pareto front filled and joined by a grey step line."""
    priced = sweep.priced
    plot_id = "sweep-pareto"
    title = "Cost vs latency (Pareto front)" if priced else "Goodput vs latency (Pareto front)"
    groups = _by_arm(sweep, arms)
    second, ylab = (
        ("usd_per_mtok_good", "$/Mtok good")
        if priced
        else ("goodput_tps", "goodput (output tok/s)")
    )
    xs = [_arr(pts, "p99_e2e_s") for _, _, pts in groups]
    if not groups or not any(np.isfinite(x).any() for x in xs):
        return no_data(plot_id, title, "no level measured")
    scale, unit = _unit(xs)
    out = []
    front = []
    for (k, name, pts), x in zip(groups, xs, strict=True):
        y = _arr(pts, second)
        out.append(
            Series(name, k, x * scale, y, "markers", _levels(pts), [bool(p.on_front) for p in pts])
        )
        front += [(a * scale, b) for a, b, p in zip(x, y, pts, strict=True) if p.on_front]
    if front:
        front.sort()
        fx, fy = np.array([a for a, _ in front]), np.array([b for _, b in front])
        out.insert(0, Series("Pareto front", -1, fx, fy, "step", width=1.2, legend=True))
    vals_y = np.concatenate([s.y for s in out])
    x = Axis.fit(f"P99 E2E ({unit}, log)", np.concatenate([s.x for s in out]), LOG, pad=0.06)
    y = Axis.fit(ylab, vals_y, LINEAR, zero=not priced, pad=0.06)
    better = "down and left" if priced else "up and left"
    return render(
        Chart(
            plot_id,
            title,
            x,
            y,
            out,
            note=f"filled: on the front (none better in both); {better} is better",
        )
    )


def sweep_plots(sweep: SweepSummary | None, arms: list[dict], slo: dict) -> list[str]:
    if not sweep:
        return []
    return [
        sweep_vs_load(sweep, arms, "p99_e2e_s", "E2E", slo.get("e2e")),
        sweep_vs_load(sweep, arms, "p99_ttft_s", "TTFT", slo.get("ttft")),
        sweep_latency_vs_throughput(sweep, arms, slo),
        sweep_pareto(sweep, arms),
    ]


# ------------------------------------------------------------------------------ workload


def histogram(
    plot_id: str, title: str, what: str, series: list[tuple[str, int, np.ndarray]], same_note: str
) -> str:
    """Overlaid histograms (step outlines) of positive integers; one series named
    ``same_note`` when every arm's values are the same multiset."""
    vals = [(n, k, np.asarray(v, dtype=float)) for n, k, v in series]
    vals = [(n, k, v[np.isfinite(v) & (v > 0)]) for n, k, v in vals]
    present = [v for _, _, v in vals if len(v)]
    if not present:
        return no_data(plot_id, title, "no lengths recorded")
    if len(present) > 1 and all(np.array_equal(np.sort(present[0]), np.sort(v)) for v in present):
        vals = [(same_note, -2, present[0])]
    allv = np.concatenate(present)
    lo, hi = float(allv.min()), float(allv.max())
    if lo == hi:  # one bar says nothing a sentence does not
        return no_data(plot_id, title, f"every request: {lo:,.0f} {what} tokens (one length)")
    log = hi / lo >= 8
    n_bins = int(np.clip(np.sqrt(len(allv)), 8, 40))
    edges = (
        np.geomspace(lo, hi * 1.0001, n_bins + 1) if log else np.linspace(lo, hi + 1, n_bins + 1)
    )
    out = []
    for name, k, v in vals:
        if not len(v):
            continue
        counts, _ = np.histogram(v, edges)
        xs = np.concatenate([edges[:1], edges])
        ys = np.concatenate([[0], counts, [0]]).astype(float)
        out.append(Series(f"{name} (n={len(v):,})", k, xs, ys, "step", width=1.6))
    x = Axis.fit(f"{what} tokens{' (log)' if log else ''}", edges, LOG if log else LINEAR)
    y = Axis.fit("requests", np.concatenate([s.y for s in out]), LINEAR, zero=True)
    return render(
        Chart(plot_id, title, x, y, out, note=f"{n_bins} {'log-spaced ' if log else ''}bins")
    )


def length_histograms(table: RequestTable, arms: list[dict]) -> list[str]:
    """Prompt lengths of every measured request and output lengths of the ok ones, per arm."""
    ok = table.select(table.ok)
    ins = [(a["name"], k, _ints(table.for_arm(a["arm"]).n_input)) for k, a in enumerate(arms)]
    outs = [(a["name"], k, _ints(ok.for_arm(a["arm"]).n_output)) for k, a in enumerate(arms)]
    return [
        histogram(
            "hist-input", "Input (prompt) lengths", "input", ins, "every arm (the same prompts)"
        ),
        histogram(
            "hist-output",
            "Output lengths (ok requests)",
            "output",
            outs,
            "every arm (the same lengths)",
        ),
    ]


def _ints(col: np.ndarray) -> np.ndarray:
    from abtui.metrics.table import NA

    col = np.asarray(col)
    return col[col != NA].astype(float)
