"""Segments: the parts of a session played one after another, each on its own start ``t0``.

A session is ``runs × levels × blocks`` segments:

- **runs** (``--runs k``): the whole schedule again, same items at the same offsets; requests
  are paired across arms by (run, item).
- **levels** (``--sweep-rate 5,10,20`` or ``--sweep-concurrency 1,4,16``): one segment per
  load level, each with its own items (seeded by the level: no prompt repeats across levels,
  so a prefix cache does not favour later levels), for the Pareto front and capacity.
- **blocks** (``schedule = "alternate"``, arms sharing one GPU): the level's schedule cut into
  ``blocks`` consecutive blocks; every arm plays every block, alone, the arms taking turns in
  A B | B A | A B … order (counterbalanced, so warm-up and drift hit both arms alike). In
  ``parallel`` mode (arms on separate hardware) there is one block, played by every arm at the
  same instants.

Each segment ends when every arm playing it has finished its requests (drained); the next one
starts on a fresh common ``t0``. So in ``alternate`` mode the arms never overlap in time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from abtui.client.items import Item

if TYPE_CHECKING:  # numpy is imported where it is used: a load generator unpickling its
    import numpy as np  # segments of whole items (Segment, Level) needs none of it

SCHEDULES = ("parallel", "alternate")


@dataclass
class Segment:
    """One part of the schedule: who plays which items, how."""

    items: list[Item]  # offsets relative to this segment's t0
    mode: str  # "open" | "closed"
    concurrency: int | None
    arms: tuple[int, ...] | None = None  # None: every arm
    run: int = 0
    level: int = 0
    block: int = 0
    rate: float | None = None
    duration_s: float | None = None  # closed loop: no new request after t0 + this

    def describe(self, arm_names: list[str]) -> dict:
        who = arm_names if self.arms is None else [arm_names[a] for a in self.arms]
        return {
            "run": self.run,
            "level": self.level,
            "block": self.block,
            "arms": who,
            "rate": self.rate,
            "concurrency": self.concurrency,
            "requests": len(self.items),
        }


@dataclass
class Level:
    rate: float | None
    concurrency: int | None
    items: list[Item] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Offset:
    """An item as :class:`Offsets` gives it back: its index and its offset, nothing else."""

    index: int
    arrival_s: float


class Offsets:
    """A level's (or a segment's) items as the main process keeps them once they are in the
    session file and the generators make their own (:mod:`abtui.runner.schedule`): each
    item's index and offset, 16 bytes, instead of an :class:`Item` (~290 bytes without its
    text), and where a conversation starts (``starts``, one byte: None when every item is a
    request on its own). A sequence: ``len``, slices, ``[k]`` and iteration give
    :class:`Offset` records."""

    __slots__ = ("index", "arrival", "starts")

    def __init__(
        self, index: np.ndarray, arrival: np.ndarray, starts: np.ndarray | None = None
    ) -> None:
        self.index = index
        self.arrival = arrival
        self.starts = starts

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, k):
        if isinstance(k, slice):
            starts = None if self.starts is None else self.starts[k]
            return Offsets(self.index[k], self.arrival[k], starts)
        return Offset(int(self.index[k]), float(self.arrival[k]))

    def __iter__(self):
        for i, t in zip(self.index.tolist(), self.arrival.tolist(), strict=True):
            yield Offset(i, t)

    def rebased(self, start: float) -> Offsets:
        import numpy as np

        return Offsets(self.index, np.maximum(0.0, self.arrival - start), self.starts)


def starts_unit(items, k: int) -> bool:
    """Whether ``items[k]`` (Items) starts a unit a schedule may not split: a request on its
    own, or a conversation's first turn here (its turns follow one another's answers)."""
    it = items[k]
    conv = getattr(it, "conversation", None)
    return conv is None or k == 0 or it.turn == 0 or conv != items[k - 1].conversation


def unit_starts(items: list[Item] | Offsets) -> np.ndarray | None:
    """Where each unit (:func:`starts_unit`) of ``items`` starts; None: at every item."""
    if isinstance(items, Offsets):
        return items.starts
    if not any(getattr(it, "conversation", None) is not None for it in items):
        return None
    import numpy as np

    return np.fromiter((starts_unit(items, k) for k in range(len(items))), bool, len(items))


def block_bounds(items: list[Item] | Offsets, blocks: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` of each block ``alternate`` cuts ``items`` into: ``blocks`` (at
    most) of equal count, each cut moved on to the next conversation's start, so that a
    conversation is played whole in one block (fewer blocks where conversations are long)."""
    n = len(items)
    nb = max(1, min(blocks, n))
    size = -(-n // nb) if n else 1
    starts = unit_starts(items)
    cuts = [b * size for b in range(1, nb) if b * size < n]
    if starts is not None:
        import numpy as np

        at = np.flatnonzero(starts)
        cuts = sorted(
            {int(at[j]) for c in cuts if (j := int(np.searchsorted(at, c))) < len(at)} - {0}
        )
    edges = [0, *cuts, n]
    return [(a, b) for a, b in zip(edges, edges[1:], strict=False) if b > a]


def alternate_order(block: int, n_arms: int) -> list[int]:
    """Arms' turn order in ``block``: A B, B A, A B, … (for more arms: forward, reversed, …)."""
    order = list(range(n_arms))
    return order if block % 2 == 0 else order[::-1]


def _rebased(items: list[Item] | Offsets, start: float) -> list[Item] | Offsets:
    import dataclasses

    if isinstance(items, Offsets):
        return items.rebased(start)
    return [dataclasses.replace(it, arrival_s=max(0.0, it.arrival_s - start)) for it in items]


def plan_segments(
    levels: list[Level],
    *,
    runs: int,
    schedule: str,
    blocks: int,
    n_arms: int,
    open_loop: bool,
    duration_s: float | None = None,
) -> list[Segment]:
    """Every segment of the session, in the order they are played."""
    segs: list[Segment] = []
    dur = None if open_loop else duration_s  # open loop: the schedule was already cut
    for run in range(runs):
        for li, lv in enumerate(levels):
            mode = "open" if open_loop else "closed"
            if schedule == "parallel":
                segs.append(Segment(lv.items, mode, lv.concurrency, None, run, li, 0, lv.rate, dur))
                continue
            for b, (lo, hi) in enumerate(block_bounds(lv.items, blocks)):
                part = _rebased(lv.items[lo:hi], lv.items[lo].arrival_s)
                for arm in alternate_order(b, n_arms):
                    segs.append(
                        Segment(part, mode, lv.concurrency, (arm,), run, li, b, lv.rate, dur)
                    )
    return segs


def shard(segments: list[Segment], g: int, n: int) -> list[Segment]:
    """Generator process ``g`` of ``n`` serving one arm: every n-th item of each segment (the
    same instants as with one process) and its share of any concurrency; every n-th whole
    conversation where the items are conversations' turns (a conversation's turns follow one
    another's answers, so they stay in one process)."""
    import dataclasses

    if n == 1:
        return segments
    out = []
    for s in segments:
        conc = None
        if s.concurrency:
            conc = s.concurrency // n + (1 if g < s.concurrency % n else 0)
        out.append(dataclasses.replace(s, items=_share(s.items, g, n), concurrency=conc))
    return out


def _share(items, g: int, n: int):
    """Generator ``g`` of ``n``'s share of a segment's items (:func:`shard`)."""
    if not len(items) or getattr(items[0], "conversation", None) is None:
        return items[g::n]
    out, j = [], -1
    for k, it in enumerate(items):
        if starts_unit(items, k):
            j += 1  # the next conversation
        if j % n == g:
            out.append(it)
    return out


def build_levels(spec, items: list[Item] | None = None) -> list[Level]:
    """The load levels of ``spec`` with their items (``items``: the caller's, one level)."""
    return [Level(rate, conc, list(src)) for rate, conc, src in level_sources(spec, items)]


def level_sources(spec, items: list[Item] | None = None) -> list[tuple]:
    """``(rate, concurrency, items)`` of each load level of ``spec``: ``items`` is the caller's
    list (one level), else a :class:`~abtui.workload.build.LevelItems` that makes the level's
    items as it is iterated, its length known and the spec's errors raised before."""
    from abtui.workload.build import LevelItems

    ld = spec.load
    if items is not None:
        return [(ld.rate, ld.concurrency, items)]
    if ld.sweep_rate:
        pairs = [(r, ld.concurrency) for r in ld.sweep_rate]
    elif ld.sweep_concurrency:
        pairs = [(None, c) for c in ld.sweep_concurrency]
    else:
        return [(ld.rate, ld.concurrency, LevelItems(spec, ld.rate))]
    out, first = [], 0
    for k, (rate, conc) in enumerate(pairs):
        src = LevelItems(spec, rate, first_index=first, seed_offset=k)
        out.append((rate, conc, src))
        first += len(src)
    return out


class Conductor:
    """The main process's side: starts segment k+1 when every live arm finished segment k,
    and keeps the segments record (``meta.segments``: who played what, from when to when)."""

    def __init__(self, segments: list[Segment], arm_names: list[str], writer, start_delay_s: float):
        self.segments = segments
        self.names = arm_names
        self.writer = writer
        self.delay_ns = int(start_delay_s * 1e9)
        self.k = -1
        self.finished: set[int] = set()
        self.log: list[dict] = []
        self.shape = Shape.of_plan(segments)

    def position(self) -> Position | None:
        """The segment being played (or stopped in): which run, level, block, whose turn. None
        before the first, after the last, and in a plain session (one run, one level, parallel)."""
        if not 0 <= self.k < len(self.segments) or not self.log:
            return None
        return self.shape.position(self.log[-1])

    @property
    def started(self) -> bool:
        return self.k >= 0

    def on_segment_done(self, arm: int, k: int) -> None:
        if k == self.k:
            self.finished.add(arm)

    def due(self, ready: set[int], done: set[int], n: int) -> bool:
        """Whether the next segment should start now."""
        if self.k >= len(self.segments):
            return False
        if self.k < 0:
            return len(ready | done) == n
        return len(self.finished | done) == n

    def start_next(self, pipes, ready: set[int], done: set[int], now_ns: int) -> None:
        self._close_current(now_ns)
        self.k += 1
        self.finished = set()
        if self.k >= len(self.segments):
            return
        t0 = now_ns + self.delay_ns
        for i, pe in enumerate(pipes):
            if i in ready and i not in done:
                pe.send(t0)
        entry = {"segment": self.k, **self.segments[self.k].describe(self.names), "t0_ns": t0}
        self.log.append(entry)
        self.writer.write_meta(segments=self.log)
        if self.k == 0:
            self.writer.event("start", f"t0={t0}")
        self.writer.event(
            "segment",
            f"segment {self.k} run {entry['run']} level "
            f"{entry['level']} block {entry['block']} arms {','.join(entry['arms'])}",
        )

    def _close_current(self, now_ns: int) -> None:
        if self.log and "end_ns" not in self.log[-1]:
            self.log[-1]["end_ns"] = now_ns
            self.writer.write_meta(segments=self.log)

    def close(self, now_ns: int) -> None:
        self._close_current(now_ns)


# ------------------------------------------------------------------ where the schedule is


def block_count(n_items: int, blocks: int) -> int:
    """How many (non-empty) blocks ``alternate`` cuts a level of ``n_items`` items into: as
    :func:`plan_segments` cuts it (``blocks`` at most, fewer when the items run out)."""
    if n_items <= 0:
        return 0
    size = -(-n_items // max(1, min(blocks, n_items)))
    return -(-n_items // size)


def _short(name: str, n: int = 12) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


@dataclass(frozen=True)
class Position:
    """Where a session's schedule is: run ``run`` of ``runs``, level ``level`` of ``levels``
    (its rate or concurrency), block ``block`` of ``blocks`` and whose turn it is (``turn``:
    ``alternate`` only, else None: every arm plays at once). Counted from 0; labels count from 1."""

    run: int
    runs: int
    level: int
    levels: int
    block: int
    blocks: int
    rate: float | None = None
    concurrency: int | None = None
    turn: str | None = None

    def label(self, squeeze: int = 0) -> str:
        """Where the schedule is, saying only what varies in the session: ``run 2/3 · level 1/2
        · 16 req/s · block 3/4 · fp8's turn``; ``squeeze`` 1: ``run 2/3 · lvl 1/2 16 req/s ·
        blk 3/4 fp8``; 2: ``run 2/3 · lvl 1/2 · blk 3/4 fp8`` (no load, the arm's name cut)."""
        parts = []
        if self.runs > 1:
            parts.append(f"run {self.run + 1}/{self.runs}")
        if self.levels > 1:
            lv = f"{'lvl' if squeeze else 'level'} {self.level + 1}/{self.levels}"
            if self.rate is not None:
                load = f"{self.rate:g} req/s"
            elif self.concurrency is not None:
                load = f"{'conc' if squeeze else 'concurrency'} {self.concurrency}"
            else:
                load = ""
            if not load or squeeze >= 2:
                parts.append(lv)
            else:
                parts.append(f"{lv} {load}" if squeeze else f"{lv} · {load}")
        if self.turn is not None:
            blk = f"{'blk' if squeeze else 'block'} {self.block + 1}/{self.blocks}"
            if squeeze:
                parts.append(f"{blk} {_short(self.turn, 12 if squeeze == 1 else 8)}")
            else:
                parts.append(f"{blk} · {self.turn}'s turn")
        return " · ".join(parts)


@dataclass(frozen=True)
class Shape:
    """How many runs, levels (with their loads) and blocks per level a session's schedule has:
    what a segment's place in it is counted against (:meth:`position`)."""

    runs: int
    levels: tuple[tuple[float | None, int | None], ...]  # (rate, concurrency) of each level
    blocks: tuple[int, ...]  # per level; 1 each unless alternate
    alternate: bool

    @property
    def plain(self) -> bool:
        """One run of one level, every arm at once: no place worth saying."""
        return self.runs <= 1 and len(self.levels) <= 1 and not self.alternate

    @classmethod
    def of_plan(cls, segments: list[Segment]) -> Shape:
        levels: dict[int, tuple] = {}
        blocks: dict[int, int] = {}
        for s in segments:
            levels.setdefault(s.level, (s.rate, s.concurrency))
            blocks[s.level] = max(blocks.get(s.level, 0), s.block + 1)
        n = max(levels, default=-1) + 1
        return cls(
            runs=max((s.run for s in segments), default=0) + 1,
            levels=tuple(levels.get(k, (None, None)) for k in range(n)),
            blocks=tuple(blocks.get(k, 1) for k in range(n)),
            alternate=any(s.arms is not None for s in segments),
        )

    @classmethod
    def of_meta(cls, meta: dict) -> Shape:
        """From a session file's meta (``levels``, ``mode``, ``spec.load``), counted as
        :func:`plan_segments` plans, and never less than the stored ``segments`` log shows (an
        interrupted session's log is cut short; a hand-edited file may say anything: what does
        not parse counts as absent)."""
        spec = meta.get("spec")
        load = spec.get("load") if isinstance(spec, dict) else None
        load = load if isinstance(load, dict) else {}
        stored = meta.get("levels")
        alternate = (meta.get("mode") or load.get("schedule")) == "alternate"
        want = load.get("blocks")
        want = want if isinstance(want, int) and want > 0 else 4
        levels, blocks = [], []
        for lv in stored if isinstance(stored, list) else []:
            if not isinstance(lv, dict):
                continue
            rate, conc, n = lv.get("rate"), lv.get("concurrency"), lv.get("requests")
            levels.append(
                (
                    float(rate) if isinstance(rate, int | float) else None,
                    conc if isinstance(conc, int) else None,
                )
            )
            cut = lv.get("blocks")  # as the run cut them (conversations: at their starts)
            if not (isinstance(cut, int) and cut >= 0):
                cut = block_count(n, want) if alternate and isinstance(n, int) else 1
            blocks.append(cut)
        runs = load.get("runs") if isinstance(load.get("runs"), int) else 1
        for e in log_entries(meta):
            runs = max(runs, e["run"] + 1)
            while len(levels) <= e["level"]:
                levels.append((e.get("rate"), e.get("concurrency")))
                blocks.append(1)
            blocks[e["level"]] = max(blocks[e["level"]], e["block"] + 1)
        return cls(max(1, runs), tuple(levels), tuple(blocks), alternate)

    def position(self, entry: dict) -> Position | None:
        """The place of the segment ``entry`` (a ``meta.segments`` record: run, level, block,
        arms, rate, concurrency); None for a plain session."""
        if self.plain:
            return None
        lv = entry["level"]
        rate, conc = entry.get("rate"), entry.get("concurrency")
        arms = entry.get("arms") or []
        return Position(
            run=entry["run"],
            runs=self.runs,
            level=lv,
            levels=len(self.levels),
            block=entry["block"],
            blocks=self.blocks[lv] if lv < len(self.blocks) else entry["block"] + 1,
            rate=float(rate) if isinstance(rate, int | float) else None,
            concurrency=conc if isinstance(conc, int) else None,
            turn=", ".join(str(a) for a in arms) if self.alternate else None,
        )


def log_entries(meta: dict) -> list[dict]:
    """The well-formed records of a session's ``meta.segments`` log (started segments, in
    order): integer ``run``, ``level``, ``block`` ≥ 0 and ``t0_ns``; the rest are left out."""
    out = []
    log = meta.get("segments")
    for e in log if isinstance(log, list) else []:
        if isinstance(e, dict) and all(
            isinstance(e.get(k), int) and not isinstance(e.get(k), bool) and e[k] >= 0
            for k in ("run", "level", "block", "t0_ns")
        ):
            out.append(e)
    return out
