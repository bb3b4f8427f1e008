"""Arrival schedules: offsets (seconds from the start) at which each item is sent."""

from __future__ import annotations

import numpy as np

from abtui.errors import UsageError

PROCESSES = ("constant", "poisson")


def arrival_offsets(n: int, rate: float | None, process: str, seed: int) -> list[float]:
    """Offsets for ``n`` requests at ``rate`` requests/s.

    ``rate=None`` (or ``inf``) sends everything at t=0 (the closed-loop runner ignores offsets).
    ``constant`` spaces requests exactly ``1/rate`` apart; ``poisson`` draws exponential gaps
    from ``seed`` so that every arm, and every rerun with the same seed, sees the same schedule.
    """
    if n <= 0:
        return []
    if rate is None or rate == float("inf"):
        return [0.0] * n
    if not rate > 0:
        raise UsageError(f"rate must be > 0 requests/s, got {rate}")
    if process == "constant":
        return [i / rate for i in range(n)]
    if process == "poisson":
        rng = np.random.default_rng(seed)
        gaps = rng.exponential(1.0 / rate, size=n)
        gaps[0] = 0.0
        return np.cumsum(gaps).tolist()
    raise UsageError(f"unknown arrival process {process!r}", f"use one of {', '.join(PROCESSES)}")
