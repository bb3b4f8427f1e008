"""How many samples a tail percentile needs before anything is said about it.

A percentile ``q`` is estimated from the observations beyond it; with fewer than
:data:`MIN_TAIL` of them in an arm its value is set by a handful of requests, so no comparison
is made (P99 needs n ≥ 1000 per arm, P95 ≥ 200, P90 ≥ 100). The live strip
(:mod:`abtui.metrics.live`) and the verdict (:mod:`abtui.stats.decide`) apply the same rule.
"""

from __future__ import annotations

import math

from abtui.metrics.catalogue import TAIL_Q

__all__ = ["MIN_TAIL", "TAIL_Q", "tail_min_n"]

MIN_TAIL = 10


def tail_min_n(stat: str) -> int:
    """Smallest per-arm sample with ≥ MIN_TAIL observations beyond the quantile (0 if none)."""
    q = TAIL_Q.get(stat)
    return 0 if q is None else math.ceil(MIN_TAIL / (1 - q) - 1e-9)
