"""A node's clocks against the driver's, by ping-pong (no Ray in here: plain arithmetic).

The driver reads its clocks (``t1``), asks the actor for its own, reads them again (``t2``). The
actor's reading was taken somewhere in ``[t1, t2]``, so ``offset = actor - (t1 + t2) / 2`` is off
by at most ``(t2 - t1) / 2``. Of several rounds, the one with the smallest round trip is kept
(the least queueing in it), and its half round trip is the offset's uncertainty.

Two clocks are measured in each round: the monotonic one every record is timestamped with
(``perf_counter_ns``: its offset converts the schedule's start and the records into the driver's
timebase; between machines it is dominated by their boot times, so it says nothing about NTP)
and the wall clock (``time_ns``: its offset is how far the node's clock is from the driver's,
which is what a user compares with NTP; abtui uses it for nothing but the report).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

ROUNDS = 12
CLOCK_WARN_MS = 2.0  # default [ray] clock_warn_ms: uncertainty beyond this is a named warning
SKEW_WARN_MS = 100.0  # a wall clock this far off the driver's: NTP is not working there


@dataclass
class ClockSync:
    mono_offset_ns: int  # node's monotonic clock minus the driver's
    wall_offset_ns: int  # node's wall clock minus the driver's
    uncertainty_ns: int  # half the kept round trip: both offsets are within ± this
    rtt_ns: int  # the kept (smallest) round trip
    rounds: int

    def to_dict(self) -> dict:
        return asdict(self)


def measure(ask, rounds: int = ROUNDS) -> ClockSync:
    """``ask()`` returns the node's ``(perf_counter_ns, time_ns)``; it is called ``rounds``
    times and the smallest round trip is kept."""
    best = None
    for _ in range(rounds):
        p1, w1 = time.perf_counter_ns(), time.time_ns()
        mono, wall = ask()
        p2, w2 = time.perf_counter_ns(), time.time_ns()
        rtt = p2 - p1
        if best is None or rtt < best[0]:
            best = (rtt, mono - (p1 + p2) // 2, wall - (w1 + w2) // 2)
    rtt, mono_off, wall_off = best
    return ClockSync(int(mono_off), int(wall_off), int(rtt // 2), int(rtt), rounds)


def per_node(nodes: list[dict]) -> list[dict]:
    """One entry per node (its actors share its clocks): the most precise of their syncs."""
    best: dict[str, dict] = {}
    for n in nodes:
        key = n.get("node_id") or "?"
        c = n.get("clock") or {}
        if key not in best or c.get("uncertainty_ns", 0) < best[key]["clock"].get(
            "uncertainty_ns", 0
        ):
            best[key] = n
    return list(best.values())


def where(n: dict) -> str:
    """A node in words: its address and the start of its id (local test nodes share an IP)."""
    return f"{n.get('node_ip') or '?'} ({(n.get('node_id') or '?')[:8]})"


def warnings(nodes: list[dict], warn_ms: float = CLOCK_WARN_MS) -> list[tuple[str, str]]:
    """``(kind, text)`` warnings for the stored per-actor clocks (``meta.ray.nodes``), one set
    per node."""
    out = []
    for n in per_node(nodes):
        c = n.get("clock") or {}
        unc = (c.get("uncertainty_ns") or 0) / 1e6
        at = where(n)
        if unc > warn_ms:
            out.append(
                (
                    "clock_uncertain",
                    f"node {at}: clock offset known only to ±{unc:.2f} ms (> {warn_ms:g} ms): "
                    "the arms' requests for one item may start that far apart",
                )
            )
        wall = abs(c.get("wall_offset_ns") or 0) / 1e6
        if wall > SKEW_WARN_MS:
            out.append(
                (
                    "clock_skew",
                    f"node {at}: wall clock {wall:.0f} ms off the driver's (is NTP running "
                    "there?); abtui converts the schedule by the measured offset",
                )
            )
        drift = c.get("drift_ns")
        if drift is not None and abs(drift) > max(_drift_noise(c), warn_ms * 1e6):
            out.append(
                (
                    "clock_drift",
                    f"node {at}: its monotonic clock drifted {drift / 1e6:+.2f} ms from the "
                    "driver's during the run",
                )
            )
    return out


def _drift_noise(c: dict) -> int:
    return (c.get("uncertainty_ns") or 0) + (c.get("end_uncertainty_ns") or 0)


def lines(ray_meta: dict) -> list[str]:
    """The cluster part of a report: per node, its generators and its clock offset."""
    nodes = ray_meta.get("nodes") or []
    if not nodes:
        return []
    out = [
        f"ray: {len(nodes)} generator actors on {len(per_node(nodes))} node(s), "
        f"{ray_meta.get('placement')} placement ({ray_meta.get('address')})"
    ]
    for n in per_node(nodes):
        c = n.get("clock") or {}
        arms = sorted({m.get("arm") for m in nodes if m.get("node_id") == n.get("node_id")})
        drift = c.get("drift_ns")
        out.append(
            f"  node {where(n)}: {', '.join(map(str, arms))}; wall clock "
            f"{(c.get('wall_offset_ns') or 0) / 1e6:+.3f} ms ± "
            f"{(c.get('uncertainty_ns') or 0) / 1e6:.3f} ms vs the driver"
            + (
                f", drift {drift / 1e6:+.3f} ± {_drift_noise(c) / 1e6:.3f} ms over the run"
                if drift is not None
                else ""
            )
        )
    for lo in ray_meta.get("lost") or []:
        out.append(
            f"  LOST: generator {lo.get('worker')} of {lo.get('arm')} on node "
            f"{where(lo)}: {lo.get('in_flight', 0)} request(s) in flight counted as errors"
        )
    for kind, text in warnings(nodes, ray_meta.get("clock_warn_ms") or CLOCK_WARN_MS):
        out.append(f"  warning {kind}: {text}")
    return out
