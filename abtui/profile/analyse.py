"""Each class's time per phase, the gaps, and the difference between two profiles.

Per phase (a step's phase, :mod:`abtui.profile.phases`; ``all`` when the trace has no steps;
``unmarked`` for activities outside every step):

- **busy** per class: the sum of its activities' own time (kernel and copy durations, host
  operators' self time); a class's **share** is its busy over the phase's busy;
- **wall**: each step's window — from the earlier of its annotation's start and its first
  activity to the later of its annotation's end and its last activity, but never before the
  previous step's window ends (with asynchronous scheduling a step's host work overlaps the
  previous step's kernels) — summed over the phase's steps (no steps: first activity to last);
- **idle / launch gaps**: wall not covered by any activity (the union over lanes): launch
  latency, host overhead inside the step, a GPU waiting on the CPU. Its share is of the wall.

The time between steps (the scheduler's, the output processing's) is in no phase; the profile
says how much there was. A summary (no timeline) has busy only.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from abtui.profile.classes import DEFAULT, IDLE, Classifier, ClassTable
from abtui.profile.model import Activity, Trace
from abtui.profile.phases import PHASES, StepIndex


@dataclass
class PhaseProfile:
    phase: str
    steps: int = 0
    wall_us: float | None = None
    idle_us: float | None = None
    busy_us: dict[str, float] = field(default_factory=dict)
    count: dict[str, int] = field(default_factory=dict)
    top: list[tuple[str, str, float, int]] = field(default_factory=list)  # name, class, µs, n

    @property
    def total_busy(self) -> float:
        return sum(self.busy_us.values())

    def share(self, cls: str) -> float | None:
        """``cls``'s share of busy time; ``idle``'s share of the wall."""
        if cls == IDLE:
            return self.idle_us / self.wall_us if self.wall_us else None
        total = self.total_busy
        return self.busy_us.get(cls, 0.0) / total if total > 0 else None

    def time_share(self, classes: tuple[str, ...]) -> float | None:
        """The classes' share of the phase's time, busy plus gaps (Amdahl's ``p``)."""
        denominator = self.total_busy + (self.idle_us or 0.0)
        if denominator <= 0:
            return None
        return sum(self.busy_us.get(c, 0.0) for c in classes) / denominator

    @property
    def per_step_us(self) -> float | None:
        return self.wall_us / self.steps if self.steps and self.wall_us is not None else None


@dataclass
class Profile:
    name: str
    trace: Trace
    table: ClassTable
    phases: dict[str, PhaseProfile]
    between_us: float | None = None  # time between steps, in no phase
    class_metrics: dict[str, tuple[float | None, float | None, int]] = field(default_factory=dict)


def _place(trace: Trace) -> list[tuple[str, int | None]]:
    """Each activity's (phase, step index): the host's steps when the trace has them (a kernel
    by its launch call's time, else its own start), else their projection on the device."""
    steps = trace.steps or trace.device_steps
    if not steps:
        return [("all", None)] * len(trace.activities)
    index = StepIndex(steps)
    out: list[tuple[str, int | None]] = []
    for a in trace.activities:
        t = a.anchor if a.anchor is not None and trace.steps else a.start
        j = index.find(t)
        out.append(("unmarked", None) if j is None else (steps[j].phase, j))
    return out


def _covered(acts: list[Activity], lo: float, hi: float) -> float:
    """Length of the union of the activities' intervals within [lo, hi]."""
    total, cur_s, cur_e = 0.0, None, None
    for a in sorted(acts, key=lambda x: x.start):
        s, e = max(a.start, lo), min(a.end, hi)
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            total += 0.0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0.0 if cur_e is None else cur_e - cur_s)


def _windows(trace: Trace, groups: dict[int | None, list[Activity]], phases: dict) -> float | None:
    """Add each step's wall and idle to its phase; return the time between steps."""
    if not trace.timeline:
        return None
    if not trace.steps and not trace.device_steps:
        acts = groups.get(None, [])
        if acts:
            lo, hi = min(a.start for a in acts), max(a.end for a in acts)
            ph = phases["all"]
            ph.wall_us, ph.idle_us = hi - lo, (hi - lo) - _covered(acts, lo, hi)
        return None
    spans, prev_hi = [], float("-inf")
    for j, step in enumerate(trace.steps or trace.device_steps):
        acts = groups.get(j, [])
        lo = max(prev_hi, min([step.start, *(a.start for a in acts)]))
        hi = max(lo, step.end, *(a.end for a in acts))
        ph = phases[step.phase]
        ph.steps += 1
        ph.wall_us = (ph.wall_us or 0.0) + hi - lo
        ph.idle_us = (ph.idle_us or 0.0) + (hi - lo) - _covered(acts, lo, hi)
        spans.append((lo, hi))
        prev_hi = hi
    if not spans:
        return None
    spans.sort()
    return max(0.0, (spans[-1][1] - spans[0][0]) - sum(h - lo for lo, h in spans))


def analyse(
    trace: Trace, table: ClassTable = DEFAULT, name: str | None = None, top: int = 5
) -> Profile:
    """The per-phase, per-class figures of one trace."""
    classifier = Classifier(table)
    classify = classifier.classify
    phases: dict[str, PhaseProfile] = {p: PhaseProfile(p) for p in PHASES}
    groups: dict[int | None, list[Activity]] = defaultdict(list)
    by_name: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for a, (phase, key) in zip(trace.activities, _place(trace), strict=True):
        cls = classifier.classify_activity(a.name, a.kind, a.parents)
        ph = phases[phase]
        ph.busy_us[cls] = ph.busy_us.get(cls, 0.0) + a.busy
        ph.count[cls] = ph.count.get(cls, 0) + 1
        groups[key].append(a)
        entry = by_name[(phase, a.name, cls)]
        entry[0] += a.busy
        entry[1] += 1
    between = _windows(trace, groups, phases)
    for (phase, op, cls), (busy, n) in by_name.items():
        phases[phase].top.append((op, cls, busy, int(n)))
    for ph in phases.values():
        ph.top = sorted(ph.top, key=lambda t: -t[2])[:top]
    kept = {p: ph for p, ph in phases.items() if ph.count or ph.steps}
    profile = Profile(name or trace.path, trace, table, kept, between)
    profile.class_metrics = _class_metrics(trace, classify)
    return profile


