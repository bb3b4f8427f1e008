#!/usr/bin/env python3
"""How often the verdict is wrong: A/A false calls, power and quality gates.

Each cell builds ``--repeats`` synthetic sessions with a known truth and counts how often
:func:`abtui.verdict.policy.evaluate` (default policy: primary ``e2e.p50``; guardrails TTFT/TPOT
P50 and P99, E2E P99) or :func:`abtui.quality.gates.evaluate_quality` (default 1 pp margin) gets
it wrong. Only public entry points that exist before and after the issue-24 fixes are used
(``evaluate`` with a spec dict, ``RequestTable.from_columns``, ``evaluate_quality``), and the data
are generated here, so the same script measures the old code and the new one.

Latency model (per arm ``n`` requests, request ``i`` of every arm = item ``i`` scheduled at
``i / 20`` s, 16 one-token chunks): TTFT and TPOT are log-normal around 40 ms and 10 ms
(σ = 0.25, :class:`~tests.synthetic.ArmTruth`'s defaults), times ``exp(σ · z)``, where
``z = √s · shared + √(1 − s) · own``: ``shared`` is one series seen by both arms (the same items
at the same instants: both arms of a parallel A/B see the same load), ``own`` is each arm's;
``s = --shared`` (default 0.5: half the log-variance is common). TTFT and TPOT get separate
series. Per scenario:

- ``iid``: independent standard normals;
- ``ar0.5``, ``ar0.9``, ``ar0.98``: a stationary AR(1) with unit variance and that coefficient;
- ``drift``: normals, plus a slow drift of the latency level common to both arms (a random walk
  whose level has sd 0.6 σ ≈ 15% by the run's end), plus bursts that slow TTFT and TPOT ×2 for
  4–16 consecutive requests (one starts at a request with probability 1/500; a share ``s`` of
  them hit both arms at the same instants, the rest one arm);
- ``drift-ar0.9``: the drift and bursts of ``drift`` over AR(1) ρ = 0.9 noise instead of
  normals (each arm's own share of it included).

Cells: ``aa`` (identical arms; a false call is a GO or NO-GO, and a row IMPROVED/REGRESSED);
``power`` (candidate TTFT and TPOT 10% faster: GO, P50 E2E IMPROVED); ``vacuous`` (the power
candidate, but 2% of its requests get ``m×`` TTFT, ``m`` tuned so P99 TTFT ≈ +30%: a GO is
wrong); ``aa-busy`` / ``power-busy`` / ``power40-busy`` (A/A, 10% and 40% faster, on a busy
client: on 30% of its loop wake-ups the generator stalls for an exponential time of mean
``--stall-ms``, drawn anew for each send — the schedule lag — and for each read of the first
and the last token, which inflates TTFT and E2E as a starved event loop does; lag P99 ≈ 3.4 ×
the mean: 11 ms at the default 3.2 ms), ``aa-busybase`` (A/A with only the baseline's client
busy: its stalls flatter the candidate, the worst case for a false GO); ``alt`` (A/A with the arms taking turns in ``--blocks`` blocks, A B | B A …: the table's
``block`` column is set and each arm's timestamps fall in its own turns; the shared series is
then indexed by time, not item); ``altpower`` (the power candidate, alternating as ``alt``);
``slo`` (parallel A/A with an E2E SLO at :data:`SLO_E2E_S`, about the median: a false call is
``slo.attainment`` or a goodput row IMPROVED/REGRESSED); ``slopower`` (the power candidate with
that SLO: its attainment rises by ≈ 41 %, from ≈ 50 % to ≈ 70 %, and should be IMPROVED); ``quality`` (paired items; per item a down-flip A right → B
wrong and an up-flip with given probabilities). Rates carry ±1.96·√(p(1−p)/R); an A/A rate
above α = 5% beyond that error is flagged ⚠.

    python scripts/bench_verdict_calibration.py --quick
    python scripts/bench_verdict_calibration.py --repeats 500 --json out.json > out.md
    python scripts/bench_verdict_calibration.py --cells aa,alt --scenarios iid,ar0.9 --n 1000
"""
# ruff: noqa: E402  (the BLAS thread count is set before numpy is imported)

from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # one BLAS thread per worker process

import argparse
import json
import math
import multiprocessing as mp
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests.synthetic
from tests.synthetic import ArmTruth  # noqa: E402

