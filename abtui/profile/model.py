"""What a reader hands the analysis: a profile's activities, its steps and its notes."""

from __future__ import annotations

from dataclasses import dataclass, field

from abtui.errors import AbtuiError


class ProfileError(AbtuiError):
    """A profile file cannot be read: names the file and, where it applies, the line or
    field."""

    title = "profile"
    default_hint = "docs/profile.md lists the formats and versions abtui reads"


# what an activity is; only "op" is a host operator (its busy time is its self time)
KINDS = ("kernel", "memcpy", "memset", "op")


@dataclass(frozen=True, slots=True)
class Activity:
    """One kernel, copy or host operator, times in microseconds on the trace's clock.

    ``busy`` is the time counted as this activity's own: a kernel's or copy's duration, a host
    operator's self time (its duration less its children's). ``anchor`` is when the host
    issued it (a kernel's launch call), the time that places it in a step; ``None`` when the
    trace does not say, and then the activity's own start places it. A summary (no timeline)
    has ``start == end == 0`` and ``busy`` the row's total. ``parents``: a host operator's
    enclosing operators, innermost first (``aten::t`` inside ``aten::linear``).
    """

    name: str
    kind: str
    start: float
    end: float
    busy: float
    lane: str = ""
    anchor: float | None = None
    parents: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StepCounts:
    """What a vLLM step annotation says the step ran: context (prefill) and generation
    (decode) requests and query tokens; with ``detailed_trace_annotation`` also each side's
    sum of sequence lengths (KV length after the step) and its causal (query, key) pairs."""

    context_reqs: int
    context_tokens: int
    generation_reqs: int
    generation_tokens: int
    context_seq_len: int | None = None
    context_pairs: float | None = None
    generation_seq_len: int | None = None
    generation_pairs: float | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """One engine step found in the trace's annotations: its host window and phase."""

    start: float
    end: float
    phase: str  # "prefill", "decode" or "mixed"
    label: str
    counts: StepCounts | None = None


@dataclass(frozen=True, slots=True)
class KernelMetrics:
    """One kernel launch's hardware figures from Nsight Compute (``None``: not in the file)."""

    name: str
    duration_us: float | None
    dram_pct: float | None  # DRAM throughput, % of peak
    occupancy_pct: float | None  # achieved occupancy, % of the SM's warps


@dataclass
class Trace:
    """A profile as read: ``side`` is "device" (GPU kernels and copies) or "host" (CPU
    operators); ``timeline`` is False for a summary (per-kernel totals, no times, so no gaps
    and no steps)."""

    path: str
    format: str  # "chrome", "nsys-sqlite", "nsys-kern-sum", "ncu-csv"
    version: str  # the format's version as the file states it, or what the reader assumes
    side: str
    timeline: bool
    activities: list[Activity] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    device_steps: list[Step] = field(default_factory=list)  # the same steps on the GPU's lanes
    metrics: list[KernelMetrics] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
