#!/usr/bin/env python3
"""How the anytime-valid verdict errs and how soon it decides (docs/verdict.md §11).

Each repeat draws one stream of paired requests (``--budget`` pairs, default 5,000) with the
latency model of ``scripts/bench_verdict_calibration.py`` (TTFT and TPOT log-normal, σ = 0.25,
half the log-variance shared by both arms; 16 tokens, E2E = TTFT + 15 jittered gaps; scenarios
iid, AR(1) 0.5 / 0.9 / 0.98 and drift with bursts) and looks at it as a run would: after every
``--look`` pairs up to 1,000 (50) and every ``--look-far`` beyond (250),
:func:`abtui.stats.seqdecide.evaluate_sequential` on everything so far. A budget ``B`` is the prefix of ``B`` pairs: one stream answers every
budget, the design being the same whatever the budget.

Cells:

- ``aa`` — identical arms. A *false call* is a GO or NO-GO at any look up to the budget (the
  run is followed to the end, past NO-GAIN, so any stopping rule is covered); a row *misses*
  when its interval leaves out the truth (0) at any look where it could be called (enough
  pairs, not too dependent; before that it is shown as not callable and decides nothing).
- ``power5``, ``power10``, ``power20``, ``power50`` — the candidate's TTFT and TPOT that much
  faster: the pairs at the first GO (the run stops there), per budget the share decided GO.
- ``fixed`` (with ``--fixed``) — the fixed design on the same streams:
  :func:`abtui.verdict.policy.evaluate` on the first ``n`` pairs (``--fixed-n``), 1,000
  resamples, its default guardrails or ``--fixed-guardrails``; the share GO.

Designs (``--designs``): ``default`` (primary P50 E2E; guardrails P50/P99 TTFT and TPOT, P99
E2E: the fixed verdict's) and ``medians`` (guardrails P50 TTFT and TPOT only).

    nice -n 10 python scripts/bench_sequential.py --cells aa --repeats 200
    nice -n 10 python scripts/bench_sequential.py --cells power10,power20 --scenarios iid,ar0.9
    nice -n 10 python scripts/bench_sequential.py --cells power20 --scenarios iid --fixed
    python scripts/bench_sequential.py --summarise run1.json run2.json
"""
# ruff: noqa: E402  (the BLAS thread count is set before numpy is imported)

from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import math
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_verdict_calibration as cal  # the fixed verdict's calibration model

from abtui.stats import seqdecide as sd

NS = 1_000_000_000
SCENARIOS = ("iid", "ar0.5", "ar0.9", "ar0.98", "drift")
CELLS = ("aa", "power5", "power10", "power20", "power50")
BUDGETS = (200, 500, 1000, 2000, 5000)
DESIGNS = {
    "default": sd.Design(),
    "medians": sd.Design(guardrails=("ttft.p50", "tpot.p50")),
    "exact": sd.Design(tails="exact"),
}


def looks(budget: int, step: int, far: int) -> list[int]:
    """Look after every ``step`` pairs up to 1,000, then every ``far``."""
    out = list(range(step, min(budget, 1000) + 1, step))
    out += list(range(1000 + far, budget + 1, far))
    if out[-1] != budget:
        out.append(budget)
    return out


def stream(rng: np.random.Generator, scenario: str, n: int, scale: float, shared: float = 0.5):
    """TTFT, TPOT and E2E (s) of both arms over ``n`` paired items (the calibration model)."""
    sh = {m: cal.unit_series(rng, n, scenario) for m in ("ttft", "tpot")}
    bursty = scenario.startswith("drift")
    sh_level = cal.level(rng, n, cal.BURST_P * shared, True) if bursty else np.zeros(n)
    out = {}
    for x in (0, 1):
        z = {
            m: math.sqrt(shared) * sh[m] + math.sqrt(1 - shared) * cal.unit_series(rng, n, scenario)
            for m in sh
        }
        if bursty:
            own = sh_level + cal.level(rng, n, cal.BURST_P * (1 - shared), False)
            z = {m: v + own for m, v in z.items()}
        s = scale if x == 1 else 1.0
        ttft = cal.TTFT_S * s * np.exp(cal.SIGMA * z["ttft"])
        tpot = cal.TPOT_S * s * np.exp(cal.SIGMA * z["tpot"])
        gaps = tpot[:, None] * np.exp(rng.standard_normal((n, cal.N_OUT - 1)) * 0.05)
        out[x] = {"ttft": ttft, "tpot": gaps.sum(axis=1) / (cal.N_OUT - 1), "gaps": gaps}
        out[x]["e2e"] = ttft + gaps.sum(axis=1)
    return out