NS = 1_000_000_000
RATE, N_OUT, ALPHA = 20.0, 16, 0.05
DRIFT_SD, BURST_P, BURST_LEN, BURST_LOG = 0.6, 1 / 500, (4, 16), math.log(2.0)
TAIL_FRAC, TAIL_P99 = 0.02, 0.30  # vacuous guardrail: 2% of requests, P99 TTFT +30%
TTFT_S, TPOT_S, SIGMA = ArmTruth().ttft_s, ArmTruth().tpot_s, ArmTruth().sigma
SCENARIOS = ("iid", "ar0.5", "ar0.9", "ar0.98", "drift", "drift-ar0.9")
CELLS = (
    "aa",
    "power",
    "vacuous",
    "alt",
    "quality",
    "altpower",
    "slo",
    "slopower",  # seeds: index
    "aa-busy",
    "aa-busybase",
    "power-busy",
    "power40-busy",
)
SLO_E2E_S = 0.19  # ≈ the median E2E (40 ms + 15 × 10 ms): attainment ≈ 50 %
BUSY_CELLS = {  # cell: (arms whose client is busy, candidate's scale)
    "aa-busy": ((0, 1), 1.0),
    "aa-busybase": ((0,), 1.0),
    "power-busy": ((0, 1), 0.9),
    "power40-busy": ((0, 1), 0.6),
}
NS_DEFAULT = (200, 500, 1000, 2000, 5000)
ROWS = {
    "e2e.p50": "P50 E2E",
    "ttft.p50": "P50 TTFT",
    "tpot.p50": "P50 TPOT",
    "ttft.p99": "P99 TTFT",
    "e2e.p99": "P99 E2E",
    "throughput.requests": "throughput",
    "slo.attainment": "SLO attainment",
    "goodput.requests": "goodput",
}
QUALITY = [  # name, items, P(down-flip), P(up-flip), what a right answer is
    ("drop 10 pp", 12, 0.10, 0.0, "fail"),
    ("Δ = 0, 2% flips", 30, 0.02, 0.02, "pass"),
    ("Δ = 0, 2% flips", 300, 0.02, 0.02, "pass"),
    ("Δ = 0, 0.5% flips", 1000, 0.005, 0.005, "pass"),
    ("Δ = 0, 0.5% flips", 3000, 0.005, 0.005, "pass"),
]


def tail_multiplier(sigma: float, scale: float = 0.9) -> float:
    """``m`` such that P99 of (1 − f)·LN(scale, σ) + f·LN(m·scale, σ) is (1 + TAIL_P99)× the P99
    of LN(1, σ) (the baseline)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def p99(m: float) -> float:
        def cdf(x: float) -> float:
            return (1 - TAIL_FRAC) * norm.cdf(math.log(x / scale) / sigma) + TAIL_FRAC * norm.cdf(
                math.log(x / (m * scale)) / sigma
            )

        return brentq(lambda x: cdf(x) - 0.99, 1e-3, 1e3)

    target = (1 + TAIL_P99) * math.exp(norm.ppf(0.99) * sigma)
    return brentq(lambda m: p99(m) - target, 1.0, 50.0)


def unit_series(rng: np.random.Generator, n: int, scenario: str) -> np.ndarray:
    """One log-noise series of ``n`` consecutive requests (in units of σ; the drift scenario's
    drift and bursts are :func:`level`)."""
    e = rng.standard_normal(n)
    if scenario in ("iid", "drift"):
        return e
    if "ar" in scenario:
        from scipy.signal import lfilter

        rho = float(scenario.rpartition("ar")[2])
        e[0] /= math.sqrt(1 - rho * rho)  # start in the stationary distribution
        return lfilter([math.sqrt(1 - rho * rho)], [1.0, -rho], e)
    raise ValueError(f"unknown scenario {scenario!r}")


def level(rng: np.random.Generator, n: int, burst_p: float, drift: bool) -> np.ndarray:
    """The drift scenario's log-level of TTFT and TPOT (in units of σ): the random-walk drift
    (when ``drift``) plus bursts starting with probability ``burst_p`` per request."""
    out = DRIFT_SD * np.cumsum(rng.standard_normal(n)) / math.sqrt(n) if drift else np.zeros(n)
    burst = np.zeros(n, dtype=bool)
    for i in np.flatnonzero(rng.random(n) < burst_p):
        burst[i : i + rng.integers(BURST_LEN[0], BURST_LEN[1] + 1)] = True
    return out + burst * (BURST_LOG / SIGMA)


def stalls(rng: np.random.Generator, n: int, mean_ms: float) -> np.ndarray:
    """Stalls (ns) of a busy client's loop: 30% of wake-ups wait an exponential of mean_ms."""
    return ((rng.random(n) < 0.3) * rng.exponential(mean_ms * 1e6, n)).astype(np.int64)


