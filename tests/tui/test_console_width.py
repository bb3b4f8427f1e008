"""Printed output fits its terminal: the summary, diagnosis and verdict
printed after the TUI exits follow the terminal's width (a 128-column table wrapped mid-word at
80), and headless progress lines are at most 100 characters and never print ``n/ams``."""

from __future__ import annotations

import io
import math
import re

from tui_fixtures import write_session

from abtui.report.console import LINE_MAX, HeadlessObserver, print_session_summary
from abtui.report.diagnosis import print_diagnosis
from abtui.report.verdict_text import print_verdict
from abtui.runner.observer import ArmProgress, Snapshot
from abtui.verdict.saved import session_verdict
from abtui.workload.segments import Position


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def printed(out, path) -> str:
    print_session_summary(path, out)
    print_diagnosis(path, out)
    print_verdict(session_verdict(path), out)
    return re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())  # a terminal gets colours


def test_after_the_tui_the_printed_summary_and_verdict_follow_an_80_column_terminal(
    tmp_path, monkeypatch
):
    path = write_session(tmp_path, "w", n=60)
    monkeypatch.setenv("COLUMNS", "80")
    text = printed(Terminal(), path)
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= 80, max(lines, key=len)
    # the compact metrics table (as the verdict screen's): whole words, the CI in one cell
    assert any(ln.startswith("metric") and "95% CI (%)" in ln for ln in lines), text
    assert any("IMPROVED" in ln and "P50 E2E" in ln for ln in lines)
    assert not any(ln.startswith("metric") and "p (adj)" in ln for ln in lines)
    # a pipe or a file keeps the full table at its fixed width
    piped = printed(io.StringIO(), path)
    assert any(ln.startswith("metric") and "p (adj)" in ln for ln in piped.splitlines())
    assert max(len(ln) for ln in piped.splitlines()) > 80
    monkeypatch.setenv("COLUMNS", "160")
    wide = printed(Terminal(), path)
    assert any(ln.startswith("metric") and "p (adj)" in ln for ln in wide.splitlines())
    assert max(len(ln) for ln in wide.splitlines()) <= 160


def arm(name: str, ttft: float = math.nan) -> ArmProgress:
    return ArmProgress(
        name=name,
        planned=12000,
        done=11500,
        ok=11400,
        errors={"timeout": 60, "http": 40},
        recent_ttft_p50_s=ttft,
        recent_tpot_p50_s=math.nan,
    )


def test_headless_progress_lines_are_at_most_100_characters_without_n_a_ms():
    seg = Position(
        run=0, runs=1, level=1, levels=2, block=3, blocks=12, rate=8.0, turn="candidate-fp8"
    )
    for arms in (
        [arm("bf16"), arm("fp8", 0.0475)],
        [
            arm("baseline-bf16-h100"),
            arm("candidate-fp8-h100", 1.5),
            arm("candidate-int4-awq-h100", 0.02),
        ],
    ):
        for segment in (None, seg):
            out = io.StringIO()
            HeadlessObserver(out, every_s=0.0).progress(Snapshot(12.0, arms, "measuring", segment))
            text = out.getvalue()
            assert max(len(ln) for ln in text.splitlines()) <= LINE_MAX, text
            assert "n/ams" not in text and "n/a" in text
            assert all(a.name in text for a in arms) and "measuring]" in text.splitlines()[0]
            if segment is not None:
                assert "(level 2/2" in text.splitlines()[0]
    out = io.StringIO()
    HeadlessObserver(out, every_s=0.0).progress(Snapshot(3.0, [arm("a", 0.05)], "measuring"))
    assert len(out.getvalue().splitlines()) == 1 and "TTFT50 50.0ms" in out.getvalue()


