"""`abtui run --ray` on a real local Ray cluster: a head (no CPUs: it only hosts the driver's
connection) and two worker nodes, started once for the module and stopped at its end.

The second worker node's clocks are shifted by ``SKEW_NS`` (``ABTUI_CLOCK_SKEW_NS`` in its
raylet's environment, inherited by its actors), so every run here also checks that a node whose
clock is off still starts the shared schedule on time. Skips when Ray is not installed (and says
so), unless ABTUI_REQUIRE_RAY=1."""

from __future__ import annotations

import os
import threading
import time

import pytest

from abtui.cli import main
from abtui.runner.observer import NullObserver
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.stats.reasons import Code
from abtui.store.reader import SessionReader

# serial: a 3-node Ray cluster on the 2 cores; the local and Ray runs' effects agree
pytestmark = pytest.mark.serial

if os.environ.get("ABTUI_REQUIRE_RAY") == "1":
    import ray  # noqa: F401 - must be there: fail, never skip
else:
    pytest.importorskip(
        "ray",
        reason="Ray is not installed: pip install 'abtui[ray]' "
        "(ABTUI_REQUIRE_RAY=1 makes this a failure)",
    )

SKEW_NS = 2_500_000_000  # node 2's clocks are 2.5 s ahead
OBJECT_STORE = 100 * 1024 * 1024  # per node: the runs move records of a few kB per batch
# A node's death is noticed by the GCS's health checks: 0.5 s apart, 2 misses.
SYSTEM_CONFIG = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 2,
}


@pytest.fixture(scope="module")
def cluster():
    import ray
    from ray.cluster_utils import Cluster

    from abtui.runner.ray.actor import SKEW_ENV

    t = time.perf_counter()
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "object_store_memory": OBJECT_STORE,
            "include_dashboard": False,
            "_system_config": SYSTEM_CONFIG,
        },
    )
    try:
        nodes = [
            c.add_node(num_cpus=2, object_store_memory=OBJECT_STORE),
            c.add_node(
                num_cpus=2, object_store_memory=OBJECT_STORE, env_vars={SKEW_ENV: str(SKEW_NS)}
            ),
        ]
        c.wait_for_nodes()
        ray.init(address=c.address, logging_level="WARNING")
        print(f"\nray cluster (head + 2 workers) up in {time.perf_counter() - t:.1f} s")
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def sims():
    with (
        SimProcess(SimConfig(ttft_ms=40, itl_ms=8, model="sim-a", seed=1)) as a,
        SimProcess(SimConfig(ttft_ms=30, itl_ms=6, model="sim-b", seed=2)) as b,
    ):
        yield a, b


def _spec(tmp_path, sims, name: str, requests: int = 40, rate: float = 10.0) -> str:
    a, b = sims
    p = tmp_path / f"{name}.toml"
    p.write_text(f"""name = "{name}"
[[arms]]
name = "baseline"
url = "{a.url}"
[[arms]]
name = "candidate"
url = "{b.url}"
[workload]
requests = {requests}
input_tokens = 64
output_tokens = 32
[load]
rate = {rate}
generators = 2
warmup = 2
[store]
dir = "{tmp_path}"
[policy]
guardrails = ["ttft.p50", "tpot.p50"]  # P99 guardrails cannot be called below 1,000 requests
""")
    return str(p)


def _verdict(path):
    from abtui.verdict.saved import session_verdict

    return session_verdict(path, store=False)


def test_ray_ab_matches_local_run(cluster, sims, tmp_path, capsys):
    c, _ = cluster
    t = time.perf_counter()
    rc_local = main(["run", _spec(tmp_path, sims, "local"), "--headless"])
    t_local = time.perf_counter() - t
    t = time.perf_counter()
    rc_ray = main(["run", _spec(tmp_path, sims, "onray"), "--headless", "--ray", c.address])
    t_ray = time.perf_counter() - t
    err = capsys.readouterr().err
    assert "ray: 4 generator actors on 2 node(s), spread placement" in err
    local, onray = _verdict(tmp_path / "local.duckdb"), _verdict(tmp_path / "onray.duckdb")
    with SessionReader(tmp_path / "local.duckdb") as rd:
        n_local = len(rd.request_table())
    with SessionReader(tmp_path / "onray.duckdb") as rd:
        t_ray_tab, meta = rd.request_table(), rd.meta()
    assert n_local == len(t_ray_tab) == 80 and set(t_ray_tab.status) == {"ok"}
    # The candidate is 25% faster in TTFT and TPOT. Both runs must measure that same effect:
    # within the policy's δ of each other, the difference the verdict itself calls negligible.
    # Not "their CIs overlap": those CIs hold one run's sampling noise only (±0.1 point for
    # the simulator's near-constant TPOT), while the client's own delay moves between two runs
    # on a loaded box (common to both arms of a run, it still shifts a ratio): TPOT P50 effects
    # of -25.05% and -24.83% with disjoint CIs failed it at load 13–19 (docs/scale-out.md).
    # Their verdict classes may still differ on a loaded box, where the lag and dependence rules
    # can refuse a call for one 40-request run and not the other (seen in CI), so the classes are
    # only compared when neither run was refused for its machine or its dependence.
    for key in ("ttft.p50", "tpot.p50", "e2e.p50"):
        el, er = (v.verdict.pairs[0].comparison.get(key) for v in (local, onray))
        for e in (el, er):
            assert e.hi < 0 and -0.35 < e.ratio < -0.15, (key, e.ratio, e.lo, e.hi)
        assert abs(el.ratio - er.ratio) <= min(el.delta, er.delta), (key, el.ratio, er.ratio)
    assert local.verdict.result in ("GO", "INCONCLUSIVE") and rc_local in (0, 4)
    assert onray.verdict.result in ("GO", "INCONCLUSIVE") and rc_ray in (0, 4)
    said = [
        t
        for v in (local, onray)
        for t in v.verdict.pairs[0].reasons
        + [e.note for e in v.verdict.pairs[0].comparison.effects]
    ]
    refusals = {Code.LOAD_NOT_KEPT, Code.LAG_EXPLAINS, Code.LAG_UNBOUNDED, Code.TOO_DEPENDENT}
    refused = [t for t in said if getattr(t, "code", None) in refusals]
    if not refused:
        assert rc_local == rc_ray and local.verdict.result == onray.verdict.result
    ray_meta = meta["ray"]
    nodes = {n["node_id"] for n in ray_meta["nodes"]}
    assert len(nodes) == 2 and not ray_meta["lost"]
    for arm in ("baseline", "candidate"):  # placed alike: each arm has a generator on each node
        assert {n["node_id"] for n in ray_meta["nodes"] if n["arm"] == arm} == nodes
    print(
        f"\nlocal run {t_local:.1f} s, ray run {t_ray:.1f} s (actors started in "
        f"{ray_meta['start_s']:.1f} s); verdict {onray.verdict.result} both"
    )