def latency_table(
    rng, cell: str, scenario: str, n: int, shared: float, blocks: int, tail_m, stall_ms: float = 3.2
):
    """A two-arm RequestTable of ``cell`` (arm 0 = baseline, arm 1 = candidate)."""
    from abtui.metrics.table import RequestTable

    alt = cell in ("alt", "altpower")
    items = np.arange(n)
    sched = {x: items * NS / RATE for x in (0, 1)}
    block = np.zeros(n, dtype=np.int64)
    time_pos = {x: items for x in (0, 1)}  # where each request falls in the shared series
    if alt:  # block b holds items of one slice; A B | B A | A B …, each turn one window
        block = np.minimum(items * blocks // n, blocks - 1)
        first = np.searchsorted(block, np.arange(blocks))
        size = np.bincount(block, minlength=blocks)
        start = np.concatenate([[0], np.cumsum(np.repeat(size, 2))])  # in request slots
        for x in (0, 1):
            turn = 2 * block + ((block % 2) ^ x)  # arm 0 first in even blocks
            time_pos[x] = start[turn] + items - first[block]
            sched[x] = time_pos[x] * NS / RATE
    span = 2 * n if alt else n  # the shared series runs over items, or over time (alt)
    sh = {m: unit_series(rng, span, scenario) for m in ("ttft", "tpot")}
    bursty = scenario.startswith("drift")
    sh_level = level(rng, span, BURST_P * shared, True) if bursty else np.zeros(span)
    cols: dict[str, list] = {}
    chunk_req, chunk_t = [], []
    for x in (0, 1):
        z = {
            m: math.sqrt(shared) * sh[m][time_pos[x]]
            + math.sqrt(1 - shared) * unit_series(rng, n, scenario)
            for m in sh
        }
        if bursty:
            own = sh_level[time_pos[x]] + level(rng, n, BURST_P * (1 - shared), False)
            z = {m: v + own for m, v in z.items()}
        faster = ("power", "vacuous", "altpower", "slopower")
        scale = 0.9 if x == 1 and cell in faster else 1.0
        busy_arms, busy_scale = BUSY_CELLS.get(cell, ((), 1.0))
        scale = busy_scale if x == 1 and cell in BUSY_CELLS else scale
        stall = (lambda: stalls(rng, n, stall_ms)) if x in busy_arms else (lambda: 0)  # noqa: E731
        ttft = TTFT_S * scale * np.exp(SIGMA * z["ttft"])
        tpot = TPOT_S * scale * np.exp(SIGMA * z["tpot"])
        if x == 1 and cell == "vacuous":
            ttft = np.where(rng.random(n) < TAIL_FRAC, ttft * tail_m, ttft)
        at = sched[x].astype(np.int64) + 10 * NS
        disp = at + 20_000 + stall()  # a busy client sends late
        first = disp + (ttft * NS).astype(np.int64)
        gaps = tpot[:, None] * np.exp(rng.standard_normal((n, N_OUT - 1)) * 0.05)
        times = np.concatenate(
            [first[:, None], first[:, None] + np.cumsum((gaps * NS).astype(np.int64), axis=1)],
            axis=1,
        )
        times[:, 0] += stall()  # ... and reads the first and the last token late
        times[:, -1] += stall()
        times = np.maximum.accumulate(times, axis=1)
        first = times[:, 0]
        req = items + x * n
        parts = {
            "req": req,
            "arm": np.full(n, x),
            "item": items,
            "run": np.zeros(n, np.int64),
            "block": block,
            "warmup": np.zeros(n, bool),
            "scheduled_ns": at,
            "dispatched_ns": disp,
            "first_byte_ns": first - 1000,
            "done_ns": times[:, -1] + 1000,
            "first_token_ns": first,
            "last_token_ns": times[:, -1],
            "n_chunks": np.full(n, N_OUT),
            "empty_token_chunks": np.zeros(n, np.int64),
            "n_input": np.full(n, 256),
            "n_output": np.full(n, N_OUT),
            "http_status": np.full(n, 200),
            "status": np.full(n, "ok", dtype=object),
            "error_class": np.full(n, None, dtype=object),
            "token_source": np.full(n, "usage", dtype=object),
        }
        for k, v in parts.items():
            cols.setdefault(k, []).append(np.asarray(v))
        chunk_req.append(np.repeat(req, N_OUT))
        chunk_t.append(times.ravel())
    rows = {k: np.concatenate(v) for k, v in cols.items()}
    creq = np.concatenate(chunk_req)
    return RequestTable.from_columns(rows, creq, np.concatenate(chunk_t), np.ones(len(creq)))


def gate_state(g: dict) -> str:
    """pass / fail / neither from a gate dict, old (``passed``) or new (a ``state``)."""
    state = str(g.get("state") or g.get("outcome") or "").upper()
    if state:
        return {
            "PASS": "pass",
            "PASSED": "pass",
            "FAIL": "fail",
            "FAILED": "fail",
            "NO-GO": "fail",
        }.get(state, "neither")
    return "pass" if g.get("passed") else "fail"


def run_task(task: tuple) -> tuple:
    """One repeat of one cell: the key of the cell and what the verdict said."""
    cell, scenario, n, rep, opts = task
    where = int(scenario) if cell == "quality" else SCENARIOS.index(scenario)
    rng = np.random.default_rng([CELLS.index(cell), where, n, rep, opts["seed"]])
    if cell == "quality":
        from abtui.quality.gates import evaluate_quality

        _, _, down, up, _ = QUALITY[int(scenario)]
        u = rng.random(n)
        same = rng.random(n) < 0.7
        ra = np.where(u < down, True, np.where(u < down + up, False, same))
        rb = np.where(u < down, False, np.where(u < down + up, True, same))
        rows = [
            {
                "arm": x,
                "item": i,
                "correct": bool(r[i]),
                "detail": {"suite": "exact", "cluster": str(i)},
            }
            for x, r in ((0, ra), (1, rb))
            for i in range(n)
        ]
        import inspect  # the pre-fix gate took the bootstrap's resamples and seed; the score

        # interval needs neither
        boot = "resamples" in inspect.signature(evaluate_quality).parameters
        kw = {"resamples": opts["resamples"], "seed": rep} if boot else {}
        q = evaluate_quality(rows, 0, 1, {}, **kw)
        q = q.to_dict() if hasattr(q, "to_dict") else q  # its JSON, in any version of abtui
        return (
            (cell, scenario, n),
            rep,
            {"gate": gate_state(q["gates"][0]), "no_go": bool(q["no_go"])},
        )
    from abtui.verdict.policy import evaluate

    table = latency_table(
        rng, cell, scenario, n, opts["shared"], opts["blocks"], opts["tail_m"], opts["stall_ms"]
    )
    slo = {"e2e": SLO_E2E_S} if cell in ("slo", "slopower") else {}
    spec = {"policy": {"resamples": opts["resamples"], "seed": rep}, "slo": slo, "quality": {}}
    v = evaluate(table, [{"name": "A"}, {"name": "B"}], spec)
    by = v.pairs[0].comparison.by_key
    rows = {k: (by[k].outcome, by[k].ratio, by[k].lo, by[k].hi) for k in ROWS if k in by}
    base = table.select(table.arm == 0)
    lag_ms = np.percentile((base.dispatched_ns - base.scheduled_ns) / 1e6, [99, 100])
    return (
        (cell, scenario, n),
        rep,
        {"result": v.result, "rows": rows, "lag_ms": [float(x) for x in lag_ms]},
    )


def rate(k: int, r: int, aa: bool = False) -> str:
    """``12.5% ±2.9`` (binomial simulation error), flagged when an A/A rate exceeds α."""
    p = k / r if r else math.nan
    err = 1.96 * math.sqrt(p * (1 - p) / r) if r else math.nan
    flag = " ⚠" if aa and p - err > ALPHA else ""
    return f"{p:.1%} ±{err * 100:.1f}{flag}"


def _median(rows: list[tuple], i: int) -> float | None:
    v = [r[i] for r in rows if math.isfinite(r[i])]
    return float(np.median(v)) if v else None


def summarize(key: tuple, reps: list[dict]) -> dict:
    """Counts of results and row outcomes over the repeats of one cell."""
    out = {"cell": key[0], "scenario": key[1], "n": key[2], "repeats": len(reps)}
    if key[0] == "quality":
        out["truth"] = QUALITY[int(key[1])][0]
        for s in ("pass", "fail", "neither"):
            out[s] = sum(r["gate"] == s for r in reps)
        out["no_go"] = sum(r["no_go"] for r in reps)
        return out
    out["results"] = {
        s: sum(r["result"] == s for r in reps) for s in ("GO", "NO-GO", "INCONCLUSIVE")
    }
    lags = [r["lag_ms"] for r in reps if "lag_ms" in r]
    if lags:
        out["lag_ms_median"] = [float(np.median([x[i] for x in lags])) for i in (0, 1)]
    out["rows"] = {}
    for k in ROWS:
        got = [r["rows"][k] for r in reps if k in r["rows"]]
        if not got:
            continue
        out["rows"][k] = {
            "improved": sum(g[0] == "IMPROVED" for g in got),
            "regressed": sum(g[0] == "REGRESSED" for g in got),
            "ratio_median": _median(got, 1),
            "lo_median": _median(got, 2),
            "hi_median": _median(got, 3),
            "example": list(got[0][1:]),  # repeat 0
        }
    return out


def pct(x) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x * 100:+.1f}%"


