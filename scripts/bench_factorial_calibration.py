#!/usr/bin/env python3
"""How well the factorial interaction is calibrated: coverage and false flags.

Each cell builds ``--repeats`` synthetic 2×2 sessions (:func:`tests.synthetic.synthetic_table`,
``--n`` requests per arm, TTFT and TPOT log-normal σ = 0.25 per arm, plus a load every arm sees:
an AR(1) log multiplier of SD ``--shared-sd`` and coefficient ``--shared-ar``) where TPOT's medians
are base 1, A 0.85, B 0.80 and AB ``0.85 · 0.80 · (1 + I)`` for the truth ``I`` of the cell, TTFT
unchanged (its interaction is 0 in every cell). ``--ar`` > 0 makes each arm's own noise AR(1)
too (dependence the block bootstrap must see). For every session :func:`abtui.stats.factorial.estimate`
and :func:`~abtui.stats.factorial.decide_terms` (primary ``tpot.p50``, guardrail ``tpot.p99``,
α = 5 %, δ 2 % / 5 %) give per row:

- **covered**: the 95 % CI of the interaction holds the truth;
- **p < α**: the uncorrected bootstrap p of "interaction = 0" is below α (for a zero truth this is
  the test's size: it should be ≈ α);
- **flagged**: the outcome is ANTAGONISTIC or SYNERGISTIC (significant after the family's
  correction *and* the CI beyond δ) — what the verdict reports as a finding; for a zero truth it
  must be ≤ α.

Rates carry ±1.96·√(p(1−p)/R) (the simulation error of R repeats).

    python scripts/bench_factorial_calibration.py --repeats 200
    python scripts/bench_factorial_calibration.py --quick
"""

# ruff: noqa: E402  (the BLAS thread count is set before numpy is imported)
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

from abtui import __version__
from abtui.stats import factorial

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests.synthetic
from tests.synthetic import ArmTruth, shared_load, synthetic_table  # noqa: E402

ROWS = ("tpot.p50", "tpot.mean", "ttft.p50", "ttft.mean")
POLICY = {
    "primary": "tpot.p50",
    "guardrails": ["tpot.p99"],
    "alpha": 0.05,
    "delta": 0.02,
    "delta_tail": 0.05,
}


def one(truth: float, seed: int, args) -> dict[str, tuple[bool, bool, bool]]:
    a, b = 0.85, 0.80
    arms = [
        ArmTruth(ar=args.ar),
        ArmTruth(tpot_scale=a, ar=args.ar),
        ArmTruth(tpot_scale=b, ar=args.ar),
        ArmTruth(tpot_scale=a * b * (1 + truth), ar=args.ar),
    ]
    shared = shared_load(args.n, seed=seed, sigma=args.shared_sd, ar=args.shared_ar)
    t = synthetic_table(args.n, arms, seed=seed, shared=shared)
    design, _ = factorial.design_of(["base", "a", "b", "a+b"], ["a", "b"])
    terms, _ = factorial.estimate(
        t, design, resamples=args.resamples, seed=seed, metrics=("ttft", "tpot")
    )
    factorial.decide_terms(terms, POLICY)
    out = {}
    for term in terms:
        if term.order == 2 and term.key in ROWS:
            want = truth if term.key.startswith("tpot") else 0.0
            out[term.key] = (
                term.lo <= want <= term.hi,
                term.p < POLICY["alpha"],
                term.outcome in (factorial.ANTAGONISTIC, factorial.SYNERGISTIC),
            )
    return out


def rate(xs: list[bool]) -> str:
    p = float(np.mean(xs)) if xs else math.nan
    err = 1.96 * math.sqrt(max(p * (1 - p), 1e-12) / max(len(xs), 1))
    return f"{100 * p:5.1f}% ±{100 * err:3.1f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--n", type=int, default=600, help="requests per arm")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--ar", type=float, default=0.0, help="AR(1) of each arm's own noise")
    ap.add_argument("--shared-sd", type=float, default=0.2)
    ap.add_argument("--shared-ar", type=float, default=0.5)
    ap.add_argument("--truths", default="0,-0.10,0.10")
    ap.add_argument("--quick", action="store_true", help="20 repeats")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 20
    truths = [float(x) for x in args.truths.split(",")]
    print(
        f"# factorial interaction calibration — abtui {__version__}, Python "
        f"{platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"{args.repeats} repeats per truth; n = {args.n} per arm; {args.resamples} resamples; "
        f"own-noise AR {args.ar:g}; shared load SD {args.shared_sd:g}, AR {args.shared_ar:g}\n"
    )
    print("| truth (TPOT) | row | truth of row | covered (95% CI) | p < α | flagged |")
    print("|--:|---|--:|--:|--:|--:|")
    t0 = time.perf_counter()
    for truth in truths:
        got: dict[str, list[tuple[bool, bool, bool]]] = {}
        for seed in range(args.repeats):
            for k, v in one(truth, 1000 + seed, args).items():
                got.setdefault(k, []).append(v)
        for key in ROWS:
            rows = got.get(key, [])
            want = truth if key.startswith("tpot") else 0.0
            print(
                f"| {truth:+.0%} | {key} | {want:+.0%} | {rate([r[0] for r in rows])} | "
                f"{rate([r[1] for r in rows])} | {rate([r[2] for r in rows])} |"
            )
        sys.stdout.flush()
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
