#!/usr/bin/env python3
"""The driver's ingest with the load generators as Ray actors vs local processes.

(a) ingest: ``abtui run`` (the real driver, a child process of this script) against abtui's
    zero-delay simulator, closed loop (64 streams per arm, ``--seconds`` of load), 256-token
    answers, with 1, 2, 4 generators per arm (2 arms: 2, 4, 8 generators in all), either as
    Ray actors on a local cluster that this script starts (a head with no CPUs and
    ``--nodes`` worker nodes, ``ray.cluster_utils.Cluster``) and stops by the handles of the
    processes it started, or as local processes (``[load] generators``, no Ray): the same
    load both ways, so Ray's overhead is a number. The two arms share one simulator process
    or have one each (``--sims 1,2``), to see whether the simulator is the limit. For each
    run: tokens and requests the driver ingested per second of the measured window (first
    segment's t0 to the last record read, from the session file), the CPU each process used
    over that window (``/proc/<pid>/stat``, sampled every 0.2 s and interpolated at the
    window's edges): the driver, each generator (actor or process), each simulator, Ray's
    own processes (GCS, raylets, agents, idle workers) and the rest of the machine; the
    driver's peak RSS (``VmHWM``); and how late the driver read the records (the session's
    health figures). Medians of ``--repeat`` runs, interleaved.
(a2) on that cluster, what one ``poll`` round trip costs the driver and the actor (CPU per
    call), empty and carrying 16 records: the Ray driver's cost per batch of records.
(b) the driver's cost per record, in this process (no Ray): what the driver does with one
    ``batch`` message, by stage: unpickle it (as ``multiprocessing``'s queue and ``ray.get``
    do), the live figures (``Delivery.on_batch`` and the live sketches), the session writer
    (``add_records`` + its flushes into DuckDB: one ``requests`` row per record and one
    ``chunks`` row per token-bearing chunk). Synthetic records shaped like the simulator's
    (256 tokens in 256, 32 or 1 chunks; text or not); CPU per record and the tokens per
    CPU-second of one driver core that follow.

Timing figures depend on the machine's load: the load average is printed with them. On a machine
with fewer cores than the processes it runs (driver, generators, simulators, Ray's own), every
figure of (a) shares the same cores, and (a) shows cost, not scaling: read it with the CPU columns.

    python scripts/bench_ray.py                                   # (a) and (b), defaults
    python scripts/bench_ray.py --parts a --generators 1,2 --sims 2 --repeat 3
    python scripts/bench_ray.py --parts b                         # no Ray needed
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path

from abtui.client import records
from abtui.client.records import RequestRecord
from abtui.hardware.host import cpu_model
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess

TICK = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.2
DISCOVER_EVERY = 5  # samples between walks of the process tree (new processes: within 1 s)
ARMS = ("baseline", "candidate")


# ------------------------------------------------------------------ /proc


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, CPU ticks used: user + system) of ``pid``, or None when it is gone."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(rest[1]), int(rest[11]) + int(rest[12])


def _hwm_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _busy_ticks() -> int:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v[:3]) + v[5] + v[6]  # user nice system irq softirq (guest is in user)


def _descendants(root: int) -> list[int]:
    out, stack = [], [root]
    while stack:
        p = stack.pop()
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                kids = [int(c) for c in (task / "children").read_text().split()]
                out += kids
                stack += kids
        except OSError:
            pass
    return out


class Sampler(threading.Thread):
    """Every ``SAMPLE_S``: the CPU ticks of every process under this one, the machine's busy
    ticks, and the driver's peak RSS. ``cpu(pid, t0, t1)``: seconds used in [t0, t1] (ns)."""

    def __init__(self, driver: int) -> None:
        super().__init__(daemon=True)
        self.driver = driver
        self.series: dict[int, list[tuple[int, int]]] = {}
        self.parent: dict[int, int] = {}
        self.machine: list[tuple[int, int]] = []
        self.hwm_kb = 0
        self.done = threading.Event()
        self.own_cpu_s = 0.0

    def run(self) -> None:
        c0, k, pids = time.thread_time(), 0, []
        while True:
            if k % DISCOVER_EVERY == 0:  # walking the tree costs more than reading the stats
                pids = _descendants(os.getpid())
            k += 1
            t = time.perf_counter_ns()
            for pid in pids:
                st = _stat(pid)
                if st is not None:
                    self.parent[pid] = st[0]
                    self.series.setdefault(pid, []).append((t, st[1]))
            self.machine.append((t, _busy_ticks()))
            self.hwm_kb = max(self.hwm_kb, _hwm_kb(self.driver))
            if self.done.wait(SAMPLE_S):
                break
        self.own_cpu_s = time.thread_time() - c0

    @staticmethod
    def _at(s: list[tuple[int, int]], t: int) -> float:
        if not s:
            return 0.0
        if t <= s[0][0]:  # every process measured here was there before the window opened
            return float(s[0][1])
        for (ta, va), (tb, vb) in zip(s, s[1:], strict=False):
            if ta <= t <= tb:
                return va + (vb - va) * (t - ta) / max(1, tb - ta)
        return float(s[-1][1])  # gone before t: all it used

    def cpu(self, pid: int, t0: int, t1: int) -> float:
        s = self.series.get(pid, [])
        return (self._at(s, t1) - self._at(s, t0)) / TICK

    def machine_cpu(self, t0: int, t1: int) -> float:
        return (self._at(self.machine, t1) - self._at(self.machine, t0)) / TICK


