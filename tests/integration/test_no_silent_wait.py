"""No wait without a word, and no work done twice: quitting the TUI after a
run prints the verdict the TUI computed (it computed it again, 15–49 s after the demo's `q`);
`report -o` checks its path before the verdict (a missing folder failed after 20 s); computing
a verdict says so on stderr."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tui_fixtures import write_session

import abtui.verdict.saved as vs
from abtui.cli import main
from abtui.cli import run as cli_run
from abtui.demo import DemoOptions, run_demo


@pytest.fixture
def counted(monkeypatch):
    """Every session_verdict call: the file's name and the ``store`` flag (a worker of an
    earlier test's app may still be computing one of its own: only this test's file counts)."""
    calls: list[tuple[str, bool]] = []
    real = vs.session_verdict

    def counting(path, **kw):
        calls.append((Path(path).name, bool(kw.get("store"))))
        return real(path, **kw)

    monkeypatch.setattr(vs, "session_verdict", counting)
    # the report's module binds the name when it is imported (an earlier test may have)
    monkeypatch.setattr("abtui.report.export.session_verdict", counting)
    return calls


def _headless_tui(job):
    """``run_in_tui`` under Textual's test driver: run, wait for the verdict, press q."""
    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.verdict import VerdictScreen

    async def drive() -> AbtuiApp:
        app = AbtuiApp(job=job)
        async with app.run_test(size=(80, 24)) as pilot:
            while app.error is None and (app.running or not isinstance(app.screen, VerdictScreen)):
                await pilot.pause(0.2)
            await pilot.press("q")
        return app

    app = asyncio.run(drive())
    assert app.error is None
    return app.result, app.verdict.sv if app.verdict is not None else None


def test_q_after_a_tui_run_prints_the_tuis_verdict_without_computing_it_again(
    tmp_path, monkeypatch, counted, capsys
):
    monkeypatch.setattr(cli_run, "run_in_tui", _headless_tui)
    opts = DemoOptions(
        requests=30, rate=20, time_scale=4, quality=False, sessions_dir=str(tmp_path), name="q"
    )
    rc = run_demo(
        opts,
        lambda spec, items: cli_run.run_and_report(
            spec, "", overwrite=False, items=items, gate=False, tui=True
        ),
    )
    out = capsys.readouterr().out
    assert rc == 0
    # the TUI's, stored in the file: once, never again after q
    assert [c for c in counted if c[0] == "q.duckdb"] == [("q.duckdb", True)]
    assert "Verdict:" in out and "fp8 vs bf16" in out  # and printed all the same


def test_report_checks_its_output_path_before_the_verdict(tmp_path, counted, capsys):
    path = write_session(tmp_path, "s", n=40, verdict=False)  # none stored: computed
    counted.clear()
    for bad in (tmp_path / "missing" / "x.html", tmp_path):
        rc = main(["report", str(path), "--format", "html", "-o", str(bad)])
        err = capsys.readouterr().err
        assert rc == 2 and f"cannot write {bad}" in err, err
    mine = lambda: [c for c in counted if c[0] == "s.duckdb"]  # noqa: E731
    assert mine() == []  # no verdict was computed for a report that cannot be written
    assert main(["report", str(path), "--format", "md", "-o", str(tmp_path / "r.md")]) in (0, 3, 4)
    err = capsys.readouterr().err
    assert "computing the verdict of s.duckdb" in err and "wrote md report" in err
    assert mine() == [("s.duckdb", False)]  # a read path: never stored


def test_report_says_it_computes_the_verdict(tmp_path, capsys):
    path = write_session(tmp_path, "t", n=40, verdict=False)  # none stored: computed
    assert main(["report", str(path)]) in (0, 3, 4)
    cap = capsys.readouterr()
    assert "computing the verdict of t.duckdb" in cap.err and "Verdict:" in cap.out
    stored = write_session(tmp_path, "u", n=40)  # the run's verdict stored: read back, no wait
    assert main(["report", str(stored)]) in (0, 3, 4)
    cap = capsys.readouterr()
    assert "computing the verdict" not in cap.err and "Verdict:" in cap.out


def test_the_command_line_runs_blas_on_one_thread_unless_told():
    """The verdict's many small products on OpenBLAS's per-core threads took 23-28 s after the
    last request of a 320-request run at load average 10 on 2 cores, 2.5-3.6 s on one
    (scripts/bench_run_edges.py, docs/reliability.md): the CLI sets one thread before numpy
    loads, and keeps a value the user set."""
    import os
    import subprocess
    import sys

    code = "import abtui.cli, os; print(os.environ['OPENBLAS_NUM_THREADS'])"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert got.stdout.strip() == "1", got.stderr
    env["OPENBLAS_NUM_THREADS"] = "3"
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert got.stdout.strip() == "3", got.stderr


def test_the_tui_counts_the_seconds_of_a_verdict_it_computes(tmp_path, monkeypatch):
    """`abtui open` computed its verdict for ~15 s under a fixed line; the note now counts the
    seconds, and fits 80 columns."""
    import time as _time

    from tui_fixtures import write_session as _write

    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.verdict import VerdictScreen

    path = _write(tmp_path, "slow", n=40)
    real = vs.session_verdict

    def slow(p, **kw):
        _time.sleep(2.5)  # a big session's verdict, in short
        return real(p, **kw)

    monkeypatch.setattr(vs, "session_verdict", slow)
    seen: list[str] = []

    async def drive():
        app = AbtuiApp(session=path)
        async with app.run_test(size=(80, 24)) as pilot:
            t0 = _time.monotonic()
            while not isinstance(app.screen, VerdictScreen) and _time.monotonic() - t0 < 60:
                live = app.live
                if live is not None and live.is_mounted:
                    seen.append(str(live.query_one("#note").render()))
                await pilot.pause(0.2)
            await pilot.press("q")

    asyncio.run(drive())
    counted = [s for s in seen if "computing the verdict… " in s and " s · " in s]
    assert counted, seen[-5:]
    assert all(len(s) <= 78 for s in counted), counted
