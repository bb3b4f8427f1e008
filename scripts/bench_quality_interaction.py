#!/usr/bin/env python3
"""How well the accuracy interaction of a 2×2 factorial is calibrated: coverage,
false flags and power of the score interval (:mod:`abtui.quality.factorial`), next to a
cluster bootstrap of the same per-item contrasts.

Each scenario draws ``--repeats`` synthetic suites (:mod:`abtui.quality.synthetic`): ``n``
items in clusters of ``--cluster`` (a haystack asked at several depths) whose hardness is
correlated ``--rho`` within a cluster; arm ``x`` answers right when the hardness is under its
threshold, then each answer flips with probability ``--flip``. Thresholds (base, A, B, AB):

- ``zero, B lossless``  0.90 0.88 0.90 0.88 — B changes no answer (speculative decoding); the
  interaction is 0 and most items' contrast is 0;
- ``zero, both lossy``  0.90 0.87 0.88 0.85 — each factor loses items, the losses add up;
- ``−5 pp``, ``−10 pp`` combination-only drops: AB 0.83 / 0.78 with base 0.90, A 0.88, B 0.90
  (items right on base, A and B, wrong on AB).

The truth is ``(1 − 2 flip) (t_AB − t_A − t_B + t_base)``. Per draw, for abtui's score
interval (an unobserved drop reaches ±1: one answer flipped on one arm): **covered** (the 95 %
interval holds the truth), **p < α** (the score test of 0, uncorrected: its size for a zero
truth), **flagged** (ANTAGONISTIC or SYNERGISTIC with the 1 pp margin as δ, the suite alone in
its Holm family; in a verdict the family also holds the latency interactions, which only makes a
flag rarer), **NO-GO** (ANTAGONISTIC), the mean **width**; the same score interval on the full
lattice (an unobserved drop reaching ±2: covered, flagged, width); and a cluster bootstrap of
the same contrasts (2,000 resamples: covered, how often it is the single point [0, 0] — no
item's contrast differs from 0, and the bootstrap then claims certainty — and width).
Rates carry ±1.96·√(p(1−p)/R).

    python scripts/bench_quality_interaction.py --repeats 1000
    python scripts/bench_quality_interaction.py --quick
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

import numpy as np

from abtui import __version__
from abtui.quality import factorial as quality_factorial
from abtui.quality import synthetic as quality_synthetic
from abtui.quality.paired import cluster_bootstrap_ci

COEF = np.array([1.0, -1.0, -1.0, 1.0])  # base, A, B, AB: the 2×2 interaction
SCENARIOS = {
    "zero, B lossless": [0.90, 0.88, 0.90, 0.88],
    "zero, both lossy": [0.90, 0.87, 0.88, 0.85],
    "-5 pp": [0.90, 0.88, 0.90, 0.83],
    "-10 pp": [0.90, 0.88, 0.90, 0.78],
}
ALPHA = 0.05


def one(thresholds: list[float], n: int, seed: int, args) -> tuple[bool, ...]:
    y, cluster = quality_synthetic.answers(
        n, thresholds, flip=args.flip, cluster_size=args.cluster, rho=args.rho, seed=seed
    )
    contrast = y @ COEF
    t = quality_factorial.term_of("synthetic", "a×b", 2, contrast, cluster, COEF, args.margin)
    t.p_adj = t.p  # the suite alone in its family
    quality_factorial.decide([t], ALPHA)
    f = quality_factorial.term_of(
        "synthetic", "a×b", 2, contrast, cluster, COEF, args.margin, full_lattice=True
    )
    f.p_adj = f.p
    quality_factorial.decide([f], ALPHA)
    want = quality_synthetic.truth(thresholds, list(COEF), args.flip)
    blo, bhi = cluster_bootstrap_ci(
        contrast.astype(float), cluster, resamples=args.resamples, seed=seed
    )
    flag = (quality_factorial.fx.ANTAGONISTIC, quality_factorial.fx.SYNERGISTIC)
    return (
        t.lo <= want <= t.hi,
        t.p < ALPHA,
        t.outcome in flag,
        t.state == quality_factorial.FAIL,
        t.hi - t.lo,
        f.lo <= want <= f.hi,
        f.outcome in flag,
        f.hi - f.lo,
        blo <= want <= bhi,
        blo == bhi,
        bhi - blo,
    )


def rate(xs) -> str:
    p = float(np.mean(xs)) if len(xs) else math.nan
    err = 1.96 * math.sqrt(max(p * (1 - p), 1e-12) / max(len(xs), 1))
    return f"{100 * p:5.1f}% ±{100 * err:3.1f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=1000)
    ap.add_argument("--n", default="90,300", help="items per suite (comma-separated)")
    ap.add_argument("--cluster", type=int, default=3, help="items per shared context")
    ap.add_argument("--rho", type=float, default=0.5, help="hardness correlation in a cluster")
    ap.add_argument("--flip", type=float, default=0.01, help="per answer, at random")
    ap.add_argument("--margin", type=float, default=0.01)
    ap.add_argument("--resamples", type=int, default=2000, help="of the cluster bootstrap")
    ap.add_argument("--quick", action="store_true", help="100 repeats")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 100
    sizes = [int(x) for x in args.n.split(",")]
    print(
        f"# accuracy interaction calibration — abtui {__version__}, Python "
        f"{platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"{args.repeats} repeats per cell; clusters of {args.cluster} (ρ {args.rho:g}); flips "
        f"{args.flip:g} per answer; margin {args.margin * 100:g} pp; α {ALPHA:g}\n"
    )
    print(
        "| scenario | items | truth | covered | p < α | flagged | NO-GO | width | full lattice: "
        "covered | flagged | width | bootstrap: covered | [0, 0] | width |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    t0 = time.perf_counter()
    for name, th in SCENARIOS.items():
        want = quality_synthetic.truth(th, list(COEF), args.flip)
        for n in sizes:
            got = [one(th, n, 5000 + seed, args) for seed in range(args.repeats)]
            c = list(zip(*got, strict=True))
            w = lambda x: f"{np.mean(x) * 100:.1f} pp"  # noqa: E731
            print(
                f"| {name} | {n} | {want * 100:+.1f} pp | {rate(c[0])} | {rate(c[1])} | "
                f"{rate(c[2])} | {rate(c[3])} | {w(c[4])} | {rate(c[5])} | {rate(c[6])} | "
                f"{w(c[7])} | {rate(c[8])} | {rate(c[9])} | {w(c[10])} |"
            )
            sys.stdout.flush()
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
