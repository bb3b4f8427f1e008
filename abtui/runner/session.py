"""One A/B session, driven from the main process.

Main process: checks the endpoints, writes the workload to the session file, starts one load
generator process per arm, starts them on a common ``t0`` so every arm sees the same schedule
(parallel mode), stores the records they ship (committed at least every second), keeps live
counts for the observer, and stops everything cleanly on Ctrl-C / SIGTERM, keeping what was
measured.
"""

from __future__ import annotations

import collections
import queue as queue_mod
import signal
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import numpy as np

from abtui.client import records
from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.client.redact import Scrubber, secrets_of
from abtui.errors import StoreWriteError
from abtui.metrics.live import ttfo_time
from abtui.quality import interleave
from abtui.runner.cuts import Cuts
from abtui.runner.endpoints import resolve_targets
from abtui.runner.generator import ArmPlan
from abtui.runner.health import Delivery, generator_health, per_arm
from abtui.runner.launch import start_fleet, start_local
from abtui.runner.machine import MachineLoad
from abtui.runner.messages import (
    Batch,
    Done,
    Fatal,
    GeneratorStats,
    Lost,
    Message,
    Ready,
    SegmentDone,
)
from abtui.runner.observer import (
    ArmProgress,
    NullObserver,
    Observer,
    RunInfo,
    ScrubbingObserver,
    Snapshot,
)
from abtui.runner.pool import connections_doc
from abtui.runner.profiling import ProfileWindow
from abtui.runner.schedule import (
    SHIP_ITEMS,
    SHIP_TEXT,
    Recipe,
    open_loop,
    recipe_spec,
    segments_of,
    session_schedule,
)
from abtui.runner.until import UntilDecided, status_line
from abtui.spec import Spec
from abtui.store.schema import WRITE_FAILED
from abtui.store.writer import SessionWriter
from abtui.telemetry import sampler as telemetry
from abtui.workload.context import ContextCheck
from abtui.workload.segments import Conductor, Shape, level_sources, shard

_now = time.perf_counter_ns
PROGRESS_INTERVAL_S = 0.5
SEQ_SAY_EVERY_S = 15.0  # --until-decided: the anytime-valid status line at most this often
START_DELAY_S = 0.1  # between "all generators ready" and t0
READY_TIMEOUT_S = 120.0  # warm-up must finish within this
RAY_START_DELAY_S = 0.25  # a remote call to every actor must arrive before t0


@dataclass
class SessionResult:
    path: Path
    name: str
    status: str  # complete | interrupted | failed
    snapshot: Snapshot


def _mark_health(
    writer: SessionWriter,
    names: list[str],
    stats: dict[int, GeneratorStats],
    worker_arm,
    obs,
    delivery=None,
    machine=None,
) -> None:
    """Store the generators' health; mark the session degraded (loudly) when they lagged."""
    writer.flush()
    backlog = delivery.backlog() if delivery is not None else None  # how late their records read
    gen_cpu = sum(st.measure_cpu_s or 0.0 for st in stats.values())
    load = machine.result(gen_cpu) if machine is not None else None
    h = generator_health(writer.con, names, per_arm(stats, worker_arm, backlog), load)
    writer.write_meta(generator_health=h.to_dict(), degraded=h.degraded)
    for r in h.reasons:
        writer.event("degraded", r)
        obs.message(f"DEGRADED: the load generator fell behind: {r}")
    for note in h.notes:
        obs.message(f"note: {note}")


class _StoppedEarly(Exception):
    """Ctrl-C (or the UI's stop) while the workload was being written: nothing was sent."""


def session_path(spec: Spec) -> tuple[str, Path]:
    name = spec.name or datetime.now().strftime("%Y%m%d-%H%M%S")
    return name, Path(spec.store.dir) / f"{name}.duckdb"


def describe_load(spec: Spec) -> str:
    ld = spec.load
    extra = ""
    if ld.schedule == "alternate":
        extra += f"; alternate arms over {ld.blocks} blocks (A B B A)"
    if ld.runs > 1:
        extra += f"; {ld.runs} runs"
    if ld.sweep_rate:
        rates = ",".join(f"{r:g}" for r in ld.sweep_rate)
        return f"sweep of {ld.arrival} rates {rates} req/s{extra}"
    if ld.sweep_concurrency:
        concs = ",".join(str(c) for c in ld.sweep_concurrency)
        return f"sweep of closed-loop concurrencies {concs}{extra}"
    return _describe_level(spec) + extra


