"""A session file that can no longer be written (a full disk, an I/O error): the run ends with
exit code 5 (not 2, which is bad input), the file says ``write_failed`` with the error and keeps
every earlier commit, and ``abtui report`` says WRITE FAILED, not KILLED.

Two ways to fill the disk: DuckDB's commit failing as on a full disk (an injected
``IOException``, everywhere), and a real 3 MiB tmpfs (a private mount namespace: ``unshare
-Urm``; skipped where user namespaces are not allowed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from contextlib import contextmanager

import duckdb
import pytest

from abtui.cli import main
from abtui.client.records import RequestRecord
from abtui.errors import StoreWriteError
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.store.listing import list_sessions
from abtui.store.reader import SessionReader
from abtui.store.writer import SessionWriter

FULL = 'IO Error: Could not write file "x.duckdb.wal": No space left on device'


class FillingWriter(SessionWriter):
    """A session writer whose disk fills once ``full`` is set: every commit then fails with the
    error DuckDB gives on a full disk (and is rolled back, as a failed commit is)."""

    full = False

    @contextmanager
    def _transaction(self):
        with super()._transaction() as con:
            yield con
            if self.full:
                raise duckdb.IOException(FULL)


def _records(n: int, first: int = 0) -> list[RequestRecord]:
    return [
        RequestRecord(
            arm=i % 2,
            item=first + i,
            scheduled_ns=1,
            dispatched_ns=2,
            first_byte_ns=3,
            done_ns=9,
            chunk_ns=[5, 7],
            chunk_tokens=[1, 1],
            n_output=2,
            n_input=4,
            finish_reason="length",
        )
        for i in range(n)
    ]


def _meta(path) -> dict:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta").fetchall()}
    finally:
        con.close()


def test_a_full_disk_marks_the_session_write_failed_keeping_what_was_committed(tmp_path, capsys):
    path = tmp_path / "s.duckdb"
    reserve = tmp_path / "s.duckdb.reserve"
    w = FillingWriter(path)
    assert reserve.stat().st_size == 1 << 20  # kept free for the session's last words
    w.write_meta(status="running", session_name="s", spec={}, load="test")
    w.write_arms(
        [
            {"arm": 0, "name": "a", "role": "baseline", "url": "http://x/v1"},
            {"arm": 1, "name": "b", "role": "candidate", "url": "http://y/v1"},
        ]
    )
    w.add_records(_records(40))
    w.flush()
    w.full = True
    w.add_records(_records(40, first=40))
    with pytest.raises(StoreWriteError) as e:
        w.flush()
    assert e.value.exit_code == 5 and "No space left on device" in e.value.message
    assert "the 40 requests committed before are kept" in e.value.hint
    assert w.closed and not reserve.exists()
    w.close()  # what a caller's finally does: nothing more, no second error
    meta = _meta(path)
    assert meta["status"] == "write_failed" and "No space left" in meta["write_error"]
    with SessionReader(path) as rd:
        assert len(rd.request_table()) == 40
        kinds = [r[0] for r in rd.query("SELECT kind FROM events")]
    assert "write_failed" in kinds
    assert [r.status for r in list_sessions(tmp_path)] == ["write failed"]
    rc = main(["report", str(path)])
    out = capsys.readouterr().out
    assert rc == 4 and "WRITE FAILED:" in out and "KILLED" not in out, out


def test_a_run_whose_disk_fills_exits_5_and_reports_write_failed(tmp_path, capsys, monkeypatch):
    import abtui.runner.session as session

    class FillsUp(FillingWriter):
        """The session's writer: its disk fills after 60 requests are committed."""

        def flush(self) -> None:
            self.full = self.n_written >= 60
            super().flush()

    monkeypatch.setattr(session, "SessionWriter", FillsUp)
    with (
        SimProcess(SimConfig(seed=1, ttft_ms=5.0, itl_ms=1.0)) as a,
        SimProcess(SimConfig(seed=2, ttft_ms=5.0, itl_ms=1.0)) as b,
    ):
        rc = main(
            [
                "run",
                "--baseline",
                a.url,
                "--candidate",
                b.url,
                "--rate",
                "100",
                "--requests",
                "400",
                "--output-tokens",
                "8",
                "--input-tokens",
                "8",
                "--name",
                "full",
                "--sessions-dir",
                str(tmp_path),
                "--headless",
            ]
        )
    err = capsys.readouterr().err
    assert rc == 5, err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(f"abtui: cannot write session file {tmp_path / 'full.duckdb'}: IO Error")
    )
    meta = _meta(tmp_path / "full.duckdb")
    assert meta["status"] == "write_failed"
    assert main(["report", str(tmp_path / "full.duckdb")]) == 4
    out = capsys.readouterr().out
    assert "WRITE FAILED:" in out and "KILLED" not in out


def _can_mount_tmpfs(tmp_path) -> bool:
    if not shutil.which("unshare"):
        return False
    d = tmp_path / "probe"
    d.mkdir()
    r = subprocess.run(
        ["unshare", "-Urm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {d}"],
        capture_output=True,
        timeout=30,
    )
    return r.returncode == 0


def test_a_real_full_tmpfs(tmp_path):
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("no private mount namespace here (unshare -Urm)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    out = tmp_path / "out.json"
    with (
        SimProcess(SimConfig(seed=1, ttft_ms=2.0, itl_ms=0.5)) as a,
        SimProcess(SimConfig(seed=2, ttft_ms=2.0, itl_ms=0.5)) as b,
    ):
        script = textwrap.dedent(f"""
            import json, sys
            from abtui.cli import main
            rc = main(["run", "--baseline", "{a.url}", "--candidate", "{b.url}", "--rate", "400",
                       "--requests", "2400", "--output-tokens", "64", "--input-tokens", "8",
                       "--name", "full", "--sessions-dir", "{mnt}", "--headless"])
            from abtui.store.listing import list_sessions
            import duckdb
            con = duckdb.connect("{mnt}/full.duckdb", read_only=True)
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
            n = con.execute("SELECT count(*) FROM requests").fetchone()[0]
            json.dump({{"rc": rc, "status": json.loads(meta["status"]), "n": n,
                        "listed": [r.status for r in list_sessions("{mnt}")]}}, open("{out}", "w"))
        """)
        cmd = f"mount -t tmpfs -o size=3m tmpfs {mnt} && {sys.executable} -c '{script}'"
        r = subprocess.run(
            ["unshare", "-Urm", "sh", "-c", cmd], capture_output=True, text=True, timeout=300
        )
    assert out.exists(), r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["rc"] == 5 and res["status"] == "write_failed", (res, r.stderr[-800:])
    assert res["n"] > 0 and res["listed"] == ["write failed"]
    assert "No space left on device" in r.stderr