def as_series(arms: dict, t: int) -> dict:
    return {m: (arms[0][m][:t], arms[1][m][:t]) for m in ("ttft", "tpot", "e2e")}


def as_table(arms: dict, n: int):
    """The first ``n`` pairs as a RequestTable, for the fixed verdict."""
    from abtui.metrics.table import RequestTable

    cols: dict[str, list] = {}
    chunk_req, chunk_t = [], []
    items = np.arange(n)
    for x in (0, 1):
        at = (items * NS / cal.RATE).astype(np.int64) + 10 * NS
        disp = at + 20_000
        first = disp + (arms[x]["ttft"][:n] * NS).astype(np.int64)
        steps = np.cumsum((arms[x]["gaps"][:n] * NS).astype(np.int64), axis=1)
        times = np.concatenate([first[:, None], first[:, None] + steps], axis=1)
        req = items + x * n
        parts = {
            "req": req,
            "arm": np.full(n, x),
            "item": items,
            "run": np.zeros(n, np.int64),
            "warmup": np.zeros(n, bool),
            "scheduled_ns": at,
            "dispatched_ns": disp,
            "first_byte_ns": first - 1000,
            "done_ns": times[:, -1] + 1000,
            "first_token_ns": first,
            "last_token_ns": times[:, -1],
            "n_chunks": np.full(n, cal.N_OUT),
            "empty_token_chunks": np.zeros(n, np.int64),
            "n_input": np.full(n, 256),
            "n_output": np.full(n, cal.N_OUT),
            "http_status": np.full(n, 200),
            "status": np.full(n, "ok", dtype=object),
            "error_class": np.full(n, None, dtype=object),
            "token_source": np.full(n, "usage", dtype=object),
        }
        for k, v in parts.items():
            cols.setdefault(k, []).append(np.asarray(v))
        chunk_req.append(np.repeat(req, cal.N_OUT))
        chunk_t.append(times.ravel())
    rows = {k: np.concatenate(v) for k, v in cols.items()}
    creq = np.concatenate(chunk_req)
    return RequestTable.from_columns(rows, creq, np.concatenate(chunk_t), np.ones(len(creq)))


def follow(arms: dict, design: sd.Design, points: list[int], stop_on_go: bool) -> dict:
    """Look at the stream at ``points``; the first look of each decision and each row's first
    miss of the truth 0 (A/A)."""
    first: dict[str, int] = {}
    missed: dict[str, int] = {}
    for t in points:
        v = sd.evaluate_sequential(as_series(arms, t), design)
        first.setdefault(v.decision, t)
        for r in v.rows:
            if r.callable and (r.lo > 0 or r.hi < 0):
                missed.setdefault(r.key, t)
        if stop_on_go and v.decision in (sd.GO, sd.NO_GO):
            break
    return {"first": first, "missed": missed}


def run_task(task: tuple) -> tuple:
    cell, scenario, rep, opts = task
    rng = np.random.default_rng([CELLS.index(cell), SCENARIOS.index(scenario), rep, opts["seed"]])
    scale = 1.0 if cell == "aa" else 1.0 - int(cell[len("power") :]) / 100
    arms = stream(rng, scenario, opts["budget"], scale)
    points = looks(opts["budget"], opts["look"], opts["look_far"])
    out = {d: follow(arms, DESIGNS[d], points, cell != "aa") for d in opts["designs"]}
    if opts["fixed"]:
        from abtui.verdict.policy import evaluate

        policy = {"resamples": 1000, "seed": rep}
        if opts["fixed_guardrails"]:
            policy["guardrails"] = opts["fixed_guardrails"]
        spec = {"policy": policy, "slo": {}, "quality": {}}
        out["fixed"] = {
            n: evaluate(as_table(arms, n), [{"name": "A"}, {"name": "B"}], spec).result
            for n in opts["fixed_n"]
        }
    return (cell, scenario), rep, out


def pct(k: int, r: int) -> str:
    return f"{k / r:.1%}" if r else "·"


