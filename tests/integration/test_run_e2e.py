"""`abtui run` end to end: real load-generator processes, real HTTP on 127.0.0.1 against two
simulated endpoints, a real DuckDB session file — and the ways a run can end badly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from abtui.cli import main
from abtui.metrics.summary import summarize
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader

# serial: TTFT within 10 ms of the configured delay; lag under 10 ms
pytestmark = pytest.mark.serial

# Configured delays of the two endpoints (ms).
A_TTFT, A_ITL = 40.0, 8.0
B_TTFT, B_ITL = 30.0, 6.0
# Measured TTFT = server delay + loopback + parsing + event-loop latency. It can never be below
# the configured delay (the server starts its clock when it has the request, after we sent
# it); on this 2-core machine the excess is ~1 ms at P50 (scripts/bench_client.py), so 10 ms
# above leaves room for a loaded CI box without letting a real bug (e.g. the usage chunk or
# the role prelude moving TTFT/E2E, or a stalled loop) pass.
TTFT_SLACK_MS = 10.0


@pytest.fixture(scope="module")
def sims():
    with (
        SimProcess(SimConfig(ttft_ms=A_TTFT, itl_ms=A_ITL, model="sim-a", seed=1)) as a,
        SimProcess(SimConfig(ttft_ms=B_TTFT, itl_ms=B_ITL, model="sim-b", seed=2)) as b,
    ):
        yield a, b


def _arms(sims):
    a, b = sims
    return ["--baseline", a.url, "--candidate", b.url]


def test_headless_run_measures_and_stores(sims, tmp_path, capsys):
    path = tmp_path / "e2e.duckdb"
    # One scheduler hiccup of > 10 ms on a CPU-starved box flags the generator as behind (lag P99
    # of 30 requests is their worst but one): such a run is repeated, at most twice; a generator
    # that is behind every time still fails the check below.
    for _ in range(3):
        rc = main(
            [
                "run",
                *_arms(sims),
                "--requests",
                "30",
                "--rate",
                "20",
                "--input-tokens",
                "64",
                "--output-tokens",
                "32",
                "--slo",
                "ttft=500ms,tpot=50ms",
                "--name",
                "e2e",
                "--sessions-dir",
                str(tmp_path),
                "--headless",
                "--warmup",
                "2",
                "--overwrite",
            ]
        )
        out = capsys.readouterr().out
        with SessionReader(path) as rd:
            t = rd.request_table()
        if not any(summarize(t, arm).generator_behind for arm in (0, 1)):
            break
    assert rc in (0, 3, 4)  # the run completed; the code is its verdict's (GO/NO-GO/INCONCLUSIVE)
    assert "TTFT (ms)" in out and "candidate/baseline" in out and "attainment %" in out
    with SessionReader(path) as rd:
        assert rd.complete
        meta = rd.meta()
        assert meta["spec"]["workload"]["requests"] == 30
        arms = rd.arms()
        assert [(a["name"], a["role"], a["model"]) for a in arms] == [
            ("baseline", "baseline", "sim-a"),
            ("candidate", "candidate", "sim-b"),
        ]
        t = rd.request_table()
        everything = rd.request_table(include_warmup=True)
        texts = rd.texts()
        n_chunks = rd.query("SELECT count(*) FROM chunks")[0][0]
    assert len(t) == 60 and len(everything) == 64  # 2 warm-ups per arm stored, flagged
    assert set(t.status) == {"ok"}
    assert (t.n_output == 32).all() and set(t.token_source) == {"usage"}
    assert n_chunks == 64 * 32
    assert all(texts[r] for r in t.req)  # generated text stored
    # the same items at the same scheduled instants for both arms (parallel mode)
    a, b = t.select(t.arm == 0), t.select(t.arm == 1)
    order_a, order_b = np.argsort(a.item), np.argsort(b.item)
    assert (a.item[order_a] == b.item[order_b]).all()
    assert (a.scheduled_ns[order_a] == b.scheduled_ns[order_b]).all()

    sa, sb = summarize(t, 0, {"ttft": 0.5}), summarize(t, 1, {"ttft": 0.5})
    for s, ttft, itl in ((sa, A_TTFT, A_ITL), (sb, B_TTFT, B_ITL)):
        assert ttft <= s.ttft.p50 * 1e3 <= ttft + TTFT_SLACK_MS
        assert abs(s.tpot.p50 * 1e3 - itl) <= 1.0
        assert s.slo_attainment == 1.0
        assert not s.generator_behind


def test_spec_file_with_flags_overriding(sims, tmp_path, capsys):
    a, b = sims
    spec = tmp_path / "ab.toml"
    spec.write_text(
        f"""
