"""The factorial ablation in the reports and on the verdict screen: the text grid, md and html
sections, the JSON's factorial key, and the ablation view readable at 80×24."""

from __future__ import annotations

import asyncio
import json

import pytest
from test_factorial import NAMES, POLICY, _table
from tui_fixtures import ablation_verdict_data

from abtui.report.factorial import grid_lines, html, markdown, text_lines
from abtui.verdict.policy import evaluate


@pytest.fixture(scope="module")
def verdict():
    return evaluate(
        _table(0.15, n=600),
        [{"name": n} for n in NAMES],
        {"ablation": {"factors": ["fp8", "spec"]}, "policy": POLICY},
    )


def test_text_grid_and_findings(verdict):
    fac, pol = verdict.factorial, verdict.policy
    lines = text_lines(fac, pol, 100)
    assert lines[0].startswith("factorial ablation: fp8 × spec (4 arms")
    grid = grid_lines(fac, "tpot.p50", 78)
    assert (
        grid[0] == "P50 TPOT (lower is better)" and "spec off" in grid[1] and "spec on" in grid[1]
    )
    assert grid[2].startswith("fp8 off     base ") and grid[3].startswith("fp8 on ")
    inter = next(line for line in grid if line.startswith("interaction"))
    assert inter.startswith("interaction fp8×spec +") and "ANTAGONISTIC, Holm p" in inter
    assert all(len(line) <= 78 for line in grid)
    assert any(line.startswith("  finding: fp8+spec: P50 TPOT") for line in lines)


def test_markdown_html_and_json(verdict):
    fac, pol = verdict.factorial, verdict.policy
    md = "\n".join(markdown(fac, pol, lambda s: str(s)))
    assert "## Factorial ablation" in md and "| P50 TPOT |" in md and "ANTAGONISTIC" in md
    h = html(fac, pol, lambda s: str(s))
    assert "<h2>Factorial ablation: fp8 × spec</h2>" in h and "ANTAGONISTIC" in h
    doc = json.loads(json.dumps(verdict.to_dict()))
    inter = next(r for r in doc["factorial"]["rows"] if r["key"] == "tpot.p50")["interactions"][0]
    assert {"term", "ratio", "lo", "hi", "log", "p_adj", "family", "outcome", "finding"} <= set(
        inter
    )
    assert inter["lo"] <= 0.15 <= inter["hi"] and inter["finding"].startswith("fp8+spec: P50 TPOT")


def test_verdict_screen_ablation_view_at_80x24(verdict, tmp_path):
    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.verdict import VerdictScreen

    data = ablation_verdict_data(verdict, NAMES, tmp_path)

    async def run():
        app = AbtuiApp()
        async with app.run_test(size=(80, 24)) as pilot:
            await app.push_screen(VerdictScreen(data))
            await pilot.pause()
            view = app.screen.query_one("#ablation")
            view.scroll_visible(animate=False)
            await pilot.pause()
            shown = [s.text.rstrip() for s in app.screen._compositor.render_strips()]
            await pilot.press("a")  # the next metric (a guardrail)
            await pilot.pause()
            after = str(view.render())
            await pilot.press("q")
        return shown, after

    shown, after = asyncio.run(run())
    text = "\n".join(shown)
    assert "ablation: fp8 × spec" in text and "P50 TPOT (lower is better)" in text
    assert "\\x0a" not in text  # the grid's lines are lines, not one escaped string
    row = next(line for line in shown if "fp8 on " in line)
    assert "[" in row and "]" in row  # the cell with its CI, on one line
    assert all(len(line) <= 80 for line in shown)
    assert "P50 TTFT" in after
