"""How many connections a segment needs open at its ``t0``, so that its first wave
goes out on connections opened beforehand (:mod:`abtui.client.preconnect`).

- Closed loop: its concurrency (this generator's share of it), or fewer when the segment has
  fewer items.
- Open loop: the most requests the schedule has in flight at once if each lasted as long as the
  warm-up's did (its TTFT plus its time per output token × the item's ``max_tokens``; with no
  warm-up to go by, :data:`DEFAULT_PACE`), times :data:`MARGIN` (a loaded server is slower
  than a warm-up alone: seen here, a Poisson 40 req/s run whose schedule implied 4 at once at
  the warm-up's pace had 15), and at least :data:`OPEN_LOOP_MIN`; at most the segment's
  concurrency cap, its number of items and :data:`OPEN_LOOP_MAX`. A run that needs more opens them as it goes; each such request records
  its connect phase, so nothing is hidden, it is only not pre-paid.
- Never more than half the process's open-file limit (each connection is a file descriptor).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from abtui.client.records import OK
from abtui.runner.messages import GeneratorStats

OPEN_LOOP_MAX = 1024  # connections one generator process opens ahead for an open-loop segment
MARGIN = 3.0  # open loop: the schedule's peak in flight at the warm-up's pace, times this
OPEN_LOOP_MIN = 8  # open loop: at least this many (idle connections cost little)


@dataclass(frozen=True)
class Pace:
    """How long a request lasts: ``ttft_s + per_token_s × (max_tokens − 1)``."""

    ttft_s: float
    per_token_s: float

    def duration_s(self, max_tokens: int | None) -> float:
        return self.ttft_s + self.per_token_s * max(0, (max_tokens or 1) - 1)

    @classmethod
    def of_warmup(cls, records) -> Pace | None:
        """The slowest successful warm-up request's pace, its connect phase left out (None
        when none succeeded)."""
        ttft, per_tok = [], []
        for r in records:
            if r.status != OK or not r.chunk_ns:
                continue
            ttft.append((r.chunk_ns[0] - r.dispatched_ns - r.connect_ns) / 1e9)
            n = r.n_output or len(r.chunk_ns)
            if n > 1:
                per_tok.append((r.chunk_ns[-1] - r.chunk_ns[0]) / 1e9 / (n - 1))
        if not ttft:
            return None
        return cls(max(ttft), max(per_tok, default=0.0))


DEFAULT_PACE = Pace(ttft_s=0.5, per_token_s=0.05)  # no warm-up to go by: a slow endpoint


def peak_in_flight(items, pace: Pace) -> int:
    """The most of ``items`` in flight at once, each sent at its ``arrival_s`` and lasting
    ``pace.duration_s(max_tokens)`` (one ending as another starts: not both)."""
    events = []
    for it in items:
        events.append((it.arrival_s, 1))
        events.append((it.arrival_s + pace.duration_s(it.max_tokens), -1))
    events.sort()  # at equal times the ends (-1) come first
    peak = now = 0
    for _, d in events:
        now += d
        peak = max(peak, now)
    return peak


def open_file_limit() -> int | None:
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def connections_needed(seg, arm: int, pace: Pace | None, fd_limit: int | None = None) -> int:
    """Connections ``seg`` needs open at its start for ``arm`` (0 when the arm does not play
    it); see the module docstring."""
    if seg is None or (seg.arms is not None and arm not in seg.arms) or not seg.items:
        return 0
    if seg.mode == "closed":
        n = min(seg.concurrency or 1, len(seg.items))
    else:
        n = max(OPEN_LOOP_MIN, math.ceil(peak_in_flight(seg.items, pace or DEFAULT_PACE) * MARGIN))
        n = min(n, OPEN_LOOP_MAX, len(seg.items))
        if seg.concurrency:
            n = min(n, seg.concurrency)
    if fd_limit:
        n = min(n, max(1, fd_limit // 2))
    return max(1, n)


def connections_doc(
    stats: dict[int, GeneratorStats], worker_arm: list[int], names: list[str]
) -> dict[str, dict]:
    """The generators' pre-connection figures (:class:`~abtui.runner.messages.Connections`:
    opened before the t0s, unanswered, failed …) summed per arm, by arm name: the JSON of
    ``meta.connections``, written as is (the diagnosis reads it back from the file)."""
    out: dict[str, dict] = {}
    for w, st in stats.items():
        if not 0 <= w < len(worker_arm):
            continue
        a = out.setdefault(names[worker_arm[w]], {"processes": 0})
        a["processes"] += 1
        for k, v in asdict(st.connections).items():
            if k == "error":
                if v and "error" not in a:
                    a["error"] = v
            elif isinstance(v, int | float):
                a[k] = a.get(k, 0) + v
    return out
