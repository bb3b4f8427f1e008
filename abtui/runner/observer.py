"""How the runner reports, so that a UI (or headless printing) can attach as an observer.

The runner calls these from the main process, a few times a second at most: never once per
token, and never from the load generator's event loop.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Protocol

from abtui.client.redact import Scrubber, scrub_url
from abtui.metrics.live import GaugeHistory, LiveArm
from abtui.stats.decide import DELTA_CENTRAL, DELTA_TAIL
from abtui.stats.seqdecide import SeqVerdict
from abtui.workload.segments import Position


@dataclass
class ArmProgress:
    """Live counts for one arm (a running view; the verdict is computed from the store)."""

    name: str
    planned: int
    done: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    cancelled: int = 0
    warmup_done: int = 0
    in_flight: int = 0
    recent_ttft_p50_s: float = float("nan")  # over the last completed requests
    recent_tpot_p50_s: float = float("nan")
    recent_ttfo_p50_s: float | None = None  # None until a response reasoned before its answer
    output_tokens: int = 0
    schedule_lag_max_s: float = 0.0
    generator_cpu_s: float = 0.0
    reading_behind_s: float = 0.0
    """How far behind the main process is reading this arm's finished records now: the most
    seconds a batch read in the last few seconds had waited since its generator shipped it
    (``abtui.runner.health.Delivery.current``); 0 when none was read lately."""
    records_waiting: int = 0  # the most of its records waiting to be read then
    finished: bool = False
    telemetry: dict[str, float] = field(default_factory=dict)
    """Latest telemetry of this arm for live gauges: ``"source:metric"`` → value (gauges and
    ``.rate`` counters, e.g. ``"vllm:kv_usage"``, ``"nvml:gpu.power_w"``)."""
    history: GaugeHistory = field(default_factory=GaugeHistory)
    """The last readings of each gauge in ``telemetry`` (:meth:`gauge` adds to both), for the
    panes' gauge histories."""
    live: LiveArm = field(default_factory=LiveArm)
    """Running histograms and throughput for live panes (bounded; read with ``live.view()``
    from the observer's callback, which runs in the runner's thread)."""

    def gauge(self, key: str, value: float) -> None:
        """A telemetry reading: the latest value of ``key`` and its history."""
        self.telemetry[key] = value
        self.history.add(key, value)


@dataclass
class Snapshot:
    elapsed_s: float
    arms: list[ArmProgress]
    phase: str  # "warmup" | "measuring" | "stopping" | "quality" | "done"
    segment: Position | None = None
    """The segment being played: sweep level, run, alternate block and whose turn
    (``segment.label()``: "level 3/5 · 8 req/s"); None for a plain single-level run, before
    the first segment and after the last."""
    sequential: str | None = None
    """``--until-decided``: the anytime-valid verdict at the last look, in one line (what is
    decided, what is left, the expected remaining time); None otherwise."""
    look: SeqLook | None = None
    """``--until-decided``: the last look itself (each row's anytime-valid interval, state and
    pairs to its decision) for the live strip; None before the first look and otherwise."""
    profiling: bool = False
    """``--profile``: the servers are profiling now (a window is open; its requests are left
    out of the latency figures)."""


@dataclass(frozen=True)
class SeqLook:
    """One look of a ``--until-decided`` run, as the live strip shows it. ``verdict`` is never
    changed after the look made it, so the UI may read it from its own thread."""

    verdict: SeqVerdict
    remaining_s: float | None  # the pair's ``more`` at the run's pace (None: unknown)
    budget_pairs: int
    stop_reason: str | None = None  # decided / budget / interrupted / failed, once it ended


@dataclass
class RunInfo:
    session_name: str
    session_path: str
    arm_names: list[str]
    arm_urls: list[str]
    arm_models: list[str]
    planned_per_arm: int
    load: str  # human description: "poisson 20 req/s", "closed loop, concurrency 8"
    delta: float = DELTA_CENTRAL  # the verdict's noise thresholds (policy.delta, delta_tail):
    delta_tail: float = DELTA_TAIL  # the live strip marks a change within ±δ as ≈

    @property
    def fixed_rate(self) -> bool:
        """Open loop (``load`` from :func:`abtui.runner.session.describe_load`: a rate, a
        sweep of rates or a replay): the arrivals are set, so throughput follows the design
        and is never better or worse by itself."""
        return bool(self.load) and "closed" not in self.load


class Observer(Protocol):
    def started(self, info: RunInfo) -> None: ...

    def progress(self, snap: Snapshot) -> None: ...

    def arm_finished(self, arm: int, progress: ArmProgress) -> None: ...

    def message(self, text: str) -> None: ...

    def finished(self, snap: Snapshot, status: str) -> None: ...


class NullObserver:
    """Observes nothing (tests, library use)."""

    def started(self, info: RunInfo) -> None:
        pass

    def progress(self, snap: Snapshot) -> None:
        pass

    def arm_finished(self, arm: int, progress: ArmProgress) -> None:
        pass

    def message(self, text: str) -> None:
        pass

    def finished(self, snap: Snapshot, status: str) -> None:
        pass


class ScrubbingObserver:
    """Passes everything on to ``inner`` with the run's secrets scrubbed from what it shows:
    messages (an endpoint's error quoting its URL) and the run's description (URLs with user
    info). What a run prints, it prints through this."""

    def __init__(self, inner: Observer, scrubber: Scrubber) -> None:
        self.inner, self.scrub = inner, scrubber

    def started(self, info: RunInfo) -> None:
        self.inner.started(
            dataclasses.replace(
                info,
                session_name=self.scrub.text(info.session_name),
                arm_names=self.scrub(info.arm_names),
                arm_models=self.scrub(info.arm_models),
                arm_urls=[self.scrub.text(scrub_url(u) or "") for u in info.arm_urls],
                load=self.scrub.text(info.load),
            )
        )

    def progress(self, snap: Snapshot) -> None:
        self.inner.progress(snap)

    def arm_finished(self, arm: int, progress: ArmProgress) -> None:
        self.inner.arm_finished(arm, progress)

    def message(self, text: str) -> None:
        self.inner.message(self.scrub.text(str(text)))

    def finished(self, snap: Snapshot, status: str) -> None:
        self.inner.finished(snap, status)