# ------------------------------------------------------------------ (a) ingest


def _spec(path: Path, urls: list[str], gens: int, args) -> Path:
    arms = "".join(
        f'[[arms]]\nname = "{n}"\nurl = "{u}"\n' for n, u in zip(ARMS, urls, strict=True)
    )
    path.write_text(f"""{arms}[workload]
requests = {args.requests * gens}
input_tokens = 64
output_tokens = {args.output_tokens}
[load]
concurrency = {args.concurrency}
duration = "{args.seconds:g}s"
generators = {gens}
warmup = {2 * gens}
[store]
dir = "{path.parent}"
text = {str(not args.no_store_text).lower()}
""")
    return path


def run_once(
    where: str,
    gens: int,
    urls: list[str],
    sims: list[int],
    address: str | None,
    tmp: Path,
    k: int,
    args,
) -> dict:
    from abtui.store.reader import SessionReader

    name = f"{where}-g{gens}-s{len(sims)}-{k}"
    spec = _spec(tmp / f"{name}.toml", urls, gens, args)
    argv = [sys.executable, "-m", "abtui", "run", str(spec), "--headless", "--name", name]
    if where == "ray":
        argv += ["--ray", address]
    load = os.getloadavg()[0]
    with open(tmp / f"{name}.log", "w") as log:
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        smp = Sampler(p.pid)
        smp.start()
        try:
            rc = p.wait(timeout=args.timeout)
        finally:
            smp.done.set()
            smp.join()
            if p.poll() is None:  # interrupted or timed out: the driver goes too
                p.terminate()
                p.wait(30)
    db = tmp / f"{name}.duckdb"
    if not db.exists():
        raise SystemExit(
            f"{name}: no session (exit {rc}); see {tmp / (name + '.log')}:\n"
            + (tmp / f"{name}.log").read_text()[-3000:]
        )
    with SessionReader(db) as rd:
        meta = rd.meta()
        ((ok, failed, tokens),) = rd.query(
            "SELECT count(*) FILTER (WHERE status = 'ok'), count(*) FILTER (WHERE status <> 'ok'),"
            " coalesce(sum(n_output) FILTER (WHERE status = 'ok'), 0) FROM requests "
            "WHERE NOT warmup"
        )
    db.unlink()
    segs = meta["segments"]
    t0, t1 = segs[0]["t0_ns"], segs[-1]["end_ns"]
    wall = (t1 - t0) / 1e9
    if where == "ray":
        gen_pids = [n["pid"] for n in meta["ray"]["nodes"]]
    else:  # the driver's spawned children, less multiprocessing's resource tracker
        gen_pids = [q for q, pp in smp.parent.items() if pp == p.pid and _is_spawned(smp, q)]
    ours = {p.pid, *gen_pids, *sims}
    gen_cpu = [smp.cpu(q, t0, t1) / wall for q in gen_pids]
    sim_cpu = [smp.cpu(q, t0, t1) / wall for q in sims]
    driver = smp.cpu(p.pid, t0, t1) / wall
    rest = [q for q in smp.series if q not in ours]  # Ray's own processes (local runs: in others)
    ray_own = sum(smp.cpu(q, t0, t1) for q in rest) / wall if where == "ray" else 0.0
    machine = smp.machine_cpu(t0, t1) / wall
    health = (meta.get("generator_health") or {}).get("arms") or {}
    behind = max((a.get("main_behind_max_s") or 0.0 for a in health.values()), default=0.0)
    return {
        "rc": rc,
        "ok": ok,
        "failed": failed,
        "tok_s": tokens / wall,
        "req_s": ok / wall,
        "wall_s": wall,
        "driver": driver,
        "gen_sum": sum(gen_cpu),
        "gen_max": max(gen_cpu, default=0.0),
        "n_gen": len(gen_cpu),
        "sim": sim_cpu,
        "sim_max": max(sim_cpu, default=0.0),
        "ray_own": ray_own,
        "others": max(0.0, machine - driver - sum(gen_cpu) - sum(sim_cpu) - ray_own),
        "rss_mb": smp.hwm_kb / 1024,
        "behind_s": behind,
        "load": load,
        "sampler_cpu": smp.own_cpu_s / wall,
    }


