"""Damaged session files: a file cut short, edited, or sent by someone else. `abtui report` and
`abtui open` say which file and what is damaged, exit code 2, never a traceback; the fuzz test
damages a real session file at random (its bytes, its values, its columns) and reads it back
with `abtui report`. And reading never writes: `abtui report` leaves the file (and a killed
writer's WAL) byte for byte as it was (docs/session-file.md)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tui_fixtures import write_session

from abtui.cli import main
from abtui.errors import StoreError
from abtui.store.damage import MAX_JSON_DEPTH, SCHEMA_COLUMNS
from abtui.store.reader import SessionReader
from abtui.store.schema import DDL

DEEP = "[" * 100_000 + "]" * 100_000
DAMAGE = {  # name: (SQL on a whole session, words the message must hold)
    "bad JSON in meta": (
        ["UPDATE meta SET value = '{bad' WHERE key = 'spec'"],
        "meta 'spec' is not valid JSON",
    ),
    "bad status": (
        ["UPDATE meta SET value = '\"done\"' WHERE key = 'status'"],
        "meta 'status' is 'done'",
    ),
    "spec of the wrong type": (
        ["UPDATE meta SET value = '[1, 2]' WHERE key = 'spec'"],
        "meta 'spec' should be an object, not a list",
    ),
    "a spec section of the wrong type": (
        ["UPDATE meta SET value = '{\"slo\": [1], \"policy\": {}}' WHERE key = 'spec'"],
        "[slo] should be an object",
    ),
    "deeply nested JSON": (
        [f"UPDATE meta SET value = '{DEEP}' WHERE key = 'load'"],
        f"meta 'load' nests deeper than {MAX_JSON_DEPTH} levels",
    ),
    "bad JSON in verdicts": (
        ["UPDATE verdicts SET result = '{\"a\": '"],
        "verdicts row 1: result is not valid JSON",
    ),
    "bad JSON in an arm's config": (
        ["UPDATE arms SET config = 'nope' WHERE arm = 1"],
        "the config of arm 1 is not valid JSON",
    ),
    "a dropped column": (
        ["ALTER TABLE requests DROP COLUMN first_token_ns"],
        "table requests has no column first_token_ns",
    ),
    "a dropped table": (["DROP TABLE events"], "it has no events table"),
    "overflowing values": (
        [
            "UPDATE requests SET done_ns = 9223372036854775000, "
            "first_token_ns = -9223372036854775000 WHERE item < 3"
        ],
        "out of range (not a time in ns)",
    ),
    "a request of no arm": (["UPDATE requests SET arm = 7 WHERE item = 1"], "requests name arm 7"),
    "arms numbered wrong": (["UPDATE arms SET arm = 5 WHERE arm = 1"], "arms are numbered"),
    "a chunk's time out of range": (
        ["UPDATE chunks SET t_ns = 9223372036854775000 WHERE seq = 1"],
        "t_ns out of range",
    ),
    "a bad clock anchor": (
        ["UPDATE meta SET value = '{\"perf_counter_ns\": 1e300}' WHERE key = 'clock_anchor'"],
        "meta 'clock_anchor'",
    ),
}


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """A session file as abtui writes it, its verdict stored (the run's)."""
    return write_session(tmp_path_factory.mktemp("whole"), "whole", n=30)


def _copy(src: Path, folder: Path, name: str) -> Path:
    dst = folder / f"{name}.duckdb"
    shutil.copyfile(src, dst)
    return dst


def _sql(path: Path, statements: list[str]) -> None:
    with duckdb.connect(str(path)) as con:
        for sql in statements:
            con.execute(sql)


def _open_in_tui(path: Path):
    """`abtui open` as far as Textual: the app on ``path`` under run_test until it has an error
    (a file that opens, but whose replay or verdict fails: shown, and raised by the CLI once
    the app closes, exit code 2)."""
    from abtui.tui.app import AbtuiApp

    async def drive():
        app = AbtuiApp(session=path)
        async with app.run_test(size=(120, 40)) as pilot:
            t0 = time.monotonic()
            while app.is_running and app.error is None and time.monotonic() - t0 < 60:
                await pilot.pause(0.1)
            if app.is_running:
                await pilot.press("q")  # the panes stay, the error on them: the user quits
        return app

    return asyncio.run(drive())


@pytest.mark.parametrize("case", list(DAMAGE))
def test_report_and_open_name_the_file_and_the_damage(whole, tmp_path, case, capsys):
    path = _copy(whole, tmp_path, "damaged")
    statements, words = DAMAGE[case]
    _sql(path, statements)
    for argv in (
        ["report", str(path)],
        ["report", str(path), "--format", "html"],
        ["open", str(path)],
    ):
        rc = main(argv)
        out, err = capsys.readouterr()
        assert rc == 2, (argv, rc, out[-1000:], err[-2000:])
        if "needs a terminal" in err:  # it opened: the damage shows in the app (below)
            assert argv[0] == "open" and case == "a chunk's time out of range", err
            continue
        assert "Traceback" not in err and str(path) in err and words in err, (argv, err)
    if case == "a chunk's time out of range":
        app = _open_in_tui(path)  # what `abtui open` raises after the app closes: exit 2
        assert isinstance(app.error, StoreError) and str(path) in str(app.error), app.error
        assert words in str(app.error)


def test_a_truncated_file(whole, tmp_path, capsys):
    data = whole.read_bytes()
    for keep in (len(data) // 2, 4096, 100):
        path = tmp_path / f"cut{keep}.duckdb"
        path.write_bytes(data[:keep])
        for argv in (["report", str(path)], ["open", str(path)]):
            assert main(argv) == 2, (keep, argv)
            err = capsys.readouterr().err
            assert "Traceback" not in err and str(path) in err, err
            assert "damaged" in err or "not a DuckDB file" in err, err


def test_no_arms(whole, tmp_path, capsys):
    path = _copy(whole, tmp_path, "armless")
    _sql(path, ["DELETE FROM requests", "DELETE FROM chunks", "DELETE FROM arms"])
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert "has no arms" in err and str(path) in err and "Traceback" not in err, err


# ------------------------------------------------------------------ reading never writes


def _state(path: Path) -> dict[str, str]:
    """Every file of the session (the file, its WAL): name -> hash of the bytes."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in path.parent.iterdir()
        if p.name.startswith(path.name)
    }


def test_report_never_writes_the_file(tmp_path, capsys):
    """A closed session without a stored verdict, then one left by a killed writer (status
    running, its rows in the WAL): every report format leaves both byte for byte as they
    were; a read-only file reports the same."""
    closed = write_session(tmp_path, "closed", n=30, verdict=False)
    killed = tmp_path / "killed.duckdb"
    code = (
        "import os, signal, sys; sys.path.insert(0, 'tests')\n"
        "from tui_fixtures import ARMS, SPEC, records\n"
        "from abtui.store.writer import SessionWriter\n"
        f"w = SessionWriter({str(killed)!r})\n"
        "w.write_meta(session_name='killed', spec=SPEC); w.write_arms(ARMS)\n"
        "w.add_records(records(1, 30)); w.flush()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert proc.returncode == -signal.SIGKILL
    assert Path(str(killed) + ".wal").exists()  # the kill left its rows in the WAL
    for path in (closed, killed):
        before = _state(path)
        for fmt in ("text", "md", "html", "json"):
            assert main(["report", str(path), "--format", fmt]) in (0, 3, 4), (path, fmt)
            capsys.readouterr()
        assert _state(path) == before, path
        with SessionReader(path) as rd:
            assert rd.verdicts() == [] and len(rd.request_table()) == 60
    os.chmod(closed, 0o444)
    try:
        assert main(["report", str(closed)]) in (0, 3, 4)
        out = capsys.readouterr().out
        assert "not stored" not in out  # nothing was tried
    finally:
        os.chmod(closed, 0o644)


# ------------------------------------------------------------------ fuzz

TABLES = dict(SCHEMA_COLUMNS)
VALUES = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from(
        [
            "",
            "{",
            "[1,",
            "null",
            "[]",
            "{}",
            "NaN",
            '"x"',
            DEEP[:3000] + "1",
            '{"slo": 1}',
            '{"arms": {}}',
            '{"perf_counter_ns": "x"}',
            "1e999",
            "running",
            "complete",
            "\x1b]0;x\x07",
        ]
    ),
    st.text(max_size=12),
    st.floats(allow_nan=True, allow_infinity=True),
)
SQL_DAMAGE = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(sorted(TABLES)), st.integers(0, 30), VALUES),
    st.tuples(st.just("drop"), st.sampled_from(sorted(TABLES)), st.integers(0, 30), st.none()),
    st.tuples(st.just("delete"), st.sampled_from(sorted(TABLES)), st.none(), st.none()),
)
BYTE_DAMAGE = st.one_of(
    st.tuples(st.just("cut"), st.floats(0.0, 1.0)),
    st.tuples(
        st.just("flip"),
        st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(0, 255)), min_size=1, max_size=8),
    ),
)


def _damage_sql(path: Path, kind: str, table: str, k, value) -> None:
    cols = TABLES[table]
    col = cols[k % len(cols)] if k is not None else None
    with duckdb.connect(str(path)) as con:
        try:
            if kind == "set":
                rows = con.execute(f'SELECT rowid FROM "{table}" LIMIT 3').fetchall()
                if rows:
                    con.execute(
                        f'UPDATE "{table}" SET "{col}" = ? WHERE rowid = ?',
                        [value, rows[k % len(rows)][0]],
                    )
            elif kind == "drop":
                con.execute(f'ALTER TABLE "{table}" DROP COLUMN "{col}"')
            else:
                con.execute(f'DELETE FROM "{table}"')
        except duckdb.Error:
            pass  # a value the column's type refuses, the key column: no damage done


def _damage_bytes(path: Path, kind: str, arg) -> None:
    data = bytearray(path.read_bytes())
    if kind == "cut":
        data = data[: int(len(data) * arg)]
    else:
        for where, byte in arg:
            data[min(int(len(data) * where), len(data) - 1)] = byte
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def fuzz_base(tmp_path_factory) -> Path:
    """A small session (the fuzz reads it back hundreds of times), verdict stored."""
    return write_session(tmp_path_factory.mktemp("fuzzbase"), "base", n=12)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    damage=st.lists(SQL_DAMAGE, min_size=1, max_size=3) | BYTE_DAMAGE.map(lambda d: [d]),
    fmt=st.sampled_from(["text", "json"]),
)
def test_fuzz_damaged_session_never_gives_a_traceback(fuzz_base, capsys, damage, fmt):
    """Random damage to a real session file (values of any type in any column, a dropped
    column, an emptied table; or bytes cut or overwritten anywhere): `abtui report` answers
    with a report or an error naming the file — never an exception."""
    with tempfile.TemporaryDirectory() as tmp:
        path = _copy(fuzz_base, Path(tmp), "fuzzed")
        for d in damage:
            if d[0] in ("cut", "flip"):
                _damage_bytes(path, *d)
            else:
                _damage_sql(path, *d)
        rc = main(["report", str(path), "--format", fmt])  # raises on a traceback
        out, err = capsys.readouterr()
        assert rc in (0, 2, 3, 4), (damage, rc, err[-2000:])
        event(f"exit code {rc}")  # --hypothesis-show-statistics: how much the damage bit
        if rc == 2:
            assert str(path) in err, (damage, err)


def test_the_schema_the_fuzz_damages_is_the_writers():
    assert len(TABLES) == len(DDL)
