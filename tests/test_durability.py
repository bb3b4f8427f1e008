"""Durability beyond `tests/test_run_e2e.py` (which checks Ctrl-C / SIGTERM / SIGKILL of `abtui
run` and its load generators): how much a SIGKILL loses, measured against what the endpoints
served; every report format of a killed session; and the simulated endpoints `abtui demo`
starts itself never outliving it, whichever way it dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from abtui.cli import main
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
RATE = 40  # req/s per arm
# The writer commits every 0.5 s (abtui/store/writer.py), so a SIGKILL loses at most about the
# last half second; the bound is one second (figures: docs/reliability.md).
MAX_LOST_S = 1.0
# The kill comes this long after a commit was seen, so that it does not land just after one
# (a commit interval of a second or more would then lose more than MAX_LOST_S).
KILL_AFTER_S = 1.2


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children of children included), from /proc."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parent[int(d.name)] = int(fields[1])
    out: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - out
        out |= frontier
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pids: set[int], timeout: float = 10.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while (left := {p for p in pids if _alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _served(url: str) -> int:
    """Generation requests a sim has finished, from its /metrics."""
    text = httpx.get(url.rsplit("/v1", 1)[0] + "/metrics", timeout=5).text
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total")
    )


def _committed(path: Path) -> int:
    try:
        with SessionReader(path) as rd:
            return rd.query("SELECT count(*) FROM requests WHERE status = 'ok'")[0][0]
    except Exception:  # noqa: BLE001 - the file may be mid-creation
        return 0


def test_sigkill_loses_at_most_the_last_commit_interval(tmp_path, capsys):
    with (
        SimProcess(ttft_ms=5, itl_ms=1, seed=1) as a,
        SimProcess(ttft_ms=5, itl_ms=1, seed=2) as b,
    ):
        path = tmp_path / "k.duckdb"
        proc = subprocess.Popen(
            [sys.executable, "-m", "abtui", "run", "--baseline", a.url, "--candidate", b.url,
             "--requests", "4000", "--rate", str(RATE), "--input-tokens", "16",
             "--output-tokens", "8", "--name", "k", "--sessions-dir", str(tmp_path),
             "--headless"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while _committed(path) < 3 * RATE and time.monotonic() < deadline:
            time.sleep(0.3)
        time.sleep(KILL_AFTER_S)
        kids = _descendants(proc.pid)
        proc.kill()
        proc.wait(timeout=10)
        served = _served(a.url) + _served(b.url)  # what the endpoints finished by the kill
        assert not _wait_gone(kids), "a load generator outlived abtui"
    with SessionReader(path) as rd:
        assert rd.status == "running" and not rd.complete
        ok = rd.query("SELECT count(*) FROM requests WHERE status = 'ok'")[0][0]
    assert ok >= 3 * RATE
    lost = served - ok  # finished by the endpoint, never committed to the file
    lost_s = lost / (2 * RATE)
    print(f"\nSIGKILL: served {served}, committed {ok}, lost {lost} = {lost_s:.2f} s of load")
    assert 0 <= lost and lost_s <= MAX_LOST_S, (served, ok)

    # every report format works on the killed file, and none of them can say GO
    for fmt in ("text", "md", "html", "json"):
        rc = main(["report", str(path), "--format", fmt])
        out, err = capsys.readouterr()
        assert rc == 4 and "Traceback" not in err, (fmt, err[-2000:])
        assert out.strip(), fmt
    doc = json.loads(out)
    assert doc["status"] == "running"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_demo_sims_and_generators_never_outlive_abtui(tmp_path, sig):
    proc = subprocess.Popen(
        [sys.executable, "-m", "abtui", "demo", "--headless", "--requests", "5000", "--rate", "5",
         "--time-scale", "10", "--name", "d", "--sessions-dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    path = tmp_path / "d.duckdb"
    deadline = time.monotonic() + 90
    while _committed(path) < 4 and time.monotonic() < deadline:
        time.sleep(0.3)
    kids = _descendants(proc.pid)
    assert len(kids) >= 4, kids  # two simulated endpoints and two load generators
    os.kill(proc.pid, sig)
    proc.wait(timeout=30)
    left = _wait_gone(kids)
    assert not left, f"outlived abtui demo after {sig.name}: {left}"
    with SessionReader(path) as rd:
        assert rd.status == ("running" if sig == signal.SIGKILL else "interrupted")
