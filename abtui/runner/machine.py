"""What the machine was doing while measuring: CPU taken by other processes, steal time.

Sampled from ``/proc/stat`` (the first ``cpu`` line: jiffies per state, summed over every CPU)
when the first segment starts and when the last ends. The CPU busy in that window, less what
abtui itself used (this process, from ``getrusage``, and the generators' own measuring CPU),
is what other processes took; ``steal`` is the time the hypervisor ran someone else while a
vCPU wanted to run (visible on most VMs, 0 on bare metal). Linux only; elsewhere ``None``.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import asdict, dataclass

_STATES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_BUSY = ("user", "nice", "system", "irq", "softirq")  # guest time is counted in user


def _proc_stat() -> dict[str, int] | None:
    try:
        with open("/proc/stat") as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    return {k: int(v) for k, v in zip(_STATES, first[1:], strict=False)}


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass(frozen=True, slots=True)
class MachineUse:
    """What the machine did while measuring (:meth:`MachineLoad.result`): stored as
    ``meta.generator_health.machine`` (:meth:`to_dict`)."""

    cpus: int | None
    wall_s: float
    busy_cpus: float  # CPUs busy on average (all processes)
    abtui_cpus: float  # of which abtui: main process + its generators
    other_cpus: float
    steal_share: float | None  # None where the kernel does not count steal
    loadavg_1m: float

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d) -> MachineUse | None:
        """A stored one; None for anything without a number of other processes' CPUs (a
        session written before it was measured, or not on Linux)."""
        if not isinstance(d, dict) or not isinstance(d.get("other_cpus"), int | float):
            return None
        steal = d.get("steal_share")
        return cls(
            d.get("cpus"),
            float(d.get("wall_s") or 0.0),
            float(d.get("busy_cpus") or 0.0),
            float(d.get("abtui_cpus") or 0.0),
            float(d["other_cpus"]),
            float(steal) if isinstance(steal, int | float) else None,
            float(d.get("loadavg_1m") or 0.0),
        )


class MachineLoad:
    """``start()`` when measuring begins, ``result(generators_cpu_s)`` when it ends."""

    def __init__(self) -> None:
        self._t0: tuple | None = None

    def start(self) -> None:
        if self._t0 is None:
            self._t0 = (time.monotonic(), _proc_stat(), _self_cpu_s())

    def result(self, generators_cpu_s: float) -> MachineUse | None:
        if self._t0 is None or self._t0[1] is None:
            return None
        t0, s0, c0 = self._t0
        s1, wall = _proc_stat(), time.monotonic() - t0
        if s1 is None or wall <= 0:
            return None
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        d = {k: (s1.get(k, 0) - s0.get(k, 0)) / hz for k in _STATES}
        total = sum(d.values())
        ours = (_self_cpu_s() - c0) + generators_cpu_s
        busy = sum(d[k] for k in _BUSY)
        return MachineUse(
            cpus=os.cpu_count(),
            wall_s=wall,
            busy_cpus=busy / wall,
            abtui_cpus=ours / wall,
            other_cpus=max(0.0, busy - ours) / wall,
            steal_share=d["steal"] / total if "steal" in s0 and total > 0 else None,
            loadavg_1m=os.getloadavg()[0],
        )


def machine_words(m: MachineUse | None) -> str | None:
    """One sentence for a user who must decide what to do about a late generator."""
    if m is None:
        return None
    text = (
        f"while measuring, other processes kept {m.other_cpus:.1f} of the machine's "
        f"{m.cpus} CPUs busy (abtui used {m.abtui_cpus:.1f}; load average "
        f"{m.loadavg_1m:.1f})"
    )
    steal = m.steal_share
    if steal is not None:
        text += f", and the hypervisor took {steal:.0%} of the CPU time (steal)"
    busy = m.other_cpus >= 0.5 or (steal is not None and steal >= 0.05)
    hint = (
        "stop the other work or run on a quieter machine (or VM) and repeat"
        if busy
        else "the machine was not busy: the generator itself is short of CPU "
        "(fewer streams per process: --generators)"
    )
    return f"the machine: {text}; {hint}"
