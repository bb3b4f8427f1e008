"""The load generator: one process per arm, with its own asyncio loop.

It never shares a loop (or a process) with the UI or the session writer, so rendering and
DuckDB writes cannot inflate what it measures. It speaks to the main process through two
channels only: a result queue of :mod:`abtui.runner.messages` (``Ready``, ``Batch`` of finished
records, ``SegmentDone``, ``Done``, ``Fatal``) and a pipe on which it receives the common start
time ``t0`` of each segment.

Connections are opened before each ``t0`` (on the fast client, the default — not on
the httpx path, :mod:`abtui.client.preconnect` says why): after the warm-up and after each
segment, the pool is filled to what the next segment needs (:mod:`abtui.runner.pool`), kept
filled while the generator waits for its ``t0`` (a server may close idle connections: llama-server
after 5 s), and topped up once more between the ``t0`` arriving and ``t0`` itself. So the first
wave of a segment goes out on open connections; a request that still has to open one records
the time as its connect phase (``RequestRecord.connect_ns``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sys
import time
from dataclasses import dataclass

from abtui.client import preconnect
from abtui.client.fast import FastClient, fast_stream_request, pool_key
from abtui.client.items import Item
from abtui.client.records import CANCELLED, OK, RequestRecord
from abtui.client.redact import Scrubber, redact, secrets_of
from abtui.client.target import Target, build_body
from abtui.runner.messages import (
    Batch,
    Connections,
    Done,
    Fatal,
    GeneratorStats,
    Ready,
    SegmentDone,
)
from abtui.runner.pool import Pace, connections_needed, open_file_limit
from abtui.runner.turns import conversations_of, session_target, skipped

_now = time.perf_counter_ns
FLUSH_INTERVAL_S = 0.05  # how often finished records are shipped to the main process
SPIN_NS = 2_000_000  # the last 2 ms before a scheduled send are waited by yielding, not a timer
KEEP_POOL_S = 0.25  # while waiting for a t0: how often the pool is checked and refilled


@dataclass
class ArmPlan:
    """Everything one generator process needs (pickled to it at start)."""

    arm: int
    target: Target
    items: list[Item]  # measured items, in order
    warmup_items: list[Item]
    mode: str  # "open" | "closed"
    concurrency: int | None  # closed loop: in flight; open loop: cap (None = no cap)
    store_text: bool = True
    http: str = "fast"  # "fast" (asyncio protocol hot path) | "httpx"
    cpu: int | None = None  # pin this process to one core (benchmarks)
    segments: list | None = None  # Segments played in turn (None: one of items/mode/concurrency)
    worker: int | None = None  # this process's id in messages (several per arm); None: ``arm``
    preconnect: bool = True  # open each segment's connections before its t0 (benchmarks: off)
    # a schedule.Recipe: the generator makes its segments and warm-up items itself from the
    # spec (abtui.runner.schedule), instead of receiving them pickled (items, segments unused)
    recipe: object | None = None
    history: str = "recorded"  # a conversation's history: "recorded" | "own" (the arm's answers)
    session_header: str | None = None  # a conversation's turns carry its id in this header

    @property
    def wid(self) -> int:
        return self.arm if self.worker is None else self.worker


async def _sleep_until(t_ns: int) -> None:
    """Return at ``t_ns`` (never before). uvloop's timers have 1 ms resolution and may fire
    up to 1 ms early, so sleep to ``SPIN_NS`` before, then yield to the loop until the time
    (other requests' reads are served meanwhile)."""
    delay = t_ns - _now() - SPIN_NS
    if delay > 0:
        await asyncio.sleep(delay / 1e9)
    while _now() < t_ns:
        await asyncio.sleep(0)


def _die_with_parent() -> None:
    """Linux: get SIGTERM when the main process dies, so no generator outlives abtui."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def process_setup() -> None:
    """A generator process's first step: Ctrl-C reaches the whole process group, and the main
    process decides how to stop us; no generator outlives the main process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()


def preload() -> None:
    """Import what :func:`run_loop` will (a prestarted process, while it waits for its plan)."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        pass


def run_loop(coro) -> None:
    """Run ``coro`` on uvloop where it is installed (about 40% less CPU per streamed read
    than the stdlib loop, measured by scripts/bench_client.py), else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)


def generator_main(plan: ArmPlan, results, start_conn, stop_event) -> None:
    """Process entry point."""
    process_setup()
    if plan.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {plan.cpu})
    try:
        if plan.recipe is not None:
            from abtui.runner.schedule import rebuild

            plan = rebuild(plan)
        run_loop(_Generator(plan, results, start_conn, stop_event).run())
    except BaseException as e:  # report, never die silently
        results.put(Fatal(plan.wid, f"{type(e).__name__}: {e}"))
        raise SystemExit(1) from None


