"""Quality items sent *during* the load test (``quality.mode = "interleaved"``): quality under
load (KV-cache pressure, preemption, batching with the measured requests).

The items go from a thread of the main process, on its own asyncio loop (the load generators
run in their own processes; the UI never shares this loop), through the load test's client, greedy
as in ``separate`` mode (:mod:`abtui.quality.run`). Send order: a permutation of the items
seeded by ``quality.seed`` (so long and short haystacks spread over the load), item ``j`` of it
at ``t0 + j × span / n`` — ``t0`` the first segment's start, ``span`` the measured schedule's
planned length (open loop: each segment's last arrival; closed loop: ``load.duration``, else 0,
and every item is sent at ``t0``) — to every arm at the same instant, at most
``quality.concurrency`` in flight per arm (an item that waits for a slot is sent late; the
detail's ``sent_s`` says when it went). Items not yet sent when the load ends are sent then, at
once, so both modes store the same items; ``meta.quality_interleaved`` says how many went
during the load.

Exclusion from the load figures: these requests are never rows of the ``requests`` table (their
outputs go to the ``quality`` table only), and every latency, throughput, SLO and goodput figure
is computed from ``requests``; so they cannot count in them. What they do change is the load
the server sees — that is the point — so the server's own telemetry includes them.

Rows are collected as they are answered and stored by the main thread (:meth:`store`, called
from the session loop: one DuckDB connection, one thread). On a stop (Ctrl-C, a failed
generator) in-flight requests are cancelled and dropped; rows already answered are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import random
import threading
import time
from collections.abc import Callable

from abtui.client.target import Target
from abtui.quality.items import QualityItem

_now = time.perf_counter_ns
POLL_S = 0.05  # how often the sender checks for a stop


def load_span_s(segments) -> float:
    """The measured schedule's planned length: open loop, each segment's last arrival; closed
    loop, its duration when bounded (else nothing is known: 0)."""
    total = 0.0
    for s in segments:
        if s.mode == "open":
            total += max((it.arrival_s for it in s.items), default=0.0)
        elif s.duration_s:
            total += s.duration_s
    return total


def schedule(n: int, span_s: float, seed: int) -> list[tuple[int, float]]:
    """``(item index, offset from t0 in s)`` in send order: a seeded permutation, evenly
    spaced over ``span_s``."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return [(k, span_s * j / n) for j, k in enumerate(order)]


