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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from abtui.client import records
from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.client.redact import Scrubber, secrets_of
from abtui.errors import StoreWriteError
from abtui.quality import interleave
from abtui.quality.run import run_for_session as run_quality
from abtui.runner.cuts import Cuts
from abtui.runner.endpoints import resolve_targets
from abtui.runner.generator import ArmPlan
from abtui.runner.health import Delivery
from abtui.runner.launch import start_fleet, start_local
from abtui.runner.machine import MachineLoad
from abtui.runner.observer import (
    ArmProgress,
    NullObserver,
    Observer,
    RunInfo,
    ScrubbingObserver,
    Snapshot,
)
from abtui.runner.pool import per_arm_connections
from abtui.runner.schedule import (
    Recipe,
    open_loop,
    recipe_spec,
    segments_of,
    session_schedule,
)
from abtui.spec import Spec
from abtui.store.schema import WRITE_FAILED
from abtui.store.writer import SessionWriter
from abtui.telemetry import sampler as telemetry
from abtui.workload.context import ContextCheck
from abtui.workload.segments import Conductor, level_sources, shard

_now = time.perf_counter_ns
PROGRESS_INTERVAL_S = 0.5
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
    stats: dict,
    worker_arm,
    obs,
    delivery=None,
    machine=None,
) -> None:
    """Store the generators' health; mark the session degraded (loudly) when they lagged."""
    from abtui.runner.health import generator_health, per_arm

    writer.flush()
    if delivery is not None:  # how far behind this process read their records
        stats = delivery.into(stats)
    gen_cpu = sum(st.get("measure_cpu_s", 0.0) for st in stats.values() if isinstance(st, dict))
    load = machine.result(gen_cpu) if machine is not None else None
    h = generator_health(writer.con, names, per_arm(stats, worker_arm), load)
    writer.write_meta(generator_health=h, degraded=h["degraded"])
    for r in h["reasons"]:
        writer.event("degraded", r)
        obs.message(f"DEGRADED: the load generator fell behind: {r}")
    for note in h["notes"]:
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
        return f"replay of {spec.workload.file} at {ld.speedup:g}× speed"
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
        self.cuts = Cuts(len(names))  # what the client's bounds left out

    def add(self, arm: int, recs: list[RequestRecord], stats: dict) -> None:
        p = self.arms[arm]
        self.cuts.add(arm, recs)
        p.in_flight = stats.get("in_flight", p.in_flight)
        p.generator_cpu_s = stats.get("cpu_s", p.generator_cpu_s)
        p.schedule_lag_max_s = max(p.schedule_lag_max_s, stats.get("lag_max_s", 0.0))
        for r in recs:
            p.live.add(r)
            if r.warmup:
                p.warmup_done += 1
                continue
            p.done += 1
            if r.status == records.OK:
                p.ok += 1
                p.output_tokens += r.n_output or 0
                if r.chunk_ns:
                    sent = r.dispatched_ns + r.connect_ns  # the service view starts here
                    ttft = (r.chunk_ns[0] - sent) / 1e9
                    self._ttft[arm].append(ttft)
                    if (r.n_output or 0) > 1:
                        e2e = (r.chunk_ns[-1] - sent) / 1e9
                        self._tpot[arm].append((e2e - ttft) / (r.n_output - 1))
            elif r.status == records.CANCELLED:
                p.cancelled += 1
            else:
                cls = r.error_class or records.E_OTHER
                p.errors[cls] = p.errors.get(cls, 0) + 1
        if self._ttft[arm]:
            p.recent_ttft_p50_s = float(np.median(self._ttft[arm]))
        if self._tpot[arm]:
            p.recent_tpot_p50_s = float(np.median(self._tpot[arm]))


def _host_fingerprint() -> dict:
    import os
    import platform
    import socket
    from importlib import metadata

    from abtui.hardware.host import cpu_model

    def ver(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "versions": {p: ver(p) for p in ("abtui", "httpx", "duckdb", "numpy", "scipy")},
    }