name = "from-file"
[[arms]]
name = "bf16"
url = "{a.url}"
[[arms]]
name = "fp8"
url = "{b.url}"
[workload]
requests = 5
input_tokens = 16
output_tokens = 8
[load]
concurrency = 3
warmup = 3  # one per connection: a cold httpx connection costs tens of ms
[request]
http = "httpx"
api = "chat"
[store]
dir = "{tmp_path}"
text = false
"""
    )
    rc = main(["run", str(spec), "--requests", "7", "--headless"])
    assert rc in (0, 3, 4)  # complete; 7 requests rarely decide anything
    assert "bf16" in capsys.readouterr().out
    with SessionReader(tmp_path / "from-file.duckdb") as rd:
        assert "requests = 5" in rd.meta()["spec_text"]
        assert [a["api"] for a in rd.arms()] == ["chat", "chat"]
        t = rd.request_table()
        texts = rd.texts()
        first_chunk = dict(
            rd.query("SELECT req, min(t_ns) FROM chunks WHERE n_tokens > 0 GROUP BY req")
        )
        stamped = dict(rd.query("SELECT req, first_token_ns FROM requests"))
    assert len(t) == 14 and set(t.status) == {"ok"}  # the flag won over the file
    assert all(v is None for v in texts.values())  # text = false
    # The httpx path stamps TTFT at the first chunk with a token, neither at the role prelude
    # (that would put it under the server's delay) nor later (a check by construction: this
    # test once asserted P50 within 10 ms of the delay, and a CPU-starved simulator process
    # alone made 12-33 ms of it; test_headless_run measures the excess, retried when late)
    assert all(stamped[r] == first_chunk[r] for r in t.req)
    s = summarize(t, 0)
    assert A_TTFT <= s.ttft.p50 * 1e3 < A_TTFT + 7 * A_ITL  # after the delay, before the last token


def _abtui(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "abtui", *args], capture_output=True, text=True, timeout=60, **kw
    )


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            [
                "run",
                "--baseline",
                "http://127.0.0.1:9/v1",
                "--candidate",
                "http://127.0.0.1:9/v1",
                "--rate",
                "5",
            ],
            "cannot connect to http://127.0.0.1:9/v1",
        ),
        (
            [
                "run",
                "--baseline",
                "http://127.0.0.1:9",
                "--candidate",
                "http://127.0.0.1:9/v1",
                "--rate",
                "5",
            ],
            "does not end in /v1",
        ),
        (
            [
                "run",
                "--baseline",
                "http://127.0.0.1:9/v1",
                "--candidate",
                "http://127.0.0.1:9/v1",
                "--rate",
                "fast",
            ],
            "argument --rate: expected a number, got 'fast'",
        ),
        (
            ["run", "--baseline", "http://127.0.0.1:9/v1"],
            "give both --baseline URL and --candidate URL",
        ),
        (["run", "missing.toml"], "spec file missing.toml does not exist"),
        (["report", "nope.duckdb"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needle):
    r = _abtui(*args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "hint:" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "body, needle",
    [
        ("[load]\nrat = 5\n", "unknown key 'rat'"),
        ('[load]\nrate = "fast"\n', "load.rate must be a number"),
        ("[workload]\nrequests = [1]\n", "workload.requests must be an integer"),
    ],
)
def test_bad_spec_file_names_the_field(tmp_path, body, needle):
    p = tmp_path / "bad.toml"
    p.write_text(body)
    r = _abtui("run", str(p))
    assert r.returncode == 2 and needle in r.stderr and str(p) in r.stderr
    assert "Traceback" not in r.stderr


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out += [int(x) for x in text]
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def _start_long_run(sims, tmp_path, name):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "abtui",
            "run",
            *_arms(sims),
            "--requests",
            "2000",
            "--rate",
            "40",
            "--input-tokens",
            "16",
            "--output-tokens",
            "16",
            "--name",
            name,
            "--sessions-dir",
            str(tmp_path),
            "--headless",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    path = tmp_path / f"{name}.duckdb"
    deadline = time.monotonic() + 30
    n = 0
    while time.monotonic() < deadline:  # wait until some requests are committed
        time.sleep(0.5)
        if path.exists():
            try:
                with SessionReader(path) as rd:
                    n = rd.query("SELECT count(*) FROM requests WHERE NOT warmup")[0][0]
            except Exception:  # noqa: BLE001 - the file may be mid-creation
                n = 0
            if n >= 40:
                break
    assert n >= 40, "the run never committed requests"
    children = _children(proc.pid)
    assert len(children) >= 2  # the two load generators
    return proc, path, children, n


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_keeps_what_was_measured(sims, tmp_path, sig):
    proc, path, children, n_before = _start_long_run(sims, tmp_path, f"int{sig}")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in out and "TTFT (ms)" in out  # the summary of what was measured
    assert "Traceback" not in err
    with SessionReader(path) as rd:
        assert rd.status == "interrupted"
        t = rd.request_table()
    assert len(t) >= n_before
    assert set(t.status) <= {"ok", "cancelled"}
    assert (t.status == "ok").sum() >= n_before - 4
    assert len(t) < 4000  # it did stop
    time.sleep(0.5)
    assert not any(_alive(c) for c in children), "a load generator outlived abtui"


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_interrupt_while_the_workload_is_written(sims, tmp_path):
    """Ctrl-C before any request is sent, while the main process streams a large workload into
    the file (abtui.runner.schedule): DuckDB turned it into "RuntimeError: Query interrupted"
    and a traceback; now the session ends interrupted, with the items written so far."""
    path = tmp_path / "early.duckdb"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "abtui",
            "run",
            *_arms(sims),
            "--requests",
            "150000",
            "--concurrency",
            "4",
            "--input-tokens",
            "512",
            "--output-tokens",
            "4",
            "--name",
            "early",
            "--sessions-dir",
            str(tmp_path),
            "--headless",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    # the load generators are started already (abtui.runner.prestart), waiting for their plans
    children = _children(proc.pid)
    assert children
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "stopped before any request was sent" in err
    time.sleep(0.5)
    assert not any(_alive(c) for c in children), "a load generator outlived abtui"
    with SessionReader(path) as rd:
        assert rd.status == "interrupted"
        (items,) = rd.query("SELECT count(*) FROM items")[0]
        (sent,) = rd.query("SELECT count(*) FROM requests")[0]
        events = [r[0] for r in rd.query("SELECT kind FROM events")]
    assert 0 < items < 150000 and sent == 0 and "interrupted" in events


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_sigkill_leaves_a_readable_session(sims, tmp_path):
    proc, path, children, n_before = _start_long_run(sims, tmp_path, "killed")
    proc.kill()
    proc.communicate(timeout=10)
    with SessionReader(path) as rd:
        assert rd.status == "running" and not rd.complete  # marked incomplete
        n = rd.query("SELECT count(*) FROM requests WHERE NOT warmup")[0][0]
    assert n >= n_before  # everything committed before the kill survived
    r = _abtui("report", str(path))
    # an unfinished session's verdict cannot be GO: INCONCLUSIVE (4), saying why
    assert r.returncode == 4 and "the session is running" in r.stdout
    assert "planned workload was not completed" in r.stdout
    deadline = time.monotonic() + 5
    while any(_alive(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(c) for c in children), "a load generator outlived abtui"
