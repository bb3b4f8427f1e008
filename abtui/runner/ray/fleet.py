"""The driver's side of ``abtui run --ray``: an arm's generators as Ray actors over the
cluster's nodes, seen by :func:`abtui.runner.session.run_session` through the same handles as
local processes (a result queue, a start pipe per generator, a stop event, process handles).

- **Placement**: one placement-group bundle per generator index ``g``, holding generator ``g``
  of every arm (``cpus_per_generator`` CPUs each); ``spread`` (default) or ``pack`` over the
  nodes. Each node therefore runs the same number of generators of each arm: the arms are
  placed alike and the A/B stays paired.
- **Clocks**: each actor's node offset is measured by ping-pong (:mod:`.clocks`) before it
  starts, and installed in the actor (:mod:`.actor`); again at the end, for the drift. Stored
  in ``meta.ray``; above ``clock_warn_ms`` a named warning.
- **Records**: one thread here keeps one ``poll`` in flight per actor (``ray.wait`` over all),
  and puts the messages each reply carries on the local queue the session reads.
- **A lost node**: a ``poll`` that fails with an actor error (its node died) makes this thread
  write the actor's in-flight requests as errors (a ``Batch``) and a ``Lost`` message
  (:mod:`abtui.runner.messages`).
"""

from __future__ import annotations

import queue
import threading
import time

from abtui.client import records
from abtui.client.records import RequestRecord
from abtui.errors import AbtuiError
from abtui.runner.messages import Batch, Done, Fatal, Lost
from abtui.runner.ray import clocks

E_LOST = "generator_lost"  # error class of the requests in flight on a lost node
POLL_S = 0.2
PG_TIMEOUT_S = 60.0


class RayError(AbtuiError):
    pass


def _ray():
    try:
        import ray
    except ImportError:
        raise RayError(
            "--ray needs Ray, which is not installed",
            "pip install 'abtui[ray]' (on the driver and in the cluster's image)",
        ) from None
    return ray


