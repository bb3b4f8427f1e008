"""The run's workload from its spec: a file or a synthetic shape, and its arrival schedule.

One function, :func:`build_items`, used by the session for every arm and every segment, so the
same spec and seed give the same items and offsets for every arm and every rerun.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from functools import lru_cache

import numpy as np

from abtui.client.items import Item
from abtui.errors import SpecError, WorkloadError
from abtui.workload.arrivals import arrival_offsets


def schedule(n: int, rate: float | None, arrival: str, burstiness: float, seed: int) -> list[float]:
    """Offsets of ``n`` requests (closed loop / no rate: all 0)."""
    if rate is None:
        return [0.0] * n
    if arrival == "gamma":
        from abtui.workload.synthetic import gamma_offsets

        return gamma_offsets(n, rate, burstiness, np.random.default_rng(seed))
    return arrival_offsets(n, rate, arrival, seed)


def file_items(spec) -> tuple[list[Item], str]:
    """The items of ``workload.file`` (the first ``requests`` of them) and a line saying so.
    The caller must not change them: the last read is reused while the file is unchanged."""
    w = spec.workload
    try:
        st = os.stat(w.file)
    except OSError as e:
        raise WorkloadError(f"cannot read workload file {w.file}: {e.strerror or e}") from None
    return _read_file(
        w.file, st.st_size, st.st_mtime_ns, w.skip_bad, w.output_tokens, w.seed, w.requests
    )


def conversation_items(spec) -> tuple[list[Item], int]:
    """The turns of ``workload.conversations`` as items (the first ``requests`` of them: the
    last conversation may be cut short) and how many conversations they belong to. The caller
    must not change them (cached as :func:`file_items`)."""
    w = spec.workload
    try:
        st = os.stat(w.conversations)
    except OSError as e:
        raise WorkloadError(
            f"cannot read conversation file {w.conversations}: {e.strerror or e}"
        ) from None
    return _read_conversations(
        w.conversations, st.st_size, st.st_mtime_ns, w.skip_bad, w.seed, w.requests
    )


@lru_cache(maxsize=1)
def _read_conversations(path, _size, _mtime, skip_bad, seed, limit) -> tuple[list[Item], int]:
    from abtui.workload.conversations import read_conversations, turn_items

    convs, _ = read_conversations(path, skip_bad=skip_bad)
    for c in convs:
        c.seed = seed
    items = turn_items(convs, seed)
    if limit is not None:
        items = items[:limit]
    return items, len({it.conversation for it in items})


@lru_cache(maxsize=1)  # a run builds its items more than once (warm-up, levels): one read
def _read_file(path, _size, _mtime, skip_bad, max_tokens, seed, limit) -> tuple[list[Item], str]:
    from abtui.workload.jsonl import read_workload

    # streamed: with a request count only that many items are held, whatever the file's size
    wl = read_workload(
        path, skip_bad=skip_bad, default_max_tokens=max_tokens, seed=seed, limit=limit
    )
    return wl.items, f"{path}: {wl.stats.describe(len(wl.items))}"


def build_items(
    spec, rate: float | None, *, first_index: int = 0, seed_offset: int = 0
) -> list[Item]:
    """The measured items of one segment at ``rate`` (None: closed loop).

    A file's items keep their text; their offsets are the file's (``arrival = "replay"``, divided
    by ``speedup``) or drawn from the arrival process at ``rate``. A synthetic workload draws its
    lengths from ``input_dist`` / ``output_dist`` (default: fixed lengths) with prefix groups."""
    return list(LevelItems(spec, rate, first_index=first_index, seed_offset=seed_offset))


class LevelItems:
    """The items :func:`build_items` returns, made one at a time as they are iterated: their
    number (``len``) is known, and any error in the spec or the file raised, before the first is
    made. A session streams them into its file this way, never holding every prompt at once;
    iterating twice makes the same items again."""

    def __init__(
        self, spec, rate: float | None, *, first_index: int = 0, seed_offset: int = 0
    ) -> None:
        from abtui.workload.synthetic import ShapedItems, parse_length_dist

        w, ld = spec.workload, spec.load
        seed = w.seed + seed_offset
        if w.conversations:
            base, _ = conversation_items(spec)
            offsets = _conversation_offsets(base, rate, ld, seed)
            self._base, self._first = base, first_index
        elif w.file:
            base, _ = file_items(spec)
            if any(it.images for it in base):
                check_chat_images(spec, f"workload file {w.file}")
            if ld.arrival == "replay":
                offsets = [it.arrival_s / ld.speedup for it in base]
            else:
                offsets = schedule(len(base), rate, ld.arrival, ld.burstiness, seed)
            self._base, self._first = base, first_index
        else:
            if ld.arrival == "replay":
                raise SpecError(
                    "load.arrival = 'replay' needs a workload file", "give --workload FILE"
                )
            n = w.requests or 200
            if w.requests is None and ld.duration_s is not None and rate is not None:
                # enough for the window (Poisson/gamma counts vary): the rest is cut by the duration
                n = int(rate * ld.duration_s * (1.5 + ld.burstiness)) + 20
            offsets = schedule(n, rate, ld.arrival, ld.burstiness, seed)
            din = parse_length_dist(
                w.input_dist or f"fixed:{w.input_tokens}", "workload.input_dist"
            )
            dout = parse_length_dist(
                w.output_dist or f"fixed:{w.output_tokens}", "workload.output_dist", output=True
            )
            self._base = None
            self._shaped = ShapedItems(
                n,
                offsets,
                din,
                dout,
                seed,
                w.prefix_groups,
                w.prefix_tokens,
                first_index=first_index,
                task=w.task,
            )
        self._offsets = offsets
        self._images = None  # made images per item: (seed, count, sizes)
        if w.images_per_request and not w.file:
            from abtui.client.images import parse_sizes

            self._images = (seed, w.images_per_request, parse_sizes(w.image_size))
        self._keep: range | list[int] = range(len(offsets))
        dur = ld.duration_s
        if dur is not None and (rate is not None or ld.arrival == "replay"):
            # open loop: what falls in the window (a file's offsets need not be sorted)
            self._keep = [k for k, t in enumerate(offsets) if t < dur]
            if not self._keep:
                raise SpecError(f"load.duration {dur:g} s holds no request of the schedule")

    def __len__(self) -> int:
        return len(self._keep)

    def __iter__(self) -> Iterator[Item]:
        for k in self._keep:
            yield self._item(k)

    def _item(self, k: int) -> Item:
        if self._base is None:
            it = self._shaped.item(k)
            if self._images is not None:
                from abtui.client.images import made_images

                seed, count, sizes = self._images
                it.images = made_images(seed, it.index, count, sizes)
            return it
        it = self._base[k]
        return dataclasses.replace(
            it, index=self._first + k, arrival_s=self._offsets[k], tags=list(it.tags)
        )


def _conversation_offsets(turns: list[Item], rate: float | None, ld, seed: int) -> list[float]:
    """Each turn's offset: its conversation's arrival, from the file (``replay``, divided by
    ``speedup``) or drawn from the arrival process at ``rate``, one arrival per conversation."""
    starts: list[int] = [k for k, it in enumerate(turns) if k == 0 or it.turn == 0]
    if ld.arrival == "replay":
        firsts = [turns[k].arrival_s / ld.speedup for k in starts]
    else:
        firsts = schedule(len(starts), rate, ld.arrival, ld.burstiness, seed)
    out: list[float] = []
    for j, k in enumerate(starts):
        end = starts[j + 1] if j + 1 < len(starts) else len(turns)
        out += [firsts[j]] * (end - k)
    return out


def check_chat_images(spec, source: str) -> None:
    """Images go in chat messages: every arm must use the chat API."""
    apis = {a.api or spec.request.api for a in spec.arms} or {spec.request.api}
    if apis != {"chat"}:
        raise SpecError(
            f"{source}: images are sent in chat messages; the API is "
            f"{' / '.join(sorted(map(str, apis)))}",
            "give --api chat",
        )
