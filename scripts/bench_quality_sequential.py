#!/usr/bin/env python3
"""Coverage of the betting confidence sequence the sequential quality gate uses
(abtui.stats.betting, docs/verdict.md §11 "Quality, until decided"): streams of paired
clusters whose true mean Δacc is known, looked at every ``--every`` clusters up to ``--n``;
a miss is a look whose interval leaves the truth out (at any look: what a run that stops when
it likes risks). Each cluster is ``--size`` items, each flipping B-worse with rate ``b`` and
B-better with rate ``c`` (``Δ = c − b``), one shared draw per cluster with probability
``--shared`` (items of one haystack fail together), else independent.

    python scripts/bench_quality_sequential.py --repeats 500
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

CELLS = {  # name: (b, c), the per-item flip rates each way
    "none": (0.0, 0.0),
    "aa-2%": (0.02, 0.02),
    "aa-10%": (0.10, 0.10),
    "drop-5pp": (0.07, 0.02),
    "gain-3pp": (0.02, 0.05),
}


def stream(rng, b: float, c: float, n: int, size: int, shared: float) -> np.ndarray:
    """``n`` cluster means of ``correct_B − correct_A``."""
    u = rng.random((n, size))
    common = rng.random(n) < shared
    u[common] = rng.random(int(common.sum()))[:, None]  # the cluster's items move together
    d = np.where(u < b, -1.0, np.where(u > 1.0 - c, 1.0, 0.0))
    return d.mean(axis=1)


def main(argv: list[str] | None = None) -> int:
    from abtui.stats.betting import bounded_mean_cs

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--n", type=int, default=300, help="clusters per stream")
    p.add_argument("--every", type=int, default=20, help="a look every this many clusters")
    p.add_argument("--size", type=int, default=3, help="items per cluster")
    p.add_argument("--shared", type=float, default=0.5)
    p.add_argument("--alpha", type=float, default=0.05, help="two-sided: α/2 each side")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print("| cell | true Δ | streams | missed at some look | mean width at the last look |")
    print("|---|--:|--:|--:|--:|")
    for name, (b, c) in CELLS.items():
        t0, missed, widths = time.monotonic(), 0, []
        for _ in range(args.repeats):
            x = stream(rng, b, c, args.n, args.size, args.shared)
            lo = hi = 0.0
            for k in range(args.every, args.n + 1, args.every):
                lo, hi = bounded_mean_cs(x[:k], args.alpha / 2, args.alpha / 2)
                if not lo <= c - b <= hi:
                    missed += 1
                    break
            widths.append(hi - lo)
        print(
            f"| {name} | {100 * (c - b):+.0f} pp | {args.repeats} | "
            f"{100 * missed / args.repeats:.1f} % | {100 * np.mean(widths):.1f} pp |",
            flush=True,
        )
        print(f"  ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