def _is_spawned(smp: Sampler, pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone: count it unless it was the tracker (never seen: tracker lives on)
        return True
    return b"spawn_main" in cmd


def _median_row(runs: list[dict]) -> dict:
    keys = [k for k, v in runs[0].items() if isinstance(v, int | float)]
    return {k: statistics.median(r[k] for r in runs) for k in keys}


def part_a(args) -> None:
    gens = [int(x) for x in args.generators.split(",")]
    sims_n = [int(x) for x in args.sims.split(",")]
    wheres = [w for w in args.where.split(",") if w]
    cluster, address = None, None
    try:
        if "ray" in wheres:
            cluster, address = _start_cluster(args, max(gens))
        rows: dict[tuple, list[dict]] = {}
        with tempfile.TemporaryDirectory(prefix="bench_ray-") as d:
            tmp = Path(d)
            for ns in sims_n:
                cfg = SimConfig(ttft_ms=0, itl_ms=0, tokens_per_chunk=args.tokens_per_chunk)
                procs = [SimProcess(cfg, seed=s + 1).start() for s in range(ns)]
                try:
                    urls = [procs[i % ns].url for i in range(2)]
                    pids = [q.pid for q in procs]
                    for k in range(args.repeat):  # interleaved: drift of the load hits all alike
                        for g in gens:
                            for w in wheres:
                                r = run_once(w, g, urls, pids, address, tmp, k, args)
                                rows.setdefault((g, ns, w), []).append(r)
                                print(
                                    f"  {w:5} {g} gen/arm, {ns} sim(s), run {k + 1}: "
                                    f"{r['tok_s']:9,.0f} tok/s  driver {r['driver']:.0%}  "
                                    f"generators {r['gen_sum']:.0%} (max {r['gen_max']:.0%})  "
                                    f"sims {'/'.join(f'{x:.0%}' for x in r['sim'])}  ray own "
                                    f"{r['ray_own']:.0%}  others {r['others']:.0%}  load "
                                    f"{r['load']:.1f}  failed {r['failed']}",
                                    flush=True,
                                )
                finally:
                    for q in procs:
                        q.stop()
        if address is not None:
            poll = poll_cost(address, args)
    finally:
        if cluster is not None:
            t = time.perf_counter()
            cluster.shutdown()
            print(f"# cluster stopped in {time.perf_counter() - t:.1f} s")
    _table_a(rows, args)
    if address is not None:
        _table_poll(poll)


def _start_cluster(args, max_gen: int):
    """A head (no CPUs: it hosts the drivers' connections) and ``--nodes`` worker nodes with
    CPUs for ``max_gen`` bundles of two arms, spread; stopped by ``Cluster.shutdown`` (which
    kills the processes it started, by their handles)."""
    from ray.cluster_utils import Cluster

    per_node = 2 * math.ceil(max_gen / args.nodes)
    t = time.perf_counter()
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "object_store_memory": args.object_store_mb << 20,
            "include_dashboard": False,
        },
    )
    try:
        for _ in range(args.nodes):
            c.add_node(num_cpus=per_node, object_store_memory=args.object_store_mb << 20)
        c.wait_for_nodes()
    except BaseException:
        c.shutdown()
        raise
    print(
        f"# local Ray cluster: head (0 CPUs) + {args.nodes} worker nodes of {per_node} logical "
        f"CPUs, up in {time.perf_counter() - t:.1f} s ({c.address})",
        flush=True,
    )
    return c, c.address