def print_tables(res: list[dict], opts: dict) -> None:
    cells = {c: [r for r in res if r["cell"] == c] for c in CELLS}

    def called(r, k):
        row = r["rows"].get(k)
        return rate(row["improved"] + row["regressed"], r["repeats"], aa=True) if row else "n/a"

    if cells["aa"]:
        print(
            "\n### A/A, parallel arms: false calls (GO or NO-GO; per row IMPROVED or REGRESSED)\n"
        )
        print("| scenario | n | false call | " + " | ".join(ROWS.values()) + " |")
        print("|---|---:|---:|" + "---:|" * len(ROWS))
        for r in cells["aa"]:
            k = r["results"]["GO"] + r["results"]["NO-GO"]
            print(
                f"| {r['scenario']} | {r['n']} | {rate(k, r['repeats'], aa=True)} | "
                + " | ".join(called(r, key) for key in ROWS)
                + " |"
            )
    for cell, how in (
        ("power", "parallel arms"),
        ("altpower", f"alternating arms ({opts['blocks']} blocks)"),
    ):
        if not cells[cell]:
            continue
        print(f"\n### Power: candidate TTFT and TPOT 10% faster, {how}\n")
        print("| scenario | n | GO | P50 E2E IMPROVED | P50 E2E effect (median) | NO-GO |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in cells[cell]:
            e = r["rows"]["e2e.p50"]
            print(
                f"| {r['scenario']} | {r['n']} | {rate(r['results']['GO'], r['repeats'])} | "
                f"{rate(e['improved'], r['repeats'])} | {pct(e['ratio_median'])} | "
                f"{rate(r['results']['NO-GO'], r['repeats'])} |"
            )
    busy = [r for c in BUSY_CELLS for r in cells[c]]
    if busy:
        print(
            f"\n### A busy client (stalls of mean {opts['stall_ms']:g} ms on 30% of the loop's "
            "wake-ups, on sends and on the first and last token's reads)\n"
        )
        print(
            "| cell | scenario | n | baseline lag P99 / max (ms, median) | GO | NO-GO | "
            "P50 E2E IMPROVED | P50 E2E effect |"
        )
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for r in busy:
            e, lag = r["rows"]["e2e.p50"], r.get("lag_ms_median") or [math.nan] * 2
            aa = r["cell"].startswith("aa")
            print(
                f"| {r['cell']} | {r['scenario']} | {r['n']} | {lag[0]:.1f} / {lag[1]:.1f} | "
                f"{rate(r['results']['GO'], r['repeats'], aa=aa)} | "
                f"{rate(r['results']['NO-GO'], r['repeats'], aa=aa)} | "
                f"{rate(e['improved'], r['repeats'])} | {pct(e['ratio_median'])} |"
            )
    if cells["vacuous"]:
        print(
            f"\n### Vacuous guardrail: P50 −10%, but {TAIL_FRAC:.0%} of requests get "
            f"{opts['tail_m']:.2f}× TTFT (P99 TTFT +{TAIL_P99:.0%} on the base log-normal; "
            "measured medians below): every GO is wrong\n"
        )
        print(
            "| scenario | n | GO (wrong) | NO-GO | P99 TTFT REGRESSED | P50 E2E effect | "
            "P99 TTFT effect | P99 E2E effect |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in cells["vacuous"]:
            w = r["rows"]
            print(
                f"| {r['scenario']} | {r['n']} | {rate(r['results']['GO'], r['repeats'])} | "
                f"{rate(r['results']['NO-GO'], r['repeats'])} | "
                f"{rate(w['ttft.p99']['regressed'], r['repeats'])} | "
                + " | ".join(pct(w[k]["ratio_median"]) for k in ("e2e.p50", "ttft.p99", "e2e.p99"))
                + " |"
            )
    if cells["alt"]:
        print(f"\n### A/A, alternating arms ({opts['blocks']} blocks, A B | B A …): throughput\n")
        print(
            "| scenario | n | false call | throughput false call | throughput effect, median "
            "[median CI] | first repeat | P50 E2E false call |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in cells["alt"]:
            t = r["rows"]["throughput.requests"]
            ex = t["example"]
            k = r["results"]["GO"] + r["results"]["NO-GO"]
            print(
                f"| {r['scenario']} | {r['n']} | {rate(k, r['repeats'], aa=True)} | "
                f"{called(r, 'throughput.requests')} | {pct(t['ratio_median'])} "
                f"[{pct(t['lo_median'])}, {pct(t['hi_median'])}] | "
                f"{pct(ex[0])} [{pct(ex[1])}, {pct(ex[2])}] | {called(r, 'e2e.p50')} |"
            )
    if cells["slo"]:
        print(
            f"\n### A/A, parallel arms, E2E SLO {SLO_E2E_S * 1e3:.0f} ms: rate rows' false calls\n"
        )
        print(
            "| scenario | n | SLO attainment false call | goodput false call | attainment effect, "
            "median [median CI] | latency false call (GO or NO-GO) |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for r in cells["slo"]:
            a = r["rows"]["slo.attainment"]
            k = r["results"]["GO"] + r["results"]["NO-GO"]
            print(
                f"| {r['scenario']} | {r['n']} | {called(r, 'slo.attainment')} | "
                f"{called(r, 'goodput.requests')} | {pct(a['ratio_median'])} "
                f"[{pct(a['lo_median'])}, {pct(a['hi_median'])}] | "
                f"{rate(k, r['repeats'], aa=True)} |"
            )
    if cells["slopower"]:
        print(
            f"\n### Power of the SLO rows: candidate 10% faster, E2E SLO {SLO_E2E_S * 1e3:.0f} ms\n"
        )
        print(
            "| scenario | n | SLO attainment IMPROVED | goodput IMPROVED | attainment effect, "
            "median [median CI] |"
        )
        print("|---|---:|---:|---:|---:|")
        for r in cells["slopower"]:
            a, g = r["rows"]["slo.attainment"], r["rows"]["goodput.requests"]
            print(
                f"| {r['scenario']} | {r['n']} | {rate(a['improved'], r['repeats'])} | "
                f"{rate(g['improved'], r['repeats'])} | {pct(a['ratio_median'])} "
                f"[{pct(a['lo_median'])}, {pct(a['hi_median'])}] |"
            )
    if cells["quality"]:
        print("\n### Quality gate (default margin 1 pp; per item flip probabilities)\n")
        print("| truth | items | right answer | pass | fail | neither | NO-GO |")
        print("|---|---:|---|---:|---:|---:|---:|")
        for r in cells["quality"]:
            name, _, _, _, right = QUALITY[int(r["scenario"])]
            print(
                f"| {name} | {r['n']} | {right} | "
                + " | ".join(rate(r[s], r["repeats"]) for s in ("pass", "fail", "neither", "no_go"))
                + " |"
            )


def code_commit() -> str:
    import abtui

    root = Path(abtui.__file__).resolve().parent.parent
    try:

        def git(*a: str) -> str:
            return subprocess.run(
                ["git", "-C", str(root), *a], capture_output=True, text=True, check=True
            ).stdout.strip()

        dirty = " (+ uncommitted changes)" if git("status", "--porcelain", "abtui") else ""
        last = git("log", "-1", "--format=%h", "--", "abtui")
        return f"abtui/ at {last}{dirty} (HEAD {git('rev-parse', '--short', 'HEAD')}) in {root}"
    except (OSError, subprocess.CalledProcessError):
        return f"unknown (not a git checkout: {root})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    csv = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    ap.add_argument("--cells", type=csv, default=list(CELLS), help=",".join(CELLS))
    ap.add_argument("--scenarios", type=csv, default=list(SCENARIOS))
    ap.add_argument(
        "--n",
        type=lambda s: [int(x) for x in csv(s)],
        default=list(NS_DEFAULT),
        help="requests per arm (default 200,500,1000,2000,5000)",
    )
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument(
        "--repeats-at",
        action="append",
        default=[],
        metavar="WHERE=R",
        help="R repeats at one n or in one cell (5000=100, alt=100; the fewer when both apply)",
    )
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--shared", type=float, default=0.5, help="common share of the log-variance")
    ap.add_argument("--blocks", type=int, default=8, help="alternation blocks (alt cell)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--stall-ms", type=float, default=3.2, help="busy cells: mean client stall (lag P99 ≈ 3.4×)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="n 200,1000; 100 repeats")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.repeats = [200, 1000], 100
    bad = set(args.cells) - set(CELLS) or set(args.scenarios) - set(SCENARIOS)
    if bad:
        ap.error(f"unknown cells/scenarios: {', '.join(sorted(bad))}")
    at = {k: int(v) for k, v in (s.split("=") for s in args.repeats_at)}
    opts = {
        "resamples": args.resamples,
        "shared": args.shared,
        "blocks": args.blocks,
        "seed": args.seed,
        "tail_m": tail_multiplier(SIGMA),
        "stall_ms": args.stall_ms,
    }
    keys = [(c, s, n) for c in args.cells if c != "quality" for s in args.scenarios for n in args.n]
    if "quality" in args.cells:
        keys += [("quality", str(i), q[1]) for i, q in enumerate(QUALITY)]

    def repeats(c: str, n: int) -> int:
        got = [at[k] for k in (c, str(n)) if k in at]
        return min(got) if got else args.repeats

    tasks = [(c, s, n, rep, opts) for c, s, n in keys for rep in range(repeats(c, n))]
    t0 = time.perf_counter()
    load = os.getloadavg()[0]
    got: dict[tuple, list] = {k: [] for k in keys}
    pool = mp.get_context("fork").Pool(args.jobs) if args.jobs > 1 else None  # 1: in-process
    try:
        outs = pool.imap_unordered(run_task, tasks, chunksize=4) if pool else map(run_task, tasks)
        for i, (key, rep, out) in enumerate(outs):
            got[key].append((rep, out))
            if (i + 1) % 500 == 0:
                print(
                    f"  {i + 1}/{len(tasks)} after {time.perf_counter() - t0:.0f} s",
                    file=sys.stderr,
                )
    finally:
        if pool:
            pool.terminate()
    wall = time.perf_counter() - t0
    res = [summarize(k, [out for _, out in sorted(got[k], key=lambda r: r[0])]) for k in keys]
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in open("/proc/cpuinfo")
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    meta = {
        "machine": f"{platform.node()}, {cpu}, {os.cpu_count()} CPUs, load {load:.2f} at start",
        "versions": f"Python {platform.python_version()}, numpy {metadata.version('numpy')}, "
        f"scipy {metadata.version('scipy')}",
        "code": code_commit(),
        "resamples": args.resamples,
        "repeats": args.repeats,
        "repeats_at": at,
        "jobs": args.jobs,
        "shared": args.shared,
        "blocks": args.blocks,
        "tail_multiplier": opts["tail_m"],
        "seed": args.seed,
        "wall_s": wall,
        "command": " ".join(sys.argv if argv is None else ["bench_verdict_calibration.py", *argv]),
    }
    print("## Verdict calibration\n")
    print(
        f"- machine: {meta['machine']}\n- versions: {meta['versions']}\n- code measured: "
        f"{meta['code']}\n- command: `{meta['command']}`"
    )
    print(
        f"- {args.resamples:,} bootstrap resamples per verdict (the verdict's default is "
        "10,000; CI endpoints at 1,000 are slightly noisier); "
        f"{args.repeats} repeats per cell"
        + "".join(f", {r} {'at n =' if k.isdigit() else 'in'} {k}" for k, r in at.items())
        + f"; common share of the log-variance {args.shared}; {args.jobs} processes; "
        f"wall time {wall / 60:.1f} min"
    )
    print("- rates ±1.96·√(p(1−p)/R); ⚠ = an A/A false-call rate above α = 5% beyond that")
    print_tables(res, opts)
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "cells": res}, indent=1) + "\n")


if __name__ == "__main__":
    main()
