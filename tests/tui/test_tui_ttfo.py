"""TTFO in every output of a run whose responses reason before answering: a real `abtui run`
against two simulators with ``--reasoning-tokens`` (loopback), then its session file. The
headless progress lines, the summary, the md / html / json reports, the replayed live panes at
80×24 (TTFO beside TTFT on the histogram's title line, still one line that never wraps) and the
compare view's table all show TTFO, with figures distinct from TTFT's. Without reasoning the
panes stay as they were (tests/tui/test_tui_snapshots.py: the snapshots are unchanged)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re

import pytest
from test_tui_fit import _panes
from tui_fixtures import compare_view_lines

from abtui.cli import main
from abtui.runner.live_replay import Replay
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.tui.screens.open import OpenScreen

# eight 6 ms reasoning tokens before the answer: TTFO ≈ TTFT + 48 ms
REASON, ITL_MS = 8, 6.0

# serial: the medians of TTFO − TTFT (the simulator's 6 ms gaps) are asserted as lower bounds
pytestmark = pytest.mark.serial


@pytest.fixture(scope="module")
def reasoned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ttfo")
    with (
        SimProcess(SimConfig(ttft_ms=5, itl_ms=ITL_MS, reasoning_tokens=REASON, seed=1)) as a,
        SimProcess(SimConfig(ttft_ms=4, itl_ms=ITL_MS, reasoning_tokens=REASON, seed=2)) as b,
    ):
        args = ["run", "--baseline", a.url, "--candidate", b.url, "--api", "chat"]
        args += ["--rate", "20", "--requests", "40", "--output-tokens", "16", "--warmup", "1"]
        args += ["--name", "think", "--sessions-dir", str(tmp), "--headless"]

        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = main(args)
    assert rc in (0, 3, 4)
    return tmp / "think.duckdb", out.getvalue()


def _ms(text: str, label: str) -> list[float]:
    return [float(v) for v in re.findall(rf"{label} ▲(?:P50 )?([\d.]+)ms", text)]


def test_headless_and_reports_show_ttfo(reasoned, tmp_path):
    path, printed = reasoned
    progress = [ln for ln in printed.splitlines() if "TTFO50" in ln]
    assert progress, printed  # the progress lines, once a response reasoned
    assert "TTFO (ms)" in printed  # the summary table
    for fmt in ("md", "html", "json"):
        out = tmp_path / f"r.{fmt}"
        assert main(["report", str(path), "--format", fmt, "-o", str(out)]) in (0, 3, 4)
        assert "TTFO" in out.read_text(), fmt
    doc = json.loads((tmp_path / "r.json").read_text())
    assert "ttfo.p50" in json.dumps(doc)


def test_replayed_panes_show_ttfo_beside_ttft_at_80x24(reasoned):
    path, _ = reasoned
    screen = OpenScreen(Replay(path), "stored session, complete")
    lines, panes = asyncio.run(_panes(screen, (80, 24)))
    for p in panes:
        assert not p["scrollbar"] and p["virtual"] <= p["inside"], p
        for row, (_y, height, need) in p["rows"].items():
            assert need == height, (row, need, height)  # nothing wrapped
    text = "\n".join(lines)
    heads = [ln for ln in lines if "TTFT ▲" in ln]
    assert heads and all("TTFO ▲" in h for h in heads), text
    for h in heads:  # each pane's own figures: TTFO after the thinking, well past TTFT
        (ttft50, *_), ttfo = _ms(h, "TTFT"), _ms(h, "TTFO")
        assert ttfo and ttfo[0] > ttft50 + REASON * ITL_MS * 0.5, h


def test_compare_view_table_has_ttfo(reasoned):
    path, _ = reasoned

    lines = compare_view_lines(path, (80, 24))
    head = next(ln for ln in lines if "TTFT P50" in ln)
    assert "TTFO P50" in head, "\n".join(lines)
    k = lines.index(head)
    rows = lines[k + 1 : k + 3]  # the arms' lines (the reasoning/answer TPOT's block follows)
    assert all(re.search(r"\d+ms", r) for r in rows)
    for r in rows:  # n, TTFT P50, P99, TTFO P50, …: TTFO past TTFT
        ms = [float(v) for v in re.findall(r"([\d.]+)ms", r)]
        assert ms[2] > ms[0] + REASON * ITL_MS * 0.5, r
