"""Load-generator health: lag, CPU share and in-flight stored per arm; a session whose generator
fell behind is marked degraded, and the summary and the verdict say so."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from abtui.cli import main
from abtui.metrics.summary import LAG_MAX_LIMIT_S, LAG_P99_LIMIT_S
from abtui.report.health import stored_health
from abtui.runner.health import ArmGenerators, Backlog, Delivery, per_arm
from abtui.runner.messages import GeneratorStats
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.stats.decide import DELTA_CENTRAL
from abtui.stats.lagguard import load_kept
from abtui.stats.reasons import Code, codes
from abtui.store.reader import SessionReader

# serial: schedule lag of healthy and starved generators
pytestmark = pytest.mark.serial


@pytest.fixture(scope="module")
def sims():
    with (
        SimProcess(SimConfig(ttft_ms=30, itl_ms=2, model="sim-a", seed=1)) as a,
        SimProcess(SimConfig(ttft_ms=30, itl_ms=2, model="sim-b", seed=2)) as b,
    ):
        yield a, b


def _assert_marked_as_measured(meta) -> None:
    """``degraded`` follows the stored lag figures and the verdict's load rule, whatever the lag
    was: on a busy machine even a 20 req/s run can fall behind, and must then say so; a lag past
    the fixed limits that kept the load is a note, with what the machine was doing."""
    h = meta["generator_health"]
    arms = h["arms"].values()
    behind = any(
        not load_kept(a["lag_p99_s"], a["gap_s"], a["e2e_p50_s"], DELTA_CENTRAL) for a in arms
    )
    assert meta["degraded"] is behind
    stored = stored_health(meta)  # the words read back with their codes
    assert codes(stored.reasons) == [Code.LOAD_NOT_KEPT] * len(stored.reasons)
    assert bool(stored.reasons) is behind
    late = any(a["lag_p99_s"] > LAG_P99_LIMIT_S or a["lag_max_s"] > LAG_MAX_LIMIT_S for a in arms)
    assert (Code.MACHINE_BUSY in codes(stored.notes)) is late
    assert all(codes(stored.notes))
    m = h["machine"]
    assert m["cpus"] == os.cpu_count() and 0 <= m["abtui_cpus"] and 0 <= m["other_cpus"]


def _run(sims, tmp_path, name, *extra):
    return main(
        [
            "run",
            "--baseline",
            sims[0].url,
            "--candidate",
            sims[1].url,
            "--requests",
            "30",
            "--input-tokens",
            "16",
            "--output-tokens",
            "8",
            "--warmup",
            "1",
            "--name",
            name,
            "--sessions-dir",
            str(tmp_path),
            "--headless",
            *extra,
        ]
    )


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
        assert a["main_behind_max_s"] >= 0 and a["records_waiting_max"] >= 1
    assert "generator baseline: lag P50" in out and "its records read at most" in out
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
    assert "the arm did not get the load asked for" in " ".join(out.out.split())
    assert "note: the machine: while measuring, other processes kept" in out.err
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
    assert _run(sims, tmp_path, "bad", "--concurrency", "1", "--generators", "2") == 2
    assert "cannot share a concurrency of 1" in capsys.readouterr().err


def test_a_stalled_main_process_loses_nothing_and_the_backlog_is_stored(sims, tmp_path, capsys):
    """SIGSTOP the main process of a real run mid-schedule: the generators keep sending and hold
    their finished records until it reads again; every request lands in the file, and the
    health says how late the records were read and how many waited."""
    rate, n, stall_s = 40, 320, 3.0  # an 8 s schedule; the stall covers ~120 records per arm
    err = tmp_path / "run.err"
    cmd = [
        sys.executable,
        "-m",
        "abtui",
        "run",
        "--baseline",
        sims[0].url,
        "--candidate",
        sims[1].url,
        "--requests",
        str(n),
        "--rate",
        str(rate),
        "--input-tokens",
        "16",
        "--output-tokens",
        "8",
        "--warmup",
        "0",
        "--name",
        "stall",
        "--sessions-dir",
        str(tmp_path),
        "--headless",
    ]
    with err.open("w") as f:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=f)
    try:
        deadline = time.monotonic() + 60
        while "measuring]" not in err.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, err.read_text()
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(stall_s)
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=120) in (0, 3, 4), err.read_text()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
    with SessionReader(tmp_path / "stall.duckdb") as rd:
        meta = rd.meta()
        t = rd.request_table()
    for arm in (0, 1):  # nothing lost: every scheduled request of each arm, once
        assert sorted(t.select(t.arm == arm).item) == list(range(n))
    assert set(t.status) == {"ok"}
    for name in ("baseline", "candidate"):
        a = meta["generator_health"]["arms"][name]
        assert a["main_behind_max_s"] >= stall_s * 0.9
        assert a["records_waiting_max"] >= rate * stall_s * 0.5  # Poisson: ~120 ± 11
    assert Code.MAIN_BEHIND in codes(stored_health(meta).notes)
    assert main(["report", str(tmp_path / "stall.duckdb")]) in (0, 3, 4)
    out = capsys.readouterr().out
    # the figure is the stall less the time to the first batch shipped after SIGSTOP, so it can
    # print as 2.9 s: compare the number, as the meta check above does, not its first digit
    behind = re.findall(r"its records read at most (\d+\.\d) s after shipping", out)
    assert len(behind) == 2 and all(float(x) >= stall_s * 0.9 for x in behind), out
    assert "note: baseline: the main process read the generator's records up to" in out


def test_delivery_counts_the_records_waiting_at_each_ship_time():
    """Hand-made timeline (ns): records shipped in batches while the reader stalls 1-5 s."""
    d = Delivery()
    s = 1_000_000_000
    d.on_batch(0, 2, GeneratorStats(shipped=2, shipped_ns=0), 0)  # read at once
    # shipped at 1 s, 2 s, 3 s; nothing read until 5 s, then all three
    for k, n in enumerate((3, 4, 5)):
        d.on_batch(
            0, n, GeneratorStats(shipped=2 + sum((3, 4, 5)[: k + 1]), shipped_ns=(k + 1) * s), 5 * s
        )
    d.on_batch(0, 1, GeneratorStats(shipped=15, shipped_ns=6 * s), 6 * s)  # caught up
    b = d.backlog()[0]
    assert b.waiting_max == 12  # at 3 s: 3 + 4 + 5 shipped since the last read
    assert b.behind_max_s == 4.0  # the batch shipped at 1 s, read at 5 s
    d.on_batch(1, 1, GeneratorStats(), 0)  # a batch without stamps is ignored
    assert 1 not in d.backlog()
    # per arm: two processes of arm 0 (one without figures of its own), one of arm 1
    stats = {
        0: GeneratorStats(in_flight_max=3, measure_wall_s=2.0, measure_cpu_s=0.5),
        2: GeneratorStats(in_flight_max=4, measure_wall_s=2.0, measure_cpu_s=1.5),
    }
    arms = per_arm(stats, [0, 0, 1], {0: b, 1: Backlog(0.5, 3)})
    assert arms[0] == ArmGenerators(2, 3, 4.0, 15, 0.5, 2.0)
    assert arms[1] == ArmGenerators(1, 4, None, None, 1.5, 2.0) and arms[1].share == 0.75


def test_delivery_counts_late_only_from_when_reading_began():
    """A batch shipped while the main process was still starting the other generators (before
    its reading loop) is late only by the time since the loop began, not since it shipped."""
    s = 1_000_000_000
    d = Delivery(since_ns=10 * s)
    d.on_batch(
        0, 2, GeneratorStats(shipped=2, shipped_ns=7 * s), 10 * s + s // 100
    )  # warm-up batch
    assert d.backlog()[0].behind_max_s == 0.01
    d.on_batch(
        0, 3, GeneratorStats(shipped=5, shipped_ns=11 * s), 13 * s
    )  # later: from its shipping
    assert d.backlog()[0].behind_max_s == 2.0


SLOW_MAIN = """
import sys, time
time.sleep({sleep})  # a main module with heavy imports: each spawned generator runs it again
if __name__ == "__main__":
    from abtui.cli import main
    sys.exit(main(sys.argv[1:]))
