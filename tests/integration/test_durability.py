"""Durability beyond `tests/integration/test_run_e2e.py` (which checks Ctrl-C / SIGTERM / SIGKILL of `abtui
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
from abtui.store.listing import read_row
from abtui.store.reader import SessionReader, never_closed

# serial: what a SIGKILL loses: the 0.5 s commit interval
pytestmark = [
    pytest.mark.serial,
    pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc"),
]
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


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """`abtui run` SIGKILLed mid-run: (session path, requests the sims served by the kill)."""
    tmp_path = tmp_path_factory.mktemp("killed")
    with (
        SimProcess(ttft_ms=5, itl_ms=1, seed=1) as a,
        SimProcess(ttft_ms=5, itl_ms=1, seed=2) as b,
    ):
        path = tmp_path / "k.duckdb"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "abtui",
                "run",
                "--baseline",
                a.url,
                "--candidate",
                b.url,
                "--requests",
                "4000",
                "--rate",
                str(RATE),
                "--input-tokens",
                "16",
                "--output-tokens",
                "8",
                "--name",
                "k",
                "--sessions-dir",
                str(tmp_path),
                "--headless",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while _committed(path) < 3 * RATE and time.monotonic() < deadline:
            time.sleep(0.3)
        time.sleep(KILL_AFTER_S)
        live = never_closed(path, "running")  # the live run holds the file: not "killed"
        live_row = read_row(path).status  # the start screen's list, by the same definition
        kids = _descendants(proc.pid)
        proc.kill()
        proc.wait(timeout=10)
        served = _served(a.url) + _served(b.url)  # what the endpoints finished by the kill
        assert not live and live_row == "running"
        assert not _wait_gone(kids), "a load generator outlived abtui"
    return path, served


def test_sigkill_loses_at_most_the_last_commit_interval(killed_run, capsys):
    path, served = killed_run
    with SessionReader(path) as rd:
        assert rd.status == "running" and not rd.complete
        ok = rd.query("SELECT count(*) FROM requests WHERE status = 'ok'")[0][0]
    assert ok >= 3 * RATE
    lost = served - ok  # finished by the endpoint, never committed to the file
    lost_s = lost / (2 * RATE)
    print(f"\nSIGKILL: served {served}, committed {ok}, lost {lost} = {lost_s:.2f} s of load")
    assert 0 <= lost and lost_s <= MAX_LOST_S, (served, ok)


def test_every_report_of_a_killed_session_works_and_says_killed(killed_run, capsys):
    path, _ = killed_run
    assert never_closed(path, "running")
    assert read_row(path).status == "killed"  # the start screen's list agrees (reader.was_killed)
    for fmt in ("text", "md", "html", "json"):  # none of them can say GO
        rc = main(["report", str(path), "--format", fmt])
        out, err = capsys.readouterr()
        assert rc == 4 and "Traceback" not in err, (fmt, err[-2000:])
        assert out.strip(), fmt
        if fmt == "text":
            assert "KILLED: abtui stopped without closing this session" in out
    doc = json.loads(out)
    assert doc["status"] == "running"


def test_a_killed_run_opens_in_the_tui_marked_killed(killed_run):
    """`abtui open`'s app on the killed file: the verdict screen, then the panes, no error; the
    header says the run was killed, the verdict banner that the session is not complete."""
    import asyncio
    import io

    from rich.console import Console

    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.open import OpenScreen
    from abtui.tui.screens.verdict import VerdictScreen

    path, _ = killed_run

    def text(widget) -> str:
        buf = io.StringIO()
        Console(file=buf, width=300, color_system=None).print(widget.content)
        return buf.getvalue()

    async def drive():
        app = AbtuiApp(session=path)
        async with app.run_test(size=(120, 40)) as pilot:
            t0 = time.monotonic()
            while not (isinstance(app.screen, VerdictScreen) and app.screen.query("#banner")):
                assert app.error is None, app.error
                assert time.monotonic() - t0 < 120, "the verdict screen never came"
                await pilot.pause(0.1)
            banner = text(app.screen.query_one("#banner"))
            await pilot.press("escape")  # back to the panes, rebuilt from the stored samples
            await pilot.pause()
            assert isinstance(app.screen, OpenScreen)
            header = text(app.screen.query_one("#header"))
            arms = len(app.screen.query(".arm"))
            await pilot.press("q")
        return app.error, banner, header, arms

    error, banner, header, arms = asyncio.run(drive())
    assert error is None
    # its first line, the verdict's word, is never GO (a reason may say "cannot be GO")
    head = banner.strip().splitlines()[0]
    assert "session running" in head and "GO " not in head.replace("NO-GO", "")
    assert "stored session, running (killed: never closed)" in header, header
    assert arms == 2


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_demo_sims_and_generators_never_outlive_abtui(tmp_path, sig):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "abtui",
            "demo",
            "--headless",
            "--requests",
            "5000",
            "--rate",
            "5",
            "--time-scale",
            "10",
            "--name",
            "d",
            "--sessions-dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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
