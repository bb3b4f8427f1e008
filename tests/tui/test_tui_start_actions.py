"""The start screen's actions, driven with run_test() at 80×24 on real session
files: a degraded session says so, requests are per arm, ``/`` filters the list, ``x`` deletes
only after ``y`` (and only a session file of the folder), ``c`` twice compares two sessions
(the core's :func:`abtui.report.compare.compare_sessions`), the help lists this screen's keys,
and the command palette carries the app's own actions."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys

import pytest
from test_tui import text_of, verdict_shown, wait_for
from tui_fixtures import session_folder, write_session

from abtui.errors import AbtuiError
from abtui.report.compare import CAVEAT, compare_lines, compare_sessions
from abtui.store.listing import delete_session, list_sessions
from abtui.tui.app import AbtuiApp, HelpScreen
from abtui.tui.screens.compare import CompareScreen
from abtui.tui.screens.dialogs import Confirm
from abtui.tui.screens.start import StartScreen


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "sessions"
    session_folder(d)
    write_session(d, "ab-degraded", seed=4, mtime=1_700_000_050, meta={"degraded": True})
    write_session(d, "ab-fast", seed=5, n=40, mtime=1_700_000_060)
    return d


def lines(app) -> list[str]:
    return [s.text for s in app.screen._compositor.render_strips()]


def rows_loaded(app) -> bool:
    return isinstance(app.screen, StartScreen) and bool(app.screen.rows)


def test_listing_says_degraded_and_requests_per_arm(folder):
    rows = {r.name: r for r in list_sessions(folder)}
    assert rows["ab-degraded"].degraded and not rows["ab-finished"].degraded
    assert rows["ab-finished"].per_arm == [60, 60] and rows["ab-finished"].requests == 120
    assert rows["ab-fast"].per_arm == [40, 40]


def test_delete_session_refuses_anything_but_a_session_file_of_the_folder(folder, tmp_path):
    outside = write_session(tmp_path, "elsewhere", seed=6)
    other = folder / "notes.txt"
    other.write_text("keep me")
    for bad in (outside, other, folder / "missing.duckdb", folder / ".." / "elsewhere.duckdb"):
        with pytest.raises(AbtuiError, match="not deleted"):
            delete_session(folder, bad)
    assert outside.exists() and other.exists()
    # a file a running abtui writes is refused too
    live = folder / "live.duckdb"
    code = (
        "import sys; from abtui.store.writer import SessionWriter\n"
        f"w = SessionWriter({str(live)!r}); print('ready', flush=True); sys.stdin.readline()\n"
        "w.close()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(AbtuiError, match="being written"):
            delete_session(folder, live)
        assert live.exists()
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    wal = folder / "ab-fast.duckdb.wal"
    wal.write_bytes(b"")  # a write-ahead log left beside it goes with it
    gone = delete_session(folder, folder / "ab-fast.duckdb")
    assert gone == [(folder / "ab-fast.duckdb").resolve(), wal.resolve()]
    assert not (folder / "ab-fast.duckdb").exists() and not wal.exists()


def test_compare_sessions_matches_arms_by_name_and_says_it_is_descriptive(folder):
    c = compare_sessions(folder / "ab-finished.duckdb", folder / "ab-fast.duckdb")
    assert c.a.name == "ab-finished" and c.b.name == "ab-fast" and c.arms == ["bf16", "fp8"]
    row = next(r for r in c.rows if r["arm"] == "fp8" and r["metric"] == "TTFT P50")
    assert math.isclose(row["change"], row["b"] / row["a"] - 1)
    assert c.b.summaries["fp8"].ok == 40 and c.a.summaries["fp8"].ok == 60
    head, rows = compare_lines(c)
    assert head == ["arm", "metric", "A", "B", "B vs A"] and len(rows) == 2 * 8
    for r in rows:
        assert r[4] == "—" or r[4].endswith(("better", "worse", "≈")), r
    assert "not paired" in CAVEAT and "no CI" in CAVEAT
    assert compare_sessions(folder / "ab-degraded.duckdb", folder / "ab-fast.duckdb").a.degraded


def test_degraded_rows_per_arm_counts_filter_and_help_at_80x24(folder):
    async def drive():
        app = AbtuiApp(start=StartScreen(folder))
        seen = {}
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: rows_loaded(app), 30)
            await pilot.pause()
            seen["list"] = lines(app)
            await pilot.press("slash", *"fp8 GO")  # two words: both must be in the row
            await pilot.pause()
            seen["filtered"] = lines(app)
            seen["shown"] = [r.name for r in app.screen.shown]
            await pilot.press("enter")  # the filter stays, the list has the keys again
            await pilot.pause()
            seen["kept"] = [r.name for r in app.screen.shown]
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            seen["help"] = text_of(app.screen.query_one("#keys"))
            await pilot.press("escape")
            await pilot.pause()
            await pilot.press("escape")  # clears the filter
            await pilot.pause()
            seen["cleared"] = [r.name for r in app.screen.shown]
            await pilot.press("q")
        return seen

    s = asyncio.run(drive())
    text = "\n".join(s["list"])
    assert all(len(ln) <= 80 for ln in s["list"])
    assert "req/arm" in text
    deg = next(ln for ln in s["list"] if "ab-degraded" in ln)
    assert " degraded " in deg and " finished " not in deg and " 60 " in deg
    done = next(ln for ln in s["list"] if "ab-finished" in ln)
    assert " finished " in done and " 60 " in done and "120" not in done
    assert s["shown"] == ["ab-fast", "ab-degraded", "ab-finished"]  # GO sessions with fp8
    assert "filter “fp8 GO”: 3 of 6" in "\n".join(s["filtered"])
    assert s["kept"] == s["shown"]
    assert len(s["cleared"]) == 6
    help_text = s["help"]
    for k in ("Enter", "/", "x / Delete", "c", "d", "r", "ctrl+p"):
        assert k in help_text, k
    assert "replay faster" not in help_text and "Markdown report" not in help_text


def test_x_deletes_only_after_y(folder):
    async def drive():
        app = AbtuiApp(start=StartScreen(folder))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: rows_loaded(app), 30)
            start = app.screen
            await pilot.press("down", "down", "down")
            assert start._selected().name == "ab-fast"
            await pilot.press("x")
            await pilot.pause()
            assert isinstance(app.screen, Confirm)
            question = "\n".join(lines(app))
            await pilot.press("n")  # no: kept
            await pilot.pause()
            assert (folder / "ab-fast.duckdb").exists() and app.screen is start
            await pilot.press("delete")
            await pilot.pause()
            await pilot.press("escape")  # Esc: kept
            await pilot.pause()
            assert (folder / "ab-fast.duckdb").exists()
            await pilot.press("x")
            await pilot.pause()
            await pilot.press("y")
            await wait_for(pilot, lambda: len(app.screen.rows) == 5, 30)
            after = "\n".join(lines(app))
            await pilot.press("q")
        return question, after

    question, after = asyncio.run(drive())
    assert "Delete the session file" in question and "ab-fast.duckdb" in question
    assert "y: delete it" in question and "n / Esc: keep it" in question
    assert not (folder / "ab-fast.duckdb").exists()
    assert "ab-fast" not in after.split("deleted")[0] and "deleted" in after


def test_c_twice_compares_two_sessions(folder):
    async def drive():
        app = AbtuiApp(start=StartScreen(folder))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: rows_loaded(app), 30)
            await pilot.press("down", "down", "down")
            await pilot.press("c")  # marks ab-fast
            await pilot.pause()
            marked = "\n".join(lines(app))
            await pilot.press("down")  # ab-degraded
            await pilot.press("c")
            await wait_for(
                pilot,
                lambda: isinstance(app.screen, CompareScreen) and app.screen.compared is not None,
                30,
            )
            await pilot.pause()
            shown = lines(app)
            await pilot.press("escape")
            await pilot.pause()
            back = isinstance(app.screen, StartScreen) and app.screen.marked is None
            await pilot.press("q")
        return marked, shown, back

    marked, shown, back = asyncio.run(drive())
    assert "▸ab-fast" in marked and "marked ab-fast" in marked
    text = "\n".join(shown)
    assert all(len(ln) <= 80 for ln in shown)
    assert "A ab-fast" in text and "B ab-degraded" in text and "DEGRADED" in text
    assert "not paired" in text and "TTFT P50" in text and "bf16" in text and "fp8" in text
    assert back


def test_the_palette_opens_compares_and_exports(folder):
    async def drive():
        app = AbtuiApp(start=StartScreen(folder))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: rows_loaded(app), 30)
            await pilot.press("down", "down", "down")  # ab-fast: compared with any other
            await pilot.press("ctrl+p")
            await pilot.pause(0.5)
            await pilot.press(*"compare ab-fast with ab-stopped")
            await pilot.pause(1.0)
            await pilot.press("enter")
            await wait_for(
                pilot,
                lambda: isinstance(app.screen, CompareScreen) and app.screen.compared is not None,
                30,
            )
            names = (app.screen.compared.a.name, app.screen.compared.b.name)
            await pilot.press("escape")
            await pilot.pause()
            await pilot.press("ctrl+p")
            await pilot.pause(0.5)
            await pilot.press(*"open session ab-finished")
            await pilot.pause(1.0)
            await pilot.press("enter")
            await wait_for(pilot, lambda: verdict_shown(app) or app.error, 60)
            await pilot.press("l")  # the replay; export from there through the palette
            await pilot.pause()
            for fmt in ("Markdown", "HTML"):
                await pilot.press("ctrl+p")
                await pilot.pause(0.5)
                await pilot.press(*f"export the {fmt}")
                await pilot.pause(1.0)
                await pilot.press("enter")
                await wait_for(pilot, lambda: verdict_shown(app), 30)
                await pilot.pause(0.5)
            exported = text_of(app.screen.query_one("#exported"))
            await pilot.press("q")
        return names, exported

    names, exported = asyncio.run(drive())
    assert names == ("ab-fast", "ab-stopped")
    assert (folder / "ab-finished.md").read_text().strip()
    assert "<html" in (folder / "ab-finished.html").read_text().lower()
    assert "wrote html report" in exported
