"""Load-generator health: did every arm get the schedule it was promised?

From the stored raw facts (``dispatched_ns − scheduled_ns`` of every measured request) and the
generators' own counters: schedule lag P50 / P99 / max, the generator's CPU share of the
measuring wall time, and the most requests it had in flight. A session whose lag exceeds the
limits the verdict uses (:data:`~abtui.metrics.summary.LAG_P99_LIMIT_S`, ``LAG_MAX_LIMIT_S``)
is marked ``degraded`` in ``meta`` (and an event), and the summary says so loudly.
"""

from __future__ import annotations

from abtui.metrics.summary import LAG_MAX_LIMIT_S, LAG_P99_LIMIT_S

CPU_SHARE_WARN = 0.9  # a generator busier than this cannot keep up for long


def generator_health(con, names: list[str], stats: dict[int, dict]) -> dict:
    """``{"arms": {name: figures}, "degraded": bool, "reasons": [...], "notes": [...]}``."""
    rows = con.execute(
        "SELECT arm, quantile_cont(lag, 0.5), quantile_cont(lag, 0.99), max(lag), count(*) "
        "FROM (SELECT arm, (dispatched_ns - scheduled_ns) / 1e9 AS lag FROM requests "
        "WHERE NOT warmup AND dispatched_ns > 0) GROUP BY arm ORDER BY arm"
    ).fetchall()
    arms: dict[str, dict] = {}
    reasons: list[str] = []
    notes: list[str] = []
    for arm, p50, p99, mx, n in rows:
        st = stats.get(arm, {})
        wall = st.get("measure_wall_s") or 0.0
        share = st.get("measure_cpu_s", 0.0) / wall if wall > 0 else None
        name = names[arm]
        arms[name] = {
            "lag_p50_s": p50,
            "lag_p99_s": p99,
            "lag_max_s": mx,
            "requests": n,
            "cpu_share": share,
            "in_flight_max": st.get("in_flight_max"),
            "processes": st.get("processes", 1),
        }
        if p99 > LAG_P99_LIMIT_S or mx > LAG_MAX_LIMIT_S:
            reasons.append(
                f"{name}: schedule lag P99 {p99 * 1e3:.1f} ms, max {mx * 1e3:.1f} ms (limits "
                f"{LAG_P99_LIMIT_S * 1e3:g} / {LAG_MAX_LIMIT_S * 1e3:g} ms)"
            )
        if share is not None and share > CPU_SHARE_WARN:
            notes.append(f"{name}: its load generator used {100 * share:.0f}% of a core")
    return {"arms": arms, "degraded": bool(reasons), "reasons": reasons, "notes": notes}


def per_arm(stats: dict[int, dict], worker_arm: list[int]) -> dict[int, dict]:
    """Workers' stats → per arm: the busiest process's CPU share, in-flight summed."""
    out: dict[int, dict] = {}
    for w, st in stats.items():
        if not isinstance(st, dict):
            continue
        a = out.setdefault(worker_arm[w], {"in_flight_max": 0, "processes": 0})
        a["processes"] += 1
        a["in_flight_max"] += st.get("in_flight_max") or 0
        wall = st.get("measure_wall_s") or 0.0
        if wall > 0:
            share = st.get("measure_cpu_s", 0.0) / wall
            if share >= a.get("share", -1.0):
                a.update(
                    share=share, measure_cpu_s=st.get("measure_cpu_s", 0.0), measure_wall_s=wall
                )
    return out


def format_health(h: dict) -> list[str]:
    """Lines for the summary: one per arm, then the degraded banner when marked."""
    out = []
    for name, a in (h.get("arms") or {}).items():
        share = a.get("cpu_share")
        cpu = f"{100 * share:.0f}% CPU" if share is not None else "CPU n/a"
        out.append(
            f"  generator {name}: lag P50 {a['lag_p50_s'] * 1e3:.2f} ms, P99 "
            f"{a['lag_p99_s'] * 1e3:.2f} ms, max {a['lag_max_s'] * 1e3:.2f} ms; {cpu}; "
            f"at most {a.get('in_flight_max')} in flight"
        )
    return out