def summarise(results: dict, opts: dict) -> list[str]:
    lines = []
    budgets = [b for b in BUDGETS if b <= opts["budget"]]
    for (cell, scen), reps in sorted(results.items()):
        r = len(reps)
        for d in opts["designs"]:
            firsts = [x[d]["first"] for x in reps]
            if cell == "aa":
                false = [
                    min((f.get(k, 10**9) for k in (sd.GO, sd.NO_GO)), default=10**9) for f in firsts
                ]
                calls = " ".join(pct(sum(x <= b for x in false), r) for b in budgets)
                gain = [f.get(sd.NO_GAIN, 10**9) for f in firsts]
                gains = " ".join(pct(sum(x <= b for x in gain), r) for b in budgets)
                keys = sorted({k for x in reps for k in x[d]["missed"]})
                miss = ", ".join(
                    f"{k} {pct(sum(k in x[d]['missed'] for x in reps), r)}" for k in keys
                )
                lines.append(
                    f"{cell} {scen} {d} (R={r}): false GO/NO-GO by budget {budgets}: {calls}; "
                    f"NO-GAIN stop: {gains}; rows missing 0 at any look (to {opts['budget']}): "
                    f"{miss or 'none'}"
                )
            else:
                go = [f.get(sd.GO, 10**9) for f in firsts]
                wrong = sum(sd.NO_GO in f for f in firsts)
                decided = " ".join(pct(sum(x <= b for x in go), r) for b in budgets)
                order = sorted(go)
                med, p90 = (order[math.ceil(q * r) - 1] for q in (0.5, 0.9))
                at = [f"{x:,}" if x < 10**9 else f"> {opts['budget']:,}" for x in (med, p90)]
                lines.append(
                    f"{cell} {scen} {d} (R={r}): GO by budget {budgets}: {decided}; pairs at GO "
                    f"median {at[0]}, P90 {at[1]}; NO-GO {wrong}"
                )
        if opts["fixed"]:
            res = [x["fixed"] for x in reps]
            row = " ".join(
                f"n={n}: {pct(sum(x[n] == 'GO' for x in res), r)}" for n in opts["fixed_n"]
            )
            lines.append(f"{cell} {scen} fixed (R={r}): GO {row}")
    return lines


def pool_runs(paths: list[Path]) -> int:
    """The tables of several ``--json`` runs pooled (their streams are independent when their
    seeds or cells differ)."""
    results: dict = {}
    opts: dict = {}
    for path in paths:
        blob = json.loads(path.read_text())
        opts = opts or blob["opts"]
        for key, reps in blob["results"].items():
            cell, scen = key.split("/")
            for rep in reps:
                if "fixed" in rep:
                    rep["fixed"] = {int(n): x for n, x in rep["fixed"].items()}
            results.setdefault((cell, scen), []).extend(reps)
    print("\n".join(summarise(results, opts)))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", default="aa")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--designs", default="default,medians")
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--budget", type=int, default=5000)
    ap.add_argument("--look", type=int, default=50, help="pairs between looks up to 1,000")
    ap.add_argument("--look-far", type=int, default=250, help="... and beyond 1,000")
    ap.add_argument("--fixed", action="store_true", help="also the fixed design on each stream")
    ap.add_argument("--fixed-n", default="1000,2000")
    ap.add_argument("--fixed-guardrails", default="", help="e.g. ttft.p50,tpot.p50")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--summarise", type=Path, nargs="+", help="pool earlier --json files")
    a = ap.parse_args(argv)
    if a.summarise:
        return pool_runs(a.summarise)
    opts = {
        "budget": a.budget,
        "look": a.look,
        "look_far": a.look_far,
        "designs": a.designs.split(","),
        "fixed": a.fixed,
        "fixed_n": [int(x) for x in a.fixed_n.split(",")],
        "fixed_guardrails": [x for x in a.fixed_guardrails.split(",") if x],
        "seed": a.seed,
    }
    tasks = [
        (c, s, rep, opts)
        for c in a.cells.split(",")
        for s in a.scenarios.split(",")
        for rep in range(a.repeats)
    ]
    t0 = time.time()
    results: dict = {}
    if a.jobs > 1:
        with mp.Pool(a.jobs) as pool:
            done = pool.imap_unordered(run_task, tasks, chunksize=4)
            for key, _, out in done:
                results.setdefault(key, []).append(out)
    else:
        for task in tasks:
            key, _, out = run_task(task)
            results.setdefault(key, []).append(out)
    lines = summarise(results, opts)
    print("\n".join(lines))
    print(f"({len(tasks)} streams, {time.time() - t0:.0f} s)")
    if a.json:
        blob = {f"{k[0]}/{k[1]}": v for k, v in results.items()}
        a.json.write_text(json.dumps({"opts": opts, "results": blob, "summary": lines}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
