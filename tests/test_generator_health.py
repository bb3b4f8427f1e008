"""Load-generator health: lag, CPU share and in-flight stored per arm; a session whose generator
fell behind is marked degraded, and the summary and the verdict say so."""

from __future__ import annotations

import numpy as np
import pytest

from abtui.cli import main
from abtui.metrics.summary import LAG_MAX_LIMIT_S, LAG_P99_LIMIT_S
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader


@pytest.fixture(scope="module")
def sims():
    with (
        SimProcess(SimConfig(ttft_ms=30, itl_ms=2, model="sim-a", seed=1)) as a,
        SimProcess(SimConfig(ttft_ms=30, itl_ms=2, model="sim-b", seed=2)) as b,
    ):
        yield a, b


def _assert_marked_as_measured(meta) -> None:
    """``degraded`` follows the stored lag figures and the verdict's limits, whatever the lag
    was: on a busy machine even a 20 req/s run can fall behind, and must then say so."""
    arms = meta["generator_health"]["arms"].values()
    behind = any(a["lag_p99_s"] > LAG_P99_LIMIT_S or a["lag_max_s"] > LAG_MAX_LIMIT_S for a in arms)
    assert meta["degraded"] is behind
    assert bool(meta["generator_health"]["reasons"]) is behind


def _run(sims, tmp_path, name, *extra):
    return main(["run", "--baseline", sims[0].url, "--candidate", sims[1].url, "--requests", "30",
                 "--input-tokens", "16", "--output-tokens", "8", "--warmup", "1", "--name", name,
                 "--sessions-dir", str(tmp_path), "--headless", *extra])  # fmt: skip


def test_a_healthy_run_stores_its_health(sims, tmp_path, capsys):
    assert _run(sims, tmp_path, "ok", "--rate", "20") in (0, 3, 4)
    out = capsys.readouterr().out
    with SessionReader(tmp_path / "ok.duckdb") as rd:
        meta = rd.meta()
    h = meta["generator_health"]
    _assert_marked_as_measured(meta)
    for name in ("baseline", "candidate"):
        a = h["arms"][name]
        assert a["requests"] == 30 and 0 <= a["lag_p50_s"] <= a["lag_p99_s"] <= a["lag_max_s"]
        assert 0 < a["cpu_share"] < 1 and a["in_flight_max"] >= 1
    assert "generator baseline: lag P50" in out
    assert ("DEGRADED" in out) is meta["degraded"]


def test_a_generator_that_falls_behind_marks_the_session_degraded(sims, tmp_path, capsys):
    # 100 req/s offered with one request in flight at a time (each takes ~45 ms): every
    # request waits for the cap, so the schedule slips by seconds — a generator behind.
    rc = _run(sims, tmp_path, "behind", "--rate", "100", "--concurrency", "1")
    out = capsys.readouterr()
    assert rc != 0  # never GO
    with SessionReader(tmp_path / "behind.duckdb") as rd:
        meta = rd.meta()
        kinds = [e["kind"] for e in rd.events()]
    assert meta["degraded"] is True and kinds.count("degraded") == 2
    assert meta["generator_health"]["arms"]["baseline"]["lag_p99_s"] > 0.1
    assert meta["generator_health"]["arms"]["baseline"]["in_flight_max"] == 1
    assert "DEGRADED SESSION" in out.out and "schedule lag P99" in out.out
    assert "DEGRADED: the load generator fell behind" in out.err
    # the saved file's report says it again
    assert main(["report", str(tmp_path / "behind.duckdb")]) != 0
    assert "DEGRADED SESSION" in capsys.readouterr().out


def test_several_generator_processes_per_arm_share_one_schedule(sims, tmp_path):
    assert _run(sims, tmp_path, "g2", "--rate", "40", "--generators", "2") in (0, 3, 4)
    with SessionReader(tmp_path / "g2.duckdb") as rd:
        meta = rd.meta()
        t = rd.request_table()
    assert len(t) == 60 and set(t.status) == {"ok"}
    for arm in (0, 1):
        rows = t.select(t.arm == arm)
        assert sorted(rows.item) == list(range(30))  # every item once, whichever process sent it
    a, b = t.select(t.arm == 0), t.select(t.arm == 1)
    assert (a.scheduled_ns[np.argsort(a.item)] == b.scheduled_ns[np.argsort(b.item)]).all()
    for name in ("baseline", "candidate"):
        assert meta["generator_health"]["arms"][name]["processes"] == 2
    _assert_marked_as_measured(meta)


def test_more_generators_than_requests_in_flight_is_refused(sims, tmp_path, capsys):
    assert _run(sims, tmp_path, "bad", "--concurrency", "2", "--generators", "3") == 2
    assert "cannot share a concurrency of 2" in capsys.readouterr().err