def test_skewed_node_clock_is_measured_and_corrected(cluster, sims, tmp_path):
    c, _ = cluster
    main(["run", _spec(tmp_path, sims, "skew", requests=20), "--headless", "--ray", c.address])
    with SessionReader(tmp_path / "skew.duckdb") as rd:
        meta = rd.meta()
        rows = rd.query(
            "SELECT arm, item, scheduled_ns, dispatched_ns FROM requests WHERE NOT warmup"
        )
    nodes = meta["ray"]["nodes"]
    skewed = [n for n in nodes if abs(n["clock"]["wall_offset_ns"]) > SKEW_NS / 2]
    assert len(skewed) == 2  # one generator of each arm on the skewed node
    for n in nodes:
        clk = n["clock"]
        true = SKEW_NS if n in skewed else 0  # the nodes share this machine's clocks otherwise
        assert abs(clk["mono_offset_ns"] - true) <= clk["uncertainty_ns"] + 1000, clk
        assert abs(clk["wall_offset_ns"] - true) <= clk["uncertainty_ns"] + 1000, clk
    # corrected: both arms' requests for one item were scheduled at the same driver instant,
    # whichever node sent them (uncorrected, the skewed node's would be 2.5 s off)
    sched = {}
    for arm, item, s, d in rows:
        sched.setdefault(item, {})[arm] = s
        assert 0 <= d - s < 50_000_000  # sent on time by its own clock
    worst = max(n["clock"]["uncertainty_ns"] for n in nodes)
    gaps = [abs(v[0] - v[1]) for v in sched.values() if len(v) == 2]
    assert len(gaps) == 20 and max(gaps) <= 2 * worst + 1000, (max(gaps), worst)
    t0 = meta["segments"][0]["t0_ns"]
    assert min(s for _, _, s, _ in rows) >= t0 - worst - 1000


class _KillOnProgress(NullObserver):
    """Kills the first worker node (from another thread) once ``after`` records were received."""

    def __init__(self, cluster, node, after: int) -> None:
        self.cluster, self.node, self.after = cluster, node, after
        self.before = None
        self.lines: list[str] = []
        self.thread = None

    def progress(self, snap) -> None:
        done = sum(a.done for a in snap.arms)
        if self.thread is None and done >= self.after:
            self.before = done
            self.thread = threading.Thread(
                target=self.cluster.remove_node, args=(self.node,), kwargs={"allow_graceful": False}
            )
            self.thread.start()

    def message(self, text: str) -> None:
        self.lines.append(text)


def test_lost_worker_node_keeps_what_was_received(cluster, sims, tmp_path):
    from abtui.runner.session import run_session
    from abtui.spec import load_spec, validate

    c, nodes = cluster
    spec, text = load_spec(_spec(tmp_path, sims, "lost", requests=120, rate=10.0))
    spec = validate(spec)
    spec.ray.address = c.address
    obs = _KillOnProgress(c, nodes[0], after=30)
    t = time.perf_counter()
    try:
        res = run_session(spec, text, obs)
    finally:
        if obs.thread is not None:
            obs.thread.join()
        nodes[0] = c.add_node(num_cpus=2, object_store_memory=OBJECT_STORE)  # for later tests
    print(f"\nlost-node run {time.perf_counter() - t:.1f} s; messages: {obs.lines}")
    assert obs.before is not None and any(line.startswith("LOST: generator") for line in obs.lines)
    with SessionReader(res.path) as rd:
        meta = rd.meta()
        tab = rd.request_table()
        events = [e["kind"] for e in rd.events()]
    assert len(tab) >= obs.before  # nothing already received was lost
    lost = meta["ray"]["lost"]
    assert len(lost) == 2 and {x["arm"] for x in lost} == {"baseline", "candidate"}
    assert events.count("generator_lost") == 2
    assert (tab.error_class == "generator_lost").sum() == sum(x["in_flight"] for x in lost)
    v = _verdict(res.path).verdict
    assert v.result != "GO"
    assert any(r.code == Code.GENERATOR_LOST for p in v.pairs for r in p.reasons)
