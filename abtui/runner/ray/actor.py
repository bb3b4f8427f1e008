"""One load generator as a Ray actor: today's generator loop (:mod:`abtui.runner.generator`,
same client, same records) on a thread of the actor's process, with a mailbox the driver
drains in batches.

The actor is threaded (``max_concurrency``): the generator's asyncio loop runs on its own
thread, and the driver's calls (``clock``, ``start``, ``poll``, ``stop``) on Ray's. The
generator's three channels are replaced by local objects with the same methods:

- ``results.put(msg)`` appends to :class:`Mailbox`; ``poll`` hands the driver everything
  queued, in order, as one reply (one remote call per batch, never per request). The driver
  keeps one ``poll`` in flight per actor, so it never holds more than one reply of each actor in
  transit: back-pressure is the driver's read rate, and what it has not read waits here.
- ``start_conn.poll()/recv()`` read the ``t0`` that ``start`` delivered.
- ``stop_event.is_set()`` is a :class:`threading.Event` that ``stop`` sets.

Clocks: the driver measures this node's monotonic offset first (``clock``, ping-pong), then
``prepare`` installs a clock that reads ``perf_counter_ns() - offset`` in the generator and the
client modules: every timestamp the actor takes, and the ``t0`` it is sent, are then in the
driver's timebase, with no per-record conversion. ``ABTUI_CLOCK_SKEW_NS`` in the environment of
a node (tests) shifts that node's clocks, as a node whose clock is off would be.
"""

from __future__ import annotations

import os
import threading
import time

import ray

from abtui.runner.generator import ArmPlan, _Generator, run_loop
from abtui.runner.messages import Fatal

SKEW_ENV = "ABTUI_CLOCK_SKEW_NS"


def _skew_ns() -> int:
    try:
        return int(os.environ.get(SKEW_ENV, "0"))
    except ValueError:
        return 0


class Mailbox:
    """The generator's result queue: ``put`` never blocks (the generator's loop must not wait
    on the driver); ``take`` hands over everything queued, waiting up to ``timeout`` for it."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._msgs: list = []
        self._started: list = []  # measured requests dispatched since the last take

    def put(self, msg) -> None:
        with self._cv:
            self._msgs.append(msg)
            self._cv.notify()

    def started(self, key: tuple) -> None:
        with self._cv:
            self._started.append(key)

    def take(self, timeout: float) -> tuple[list, list]:
        with self._cv:
            if not self._msgs:
                self._cv.wait(timeout)
            msgs, started = self._msgs, self._started
            self._msgs, self._started = [], []
            return msgs, started


class _StartConn:
    def __init__(self) -> None:
        self._t0: list[int] = []
        self._lock = threading.Lock()

    def send(self, t0: int) -> None:
        with self._lock:
            self._t0.append(t0)

    def poll(self) -> bool:
        return bool(self._t0)

    def recv(self) -> int:
        with self._lock:
            return self._t0.pop(0)


class _RemoteGenerator(_Generator):
    """The generator, telling the mailbox which measured requests it dispatched (so that a
    lost node's in-flight requests can be counted as errors by the driver)."""

    def _spawn(self, rec, item, body, sem=None):
        if not rec.warmup:
            self.results.started((rec.item, rec.run, rec.level, rec.block, rec.scheduled_ns))
        return super()._spawn(rec, item, body, sem)


@ray.remote(max_concurrency=4)
class GeneratorActor:
    def __init__(self) -> None:
        self.skew = _skew_ns()
        self.mailbox = Mailbox()
        self.start_conn = _StartConn()
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def where(self) -> dict:
        import platform
        import socket

        from abtui import __version__

        ctx = ray.get_runtime_context()
        return {
            "node_id": ctx.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "abtui": __version__,
            "python": platform.python_version(),
            "ray": ray.__version__,
        }

    def clock(self) -> tuple[int, int]:
        """This node's (monotonic, wall) clocks, as the generator would read them unshifted."""
        return time.perf_counter_ns() + self.skew, time.time_ns() + self.skew

    def prepare(self, offset_ns: int) -> None:
        """Timestamps from now on in the driver's timebase (``offset_ns``: node minus driver)."""
        from abtui.client import fast, stream, stream_state
        from abtui.runner import generator

        perf, shift = time.perf_counter_ns, self.skew - int(offset_ns)

        def now() -> int:
            return perf() + shift

        for mod in (generator, stream, stream_state, fast):
            mod._now = now

    def run(self, plan: ArmPlan) -> None:
        def main() -> None:
            try:
                run_loop(
                    _RemoteGenerator(plan, self.mailbox, self.start_conn, self.stop_event).run()
                )
            except BaseException as e:  # report, never die silently
                self.mailbox.put(Fatal(plan.wid, f"{type(e).__name__}: {e}"))

        self.thread = threading.Thread(target=main, name="abtui-generator", daemon=True)
        self.thread.start()

    def poll(self, timeout: float = 0.2) -> tuple[list, list]:
        return self.mailbox.take(timeout)

    def start(self, t0: int) -> None:
        self.start_conn.send(t0)

    def stop(self) -> None:
        self.stop_event.set()