def _class_metrics(trace: Trace, classify) -> dict[str, tuple[float | None, float | None, int]]:
    """Per class, from Nsight Compute: DRAM throughput and achieved occupancy (%), averaged
    over the launches weighted by duration (equally when no duration is known)."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0.0])
    for k in trace.metrics:
        s = sums[classify(k.name)]
        w = k.duration_us if k.duration_us else 1.0
        if k.dram_pct is not None:
            s[0] += w * k.dram_pct
            s[1] += w
        if k.occupancy_pct is not None:
            s[2] += w * k.occupancy_pct
            s[3] += w
        s[4] += 1
    return {
        c: (s[0] / s[1] if s[1] else None, s[2] / s[3] if s[3] else None, int(s[4]))
        for c, s in sums.items()
    }


# ------------------------------------------------------------------------ two profiles


@dataclass
class ClassChange:
    cls: str
    a_us: float
    b_us: float

    @property
    def change(self) -> float | None:
        return self.b_us / self.a_us - 1 if self.a_us > 0 else None


@dataclass
class PhaseDiff:
    """Candidate ``b`` against baseline ``a`` in one phase: per step when both have steps
    (``per_step``), else totals over each profile's whole window."""

    phase: str
    per_step: bool
    a_time: float | None  # wall per step (µs), or None
    b_time: float | None
    classes: list[ClassChange]

    @property
    def change(self) -> float | None:
        if self.a_time and self.b_time is not None:
            return self.b_time / self.a_time - 1
        return None

    @property
    def speedup(self) -> float | None:
        return self.a_time / self.b_time if self.a_time and self.b_time else None


def compare(a: Profile, b: Profile) -> list[PhaseDiff]:
    """Phase by phase, each class's time in ``b`` against ``a`` (``idle`` included)."""
    out = []
    order = list(dict.fromkeys([*a.table.order, *b.table.order, IDLE]))
    for phase in PHASES:
        pa, pb = a.phases.get(phase), b.phases.get(phase)
        if pa is None or pb is None:
            continue
        per_step = bool(pa.steps and pb.steps)
        na, nb = (pa.steps, pb.steps) if per_step else (1, 1)
        classes = []
        for cls in order:
            if cls == IDLE:
                if pa.idle_us is None or pb.idle_us is None:
                    continue
                ua, ub = pa.idle_us, pb.idle_us
            else:
                ua, ub = pa.busy_us.get(cls, 0.0), pb.busy_us.get(cls, 0.0)
            if ua or ub:
                classes.append(ClassChange(cls, ua / na, ub / nb))
        a_time = pa.per_step_us if per_step else None
        b_time = pb.per_step_us if per_step else None
        out.append(PhaseDiff(phase, per_step, a_time, b_time, classes))
    return out


def _mean(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(values) / len(values)


def merge(profiles: list[Profile], name: str, top: int = 5) -> Profile:
    """One arm's profile from its ranks' (one file per tensor-parallel worker): per phase, the
    mean over the ranks of each class's busy time, the wall and the gaps (a rank without the
    phase or the class counts 0); the steps are the first rank's."""
    if len(profiles) == 1:
        profiles[0].name = name
        return profiles[0]
    n = len(profiles)
    first = profiles[0]
    phases: dict[str, PhaseProfile] = {}
    for phase in PHASES:
        ranks = [p.phases.get(phase) for p in profiles]
        if all(r is None for r in ranks):
            continue
        have = [r or PhaseProfile(phase) for r in ranks]
        merged = PhaseProfile(phase, steps=max(r.steps for r in have))
        merged.wall_us = _mean([r.wall_us for r in have])
        merged.idle_us = _mean([r.idle_us for r in have])
        for r in have:
            for cls, us in r.busy_us.items():
                merged.busy_us[cls] = merged.busy_us.get(cls, 0.0) + us / n
            for cls, k in r.count.items():
                merged.count[cls] = merged.count.get(cls, 0) + k
        tops: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
        for r in have:
            for op, cls, us, k in r.top:
                tops[(op, cls)][0] += us / n
                tops[(op, cls)][1] += k
        ranked = sorted(tops.items(), key=lambda kv: -kv[1][0])[:top]
        merged.top = [(op, cls, us, int(k)) for (op, cls), (us, k) in ranked]
        phases[phase] = merged
    t = first.trace
    trace = Trace(
        path=", ".join(p.trace.path for p in profiles),
        format=t.format,
        version=t.version,
        side=t.side,
        timeline=all(p.trace.timeline for p in profiles),
        activities=[a for p in profiles for a in p.trace.activities],
        steps=t.steps,
        device_steps=t.device_steps,
        metrics=[m for p in profiles for m in p.trace.metrics],
        notes=[
            f"the mean of {n} files (ranks)",
            *dict.fromkeys(x for p in profiles for x in p.trace.notes),
        ],
    )
    out = Profile(name, trace, first.table, phases, _mean([p.between_us for p in profiles]))
    out.class_metrics = _class_metrics(trace, Classifier(first.table).classify)
    return out
