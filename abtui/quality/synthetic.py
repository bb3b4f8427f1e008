"""Synthetic quality rows of known truth, for the tests and the calibration of the accuracy
terms of a factorial (:mod:`abtui.quality.factorial`, scripts/bench_quality_interaction.py).

Each item has a hardness ``h`` uniform on [0, 1]; items of one cluster (a shared context) have
correlated hardness (a Gaussian copula, correlation ``rho``). Arm ``x`` answers right when
``h < t_x`` — a weaker arm fails a superset of the items a stronger one fails, as the simulator's
quality face does — and then each answer flips independently with probability ``flip``
(answers that change for no systematic reason). So ``E[y_x] = flip + t_x (1 − 2 flip)`` and a
contrast ``Σ c_x y_x`` has the truth :func:`truth`. A combination-only drop: thresholds base
0.90, A 0.88, B 0.90, AB 0.78 — the items with ``h`` in [0.78, 0.88) are right on base, A and B
and wrong only on AB (10 %).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm


def truth(thresholds: list[float], coef: list[float], flip: float = 0.0) -> float:
    """``Σ c_x E[y_x]`` (module docstring)."""
    return sum(c * (flip + t * (1 - 2 * flip)) for c, t in zip(coef, thresholds, strict=True))


def answers(
    n: int,
    thresholds: list[float],
    *,
    flip: float = 0.0,
    cluster_size: int = 1,
    rho: float = 0.0,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """``(y, cluster)``: 0/1 answers, items × arms, and each item's cluster index."""
    rng = np.random.default_rng(seed)
    cluster = np.arange(n) // max(1, cluster_size)
    shared = rng.standard_normal(int(cluster.max()) + 1)[cluster]
    h = norm.cdf(math.sqrt(rho) * shared + math.sqrt(1 - rho) * rng.standard_normal(n))
    y = (h[:, None] < np.asarray(thresholds)[None, :]).astype(np.int8)
    if flip > 0:
        y ^= (rng.random(y.shape) < flip).astype(np.int8)
    return y, cluster


def rows(
    n: int, thresholds: list[float], *, suite: str = "synthetic", first: int = 0, **kw
) -> list[dict]:
    """The quality table's rows (arm, item, correct, detail) of :func:`answers`; items are
    numbered from ``first`` (a session numbers the items of all its suites together)."""
    y, cluster = answers(n, thresholds, **kw)
    out = []
    for a in range(y.shape[1]):
        for i in range(n):
            out.append(
                {
                    "arm": a,
                    "item": first + i,
                    "run": 0,
                    "score": float(y[i, a]),
                    "correct": bool(y[i, a]),
                    "detail": {
                        "suite": suite,
                        "id": f"{suite}-{i}",
                        "cluster": f"{suite}-c{cluster[i]}",
                        "bucket": "all",
                    },
                }
            )
    return out
