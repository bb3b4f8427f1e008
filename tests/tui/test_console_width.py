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