def _table_a(rows: dict[tuple, list[dict]], args) -> None:
    print(
        f"\n(a) ingest, closed loop {args.concurrency} streams per arm, {args.output_tokens}-token "
        f"answers in {args.tokens_per_chunk}-token chunks, {args.seconds:g} s per run, "
        f"text {'not ' if args.no_store_text else ''}stored; median of {args.repeat} runs; CPU "
        "in cores (1.00 = one core busy) over the measured window"
    )
    print(
        "| gen/arm (in all) | sims | where | tokens/s | requests/s | driver CPU | generators "
        "CPU (busiest) | sims CPU | Ray's own | others | driver tok per CPU-s | driver peak RSS "
        "| read late (max) | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    med = {key: _median_row(rs) for key, rs in rows.items()}
    for (g, ns, w), m in sorted(med.items()):
        bad = sum(r["failed"] for r in rows[(g, ns, w)])
        own = (
            f"{m['ray_own']:.2f}" if w == "ray" else "—"
        )  # local runs: the idle cluster is in others
        print(
            f"| {g} ({2 * g}) | {ns} | {w} | {m['tok_s']:,.0f} | {m['req_s']:,.0f} | "
            f"{m['driver']:.2f} | {m['gen_sum']:.2f} ({m['gen_max']:.2f}) | {m['sim_max']:.2f}"
            f"{' each' if ns > 1 else ''} | {own} | {m['others']:.2f} | "
            f"{m['tok_s'] / max(m['driver'], 1e-9):,.0f} | {m['rss_mb']:.0f} MB | "
            f"{m['behind_s'] * 1e3:.0f} ms | {m['load']:.1f} |" + (f" {bad} failed" if bad else "")
        )
    for (g, ns, w), m in sorted(med.items()):
        loc = med.get((g, ns, "local"))
        if w == "ray" and loc:
            print(
                f"  {g} gen/arm, {ns} sim(s): Ray/local tokens/s ×{m['tok_s'] / loc['tok_s']:.2f};"
                f" driver CPU per Mtok {1e6 * m['driver'] / m['tok_s']:.1f} s (Ray) vs "
                f"{1e6 * loc['driver'] / loc['tok_s']:.1f} s (local); generators' CPU per Mtok "
                f"{1e6 * m['gen_sum'] / m['tok_s']:.1f} s vs {1e6 * loc['gen_sum'] / loc['tok_s']:.1f}"
                f" s; Ray's own processes {m['ray_own']:.2f} core (a background, whatever the "
                "rate)"
            )
    sampler = statistics.median(r["sampler_cpu"] for rs in rows.values() for r in rs)
    print(f"  (this script's /proc sampler used {sampler:.1%} of a core)")


def poll_cost(address: str, args, calls: int = 400) -> list[dict]:
    """What one ``poll`` round trip costs (abtui.runner.ray.fleet keeps one in flight per actor;
    a busy actor answers ~20 a second, one per batch shipped): CPU of this process as the
    driver (its Ray threads included) and of the actor, per call, for an empty reply and for
    a batch of 16 records of 256 chunks."""
    import ray

    ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    try:

        @ray.remote(num_cpus=0)
        class Echo:
            def __init__(self, recs: list) -> None:
                self.recs = recs

            def pid(self) -> int:
                return os.getpid()

            def poll(self, n: int) -> tuple[list, list]:
                return self.recs[:n], []

        actor = Echo.remote(_records(16, 256, 256, not args.no_store_text, 0))
        pid = ray.get(actor.pid.remote())
        out = []
        for n in (0, 16):
            for _ in range(50):  # warm
                ray.get(actor.poll.remote(n))
            a0, c0, w0 = _stat(pid)[1], time.process_time(), time.perf_counter()
            for _ in range(calls):
                ray.get(actor.poll.remote(n))
            w, c, a = time.perf_counter() - w0, time.process_time() - c0, _stat(pid)[1] - a0
            out.append(
                {
                    "records": n,
                    "wall_us": 1e6 * w / calls,
                    "driver_us": 1e6 * c / calls,
                    "actor_us": 1e6 * a / TICK / calls,
                }
            )
        ray.kill(actor)
        return out
    finally:
        ray.shutdown()


def _table_poll(rows: list[dict]) -> None:
    print(
        "\n(a2) one `poll` round trip on this cluster (one in flight, as the driver keeps per "
        "actor), per call"
    )
    print("| records in the reply | round trip µs (wall) | driver CPU µs | actor CPU µs |")
    print("|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['records']} | {r['wall_us']:.0f} | {r['driver_us']:.0f} | {r['actor_us']:.0f} |"
        )


# ------------------------------------------------------------------ (b) the driver per record


def _records(n: int, tokens: int, chunks: int, text: bool, first: int) -> list[RequestRecord]:
    per = [tokens // chunks + (1 if k < tokens % chunks else 0) for k in range(chunks)]
    out = []
    t = 1_000_000_000_000
    for i in range(first, first + n):
        d = t + i * 1_000_000
        out.append(
            RequestRecord(
                arm=i % 2,
                item=i // 2,
                scheduled_ns=d - 20_000,
                dispatched_ns=d,
                first_byte_ns=d + 400_000,
                done_ns=d + 400_000 + chunks * 37_000,
                chunk_ns=[d + 400_000 + k * 37_000 for k in range(chunks)],
                chunk_tokens=per,
                status=records.OK,
                http_status=200,
                n_input=64,
                n_output=tokens,
                token_source=records.TOKENS_USAGE,
                finish_reason="length",
                text=" tok" * tokens if text else None,
            )
        )
    return out


def driver_cost(tokens: int, chunks: int, text: bool, n: int, batch: int) -> dict:
    """CPU per record of what the driver's loop does with ``batch`` messages of ``batch``
    records (abtui.runner.session.run_session), by stage, over ``n`` records."""
    from abtui.runner.health import Delivery
    from abtui.runner.messages import Batch, GeneratorStats
    from abtui.runner.session import _Live
    from abtui.store import writer as store_writer

    columns = [0.0]  # CPU in W.record_columns (records -> numpy columns), inside the flushes
    build = store_writer.record_columns

    def timed(*a):
        c = time.process_time()
        try:
            return build(*a)
        finally:
            columns[0] += time.process_time() - c

    msgs = []
    for b in range(0, n, batch):
        recs = _records(batch, tokens, chunks, text, b)
        stats = GeneratorStats(
            cpu_s=1.0,
            in_flight=64,
            in_flight_max=64,
            shipped=b + batch,
            shipped_ns=time.perf_counter_ns(),
        )
        msgs.append(pickle.dumps(Batch((b // batch) % 2, recs, stats), protocol=5))
    cost = {"unpickle": 0.0, "live": 0.0, "store": 0.0}
    with tempfile.TemporaryDirectory() as d:
        store_writer.record_columns = timed
        writer = store_writer.SessionWriter(Path(d) / "bench.duckdb")
        live, delivery = _Live(list(ARMS), n), Delivery(since_ns=time.perf_counter_ns())
        w0 = time.perf_counter()
        for raw in msgs:
            c0 = time.process_time()
            msg = pickle.loads(raw)
            wid, recs, stats = msg.wid, msg.records, msg.stats
            c1 = time.process_time()
            delivery.on_batch(wid, len(recs), stats, time.perf_counter_ns())
            live.add(wid, recs, stats)
            c2 = time.process_time()
            writer.add_records(recs, store_text=text)
            writer.maybe_flush()
            c3 = time.process_time()
            cost["unpickle"] += c1 - c0
            cost["live"] += c2 - c1
            cost["store"] += c3 - c2
        c0 = time.process_time()
        writer.flush()
        cost["store"] += time.process_time() - c0
        wall = time.perf_counter() - w0
        writer.close(status="complete")
        store_writer.record_columns = build
        size = (Path(d) / "bench.duckdb").stat().st_size
    total = sum(cost.values())
    cost["columns"], cost["duckdb"] = columns[0], cost.pop("store") - columns[0]
    return {
        **{k: 1e6 * v / n for k, v in cost.items()},
        "total_us": 1e6 * total / n,
        "tok_per_cpu_s": n * tokens / total,
        "rec_per_cpu_s": n / total,
        "wall_tok_s": n * tokens / wall,
        "bytes_per_rec": len(msgs[0]) / batch,
        "db_bytes_per_tok": size / (n * tokens),
    }


def part_b(args) -> None:
    print(
        f"\n(b) the driver's CPU per record (this process, no Ray; batches of {args.batch} "
        f"records, {args.records:,} records, median of {args.repeat}); 256-token answers"
    )
    print(
        "| chunks per record (tokens each) | text | unpickle µs | live µs | columns µs | DuckDB µs "
        "| total µs per record | records per CPU-s | tokens per CPU-s | pickled bytes per record "
        "| file bytes per token |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for chunks, text in ((256, True), (256, False), (32, True), (32, False), (1, False)):
        runs = [
            driver_cost(256, chunks, text, args.records, args.batch) for _ in range(args.repeat)
        ]
        m = _median_row(runs)
        print(
            f"| {chunks} ({256 // chunks}) | {'yes' if text else 'no'} | {m['unpickle']:.1f} | "
            f"{m['live']:.1f} | {m['columns']:.1f} | {m['duckdb']:.1f} | {m['total_us']:.1f} | "
            f"{m['rec_per_cpu_s']:,.0f} | {m['tok_per_cpu_s']:,.0f} | "
            f"{m['bytes_per_rec']:,.0f} | {m['db_bytes_per_tok']:.1f} |",
            flush=True,
        )


# ------------------------------------------------------------------ main


def _ver(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--parts",
        default="ab",
        help="a: ingest (Ray and local); b: the driver's cost per record (default ab)",
    )
    ap.add_argument("--generators", default="1,2,4", help="generators per arm (default 1,2,4)")
    ap.add_argument(
        "--sims",
        default="1,2",
        help="simulator processes: 1 shared by both arms, 2 one per arm (default 1,2)",
    )
    ap.add_argument(
        "--where",
        default="local,ray",
        help="local (processes), ray (actors), or both: local,ray (default)",
    )
    ap.add_argument("--nodes", type=int, default=2, help="Ray worker nodes (default 2)")
    ap.add_argument("--object-store-mb", type=int, default=100, help="per node (default 100)")
    ap.add_argument(
        "--seconds",
        type=float,
        default=8.0,
        help="closed loop: no new request after this (default 8)",
    )
    ap.add_argument(
        "--requests", type=int, default=4000, help="per arm and generator, a cap (default 4000)"
    )
    ap.add_argument("--concurrency", type=int, default=64, help="streams per arm (default 64)")
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--tokens-per-chunk", type=int, default=1, help="the simulator's (default 1)")
    ap.add_argument("--no-store-text", action="store_true", help="[store] text = false")
    ap.add_argument("--repeat", type=int, default=3, help="runs per configuration (median)")
    ap.add_argument("--timeout", type=float, default=600.0, help="per run, seconds")
    ap.add_argument("--records", type=int, default=4000, help="(b): records per measurement")
    ap.add_argument("--batch", type=int, default=16, help="(b): records per batch message")
    args = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C, so that the cluster started here is stopped (finally: below)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    vers = ", ".join(f"{d} {_ver(d)}" for d in ("abtui", "ray", "duckdb", "numpy", "uvloop"))
    print(
        f"# bench_ray — {platform.platform()}, {os.cpu_count()} cpus, {cpu_model()}, Python "
        f"{platform.python_version()}, {vers}; load average at start "
        f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )
    if "a" in args.parts:
        part_a(args)
    if "b" in args.parts:
        part_b(args)
    print(f"# load average at end {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