def _describe_level(spec: Spec) -> str:
    ld = spec.load
    if ld.arrival == "replay":
        w = spec.workload
        return f"replay of {w.file or w.conversations} at {ld.speedup:g}× speed"
    if ld.rate is None:
        return f"closed loop, concurrency {ld.concurrency}"
    cap = f", at most {ld.concurrency} in flight" if ld.concurrency else ""
    burst = f" (burstiness {ld.burstiness:g})" if ld.arrival == "gamma" else ""
    return f"{ld.arrival}{burst} {ld.rate:g} req/s{cap}"


class _Live:
    """Running counts per arm for the observer (bounded: no list grows with the run)."""

    def __init__(self, names: list[str], planned: int, slo: dict | None = None) -> None:
        self.arms = [ArmProgress(name=n, planned=planned) for n in names]
        for p in self.arms:
            p.live.slo = dict(slo or {})
        self._ttft = [collections.deque(maxlen=256) for _ in names]
        self._tpot = [collections.deque(maxlen=256) for _ in names]
        self._ttfo = [collections.deque(maxlen=256) for _ in names]
        self.cuts = Cuts(len(names))  # what the client's bounds left out

    def add(self, arm: int, recs: list[RequestRecord], stats: GeneratorStats | None = None) -> None:
        p = self.arms[arm]
        self.cuts.add(arm, recs)
        if stats:
            p.in_flight = stats.in_flight
            p.generator_cpu_s = stats.cpu_s
            p.schedule_lag_max_s = max(p.schedule_lag_max_s, stats.lag_max_s)
        for r in recs:
            times = p.live.add(r)  # the service view's TTFT, E2E, TPOT (abtui.metrics.live)
            if r.warmup:
                p.warmup_done += 1
                continue
            p.done += 1
            if r.status == records.OK:
                p.ok += 1
                p.output_tokens += r.n_output or 0
                if times is not None:
                    self._ttft[arm].append(times[0])
                    if (r.n_output or 0) > 1:
                        self._tpot[arm].append(times[2])
                    if (ttfo := ttfo_time(r)) is not None:
                        self._ttfo[arm].append(ttfo)
            elif r.status == records.CANCELLED:
                p.cancelled += 1
            else:
                cls = r.error_class or records.E_OTHER
                p.errors[cls] = p.errors.get(cls, 0) + 1
        if self._ttft[arm]:
            p.recent_ttft_p50_s = float(np.median(self._ttft[arm]))
        if self._tpot[arm]:
            p.recent_tpot_p50_s = float(np.median(self._tpot[arm]))
        if p.live.thinking and self._ttfo[arm]:
            p.recent_ttfo_p50_s = float(np.median(self._ttfo[arm]))


class _Interrupts:
    """Ctrl-C and SIGTERM while a session runs (and the UI's stop request, which acts as the
    first): the first stops the generators gently (they cancel what is in flight and the
    session keeps what was measured), the second terminates them. The handlers are installed
    for the ``with`` block (main thread only: a UI's worker thread cannot install them and
    uses ``stop_request``) and the previous ones restored after it."""

    def __init__(self, stop_request: threading.Event | None, procs: list) -> None:
        self.count = 0
        self.stop_request = stop_request
        self.procs = procs  # the generators' handles, filled when they start
        self.stop = None  # the generators' stop event, once they exist
        self._old: dict = {}

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for sig, h in self._old.items():
            signal.signal(sig, h)
        self._old.clear()

    def _on_signal(self, signum, frame) -> None:  # noqa: ARG002
        self.request()

    def request(self) -> None:
        self.count += 1
        if self.stop is not None:
            self.stop.set()
        if self.count >= 2:  # second Ctrl-C: stop now
            for p in self.procs:
                if p.is_alive():
                    p.terminate()

    @property
    def requested(self) -> bool:
        """A stop was asked for (a signal, or the UI's stop request, seen or not yet)."""
        return self.count > 0 or (self.stop_request is not None and self.stop_request.is_set())

    def poll(self) -> None:
        """The UI's stop request counts as the first signal."""
        if self.count == 0 and self.stop_request is not None and self.stop_request.is_set():
            self.request()


