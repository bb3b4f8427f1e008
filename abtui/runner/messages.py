"""What a load generator tells the main process, one message type per event.

A generator (a local process, :mod:`abtui.runner.generator`, or a Ray actor,
:mod:`abtui.runner.ray`) puts these on its result queue; :class:`abtui.runner.session.SessionRun`
reads them and matches on the type. They are plain frozen, slotted dataclasses: they pickle as
a class reference and their fields, about as cheaply as the tuples they replace, and a field
is read by name, never by position.

In the order a generator sends them::

    Batch*  Ready  (Batch* SegmentDone)*  Batch*  Done

``Batch`` comes whenever finished records are waiting (every 50 ms at most); ``Fatal`` may end
the sequence at any point (the generator failed), and ``Lost`` is written by the Ray driver
for a generator whose node died.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from abtui.client.records import RequestRecord


@dataclass(slots=True)
class Connections:
    """The connections a generator opened before its segments' ``t0`` (abtui.client.preconnect),
    summed over its fills; per arm in ``meta.connections``."""

    wanted: int = 0  # the most it asked for at once
    opened: int = 0
    unanswered: int = 0  # opened, but the server never answered on them
    closed: int = 0  # closed by the server before the t0
    failed: int = 0
    late: int = 0  # still opening at the t0
    seconds: float = 0.0
    error: str | None = None  # the first connect error

    def add(self, wanted: int, fill) -> None:
        """Count one :class:`abtui.client.preconnect.Fill` of ``wanted`` connections."""
        self.wanted = max(self.wanted, wanted)
        self.opened += fill.opened
        self.unanswered += fill.unanswered
        self.closed += fill.closed
        self.failed += fill.failed
        self.late += fill.late
        self.seconds += fill.seconds
        self.error = self.error or fill.error


@dataclass(frozen=True, slots=True)
class GeneratorStats:
    """A generator's own counters at the moment it sent a message."""

    cpu_s: float = 0.0  # its process's CPU time so far
    in_flight: int = 0
    in_flight_max: int = 0  # most measured requests in flight at once
    lag_max_s: float = 0.0  # the largest schedule lag (dispatched − scheduled)
    connections: Connections = field(default_factory=Connections)
    measure_wall_s: float | None = None  # since the first segment's t0 (None before it)
    measure_cpu_s: float | None = None  # its CPU time since then
    shipped: int | None = None  # records put on the queue so far (batches only)
    shipped_ns: int | None = None  # when this batch was put there (batches only)


@dataclass(frozen=True, slots=True)
class Ready:
    """Warm-up done and the first segment's connections open: waiting for a ``t0``."""

    wid: int
    stats: GeneratorStats


@dataclass(frozen=True, slots=True)
class Batch:
    """Finished records, in the order they finished. ``stats`` is None for the records the Ray
    driver writes as errors for a lost node."""

    wid: int
    records: list[RequestRecord]
    stats: GeneratorStats | None


@dataclass(frozen=True, slots=True)
class SegmentDone:
    """Segment ``segment`` played (its requests drained) and the next one's connections open."""

    wid: int
    segment: int
    stats: GeneratorStats


@dataclass(frozen=True, slots=True)
class Done:
    """Every segment played; the generator ends."""

    wid: int
    stats: GeneratorStats


@dataclass(frozen=True, slots=True)
class Fatal:
    """The generator failed (``error``: the exception's type and text); nothing more comes."""

    wid: int
    error: str


@dataclass(frozen=True, slots=True)
class Lost:
    """A Ray actor's node died under it (the driver's word, :mod:`abtui.runner.ray.fleet`)."""

    wid: int
    why: str


Message = Ready | Batch | SegmentDone | Done | Fatal | Lost