class _Generator:
    def __init__(self, plan: ArmPlan, results, start_conn, stop_event) -> None:
        self.plan = plan
        self.results = results
        self.start_conn = start_conn
        self.stop_event = stop_event
        self.outbox: list[RequestRecord] = []
        t = plan.target  # its key, URL user info and secret params: never stored
        self.scrubber = Scrubber(secrets_of(t.headers, [t.base_url], [t.params]))
        self.tasks: set[asyncio.Task] = set()
        self.conversations: set[asyncio.Task] = set()  # tasks each playing one conversation
        self.stopping = False
        self.lag_max_ns = 0
        self.in_flight_max = 0  # most requests in flight at once (measured ones)
        self.active = 0
        self.t_measure = None  # (perf_counter_ns, process_time) at the first segment's t0
        self.shipped = 0  # records handed to the result queue so far (health.Delivery)
        self.pace: Pace | None = None  # how long the warm-up's requests took (abtui.runner.pool)
        self.pool_cap: int | None = None  # what the server serves at once, once a fill showed it
        self.conn = Connections()
        self._keeper: asyncio.Task | None = None  # a fill while waiting for a t0

    # -- plumbing -------------------------------------------------------------
    def _stats(self, shipped: int | None = None, shipped_ns: int | None = None) -> GeneratorStats:
        cpu = time.process_time()
        measure_wall = measure_cpu = None
        if self.t_measure is not None:  # the generator's own CPU while measuring, and the wall
            measure_wall = max(0, _now() - self.t_measure[0]) / 1e9
            measure_cpu = cpu - self.t_measure[1]
        return GeneratorStats(
            cpu_s=cpu,
            in_flight=len(self.tasks),
            in_flight_max=self.in_flight_max,
            lag_max_s=self.lag_max_ns / 1e9,
            connections=dataclasses.replace(self.conn),  # a copy: the counters go on
            measure_wall_s=measure_wall,
            measure_cpu_s=measure_cpu,
            shipped=shipped,
            shipped_ns=shipped_ns,
        )

    def _ship(self) -> None:
        """Hand the finished records to the result queue. ``put`` never blocks: a feeder thread
        writes to the pipe, and while the main process does not read (stalled) the records wait
        in this process's memory (docs/reliability.md). Each batch says how many records were
        shipped so far and when, from which the main process measures how far behind it reads
        (:class:`abtui.runner.health.Delivery`)."""
        if self.outbox:
            self.shipped += len(self.outbox)
            stats = self._stats(self.shipped, _now())
            self.results.put(Batch(self.plan.wid, self.outbox, stats))
            self.outbox = []

    async def _pump(self) -> None:
        """Ship finished records and watch for the stop signal."""
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            self._ship()
            if not self.stopping and self.stop_event.is_set():
                self.stopping = True
                for t in [*self.conversations, *self.tasks]:
                    t.cancel()

    async def _one(
        self, rec: RequestRecord, item: Item, body: bytes, sem, target: Target | None, seen
    ) -> None:
        self.active += 1
        self.in_flight_max = max(self.in_flight_max, self.active)
        store_text = self.plan.store_text or seen is not None
        try:
            await self._send(
                self.client, target or self.plan.target, item, body, rec, store_text=store_text
            )
        except asyncio.CancelledError:
            pass  # rec is marked cancelled by the client
        finally:
            self.active -= 1
            if seen is not None:  # the answer, for the conversation's next turns
                seen(rec.text or "")
                if not self.plan.store_text:
                    rec.text = None
            if self.scrubber:  # a server may echo the key back: it is never stored
                redact(rec, self.scrubber)
            self.outbox.append(rec)
            if sem is not None:
                sem.release()

    def _spawn(
        self,
        rec: RequestRecord,
        item: Item,
        body: bytes,
        sem=None,
        target: Target | None = None,
        seen=None,
    ) -> asyncio.Task:
        """Send ``item`` (``target``: the arm's unless given); ``seen(text)``: called with the
        answer before the record is shipped."""
        task = asyncio.create_task(self._one(rec, item, body, sem, target, seen))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _drain(self) -> None:
        """Wait for the conversations under way and the requests in flight."""
        while self.conversations or self.tasks:
            await asyncio.gather(*self.conversations, *self.tasks, return_exceptions=True)

    # -- phases ---------------------------------------------------------------
    async def run(self) -> None:
        plan = self.plan
        n_conn = max(64, (plan.concurrency or 0) * 2, len(plan.warmup_items))
        if plan.mode == "open" and plan.concurrency is None:
            n_conn = max(n_conn, 4096)
        if plan.http == "httpx":  # imported only then: httpx is ~0.1 s of a process's start
            from abtui.client.stream import make_client, stream_request

            client, self._send = make_client(n_conn, plan.target.tls), stream_request
        else:
            client, self._send = FastClient(), fast_stream_request
        from abtui.workload.segments import Segment

        self.segs = plan.segments or [Segment(plan.items, plan.mode, plan.concurrency)]
        self.fd_limit = open_file_limit()
        async with client as self.client:
            pump = asyncio.create_task(self._pump())
            try:
                await self._warmup()
                self._ship()
                await self._fill_for(0)
                self.results.put(Ready(plan.wid, self._stats()))
                await self._segments()
                await self._drain()
            finally:
                pump.cancel()
                self._ship()
        self.results.put(Done(plan.wid, self._stats()))

    async def _warmup(self) -> None:
        plan = self.plan
        tasks, recs = [], []
        for item in plan.warmup_items:
            body = build_body(plan.target, item)
            rec = RequestRecord(arm=plan.arm, item=item.index, warmup=True, scheduled_ns=_now())
            recs.append(rec)
            tasks.append(self._spawn(rec, item, body))
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.pace = Pace.of_warmup(recs)

    # -- connections before t0 (abtui.client.preconnect) ----------------------------------
    def _need(self, k: int) -> int:
        """Connections to have open for the first segment from ``k`` on that this arm plays
        (none on the httpx path: a pool of idle connections slows httpcore down, see
        :mod:`abtui.client.preconnect`)."""
        if not self.plan.preconnect or self.plan.http == "httpx":
            return 0
        for seg in self.segs[k:]:
            n = connections_needed(seg, self.plan.arm, self.pace, self.fd_limit)
            if n:
                return n if self.pool_cap is None else min(n, self.pool_cap)
        return 0

    async def _fill(self, n: int, until_ns: int | None = None) -> None:
        if n <= 0 or self.stopping:
            return
        f = await preconnect.fill(self.client, self.plan.target, n, until_ns=until_ns)
        self.conn.add(n, f)
        if f.unanswered or f.closed:  # the server serves no more at once: keep to that
            self.pool_cap = f.ready  # (a failed connect may pass: it is tried again next time)

    async def _fill_for(self, k: int) -> None:
        await self._fill(self._need(k))

    def _keep_pool(self, k: int) -> None:
        """While waiting for segment ``k``'s t0: refill the pool aside if the server closed
        some of it (one fill at a time)."""
        if self._keeper is not None and not self._keeper.done():
            return
        n = self._need(k)
        if n and self.client.idle_open(pool_key(self.plan.target)) < n:
            self._keeper = asyncio.create_task(self._fill(n))

    async def _segments(self) -> None:
        """Play each segment on the ``t0`` the main process sends; report each one's end."""
        plan = self.plan
        segs = self.segs
        for k, seg in enumerate(segs):
            t0 = await self._wait_start(k)
            if t0 is None or self.stopping:
                return
            if self._keeper is not None:  # a refill under way: it may run up to t0
                await asyncio.wait([self._keeper], timeout=max(0.0, (t0 - _now()) / 1e9))
            await self._fill(self._need(k), until_ns=t0)  # what closed since: up to t0
            if self.t_measure is None:
                self.t_measure = (t0, time.process_time())
                self.in_flight_max = self.active  # warm-up does not count
            if seg.arms is None or plan.arm in seg.arms:
                self.seg = seg
                turns = bool(seg.items) and seg.items[0].conversation is not None
                if seg.mode == "open":
                    await (self._open_conversations(t0) if turns else self._open_loop(t0))
                else:
                    await (self._closed_conversations(t0) if turns else self._closed_loop(t0))
                await self._drain()  # drained before the segment counts as done
            self._ship()
            await self._fill_for(k + 1)  # the next one's connections, before reporting done
            self.results.put(SegmentDone(plan.wid, k, self._stats()))

    def _record(self, item: Item, sched: int) -> RequestRecord:
        seg = self.seg
        return RequestRecord(
            arm=self.plan.arm,
            item=item.index,
            run=seg.run,
            level=seg.level,
            block=seg.block,
            scheduled_ns=sched,
        )

    async def _wait_start(self, k: int = 0) -> int | None:
        conn = self.start_conn
        checked = time.monotonic()
        while not conn.poll():
            if self.stopping or self.stop_event.is_set():
                return None
            if time.monotonic() - checked >= KEEP_POOL_S:
                checked = time.monotonic()
                self._keep_pool(k)
            await asyncio.sleep(0.005)
        return conn.recv()

    async def _open_loop(self, t0: int) -> None:
        """Send item i at ``t0 + arrival_i`` (the same instants for every arm)."""
        plan, seg = self.plan, self.seg
        sem = asyncio.Semaphore(seg.concurrency) if seg.concurrency else None
        for item in seg.items:
            body = build_body(plan.target, item)  # built before its time comes
            sched = t0 + int(item.arrival_s * 1e9)
            await _sleep_until(sched)
            if self.stopping:
                return
            if sem is not None:
                await sem.acquire()  # capped: the wait shows up as schedule lag / TTFT_user
                if self.stopping:
                    return
            rec = self._record(item, sched)
            lag = _now() - sched
            if lag > self.lag_max_ns:
                self.lag_max_ns = lag
            self._spawn(rec, item, body, sem)

    async def _closed_loop(self, t0: int | None = None) -> None:
        """From ``t0`` (the same instant for every arm), keep ``concurrency`` requests in
        flight; each worker sends its next item at once."""
        plan, seg = self.plan, self.seg
        queue = iter(seg.items)
        end = t0 + int(seg.duration_s * 1e9) if seg.duration_s and t0 is not None else None
        if t0 is not None:
            await _sleep_until(t0)

        async def worker() -> None:
            for item in queue:
                if self.stopping or (end is not None and _now() >= end):
                    return
                body = build_body(plan.target, item)
                rec = self._record(item, _now())
                task = self._spawn(rec, item, body)
                try:
                    await asyncio.shield(task)
                except asyncio.CancelledError:
                    return

        await asyncio.gather(*(worker() for _ in range(seg.concurrency or 1)))

    # -- conversations (abtui.runner.turns) ------------------------------------------------
    def _start_conversation(self, turns: list[Item], sched: int, sem, end: int | None = None):
        task = asyncio.create_task(self._conversation(turns, sched, sem, end))
        self.conversations.add(task)
        task.add_done_callback(self.conversations.discard)
        return task

    async def _open_conversations(self, t0: int) -> None:
        """Start each conversation at ``t0 + arrival`` (the same instants for every arm); its
        turns follow one another on this arm (:meth:`_conversation`)."""
        seg = self.seg
        sem = asyncio.Semaphore(seg.concurrency) if seg.concurrency else None
        for turns in conversations_of(seg.items):
            sched = t0 + int(turns[0].arrival_s * 1e9)
            await _sleep_until(sched)
            if self.stopping:
                return
            self._start_conversation(turns, sched, sem)

    async def _closed_conversations(self, t0: int | None = None) -> None:
        """Keep ``concurrency`` conversations under way; a worker starts its next one when its
        last turn completed; from ``t0``, the same instant for every arm."""
        seg = self.seg
        queue = iter(conversations_of(seg.items))
        end = t0 + int(seg.duration_s * 1e9) if seg.duration_s and t0 is not None else None
        if t0 is not None:
            await _sleep_until(t0)

        async def worker() -> None:
            for turns in queue:
                if self.stopping or (end is not None and _now() >= end):
                    return
                try:
                    await asyncio.shield(self._start_conversation(turns, _now(), None, end))
                except asyncio.CancelledError:
                    return

        await asyncio.gather(*(worker() for _ in range(seg.concurrency or 1)))

    async def _conversation(self, turns: list[Item], sched: int, sem, end: int | None) -> None:
        """Send ``turns`` one after another: turn k at turn k − 1's completion plus its think
        time; after a failed turn the rest are recorded as skipped, not sent. Under ``history =
        "own"`` each turn carries this arm's earlier answers."""
        from abtui.workload.conversations import own_history_messages

        plan = self.plan
        target = session_target(plan.target, turns[0].conversation, plan.session_header)
        own = plan.history == "own"
        said: list[tuple[Item, str]] = []
        done = sched  # when the previous turn's answer completed
        try:
            for k, item in enumerate(turns):
                sent = item
                if own and k:
                    sent = dataclasses.replace(item, messages=own_history_messages(said, item))
                body = build_body(target, sent)  # built before its time comes
                if k:
                    sched = done + int(item.think_s * 1e9)
                    await _sleep_until(sched)
                if self.stopping or (end is not None and _now() >= end):
                    return
                if sem is not None:
                    await sem.acquire()
                    if self.stopping:
                        return
                rec = self._record(item, sched)
                rec.conversation_id, rec.turn = item.conversation, item.turn
                self.lag_max_ns = max(self.lag_max_ns, _now() - sched)

                def seen(text: str, item=item) -> None:
                    said.append((item, text))

                await self._spawn(rec, sent, body, sem, target, seen if own else None)
                if rec.status == CANCELLED or self.stopping:
                    return
                if rec.status != OK:
                    t = rec.done_ns or _now()
                    for later in turns[k + 1 :]:
                        r = self._record(later, t)
                        r.conversation_id, r.turn = later.conversation, later.turn
                        self.outbox.append(skipped(r, item.turn, t))
                    return
                done = rec.done_ns or _now()
        finally:
            if plan.http != "httpx":
                self.client.end_affinity(target)
