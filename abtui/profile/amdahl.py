"""Amdahl's law on a profile: what making some classes faster can gain a phase at most.

If the classes an optimisation targets take a share ``p`` of a phase's time (busy plus gaps:
the gaps do not shrink when kernels do), the phase's speed-up is at most

- ``1 / (1 − p)`` if they took no time at all, and
- ``1 / ((1 − p) + p / k)`` if they became ``k`` times faster.

A measured speed-up above the first bound means more changed than the targeted classes (or the
two profiles cover different work). A targeted share under :data:`SMALL_SHARE` draws a warning:
optimising it cannot move the phase much, whatever it does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from abtui.profile.analyse import Profile
from abtui.profile.classes import IDLE

SMALL_SHARE = 0.20  # a share under this gains at most ×1.25 even for free


def speedup_bound(p: float, k: float = math.inf) -> float:
    """Amdahl: the whole's speed-up when a part ``p`` (0..1) becomes ``k`` times faster
    (``k`` infinite: takes no time; ``math.inf`` when ``p`` is 1 and it is free)."""
    if not 0.0 <= p <= 1.0 or k <= 0:
        raise ValueError(f"share {p} must be in [0, 1] and factor {k} > 0")
    rest = (1.0 - p) + (0.0 if math.isinf(k) else p / k)
    return math.inf if rest <= 0 else 1.0 / rest


@dataclass
class AmdahlLine:
    phase: str
    classes: tuple[str, ...]
    share: float  # p: the targeted classes' share of the phase's time
    free: float  # bound if they took no time
    factor: float  # k
    at_factor: float  # bound if they were k times faster
    measured: float | None  # the phase's measured speed-up (baseline time / candidate time)
    measured_from: str  # where the measured figure comes from
    gaps_known: bool  # False for a summary: p is of busy time, so the bound is looser
    largest: tuple[str, float] | None  # the phase's largest class and its share of the time
    warning: str | None = None
    exceeds: bool = False  # measured above the free bound


def amdahl(
    profile: Profile,
    classes: tuple[str, ...],
    factor: float = 2.0,
    measured: dict[str, tuple[float, str]] | None = None,
) -> list[AmdahlLine]:
    """One line per phase with time in it (not ``unmarked``): the bounds for ``classes`` made free and ``factor``
    times faster, next to the measured speed-up of that phase when ``measured`` has one
    (phase → (speed-up, source))."""
    out = []
    for phase, ph in profile.phases.items():
        if phase == "unmarked":  # outside every step: warm-up, graph capture
            continue
        p = ph.time_share(classes)
        if p is None:
            continue
        p = min(1.0, max(0.0, p))
        got = (measured or {}).get(phase)
        shares = {c: ph.time_share((c,)) or 0.0 for c in ph.busy_us}
        if ph.idle_us:
            shares[IDLE] = ph.idle_us / (ph.total_busy + ph.idle_us)
        largest = max(shares.items(), key=lambda kv: kv[1]) if shares else None
        line = AmdahlLine(
            phase=phase,
            classes=classes,
            share=p,
            free=speedup_bound(p),
            factor=factor,
            at_factor=speedup_bound(p, factor),
            measured=got[0] if got else None,
            measured_from=got[1] if got else "",
            gaps_known=ph.idle_us is not None,
            largest=largest,
        )
        if p < SMALL_SHARE:
            line.warning = (
                f"{phase}: the targeted classes are {p:.0%} of the phase's time: at most "
                f"×{line.free:.2f} even if they took none"
            )
            if largest and largest[0] not in classes:
                label = profile.table.label(largest[0])
                line.warning += f"; the largest is {label} ({largest[1]:.0%})"
        if line.measured is not None and line.measured > line.free * 1.02:
            line.exceeds = True
        out.append(line)
    return out
