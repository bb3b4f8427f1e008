"""The session's schedule, made from its spec twice: light in the main process, whole in each
load generator.

Built whole in the main process, written to the file and pickled into each generator's start
arguments, a 100,000-request run's items would hold ~300 MB before a request was sent, most of
it prompts the main process never reads again (docs/reliability.md). Instead:

- The main process **streams** the measured items into the session file a batch at a time
  (:func:`session_schedule` with a ``sink``) and keeps of each only what the schedule needs
  (:class:`~abtui.workload.segments.Offsets`: each item's index and offset, 16 bytes). Its
  memory does not grow with the prompts' length, and by 16 bytes a request with their count.
- Each local generator **rebuilds** the same items from the same spec and seed
  (:class:`Recipe`, resolved by :func:`rebuild` in the generator process before it starts) and
  checks them against the main process's fingerprint of every item's content: a workload file
  changed between the two reads, or anything else that would make the generators send other
  requests than the session file records, stops the run with a message instead of measuring it.
- Where a generator cannot rebuild — the caller's own items (``abtui demo``), Ray actors on other
  machines (whose disks may not hold the workload file) — the main process builds the whole
  schedule (``light=False``) and ships it in the plans, as before.
- A small workload (at most :data:`SHIP_ITEMS` items and :data:`SHIP_TEXT` characters of prompt
  text) is shipped whole too: the main process keeps it as it streams it (``whole_up_to``), and
  a generator then starts without importing numpy and the spec's workload builders (~0.1 s of
  CPU per process on the 2-core dev VM) and without making the items again.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import random
from array import array
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from abtui.client.items import Item, synthetic_prompt
from abtui.spec import Spec
from abtui.workload.segments import (
    Level,
    Offsets,
    Segment,
    level_sources,
    plan_segments,
    shard,
)

BATCH = 4096  # items written to the session file at once while streaming ...
BATCH_TEXT = 8 << 20  # ... or fewer, when their prompts and messages hold this many characters
SHIP_ITEMS = 10_000  # a workload of at most this many items ...
SHIP_TEXT = 2 << 20  # ... and this many characters of text is shipped whole, not rebuilt


@dataclass
class Schedule:
    """Every level with its items (light or whole), the warm-up items, and the fingerprint."""

    levels: list[Level]
    warm: list[Item]
    fingerprint: str
    whole: list[Level] | None = None  # light, and small enough: the levels' items kept whole

    @property
    def n(self) -> int:
        return sum(len(lv.items) for lv in self.levels)


@dataclass
class Recipe:
    """What a generator needs to rebuild its share of the schedule: the spec as the session
    started from it (before the main process changed anything in it), which share (every
    ``n``-th item from the ``g``-th) and the fingerprint its items must have."""

    spec: Spec
    n_arms: int
    g: int
    n: int
    fingerprint: str


def warmup_items(spec: Spec, first_index: int) -> list[Item]:
    """The warm-up items (distinct prompts, never measured), indexed after the measured ones."""
    w, ld = spec.workload, spec.load
    rng = random.Random(w.seed + 1_000_003)
    if w.task is not None:  # the workload's own kind of prompt, so the server warms to it
        from abtui.workload.tasks import task_prompt

        def prompt(k: int) -> str:
            return task_prompt(w.task, w.seed + 1_000_003, f"warmup{k}", w.input_tokens)
    else:

        def prompt(k: int) -> str:
            return f"warmup {k} " + synthetic_prompt(max(1, w.input_tokens - 2), rng)

    items = [
        Item(
            index=first_index + k,
            id=f"warmup{k}",
            prompt=prompt(k),
            max_tokens=w.output_tokens,
            n_input=w.input_tokens,
            tags=["warmup"],
        )
        for k in range(ld.warmup)
    ]
    if w.images_per_request and not w.file:  # the server's vision path warms too
        from abtui.client.images import made_images, parse_sizes

        for it in items:
            it.images = made_images(
                w.seed + 1_000_003, it.index, w.images_per_request, parse_sizes(w.image_size)
            )
    return items


def _text_len(it: Item) -> int:
    n = len(it.prompt or "")
    for m in it.messages or ():
        c = m.get("content") if isinstance(m, dict) else None
        n += len(c) if isinstance(c, str) else 64
    return n


def _digest(h, it: Item) -> None:
    h.update(
        repr(
            (
                it.index,
                it.id,
                it.arrival_s,
                it.prompt,
                it.messages,
                it.max_tokens,
                it.n_input,
                it.expected,
                it.suite,
                it.tags,
                it.conversation,
                it.turn,
                it.think_s,
                it.turn_messages,
            )
            + ((it.images,) if it.images else ())
        ).encode()
    )


def open_loop(spec: Spec) -> bool:
    return spec.load.rate is not None or spec.load.arrival == "replay"


def session_schedule(
    spec: Spec,
    sources: list[tuple],
    *,
    sink: Callable[[list[Item], bool], None] | None = None,
    light: bool = False,
    whole_up_to: tuple[int, int] | None = None,
) -> Schedule:
    """The schedule of ``spec`` whose levels are ``sources``
    (:func:`~abtui.workload.segments.level_sources`): each item made once, in order,
    fingerprinted, handed to ``sink(batch, warmup)`` in batches of :data:`BATCH` (measured
    items, then the warm-up items), and kept whole, or ``light``: as their indices and offsets
    (:class:`~abtui.workload.segments.Offsets`), which is all the main process reads of them.
    ``whole_up_to=(items, characters)`` with ``light``: the items are kept whole as well while
    there are no more than that (``Schedule.whole``; None once there are more)."""
    warm = warmup_items(spec, sum(len(src) for _, _, src in sources))
    h = hashlib.blake2b(digest_size=16)
    levels = []
    whole: list[Level] | None = [] if light and whole_up_to else None
    room_items, room_text = whole_up_to or (0, 0)
    for rate, conc, src in sources:
        kept: list[Item] = []
        small: list[Item] | None = [] if whole is not None else None
        index, arrival, starts = array("q"), array("d"), array("b")
        batch: list[Item] = []
        text = 0
        prev: str | None = None  # the previous item's conversation
        for it in src:
            _digest(h, it)
            if light:
                index.append(it.index)
                arrival.append(it.arrival_s)
                # where a conversation starts (segments.starts_unit): blocks cut only there
                conv = it.conversation
                starts.append(conv is None or len(index) == 1 or it.turn == 0 or conv != prev)
                prev = conv
                if small is not None:
                    room_items -= 1
                    room_text -= _text_len(it)
                    small.append(it)
                    if room_items < 0 or room_text < 0:  # too big to keep: rebuilt instead
                        small = whole = None
            else:
                kept.append(it)
            if sink is not None:
                batch.append(it)
                text += _text_len(it)
                if len(batch) >= BATCH or text >= BATCH_TEXT:
                    sink(batch, False)
                    batch, text = [], 0
        if batch:
            sink(batch, False)
        if light:
            first = np.frombuffer(starts, np.int8).astype(bool)
            kept = Offsets(
                np.frombuffer(index, np.int64),
                np.frombuffer(arrival, np.float64),
                None if first.all() else first,
            )
        levels.append(Level(rate, conc, kept))
        if whole is not None:
            whole.append(Level(rate, conc, small))
    for it in warm:
        _digest(h, it)
    if sink is not None and warm:
        sink(warm, True)
    return Schedule(levels, warm, h.hexdigest(), whole)


def segments_of(spec: Spec, levels: list[Level], n_arms: int) -> list[Segment]:
    """The segments the levels are played in, as the spec's load section says."""
    ld = spec.load
    return plan_segments(
        levels,
        runs=ld.runs,
        schedule=ld.schedule,
        blocks=ld.blocks,
        n_arms=n_arms,
        open_loop=open_loop(spec),
        duration_s=ld.duration_s,
    )


def recipe_spec(spec: Spec) -> Spec:
    """A copy of ``spec`` as it is now, for :class:`Recipe` (the session changes some fields)."""
    return copy.deepcopy(spec)


class ScheduleMismatch(RuntimeError):
    """A generator's rebuilt items are not those the session file records."""


def rebuild(plan):
    """In a generator process: ``plan`` (an :class:`~abtui.runner.generator.ArmPlan` with a
    ``recipe``) with its segments and warm-up items made from the recipe's spec, checked
    against the fingerprint of what the main process recorded."""
    r: Recipe = plan.recipe
    sch = session_schedule(r.spec, level_sources(r.spec))
    if sch.fingerprint != r.fingerprint:
        raise ScheduleMismatch(
            "the workload this generator rebuilt from the spec is not the one the session file "
            "records (did the workload file change while the run started?); nothing was sent"
        )
    segs = shard(segments_of(r.spec, sch.levels, r.n_arms), r.g, r.n)
    return dataclasses.replace(plan, items=[], warmup_items=sch.warm, segments=segs, recipe=None)