class Interleaved:
    """The sender thread and its answered rows (the session drives it: start, store, finish)."""

    def __init__(
        self,
        spec,
        targets: list[Target],
        items: list[QualityItem],
        segments,
        stop: Callable[[], bool],
    ) -> None:
        self.spec = spec
        self.targets = targets
        self.items = items
        self.span_s = load_span_s(segments)
        self.plan = schedule(len(items), self.span_s, spec.quality.seed)
        self.stop = stop
        self.t0_ns: int | None = None
        self.rows: list[dict] = []  # stored so far
        self._answered: queue.SimpleQueue = queue.SimpleQueue()
        self._halt = threading.Event()
        self._load_over = threading.Event()  # the rest are sent at once
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def _stopped(self) -> bool:
        return self._halt.is_set() or self.stop()

    def start(self, t0_ns: int) -> None:
        """Start sending, item ``j`` at ``t0_ns`` + its offset."""
        self.t0_ns = t0_ns
        self._thread = threading.Thread(target=self._run, name="abtui-quality", daemon=True)
        self._thread.start()

    def store(self, writer) -> int:
        """Write the rows answered since the last call (main thread); how many."""
        new = []
        while True:
            try:
                new.append(self._answered.get_nowait())
            except queue.Empty:
                break
        if new:
            writer.write_quality(new)
            self.rows += new
        return len(new)

    def finish(self, writer, load_end_ns: int | None) -> None:
        """After the load test: wait for the rest (unless stopped), store, then perplexity,
        logprobs and meta as in ``separate`` mode."""
        self._load_over.set()
        if self._thread is None:  # the load test never started: nothing was sent
            writer.write_meta(quality_mode="interleaved")
            writer.event("quality", "interleaved quality items not sent: the load never started")
            return
        while self._thread.is_alive():
            self._thread.join(POLL_S)
            self.store(writer)
        self.store(writer)
        if self.error:
            writer.event("quality", f"interleaved quality sender failed: {self.error}")
        during = None
        if self.t0_ns is not None and load_end_ns is not None:
            end_s = (load_end_ns - self.t0_ns) / 1e9
            sent = [r["detail"]["sent_s"] for r in self.rows]
            during = sum(1 for x in sent if x is not None and x < end_s)
        info = {
            "t0_ns": self.t0_ns,
            "span_s": self.span_s,
            "items": len(self.items),
            "rows": len(self.rows),
            "sent_during_load": during,
            "load_end_s": None if during is None else (load_end_ns - self.t0_ns) / 1e9,
        }
        from abtui.quality import run as qrun  # with its scorers and clients: only when used

        qrun.finish(
            self.spec,
            self.targets,
            writer,
            self.items,
            self.rows,
            self._stopped,
            quality_interleaved=info,
        )

    def close(self) -> None:
        """Stop sending (cancels in-flight requests) and wait for the thread."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join(5)

    # -- the sender thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as e:  # noqa: BLE001 (reported in the session, never silent)
            self.error = f"{type(e).__name__}: {e}"

    async def _main(self) -> None:
        from abtui.quality import run as qrun  # with its scorers and clients: only when used

        q = self.spec.quality
        greedy = [qrun.greedy_target(t, q.seed) for t in self.targets]
        tasks: set[asyncio.Task] = set()
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(qrun.client_for(t, q.concurrency)) for t in greedy
            ]
            sems = [asyncio.Semaphore(max(1, q.concurrency)) for _ in greedy]

            async def one(arm: int, k: int, offset_s: float) -> None:
                qi = self.items[k]
                async with sems[arm]:
                    if self._stopped():
                        return
                    try:
                        rec = await qrun.send(clients[arm], greedy[arm], arm, k, qi, q.max_tokens)
                    except asyncio.CancelledError:
                        return  # stopped: not an answer, not stored
                r = qrun.row(arm, k, qi, rec)
                r["detail"] |= {
                    "offset_s": round(offset_s, 4),
                    "sent_s": round((rec.dispatched_ns - self.t0_ns) / 1e9, 4)
                    if rec.dispatched_ns
                    else None,
                }
                self._answered.put(r)

            watcher = asyncio.create_task(self._watch(tasks))
            try:
                for k, offset_s in self.plan:
                    if not await self._sleep_until(self.t0_ns + int(offset_s * 1e9)):
                        break
                    for arm in range(len(greedy)):
                        t = asyncio.create_task(one(arm, k, offset_s))
                        tasks.add(t)
                        t.add_done_callback(tasks.discard)
                while tasks:
                    await asyncio.wait(set(tasks), timeout=POLL_S)
            finally:
                watcher.cancel()

    async def _watch(self, tasks: set[asyncio.Task]) -> None:
        """Cancel every in-flight request once a stop is asked for."""
        while not self._stopped():
            await asyncio.sleep(POLL_S)
        for t in list(tasks):
            t.cancel()

    async def _sleep_until(self, t_ns: int) -> bool:
        """Wait until ``t_ns``; False when stopped first."""
        while (left := t_ns - _now()) > 0 and not self._load_over.is_set():
            if self._stopped():
                return False
            await asyncio.sleep(min(left / 1e9, POLL_S))
        return not self._stopped()


def prepare(
    spec, targets: list[Target], segments, writer, obs, stop: Callable[[], bool]
) -> Interleaved | None:
    """The interleaved sender of ``spec``'s quality items; None unless ``quality.mode`` is
    ``interleaved`` and there are items to send."""
    if not spec.quality.enabled or spec.quality.mode != "interleaved":
        return None
    from abtui.quality import run as qrun  # with its scorers and clients: only when used

    items = qrun.session_items(spec, targets, writer, obs)
    return Interleaved(spec, targets, items, segments, stop) if items else None
