"""abtui.headless: a run driven from Python (what the engine experiments and users' scripts call)
behaves as ``abtui run SPEC --headless`` does — the same session file, summary, verdict and exit
code — and a user error is a one-line message and exit code 2, never a traceback."""

from __future__ import annotations

import os

from abtui.headless import run_spec_file
from abtui.report.document import report_data
from abtui.report.export import to_markdown
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader
from abtui.verdict.saved import session_verdict


def test_run_spec_file_runs_stores_and_prints_the_verdict(tmp_path, capsys):
    with (
        SimProcess(SimConfig(ttft_ms=30, itl_ms=6, model="sim-a", seed=1)) as a,
        SimProcess(SimConfig(ttft_ms=20, itl_ms=4, model="sim-b", seed=2)) as b,
    ):
        spec = tmp_path / "ab.toml"
        spec.write_text(
            f'name = "py"\n[store]\ndir = "{tmp_path}"\n'
            "[workload]\nrequests = 12\ninput_tokens = 32\noutput_tokens = 8\n"
            "[load]\nconcurrency = 2\nwarmup = 1\n"
            f'[[arms]]\nname = "base"\nurl = "{a.url}"\nrole = "baseline"\n'
            f'[[arms]]\nname = "cand"\nurl = "{b.url}"\nrole = "candidate"\n'
        )
        rc = run_spec_file(spec)
        out = capsys.readouterr()
        assert rc in (0, 3, 4), out.err  # a complete run: the verdict's code
        assert "Verdict" in out.out or "VERDICT" in out.out.upper()
        with SessionReader(tmp_path / "py.duckdb") as rd:
            assert rd.complete and len(rd.request_table()) == 24
            assert len(rd.verdicts()) >= 1
        # the report names the machine the run was measured on, its CPU count included
        sv = session_verdict(tmp_path / "py.duckdb", store=False)
        host = next(ln for ln in to_markdown(sv, report_data(sv)).splitlines() if "| host |" in ln)
        assert f"{os.cpu_count()} CPUs" in host and sv.meta["host"]["cpu"], host
        # the same name again without overwrite: a user error, as on the command line
        assert run_spec_file(spec) == 2
        err = capsys.readouterr().err
        assert err.startswith("abtui: ") and "py.duckdb" in err and "Traceback" not in err
        assert run_spec_file(spec, overwrite=True) in (0, 3, 4)


def test_run_spec_file_names_a_bad_spec(tmp_path, capsys):
    spec = tmp_path / "bad.toml"
    spec.write_text("[load]\nrate = -1\n")
    assert run_spec_file(spec) == 2
    err = capsys.readouterr().err
    assert "bad.toml" in err and "Traceback" not in err


def test_the_report_after_a_run_opens_the_file_once_and_prints_the_same(
    tmp_path, capsys, monkeypatch
):
    """report_run (the end of ``abtui run``) reads the session through one reader and one
    request table for the summary, diagnosis, profile and verdict, closes it before the
    verdict is stored, and prints what each section prints from the path on its own."""
    import shutil
    from types import SimpleNamespace

    from tui_fixtures import write_session

    from abtui.headless import print_session_verdict, report_run
    from abtui.report.console import print_session_summary
    from abtui.report.diagnosis import print_diagnosis
    from abtui.report.profile import print_profile

    path = write_session(tmp_path, "once", n=80, verdict=False)
    alone = shutil.copyfile(path, tmp_path / "alone.duckdb")
    opened: list[str] = []
    init = SessionReader.__init__

    def counted(self, p, *args, **kwargs):
        opened.append(str(p))
        init(self, p, *args, **kwargs)

    monkeypatch.setattr(SessionReader, "__init__", counted)
    rc = report_run(SimpleNamespace(path=str(path), status="complete"))
    together = capsys.readouterr().out
    assert opened == [str(path)]
    monkeypatch.setattr(SessionReader, "__init__", init)
    with SessionReader(path) as rd:
        assert len(rd.verdicts()) == 1  # stored: the reader was closed first
    import sys

    for section in (print_session_summary, print_diagnosis, print_profile):
        section(str(alone), sys.stdout)
    sv = print_session_verdict(str(alone), store=True)
    separately = capsys.readouterr().out
    assert rc == sv.exit_code
    assert together == separately.replace(str(alone), str(path))
