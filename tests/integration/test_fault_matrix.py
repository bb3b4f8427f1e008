"""The fault matrix end to end: `abtui run` against simulated endpoints that inject each fault
real endpoints produce, over real HTTP on 127.0.0.1, into a real session file.

For every fault: the run goes on to its end, every request is accounted for (ok + each error
class = sent), errors count against SLO attainment and goodput, the summary and the verdict show
each arm's error rate, and a candidate that is faster but fails more is never GO. Plus an
endpoint killed and restarted in the middle of a run (connection refused, then back).
(`tests/integration/test_sim_faults.py` checks each fault's error class request by request.)
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from abtui.cli import main
from abtui.client import records
from abtui.metrics.summary import summarize
from abtui.sim.faults import FaultConfig
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader

N = 60  # measured requests per arm
RATE = 40  # req/s, open loop
RATE_SHARE = 0.3  # share of a faulty candidate's requests that fail
SLO_TTFT_S = 0.2

# Each faulty candidate: (name, faults, the error class its faults produce or None).
# Every candidate is faster than the baseline (TTFT 3 ms / ITL 1 ms vs 6 / 2): without its
# faults it would be GO, so only the accounting of its failures can keep it from GO.
FAULTS = [
    ("r429", FaultConfig(fail={429: RATE_SHARE}, retry_after_s=2), records.E_HTTP),
    ("r500", FaultConfig(fail={500: RATE_SHARE}), records.E_HTTP),
    ("r503html", FaultConfig(fail={503: RATE_SHARE}, fail_body="html"), records.E_HTTP),
    ("hang", FaultConfig(hang_rate=RATE_SHARE), records.E_TIMEOUT),
    ("stall", FaultConfig(stall_rate=RATE_SHARE, stall_ms=3000), records.E_TIMEOUT),
    ("disconnect", FaultConfig(disconnect_rate=RATE_SHARE), records.E_DISCONNECTED),
    ("malformed", FaultConfig(malformed_rate=RATE_SHARE), records.E_MALFORMED),
    # no error, but every first byte comes 300 ms late: over the TTFT SLO
    ("slowfirst", FaultConfig(slow_first_byte_ms=300), None),
]


def _classes(t, arm: int) -> dict[str, int]:
    out: dict[str, int] = {}
    rows = t.select((t.arm == arm) & ~t.warmup)
    for status, cls in zip(rows.status, rows.error_class, strict=True):
        key = "ok" if status == records.OK else f"{status}:{cls}"
        out[key] = out.get(key, 0) + 1
    return out


@pytest.fixture(scope="module")
def matrix_run(tmp_path_factory):
    """One run: a healthy baseline and one candidate per fault (the verdict judges each)."""
    tmp = tmp_path_factory.mktemp("matrix")
    seeds = iter(range(10, 100))
    with SimProcess(ttft_ms=6, itl_ms=2, seed=1) as base:
        sims = [SimProcess(ttft_ms=3, itl_ms=1, seed=next(seeds), faults=f) for _, f, _ in FAULTS]
        try:
            for s in sims:
                s.start()
            argv = ["run", "--baseline", base.url]
            for s in sims:
                argv += ["--candidate", s.url]
            argv += [
                "--requests",
                str(N),
                "--rate",
                str(RATE),
                "--input-tokens",
                "16",
                "--output-tokens",
                "16",
                "--timeout",
                "1s",
                "--warmup",
                "0",
                "--slo",
                f"ttft={SLO_TTFT_S * 1e3:g}ms",
                "--name",
                "matrix",
                "--sessions-dir",
                str(tmp),
                "--headless",
            ]
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                rc = main(argv)
            alive = [httpx.get(s.url + "/models", timeout=5).status_code for s in sims]
        finally:
            for s in sims:
                s.stop()
    path = tmp / "matrix.duckdb"
    with SessionReader(path) as rd:
        complete = rd.complete
        table = rd.request_table()
        verdicts = rd.verdicts()
    return rc, buf.getvalue(), alive, complete, table, verdicts


def test_every_fault_run_continues_and_accounts_for_every_request(matrix_run):
    rc, out, alive, complete, t, _ = matrix_run
    assert rc in (3, 4), out[-3000:]  # a verdict's exit code (never GO: 0)
    assert complete and alive == [200] * len(FAULTS)  # the run reached its end; sims still up
    assert _classes(t, 0) == {"ok": N}  # the baseline is healthy
    for arm, (name, _, cls) in enumerate(FAULTS, start=1):
        got = _classes(t, arm)
        assert sum(got.values()) == N, (name, got)  # ok + each error class = sent
        if cls is None:
            assert got == {"ok": N}, (name, got)
            continue
        # only this fault's class, and about RATE_SHARE of the requests (seeded draws)
        assert set(got) == {"ok", f"{records.ERROR}:{cls}"}, (name, got)
        assert 0.1 * N <= got[f"{records.ERROR}:{cls}"] <= 0.5 * N, (name, got)


def test_errors_count_against_slo_attainment_and_goodput(matrix_run):
    _, _, _, _, t, _ = matrix_run
    slo = {"ttft": SLO_TTFT_S}
    for arm, (name, _, cls) in enumerate(FAULTS, start=1):
        s = summarize(t, arm, slo)
        assert s.sent == N and s.ok + s.n_errors == N, name
        if cls is None:  # slow first byte: all ok, none within the TTFT SLO
            assert s.ok == N and s.good == 0 and s.slo_attainment == 0, name
            assert s.goodput_requests_per_s == 0, name
            continue
        # the errors are misses: attainment is at most the ok share, goodput below throughput
        assert s.slo_attainment <= s.ok / N < 1, name
        assert s.good <= s.ok and s.goodput_requests_per_s <= s.requests_per_s, name


def test_summary_and_verdict_show_each_arms_error_rate(matrix_run):
    _, out, _, _, t, verdicts = matrix_run
    summary, _, verdict_text = out.partition("\nVerdict:")
    assert verdict_text, out[-2000:]
    for arm, (name, _, cls) in enumerate(FAULTS, start=1):
        if cls is None:
            continue
        n_err = N - _classes(t, arm)["ok"]
        assert f"{N - n_err}/{N}" in summary and f"{cls} {n_err}" in summary, name
        # the verdict's line for this candidate gives both arms' error rates
        assert (
            f"baseline 0.0% (0 of {N} sent), candidate{arm} {n_err / N:.1%} ({n_err} of {N}"
            in verdict_text
        )
    (stored,) = verdicts
    pairs = stored["result"]["pairs"]
    assert len(pairs) == len(FAULTS)
    for pair, (name, _, _) in zip(pairs, FAULTS, strict=True):
        n_err = N - _classes(t, pair["b"])["ok"]
        assert pair["errors"]["rate_a"] == 0 and pair["errors"]["rate_b"] == n_err / N, name


def test_a_faster_but_faulty_candidate_is_never_go(matrix_run):
    _, _, _, _, _, verdicts = matrix_run
    (stored,) = verdicts
    assert stored["result"]["result"] != "GO"
    for pair, (name, _, cls) in zip(stored["result"]["pairs"], FAULTS, strict=True):
        assert pair["result"] != "GO", (name, pair["reasons"])
        if cls is not None:  # ~30% errors vs none: significantly higher, NO-GO
            assert pair["result"] == "NO-GO", (name, pair["reasons"])
            assert any(r.startswith("errors rose") for r in pair["reasons"]), name


# --- connection refused mid-run: the endpoint is killed and restarted on the same port ---


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "abtui.sim",
            "--port",
            str(port),
            "--ttft-ms",
            "3",
            "--itl-ms",
            "1",
            "--seed",
            "5",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("the sim did not start")


def _served(url: str) -> int:
    """Generation requests the sim has finished (its own counter, from /metrics)."""
    try:
        text = httpx.get(url, timeout=1).text
    except httpx.HTTPError:
        return 0
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total")
    )


def test_endpoint_killed_and_restarted_mid_run(tmp_path, capsys):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    # 300 requests at 40/s: a 7.5 s run. The kill comes after ~0.75 s, the restart 0.6 s and a
    # fresh interpreter later (1.2-1.9 s with two CPU hogs on 2 cores); at 150 (3.75 s) a loaded
    # box restarted it after the run's last request, and no request could succeed again
    n = 300
    procs = [_serve(port)]
    events: list[str] = []

    def chaos() -> None:
        deadline = time.monotonic() + 60
        while _served(url + "/metrics") < 30 and time.monotonic() < deadline:
            time.sleep(0.02)
        procs[0].send_signal(signal.SIGKILL)  # in-flight streams cut, then connect refused
        procs[0].wait()
        events.append("killed")
        time.sleep(0.6)
        procs.append(_serve(port))
        events.append("restarted")

    th = threading.Thread(target=chaos, daemon=True)
    try:
        with SimProcess(ttft_ms=6, itl_ms=2, seed=1) as base:
            th.start()
            rc = main(
                [
                    "run",
                    "--baseline",
                    base.url,
                    "--candidate",
                    url + "/v1",
                    "--requests",
                    str(n),
                    "--rate",
                    str(RATE),
                    "--input-tokens",
                    "16",
                    "--output-tokens",
                    "16",
                    "--timeout",
                    "1s",
                    "--warmup",
                    "0",
                    "--model",
                    "sim-model",
                    "--name",
                    "refused",
                    "--sessions-dir",
                    str(tmp_path),
                    "--headless",
                ]
            )
            th.join(timeout=30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    out = capsys.readouterr().out
    assert events == ["killed", "restarted"]
    assert rc in (3, 4), out[-2000:]
    with SessionReader(tmp_path / "refused.duckdb") as rd:
        assert rd.complete
        t = rd.request_table()
        (stored,) = rd.verdicts()
    got = _classes(t, 1)
    assert sum(got.values()) == n, got  # ok + each error class = sent
    assert got.get(f"{records.ERROR}:{records.E_CONNECT}", 0) >= 1, got  # refused while it was down
    assert set(got) <= {
        "ok",
        f"{records.ERROR}:{records.E_CONNECT}",
        f"{records.ERROR}:{records.E_DISCONNECTED}",
    }, got
    # the run went on: requests scheduled after the restart succeeded again
    rows = t.select(t.arm == 1)
    last_fail = max(int(i) for i, s in zip(rows.item, rows.status, strict=True) if s != records.OK)
    assert any(
        int(i) > last_fail and s == records.OK for i, s in zip(rows.item, rows.status, strict=True)
    ), f"no request after item {last_fail} (of {n}) succeeded: restarted too late?"
    assert stored["result"]["pairs"][0]["result"] != "GO"
    assert os.path.exists(tmp_path / "refused.duckdb")