def connect(address: str):
    """``ray.init`` to ``address`` (``auto``, ``ray://head:10001``, ``host:6379``), unless this
    process is connected already. Returns (ray, whether we connected and so must disconnect)."""
    ray = _ray()
    if ray.is_initialized():
        return ray, False
    try:
        ray.init(address=address, logging_level="WARNING", log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise RayError(
            f"could not connect to the Ray cluster at {address!r}: {e}",
            "is it up? `ray status` on the head; RAY_ADDRESS or --ray ray://HEAD:10001 "
            "for a remote cluster",
        ) from None
    return ray, True


class _Pipe:
    def __init__(self, actor) -> None:
        self.actor = actor

    def send(self, t0: int) -> None:
        self.actor.start.remote(t0)


class _Stop:
    def __init__(self, fleet: RayFleet) -> None:
        self.fleet = fleet
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            for a in self.fleet.actors:
                a.stop.remote()

    def is_set(self) -> bool:
        return self._set


class _Handle:
    """A generator's stand-in for ``multiprocessing.Process``: alive until its last message was
    queued (``Done``, ``Fatal`` or ``Lost``)."""

    def __init__(self, fleet: RayFleet, wid: int) -> None:
        self.fleet, self.wid = fleet, wid
        self.exitcode = None

    def is_alive(self) -> bool:
        return self.wid not in self.fleet.ended

    def terminate(self) -> None:
        self.fleet.kill(self.wid)

    def join(self, timeout: float | None = None) -> None:
        end = time.monotonic() + (timeout or 0)
        while self.is_alive() and time.monotonic() < end:
            time.sleep(0.02)


class RayFleet:
    def __init__(
        self,
        address: str,
        plans: list,
        names: list[str],
        *,
        placement: str = "spread",
        cpus_per_generator: float = 1.0,
        clock_warn_ms: float = clocks.CLOCK_WARN_MS,
        n_gen: int = 1,
    ) -> None:
        self.address, self.plans, self.names = address, plans, names
        self.placement, self.cpus, self.warn_ms, self.n_gen = (
            placement,
            cpus_per_generator,
            clock_warn_ms,
            n_gen,
        )
        self.actors: list = []
        self.results: queue.Queue = queue.Queue()
        self.ended: set[int] = set()
        self.inflight: list[dict] = [{} for _ in plans]
        self.nodes: list[dict] = []  # per generator: where it runs and its clock
        self.lost: list[dict] = []
        self.pg = None
        self._ray = None
        self._owned = False
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self.t_connect_s = self.t_start_s = 0.0

    # ---------------------------------------------------------------- start
    def start(self):
        """Connect, place, sync clocks, start every generator's warm-up. Returns the session's
        handles: (results queue, start pipes, stop event, process handles)."""
        t = time.perf_counter()
        ray, self._owned = connect(self.address)
        self._ray = ray
        self.t_connect_s = time.perf_counter() - t
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from abtui import __version__
        from abtui.runner.ray.actor import GeneratorActor

        n_arms = len(self.names)
        bundles = [{"CPU": self.cpus * n_arms} for _ in range(self.n_gen)]
        self.pg = placement_group(bundles, strategy=self.placement.upper())
        if not self._wait(self.pg.ready(), PG_TIMEOUT_S):
            raise RayError(
                f"the cluster could not place {self.n_gen} bundle(s) of {self.cpus * n_arms:g} CPUs "
                f"({self.placement} placement) within {PG_TIMEOUT_S:g} s",
                "`ray status` shows the free CPUs; lower [load] generators or "
                "[ray] cpus_per_generator, or add nodes",
            )
        for plan in self.plans:
            g = plan.wid % self.n_gen
            self.actors.append(
                GeneratorActor.options(
                    num_cpus=self.cpus,
                    name=None,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=self.pg, placement_group_bundle_index=g
                    ),
                ).remote()
            )
        where = ray.get([a.where.remote() for a in self.actors])
        bad = [w for w in where if w["abtui"] != __version__]
        if bad:
            raise RayError(
                f"the cluster runs abtui {bad[0]['abtui']} on {bad[0]['node_ip']}, "
                f"the driver {__version__}",
                "install the same abtui on the driver and in the cluster's image",
            )
        for plan, actor, w in zip(self.plans, self.actors, where, strict=True):
            sync = clocks.measure(lambda a=actor: ray.get(a.clock.remote()))
            ray.get(actor.prepare.remote(sync.mono_offset_ns))
            self.nodes.append(
                {
                    "worker": plan.wid,
                    "arm": self.names[plan.arm],
                    "bundle": plan.wid % self.n_gen,
                    **w,
                    "clock": sync.to_dict(),
                }
            )
        ray.get([a.run.remote(p) for a, p in zip(self.actors, self.plans, strict=True)])
        self.t_start_s = time.perf_counter() - t
        self._thread = threading.Thread(target=self._pump, name="abtui-ray-pump", daemon=True)
        self._thread.start()
        procs = [_Handle(self, p.wid) for p in self.plans]
        return self.results, [_Pipe(a) for a in self.actors], _Stop(self), procs

    def _wait(self, ref, timeout: float) -> bool:
        ready, _ = self._ray.wait([ref], timeout=timeout)
        return bool(ready)

    def meta(self) -> dict:
        """What the session stores about the cluster (``meta.ray``)."""
        return {
            "address": self.address,
            "placement": self.placement,
            "cpus_per_generator": self.cpus,
            "generators_per_arm": self.n_gen,
            "clock_warn_ms": self.warn_ms,
            "connect_s": round(self.t_connect_s, 3),
            "start_s": round(self.t_start_s, 3),
            "nodes": self.nodes,
            "lost": self.lost,
        }

    def clock_warnings(self) -> list[tuple[str, str]]:
        return clocks.warnings(self.nodes, self.warn_ms)

    # ---------------------------------------------------------------- records
    def _pump(self) -> None:
        ray = self._ray
        pending = {a.poll.remote(POLL_S): w for w, a in enumerate(self.actors)}
        while pending and not self._closing.is_set():
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S * 2)
            for ref in ready:
                w = pending.pop(ref)
                try:
                    msgs, started = ray.get(ref)
                except Exception as e:  # the actor or its node is gone
                    self._on_lost(w, e)
                    continue
                self._on_reply(w, msgs, started)
                if w not in self.ended:
                    pending[self.actors[w].poll.remote(POLL_S)] = w

    def _on_reply(self, w: int, msgs: list, started: list) -> None:
        fl = self.inflight[w]
        for item, run, level, block, sched in started:
            fl[(item, run, level, block)] = sched
        for msg in msgs:
            if isinstance(msg, Batch):
                for r in msg.records:
                    fl.pop((r.item, r.run, r.level, r.block), None)
            self.results.put(msg)
            if isinstance(msg, Done | Fatal):
                self.ended.add(w)

    def _on_lost(self, w: int, exc: BaseException) -> None:
        plan, now = self.plans[w], time.perf_counter_ns()
        node = self.nodes[w] if w < len(self.nodes) else {}
        why = (
            f"generator {w} of {self.names[plan.arm]} on node {clocks.where(node)} "
            f"was lost ({type(exc).__name__})"
        )
        recs = [
            RequestRecord(
                arm=plan.arm,
                item=item,
                run=run,
                level=level,
                block=block,
                scheduled_ns=sched,
                dispatched_ns=sched,
                done_ns=now,
                status=records.ERROR,
                error_class=E_LOST,
                error_message=why,
            )
            for (item, run, level, block), sched in self.inflight[w].items()
        ]
        self.inflight[w] = {}
        self.lost.append(
            {
                "worker": w,
                "arm": self.names[plan.arm],
                "node_id": node.get("node_id"),
                "node_ip": node.get("node_ip"),
                "in_flight": len(recs),
                "at_ns": now,
                "error": f"{type(exc).__name__}: {exc}"[:500],
            }
        )
        if recs:
            self.results.put(Batch(w, recs, None))
        counted = f": {len(recs)} request(s) in flight counted as errors" if recs else ""
        self.results.put(Lost(w, why + counted))
        self.ended.add(w)

    # ---------------------------------------------------------------- end
    def kill(self, w: int) -> None:
        if self._ray is not None and w < len(self.actors):
            self._ray.kill(self.actors[w], no_restart=True)

    def resync(self) -> None:
        """The clocks again, for the drift over the run (live actors only; short timeout)."""
        ray = self._ray
        for n, a in zip(self.nodes, self.actors, strict=False):
            if any(lo["worker"] == n["worker"] for lo in self.lost):
                continue
            try:
                s = clocks.measure(lambda a=a: ray.get(a.clock.remote(), timeout=5), rounds=6)
            except Exception:  # noqa: BLE001 - gone at the end: no drift figure
                continue
            n["clock"]["drift_ns"] = s.mono_offset_ns - n["clock"]["mono_offset_ns"]
            n["clock"]["end_uncertainty_ns"] = s.uncertainty_ns

    def close(self) -> None:
        self._closing.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * POLL_S + 1)
        if self._ray is None:
            return
        for w in range(len(self.actors)):
            try:
                self.kill(w)
            except Exception:  # noqa: BLE001,S110 - already dead
                pass
        if self.pg is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self.pg)
            except Exception:  # noqa: BLE001,S110
                pass
        if self._owned:
            self._ray.shutdown()