def run_session(  # noqa: C901  (split in issue 36)
    spec: Spec,
    spec_text: str = "",
    observer: Observer | None = None,
    *,
    overwrite: bool = False,
    generator_cpus: list[int] | None = None,
    items: list[Item] | None = None,
    stop_request: threading.Event | None = None,
) -> SessionResult:
    """Run ``spec`` (already validated) to the end, or until Ctrl-C / SIGTERM.

    ``items``: a workload built by the caller (``abtui demo``), sent to every arm instead of
    the spec's synthetic one; ``spec.workload.requests`` should be its length.
    ``stop_request``: set it to stop as Ctrl-C does (a UI running this in a thread, where
    signal handlers cannot be installed)."""
    # local generators make their items themselves from the spec (abtui.runner.schedule): the
    # main process streams them into the file and keeps them light; not the caller's items (the
    # demo) nor Ray actors, whose machines may not hold the workload file
    rebuild = items is None and not spec.ray.address
    start_spec = recipe_spec(spec) if rebuild else None
    # the workload file's errors first (a bad line, a number out of range), then the endpoints',
    # both before any session file is written or any request sent
    sources = level_sources(spec, items)
    targets = resolve_targets(spec)
    # the spec's secrets and the keys from the environment: nothing written or shown has them
    headers = {f"{i}": v for i, t in enumerate(targets) for v in t.headers.values()}
    urls = [a.url for a in spec.arms] + [a.metrics_url for a in spec.arms]
    scrubber = Scrubber(secrets_of(headers, urls, [spec.to_dict()]))
    obs = ScrubbingObserver(observer or NullObserver(), scrubber)
    name, path = session_path(spec)
    total = sum(len(src) for _, _, src in sources)
    spec.workload.requests = total  # a file's items: the count the summary shows
    mode = "open" if open_loop(spec) else "closed"

    writer = SessionWriter(path, overwrite=overwrite, scrubber=scrubber)
    status = "failed"
    procs: list = []
    old_handlers: dict = {}
    ld = spec.load
    planned = ld.runs * total  # every arm plays every item once a run (alternate: block by block)
    live = _Live([a.name for a in spec.arms], planned, spec.slo)
    t_start = _now()
    phase = "warmup"
    hub = None  # background telemetry (server /metrics, local GPUs)
    qi = None  # quality items sent during the load (quality.mode = "interleaved")
    conductor: Conductor | None = None  # starts the segments; knows which one is playing
    fleet = None  # the generators' Ray actors (--ray)

    def snap() -> Snapshot:
        seg = conductor.position() if conductor is not None else None
        return Snapshot(
            elapsed_s=(_now() - t_start) / 1e9, arms=live.arms, phase=phase, segment=seg
        )

    try:
        writer.write_meta(
            session_name=name,
            spec_text=spec_text,
            spec=spec.to_dict(),
            host=_host_fingerprint(),
            mode=ld.schedule,
            load=describe_load(spec),
            levels=[
                {"level": k, "rate": rate, "concurrency": conc, "requests": len(src)}
                for k, (rate, conc, src) in enumerate(sources)
            ],
        )
        writer.write_arms(
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
                for i, (a, t) in enumerate(zip(spec.arms, targets, strict=True))
            ]
        )
        interrupted = {"n": 0}
        stop = None  # the generators' stop event, once they exist

        def on_signal(signum, frame):  # noqa: ARG001
            interrupted["n"] += 1
            if stop is not None:
                stop.set()
            if interrupted["n"] >= 2:  # second Ctrl-C: stop now
                for p in procs:
                    if p.is_alive():
                        p.terminate()

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                old_handlers[sig] = signal.signal(sig, on_signal)
        context = ContextCheck(targets, [a.name for a in spec.arms])

        def sink(batch: list[Item], warmup: bool) -> None:
            if interrupted["n"] or (stop_request is not None and stop_request.is_set()):
                raise _StoppedEarly  # Ctrl-C while the workload is written: nothing sent yet
            writer.write_items(batch)
            if not warmup:
                context.add(batch)

        try:
            sch = session_schedule(spec, sources, sink=sink, light=rebuild)
        except _StoppedEarly:
            status = "interrupted"
            writer.event("interrupted", "stop requested while the workload was being written")
            obs.message(
                "stopped before any request was sent; the session file keeps the "
                "items written so far"
            )
            return SessionResult(path=path, name=name, status=status, snapshot=snap())
        del sources  # every item is in the file now
        levels, warm = sch.levels, sch.warm
        segments = segments_of(spec, levels, len(spec.arms))
        obs.started(
            RunInfo(
                session_name=name,
                session_path=str(path),
                arm_names=[a.name for a in spec.arms],
                arm_urls=[a.url for a in spec.arms],
                arm_models=[t.model for t in targets],
                planned_per_arm=planned,
                load=describe_load(spec),
                delta=spec.policy.delta,
                delta_tail=spec.policy.delta_tail,
            )
        )
        context.report(writer, obs)
        hub = telemetry.start_for_session(spec, writer, obs.message)

        n_gen = spec.load.generators  # generators per arm, each every n-th item of the schedule
        worker_arm = [i for i in range(len(targets)) for _ in range(n_gen)]
        plans = [
            ArmPlan(
                arm=i,
                target=targets[i],
                items=[],
                warmup_items=warm,
                mode=mode,
                concurrency=max((lv.concurrency or 0 for lv in levels), default=0) or None,
                store_text=spec.store.text,
                http=spec.request.http,
                cpu=generator_cpus[w % len(generator_cpus)] if generator_cpus else None,
                segments=None if rebuild else shard(segments, w % n_gen, n_gen),
                worker=w,
                recipe=Recipe(start_spec, len(spec.arms), w % n_gen, n_gen, sch.fingerprint)
                if rebuild
                else None,
            )
            for w, i in enumerate(worker_arm)
        ]
        if spec.ray.address:  # actors on a Ray cluster (abtui.runner.ray); else local processes
            fleet = start_fleet(spec, plans, writer, obs)
            results, pipes, stop, procs = fleet.handles
        else:
            results, pipes, stop = start_local(spec, plans, procs)

        qi = interleave.prepare(
            spec, targets, segments, writer, obs, stop=lambda: interrupted["n"] > 0
        )

        n = len(procs)  # generator processes (workers)
        ready: set[int] = set()
        done: set[int] = set()
        fatal: dict[int, str] = {}
        gen_stats: dict[int, dict] = {}
        conductor = Conductor(
            segments,
            [a.name for a in spec.arms],
            writer,
            START_DELAY_S if fleet is None else RAY_START_DELAY_S,
        )
        delivery = Delivery(since_ns=_now())  # reading starts now (below)
        machine = MachineLoad()  # what the machine does while measuring
        t_ready_deadline = time.monotonic() + READY_TIMEOUT_S
        last_progress = 0.0
        while len(done) < n:
            try:
                msg = results.get(timeout=0.1)
            except queue_mod.Empty:
                msg = None
            if msg is not None:
                kind, wid = msg[0], msg[1]
                arm = worker_arm[wid]
                if kind == "batch":
                    delivery.on_batch(wid, len(msg[2]), msg[3], _now())
                    writer.add_records(msg[2], store_text=spec.store.text)
                    live.add(arm, msg[2], msg[3])
                elif kind == "ready":
                    ready.add(wid)
                elif kind == "segment_done":
                    conductor.on_segment_done(wid, msg[2])
                    live.add(arm, [], msg[3])
                    gen_stats[wid] = msg[3]
                elif kind == "done":
                    done.add(wid)
                    gen_stats[wid] = msg[2]
                    if all(w in done for w, a in enumerate(worker_arm) if a == arm):
                        live.arms[arm].finished = True
                        live.arms[arm].in_flight = 0
                        obs.arm_finished(arm, live.arms[arm])
                elif kind == "lost":  # a Ray node died under it (abtui.runner.ray.fleet)
                    done.add(wid)
                    writer.event("generator_lost", msg[2], arm=arm)
                    writer.write_meta(ray=fleet.meta())
                    obs.message(f"LOST: {msg[2]}")
                elif kind == "fatal":
                    fatal[wid] = msg[2]
                    done.add(wid)
                    writer.event("generator_failed", msg[2], arm=arm)
                    obs.message(f"load generator of {spec.arms[arm].name} failed: {msg[2]}")
            if not interrupted["n"] and conductor.due(ready, done, n):
                conductor.start_next(pipes, ready, done, _now())
                machine.start()
                if qi is not None and not qi.started and conductor.log:
                    qi.start(conductor.log[0]["t0_ns"])
                phase = "measuring"
            if not conductor.started and time.monotonic() > t_ready_deadline:
                stop.set()
                writer.event("warmup_timeout", f"warm-up did not finish in {READY_TIMEOUT_S:g} s")
                obs.message(f"warm-up did not finish within {READY_TIMEOUT_S:g} s; stopping")
            if msg is None:
                # a generator that died without a word (killed): don't wait for it forever
                for i, p in enumerate(procs):
                    if i not in done and not p.is_alive() and results.empty():
                        done.add(i)
                        fatal.setdefault(i, f"exited with code {p.exitcode}")
                        writer.event("generator_died", f"exit code {p.exitcode}", arm=worker_arm[i])
            if stop_request is not None and stop_request.is_set() and not interrupted["n"]:
                on_signal(None, None)
            if interrupted["n"] and phase != "stopping":
                phase = "stopping"
                writer.event("interrupted", "stop requested (signal)")
                obs.message("stopping: cancelling in-flight requests, keeping what was measured")
            telemetry.drain_into(hub, writer, live.arms)
            if qi is not None:
                qi.store(writer)
            writer.maybe_flush()
            t = time.monotonic()
            if t - last_progress >= PROGRESS_INTERVAL_S:
                last_progress = t
                behind = delivery.current(worker_arm, _now())  # the live header's backlog
                for i, ap in enumerate(live.arms):
                    ap.reading_behind_s, ap.records_waiting = behind.get(i, (0.0, 0))
                obs.progress(snap())
        conductor.close(_now())
        live.cuts.store(writer, [a.name for a in spec.arms], obs)
        if fleet is not None:
            fleet.resync()
            writer.write_meta(ray=fleet.meta())
        _mark_health(
            writer, [a.name for a in spec.arms], gen_stats, worker_arm, obs, delivery, machine
        )
        writer.write_meta(
            connections=per_arm_connections(gen_stats, worker_arm, [a.name for a in spec.arms])
        )
        for p in procs:
            p.join(timeout=5)
        if qi is not None:  # the rest of the interleaved items; rows answered are kept on a stop
            if fatal:
                qi.close()
            phase = "quality"
            obs.progress(snap())
            qi.finish(writer, conductor.log[-1].get("end_ns") if conductor.log else None)
        elif spec.quality.enabled and not interrupted["n"] and not fatal:
            phase = "quality"  # after the load test, never timed with it (abtui.quality.run)
            obs.progress(snap())
            run_quality(spec, targets, writer, obs, stop=lambda: interrupted["n"] > 0)
        if interrupted["n"]:
            status = "interrupted"
        elif fatal:
            status = "failed"
        else:
            status = "complete"
        phase = "done"
        return SessionResult(path=path, name=name, status=status, snapshot=snap())
    except StoreWriteError:  # the writer marked the file write_failed and closed it
        status = WRITE_FAILED
        raise
    finally:
        for sig, h in old_handlers.items():
            signal.signal(sig, h)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
        if fleet is not None:
            fleet.close()
        if qi is not None:
            qi.close()
        if writer.closed:  # a write failed: nothing more goes into the file
            telemetry.finish(hub, None)
        else:
            telemetry.finish(hub, writer)
        writer.close(status=status)
        obs.finished(snap(), status)