class SessionRun:
    """One session, phase by phase (:meth:`run` calls them in order):

    1. :meth:`_header`: the session file's meta and arms;
    2. :meth:`_workload`: the items streamed into the file, the schedule and its segments;
    3. :meth:`_launch`: telemetry, the generators (local processes or Ray actors), the
       interleaved quality items;
    4. :meth:`_loop`: read the generators' :mod:`~abtui.runner.messages` (one handler per type),
       start each segment on its ``t0``, store, report progress, until every generator ended;
    5. :meth:`_finish`: segments closed, cuts, health and connections stored, quality after the
       load, the status;

    and :meth:`_close`, whatever happened: generators stopped, telemetry and file closed.
    Making one creates the session file: :func:`run_session` makes it and runs it at once.

    ``items``: a workload built by the caller (``abtui demo``), sent to every arm instead of
    the spec's synthetic one; ``spec.workload.requests`` should be its length.
    ``stop_request``: set it to stop as Ctrl-C does (a UI running this in a thread, where
    signal handlers cannot be installed). ``generators``: local generator processes started
    beforehand (:class:`~abtui.runner.prestart.Prestarted`), given their plans at the launch
    (closed with the session if it never gets there)."""

    def __init__(
        self,
        spec: Spec,
        spec_text: str = "",
        observer: Observer | None = None,
        *,
        overwrite: bool = False,
        generator_cpus: list[int] | None = None,
        items: list[Item] | None = None,
        stop_request: threading.Event | None = None,
        generators=None,
    ) -> None:
        self.spec, self.spec_text, self.generator_cpus = spec, spec_text, generator_cpus
        self.prestarted = generators
        # local generators make their items themselves from the spec (abtui.runner.schedule):
        # the main process streams them into the file and keeps them light; not the caller's
        # items (the demo) nor Ray actors, whose machines may not hold the workload file
        self.rebuild = items is None and not spec.ray.address
        # the spec as the generators rebuild from it: before anything below changes it
        self.start_spec = recipe_spec(spec) if self.rebuild else None
        # the workload file's errors first (a bad line, a number out of range), then the
        # endpoints', both before any session file is written or any request sent
        self.sources = level_sources(spec, items)
        self.targets = resolve_targets(spec)
        # the spec's secrets and the keys from the environment: nothing written or shown has them
        headers = {f"{i}": v for i, t in enumerate(self.targets) for v in t.headers.values()}
        urls = [a.url for a in spec.arms] + [a.metrics_url for a in spec.arms]
        scrubber = Scrubber(secrets_of(headers, urls, [spec.to_dict()]))
        self.obs = ScrubbingObserver(observer or NullObserver(), scrubber)
        self.name, self.path = session_path(spec)
        total = sum(len(src) for _, _, src in self.sources)
        spec.workload.requests = total  # a file's items: the count the summary shows
        self.names = [a.name for a in spec.arms]
        # every arm plays every item once a run (alternate: block by block)
        self.planned = spec.load.runs * total
        self.writer = SessionWriter(self.path, overwrite=overwrite, scrubber=scrubber)
        self.status = "failed"
        self.live = _Live(self.names, self.planned, spec.slo)
        self.t_start = _now()
        self.phase = "warmup"
        self.procs: list = []  # the generators' process handles
        self.interrupts = _Interrupts(stop_request, self.procs)
        self.hub = None  # background telemetry (server /metrics, local GPUs)
        self.qi = None  # quality items sent during the load (quality.mode = "interleaved")
        self.conductor: Conductor | None = None  # starts the segments; knows which one plays
        self.fleet = None  # the generators' Ray actors (--ray)
        self.ready: set[int] = set()
        self.done: set[int] = set()
        self.fatal: dict[int, str] = {}
        self.gen_stats: dict[int, GeneratorStats] = {}
        # --until-decided: the anytime-valid verdict looked at as pairs come (abtui.runner.until)
        self.until = UntilDecided(spec, self.planned) if spec.load.until_decided else None
        self.decided = False  # the sequential verdict stopped the run
        self._said_at = 0.0  # last sequential status line shown
        self.seq_line: str | None = None  # the anytime-valid status at the last look
        # --profile: each arm's server profiles a window of the measured phase
        self.profiling = ProfileWindow.of(spec, self.targets, self.obs.message)

    def snap(self) -> Snapshot:
        seg = self.conductor.position() if self.conductor is not None else None
        return Snapshot(
            elapsed_s=(_now() - self.t_start) / 1e9,
            arms=self.live.arms,
            phase=self.phase,
            segment=seg,
            sequential=self.seq_line,
            look=self.until.seq_look() if self.until is not None else None,
            profiling=self.profiling is not None and self.profiling.active,
        )

    def _result(self) -> SessionResult:
        return SessionResult(
            path=self.path, name=self.name, status=self.status, snapshot=self.snap()
        )

    def run(self) -> SessionResult:
        try:
            self._header()
            with self.interrupts:
                if not self._workload():
                    return self._result()
                self._launch()
                self._loop()
                self._finish()
                return self._result()
        except StoreWriteError:  # the writer marked the file write_failed and closed it
            self.status = WRITE_FAILED
            raise
        finally:
            self._close()

    # -- 1. header ------------------------------------------------------------------------
    def _header(self) -> None:
        spec = self.spec
        self.levels_meta = [
            {"level": k, "rate": rate, "concurrency": conc, "requests": len(src)}
            for k, (rate, conc, src) in enumerate(self.sources)
        ]
        self.writer.write_meta(
            session_name=self.name,
            spec_text=self.spec_text,
            spec=spec.to_dict(),
            mode=spec.load.schedule,
            load=describe_load(spec),
            levels=self.levels_meta,
        )
        self.writer.write_arms(
            [
                {
                    "arm": i,
                    "name": a.name,
                    "role": a.role,
                    "url": a.url,
                    "model": t.model,
                    "api": t.api,
                    # the request body settings; headers (credentials) are never stored
                    "config": {
                        "params": t.params,
                        "api_key_env": a.api_key_env,
                        "timeout_s": t.timeout_s,
                        "insecure": a.insecure,
                        "ca_bundle": a.ca_bundle,
                    },
                }
                for i, (a, t) in enumerate(zip(spec.arms, self.targets, strict=True))
            ]
        )

    # -- 2. workload ----------------------------------------------------------------------
    def _workload(self) -> bool:
        """Stream the items into the file and plan the segments; False when a stop came first
        (nothing was sent, the file keeps the items written so far)."""
        spec, writer = self.spec, self.writer
        context = ContextCheck(self.targets, self.names)

        def sink(batch: list[Item], warmup: bool) -> None:
            if self.interrupts.requested:
                raise _StoppedEarly  # Ctrl-C while the workload is written: nothing sent yet
            writer.write_items(batch)
            if not warmup:
                context.add(batch)

        try:
            small = (SHIP_ITEMS, SHIP_TEXT) if self.rebuild else None
            self.schedule = session_schedule(
                spec, self.sources, sink=sink, light=self.rebuild, whole_up_to=small
            )
        except _StoppedEarly:
            self.status = "interrupted"
            writer.event("interrupted", "stop requested while the workload was being written")
            self.obs.message(
                "stopped before any request was sent; the session file keeps the "
                "items written so far"
            )
            return False
        self.sources = None  # every item is in the file now
        if self.schedule.whole is not None:  # small: shipped to the generators, not rebuilt
            self.schedule.levels, self.rebuild = self.schedule.whole, False
        self.segments = segments_of(spec, self.schedule.levels, len(spec.arms))
        if spec.load.schedule == "alternate":  # the blocks as cut (fewer: long conversations)
            blocks = Shape.of_plan(self.segments).blocks
            for lv in self.levels_meta:
                lv["blocks"] = blocks[lv["level"]] if lv["level"] < len(blocks) else 0
            self.writer.write_meta(levels=self.levels_meta)
        self.obs.started(
            RunInfo(
                session_name=self.name,
                session_path=str(self.path),
                arm_names=self.names,
                arm_urls=[a.url for a in spec.arms],
                arm_models=[t.model for t in self.targets],
                planned_per_arm=self.planned,
                load=describe_load(spec),
                delta=spec.policy.delta,
                delta_tail=spec.policy.delta_tail,
            )
        )
        context.report(writer, self.obs)
        note = self.until.budget_note() if self.until is not None else None
        if note:
            writer.event("sequential_budget", note)
            self.obs.message(note)
        return True

    # -- 3. launch ------------------------------------------------------------------------
    def _plans(self) -> list[ArmPlan]:
        """One plan per generator: ``spec.load.generators`` per arm, each every n-th item."""
        spec, sch, cpus = self.spec, self.schedule, self.generator_cpus
        n_gen = spec.load.generators
        concurrency = max((lv.concurrency or 0 for lv in sch.levels), default=0) or None
        return [
            ArmPlan(
                arm=i,
                target=self.targets[i],
                items=[],
                warmup_items=sch.warm,
                mode="open" if open_loop(spec) else "closed",
                concurrency=concurrency,
                store_text=spec.store.text,
                http=spec.request.http,
                history=spec.workload.history,
                session_header=spec.request.session_header or None,
                cpu=cpus[w % len(cpus)] if cpus else None,
                segments=None if self.rebuild else shard(self.segments, w % n_gen, n_gen),
                worker=w,
                recipe=Recipe(self.start_spec, len(spec.arms), w % n_gen, n_gen, sch.fingerprint)
                if self.rebuild
                else None,
            )
            for w, i in enumerate(self.worker_arm)
        ]

    def _launch(self) -> None:
        spec, writer = self.spec, self.writer
        self.hub = telemetry.start_for_session(spec, writer, self.obs.message)
        n_gen = spec.load.generators
        self.worker_arm = [i for i in range(len(self.targets)) for _ in range(n_gen)]
        plans = self._plans()
        if spec.ray.address:  # actors on a Ray cluster (abtui.runner.ray); else local processes
            self.fleet = start_fleet(spec, plans, writer, self.obs)
            self.results, self.pipes, stop, procs = self.fleet.handles
            self.procs.extend(procs)
        else:
            self.results, self.pipes, stop = start_local(spec, plans, self.procs, self.prestarted)
        self.interrupts.stop = stop
        self.qi = interleave.prepare(
            spec,
            self.targets,
            self.segments,
            writer,
            self.obs,
            stop=lambda: self.interrupts.count > 0,
        )
        self.conductor = Conductor(
            self.segments,
            self.names,
            writer,
            START_DELAY_S if self.fleet is None else RAY_START_DELAY_S,
        )
        self.delivery = Delivery(since_ns=_now())  # reading starts now (the loop)
        self.machine = MachineLoad()  # what the machine does while measuring

    # -- 4. the message loop --------------------------------------------------------------
    def _loop(self) -> None:
        n = len(self.procs)
        ready_deadline = time.monotonic() + READY_TIMEOUT_S
        last_progress = 0.0
        while len(self.done) < n:
            try:
                msg = self.results.get(timeout=0.1)
            except queue_mod.Empty:
                msg = None
            if msg is not None:
                self._handle(msg)
            self._start_segment(n)
            if not self.conductor.started and time.monotonic() > ready_deadline:
                self._warmup_timed_out()
            if msg is None:
                self._reap_silent()
            self._check_stop()
            self._maybe_look()
            if self.profiling is not None:
                stopping = bool(self.interrupts.count or self.decided)
                self.profiling.tick(self.conductor, _now(), stopping)
            telemetry.drain_into(self.hub, self.writer, self.live.arms)
            if self.qi is not None:
                self.qi.store(self.writer)
            self.writer.maybe_flush()
            t = time.monotonic()
            if t - last_progress >= PROGRESS_INTERVAL_S:
                last_progress = t
                self._progress()

    def _handle(self, msg: Message) -> None:
        match msg:
            case Batch():
                self._on_batch(msg)
            case Ready():
                self.ready.add(msg.wid)
            case SegmentDone():
                self._on_segment_done(msg)
            case Done():
                self._on_done(msg)
            case Lost():
                self._on_lost(msg)
            case Fatal():
                self._on_fatal(msg)

    def _on_batch(self, msg: Batch) -> None:
        self.delivery.on_batch(msg.wid, len(msg.records), msg.stats, _now())
        self.writer.add_records(msg.records, store_text=self.spec.store.text)
        self.live.add(self.worker_arm[msg.wid], msg.records, msg.stats)
        if self.until is not None:
            self.until.add(msg.records)

    def _on_segment_done(self, msg: SegmentDone) -> None:
        self.conductor.on_segment_done(msg.wid, msg.segment)
        self.live.add(self.worker_arm[msg.wid], [], msg.stats)
        self.gen_stats[msg.wid] = msg.stats

    def _on_done(self, msg: Done) -> None:
        self.done.add(msg.wid)
        self.gen_stats[msg.wid] = msg.stats
        arm = self.worker_arm[msg.wid]
        if all(w in self.done for w, a in enumerate(self.worker_arm) if a == arm):
            p = self.live.arms[arm]
            p.finished = True
            p.in_flight = 0
            self.obs.arm_finished(arm, p)

    def _on_lost(self, msg: Lost) -> None:  # a Ray node died under it (abtui.runner.ray.fleet)
        self.done.add(msg.wid)
        self.writer.event("generator_lost", msg.why, arm=self.worker_arm[msg.wid])
        self.writer.write_meta(ray=self.fleet.meta())
        self.obs.message(f"LOST: {msg.why}")

    def _on_fatal(self, msg: Fatal) -> None:
        arm = self.worker_arm[msg.wid]
        self.fatal[msg.wid] = msg.error
        self.done.add(msg.wid)
        self.writer.event("generator_failed", msg.error, arm=arm)
        self.obs.message(f"load generator of {self.spec.arms[arm].name} failed: {msg.error}")

    def _start_segment(self, n: int) -> None:
        """Send the next segment's ``t0`` once every generator is ready for it."""
        conductor = self.conductor
        if self.interrupts.count or self.decided or not conductor.due(self.ready, self.done, n):
            return
        conductor.start_next(self.pipes, self.ready, self.done, _now())
        self.machine.start()
        if self.qi is not None and not self.qi.started and conductor.log:
            self.qi.start(conductor.log[0]["t0_ns"])
        self.phase = "measuring"

    def _warmup_timed_out(self) -> None:
        self.interrupts.stop.set()
        self.writer.event("warmup_timeout", f"warm-up did not finish in {READY_TIMEOUT_S:g} s")
        self.obs.message(f"warm-up did not finish within {READY_TIMEOUT_S:g} s; stopping")

    def _reap_silent(self) -> None:
        """A generator that died without a word (killed): don't wait for it forever."""
        for i, p in enumerate(self.procs):
            if i not in self.done and not p.is_alive() and self.results.empty():
                self.done.add(i)
                self.fatal.setdefault(i, f"exited with code {p.exitcode}")
                self.writer.event(
                    "generator_died", f"exit code {p.exitcode}", arm=self.worker_arm[i]
                )

    def _check_stop(self) -> None:
        self.interrupts.poll()
        if self.interrupts.count and self.phase != "stopping":
            self.phase = "stopping"
            self.writer.event("interrupted", "stop requested (signal)")
            self.obs.message("stopping: cancelling in-flight requests, keeping what was measured")

    def _maybe_look(self) -> None:
        """--until-decided: look at the pairs so far when a look is due; stop the run, as a
        stop request does, once the verdict is decided."""
        u = self.until
        if u is None or self.decided or self.interrupts.count or self.phase != "measuring":
            return
        if not u.due():
            return
        try:
            v = u.look(self._profiled())
        except (ArithmeticError, ValueError) as e:  # a look must never end the run
            self.writer.event("sequential_error", f"look failed: {e!r}")
            return
        line = self.seq_line = status_line(v, u.remaining_s())
        if v.stop:
            self.decided = True
            u.stop_reason = "decided"
            self.phase = "stopping"
            self.interrupts.stop.set()  # the generators cancel what is in flight and end
            self.writer.event("decided", line)
            self.obs.message(f"stopping: {line}")
        elif time.monotonic() - self._said_at >= SEQ_SAY_EVERY_S:
            self._said_at = time.monotonic()
            self.obs.message(line)

    def _progress(self) -> None:
        behind = self.delivery.current(self.worker_arm, _now())  # the live header's backlog
        for i, ap in enumerate(self.live.arms):
            ap.reading_behind_s, ap.records_waiting = behind.get(i, (0.0, 0))
        self.obs.progress(self.snap())

    # -- 5. finish ------------------------------------------------------------------------
    def _finish(self) -> None:
        spec, writer, obs = self.spec, self.writer, self.obs
        self.conductor.close(_now())
        if self.profiling is not None:  # the window closed, the traces analysed and stored
            self.profiling.finish(writer)
        self.live.cuts.store(writer, self.names, obs)
        if self.fleet is not None:
            self.fleet.resync()
            writer.write_meta(ray=self.fleet.meta())
        stats = self.gen_stats
        _mark_health(writer, self.names, stats, self.worker_arm, obs, self.delivery, self.machine)
        writer.write_meta(connections=connections_doc(stats, self.worker_arm, self.names))
        # every generator has ended (Done, Fatal or found dead) and exits on its own, beside the
        # summary and verdict: waiting for their teardown took up to 0.1 s of a small run's end
        self._store_sequential()  # the load's end; the quality suites come after it
        if self.qi is not None:  # the rest of the interleaved items; rows answered are kept
            if self.fatal:
                self.qi.close()
            self.phase = "quality"
            obs.progress(self.snap())
            log = self.conductor.log
            self.qi.finish(writer, log[-1].get("end_ns") if log else None)
        elif spec.quality.enabled and not self.interrupts.count and not self.fatal:
            self.phase = "quality"  # after the load test, never timed with it (abtui.quality.run)
            obs.progress(self.snap())
            # the suites' modules (scorers, clients) load only when they run
            from abtui.quality.run import run_for_session as run_quality
            from abtui.quality.seqrun import run_until_decided as run_quality_until_decided

            if self.until is not None:  # items until the quality gate is decided, too
                doc = run_quality_until_decided(spec, self.targets, writer, obs, self._stopping)
                if doc is not None:
                    seq = replace(self.until.record(), quality=doc.to_dict())
                    writer.write_meta(sequential=seq.to_dict())
            else:
                run_quality(spec, self.targets, writer, obs, stop=self._stopping)
        if self.interrupts.count:
            self.status = "interrupted"
        elif self.fatal:
            self.status = "failed"
        else:
            self.status = "complete"
        self.phase = "done"

    def _stopping(self) -> bool:
        """A stop was asked for (Ctrl-C, SIGTERM, the UI's quit)."""
        return self.interrupts.count > 0

    def _profiled(self) -> list[tuple[int, int, int]]:
        """--profile: the windows the looks leave out (none without a profile)."""
        return self.profiling.windows() if self.profiling is not None else []

    def _store_sequential(self) -> None:
        """--until-decided: the verdict where the run stopped, else one last look over every
        pair (valid at any stopping time), stored as the ``sequential`` meta key."""
        u = self.until
        if u is None:
            return
        if not self.decided:
            u.stop_reason = "interrupted" if self.interrupts.count else "budget"
            if self.fatal:
                u.stop_reason = "failed"
            try:
                v = u.look(self._profiled())
            except (ArithmeticError, ValueError) as e:  # the file keeps the looks so far
                self.writer.event("sequential_error", f"last look failed: {e!r}")
            else:
                self.seq_line = status_line(v, u.remaining_s())
                self.obs.message(self.seq_line)
        self.writer.write_meta(sequential=u.record().to_dict())

    def _close(self) -> None:
        """Whatever happened: the generators stopped, telemetry and the file closed. A generator
        that ended (:meth:`_loop` heard its last message) is left to exit: its process is
        reaped when it has (multiprocessing does, at the latest at this process's exit)."""
        if self.prestarted is not None:  # never launched (a stop before): ended here
            self.prestarted.close()
        for i, p in enumerate(self.procs):
            if i not in self.done and p.is_alive():
                p.terminate()
                p.join(timeout=2)
        if self.fleet is not None:
            self.fleet.close()
        if self.qi is not None:
            self.qi.close()
        if self.profiling is not None:  # no server left profiling
            self.profiling.close()
        writer = self.writer
        telemetry.finish(self.hub, None if writer.closed else writer)  # closed: a write failed
        writer.close(status=self.status)
        self.obs.finished(self.snap(), self.status)


def run_session(
    spec: Spec,
    spec_text: str = "",
    observer: Observer | None = None,
    *,
    overwrite: bool = False,
    generator_cpus: list[int] | None = None,
    items: list[Item] | None = None,
    stop_request: threading.Event | None = None,
    generators=None,
) -> SessionResult:
    """Run ``spec`` (already validated) to the end, or until Ctrl-C / SIGTERM (see
    :class:`SessionRun` for the phases, ``items``, ``stop_request`` and ``generators``)."""
    return SessionRun(
        spec,
        spec_text,
        observer,
        overwrite=overwrite,
        generator_cpus=generator_cpus,
        items=items,
        stop_request=stop_request,
        generators=generators,
    ).run()