def _bullet_blocks(lines: list[str], reasons: list[str], indent: str = "    ") -> dict:
    """Each reason's printed lines joined back (its first line from ``  - ``, the rest while
    they start with ``indent``), by reason; a reason not found maps to None."""
    out = {}
    for r in reasons:
        at = [i for i, ln in enumerate(lines) if ln.startswith("  - " + r[:24])]
        if not at:
            out[r] = None
            continue
        i, parts = at[0], [lines[at[0]][4:].rstrip()]
        while i + 1 < len(lines) and lines[i + 1].startswith(indent) and lines[i + 1].strip():
            i += 1
            parts.append(lines[i].strip())
        out[r] = (" ".join(parts), i - at[0] + 1)
    return out


def test_printed_verdict_at_80_columns_hangs_its_bullets_and_names_no_width(tmp_path, monkeypatch):
    """Printed after the TUI at 80 columns: a reason longer than a line wraps under its own
    first word, never at column 1 nor mid-word; the quality table is fitted to the width (its
    rows wrapped to column 1); the captions say where the left-out columns are, not "from 100
    columns wide" (printed text has no terminal to widen)."""
    from rich.cells import cell_len

    path = write_session(tmp_path, "q", n=60, quality=True)
    monkeypatch.setenv("COLUMNS", "80")
    out = Terminal()
    sv = session_verdict(path)
    print_verdict(sv, out)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    lines = text.splitlines()
    assert max(cell_len(ln) for ln in lines) <= 80, max(lines, key=cell_len)
    reasons = [r for p in sv.verdict.pairs for r in p.reasons]
    blocks = _bullet_blocks(lines, reasons)
    assert all(b is not None and b[0] == r for r, b in blocks.items()), blocks
    assert any(n > 1 for _, n in blocks.values()), "no reason long enough to wrap"
    assert "columns wide" not in text and "abtui report --format md" in text
    assert "quality (paired items, greedy)" in text and ".py" not in text
    assert all(not ln.startswith(("niah", "keys")) for ln in lines)  # no row back at column 1


def test_the_tui_verdict_bullets_hang_under_their_first_word_at_80x24(tmp_path):
    import asyncio
    import io as _io

    from rich.console import Console

    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.verdict import VerdictScreen

    path = write_session(tmp_path, "b", n=60)

    async def drive():
        app = AbtuiApp(session=path)
        async with app.run_test(size=(80, 24)) as pilot:
            for _ in range(600):
                if isinstance(app.screen, VerdictScreen) and app.screen.query("#banner"):
                    break
                await pilot.pause(0.1)
            await pilot.pause()
            banner = app.screen.query_one("#banner")
            buf = _io.StringIO()
            Console(file=buf, width=banner.content_region.width, color_system=None).print(
                banner.content
            )
            await pilot.press("q")
            return buf.getvalue(), banner.content_region.width

    text, width = asyncio.run(drive())
    assert width <= 80
    lines = text.splitlines()
    reasons = [r for p in session_verdict(path).verdict.pairs for r in p.reasons]
    blocks = _bullet_blocks(lines, reasons)
    assert all(b is not None and b[0] == r for r, b in blocks.items()), (blocks, text)
    assert any(n > 1 for _, n in blocks.values()), "no reason long enough to wrap"


def test_lines_printed_after_the_tui_wrap_at_word_boundaries(monkeypatch):
    """The demo's closing lines (the exit code, the quality note) went out as one long line
    each, which an 80-column terminal breaks mid-word ("can" / "didate")."""
    from abtui.report.console import say

    long = (
        "demo: the simulator's model of quality expects fp8 vs bf16: keys -0.3 pp over 30 "
        "items (one flip 3.3 pp); niah -0.3 pp over 45 items — less than one flip: no accuracy "
        "difference is the expected result here for the candidate, not a measurement failure"
    )
    out = Terminal()
    monkeypatch.setenv("COLUMNS", "80")
    say(long, out)
    lines = out.getvalue().splitlines()
    assert len(lines) > 1 and max(len(ln) for ln in lines) <= 80
    assert " ".join(ln.strip() for ln in lines).split() == long.split()  # no word cut
    piped = io.StringIO()
    say(long, piped)
    assert piped.getvalue() == long + "\n"  # a file or pipe gets it whole