"""


def test_a_slow_generator_start_is_not_reading_late(sims, tmp_path):
    """Each spawn start waits until its child has imported the main module (when the plan's
    pickle is larger than a pipe's buffer), and the first generator warms up and ships its
    warm-up records while the main process still starts the next: those records wait ~2 s (2.8 s, before),
    but not because the main process fell behind reading, so no note may say it did (the
    TUI capture script, whose main module imports Textual, showed one on every run)."""
    script = tmp_path / "slow_main.py"
    script.write_text(SLOW_MAIN.format(sleep=1.8))
    out = subprocess.run(
        [
            sys.executable,
            str(script),
            "run",
            "--baseline",
            sims[0].url,
            "--candidate",
            sims[1].url,
            "--requests",
            "20",
            "--input-tokens",
            "2000",
            "--output-tokens",
            "4",
            "--warmup",
            "1",
            "--rate",
            "20",
            "--name",
            "slow",
            "--sessions-dir",
            str(tmp_path),
            "--headless",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode in (0, 3, 4), out.stdout[-2000:] + out.stderr[-2000:]
    with SessionReader(tmp_path / "slow.duckdb") as rd:
        meta = rd.meta()
    h = meta["generator_health"]
    assert Code.MAIN_BEHIND not in codes(stored_health(meta).notes), h["notes"]
    assert all(a["main_behind_max_s"] < 1.0 for a in h["arms"].values()), h["arms"]
    assert "read the generator's records up to" not in out.stdout


def test_the_machine_is_described_while_another_process_takes_a_core(sims, tmp_path):
    """/proc/stat sampled over the measuring window: a busy loop in another process shows as
    CPU taken by other processes (at least most of a core), apart from abtui's own."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        assert _run(sims, tmp_path, "hog", "--rate", "20") in (0, 3, 4)
    finally:
        hog.kill()
        hog.wait()
    with SessionReader(tmp_path / "hog.duckdb") as rd:
        m = rd.meta()["generator_health"]["machine"]
    assert m["other_cpus"] >= 0.6 and m["abtui_cpus"] > 0 and m["wall_s"] > 1.0
    assert m["steal_share"] is None or 0 <= m["steal_share"] < 1
    assert m["busy_cpus"] <= m["cpus"] + 0.1


def test_a_small_lag_on_a_real_session_no_longer_blocks_a_large_gain(tmp_path):
    """A real run over loopback (E2E ~350 ms at 30 req/s, the candidate 40% faster), then the
    baseline's schedule made late in the stored file as a busy box makes it (lag P99 11 ms,
    max 21.5 ms, the issue's figures): GO, with the lag's reach stated; with the lag past half
    the inter-arrival gap the same session cannot be GO."""
    import duckdb

    from abtui.verdict.saved import session_verdict

    spec = tmp_path / "s.toml"
    with (
        SimProcess(SimConfig(ttft_ms=50, itl_ms=20, jitter_ms=1, model="sim-a", seed=1)) as a,
        SimProcess(SimConfig(ttft_ms=30, itl_ms=12, jitter_ms=1, model="sim-b", seed=2)) as b,
    ):
        spec.write_text(f"""name = "busy"
[[arms]]
name = "base"
url = "{a.url}"
[[arms]]
name = "cand"
url = "{b.url}"
[workload]
requests = 150
input_tokens = 16
output_tokens = 16
[load]
rate = 30
[store]
dir = "{tmp_path}"
text = false
[policy]
guardrails = ["ttft.p50", "tpot.p50", "e2e.p90"]
resamples = 1000
""")
        assert main(["run", str(spec), "--headless"]) in (0, 3, 4)
    path = tmp_path / "busy.duckdb"

    def late(ms_of_row: str) -> str:
        with duckdb.connect(str(path)) as con:  # lag = dispatched − scheduled, set per row
            con.execute(
                f"UPDATE requests SET scheduled_ns = dispatched_ns - "
                f"CAST(({ms_of_row}) * 1e6 AS BIGINT) WHERE arm = 0 AND NOT warmup"
            )
        v = session_verdict(path, store=False).verdict
        return v

    # item 0: 21.5 ms; every 40th: 11 ms (P99 of 150 ≈ 11 ms); the rest 2 ms
    v = late("CASE WHEN item = 0 THEN 21.5 WHEN item % 40 = 1 THEN 11 ELSE 2 END")
    g = v.pairs[0].generator["base"]
    assert 0.010 < g.lag_p99_s <= 0.0115 and g.lag_max_s == pytest.approx(0.0215)
    assert g.load_kept and g.flattery["e2e.p50"] < 1.1
    assert v.result == "GO", v.pairs[0].reasons
    v = late("CASE WHEN item % 5 = 0 THEN 40 ELSE 2 END")  # P99 40 ms > half of a 33 ms gap
    assert v.result == "INCONCLUSIVE"
    assert Code.LOAD_NOT_KEPT in codes(v.pairs[0].reasons)
