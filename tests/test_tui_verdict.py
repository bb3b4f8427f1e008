"""The verdict screen's metrics table fits the terminal: at 80×24 every row is one line with
its metric name whole (short names, δ and p left out, said under the table); at 160×48 the
full table (role, δ, p) with the report's metric names. Outcomes are words at any width."""

from __future__ import annotations

import asyncio

import pytest
from tui_fixtures import write_session

from abtui.report.verdict_text import rows_of
from abtui.stats.verdict import label
from abtui.tui.app import AbtuiApp
from abtui.tui.screens.verdict import VerdictScreen, load_verdict, short_label


@pytest.fixture(scope="module")
def verdict_data(tmp_path_factory):
    return load_verdict(write_session(tmp_path_factory.mktemp("verdict"), "v80", seed=1))


async def _screen_lines(data, size) -> list[str]:
    app = AbtuiApp()
    async with app.run_test(size=size) as pilot:
        await app.push_screen(VerdictScreen(data))
        await pilot.pause()
        await pilot.pause()
        lines = [s.text.rstrip() for s in app.screen._compositor.render_strips()]
        await pilot.press("q")
    return lines


def _table_rows(lines: list[str], n: int) -> tuple[str, list[str], str]:
    head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("metric "))
    return lines[head], lines[head + 1 : head + 1 + n], lines[head + 1 + n]


def test_metrics_table_rows_fit_80_columns(verdict_data):
    pair, pol = verdict_data.sv.verdict.pairs[0], verdict_data.sv.verdict.policy
    effects = rows_of(pair, pol)
    assert len(effects) >= 8
    lines = asyncio.run(_screen_lines(verdict_data, (80, 24)))
    header, rows, after = _table_rows(lines, len(effects))
    for col in ("bf16", "fp8", "Δ", "95% CI", "outcome"):
        assert col in header, col
    for e, row in zip(effects, rows, strict=True):  # one line per row, the name whole
        assert row.strip().startswith(short_label(e.key) + " "), (e.key, row)
        assert e.outcome in row, (e.outcome, row)  # the outcome as a word, not cut
    assert after.strip().startswith("r: P primary, G guardrail")  # no wrapped continuation


def test_metrics_table_keeps_every_column_at_160(verdict_data):
    pair, pol = verdict_data.sv.verdict.pairs[0], verdict_data.sv.verdict.policy
    effects = rows_of(pair, pol)
    lines = asyncio.run(_screen_lines(verdict_data, (160, 48)))
    header, rows, _ = _table_rows(lines, len(effects))
    for col in ("role", "95% CI", "δ", "p (adj)", "outcome"):
        assert col in header, col
    for e, row in zip(effects, rows, strict=True):
        assert row.strip().startswith(label(e.key)), (e.key, row)
        assert e.outcome in row
    assert any("primary" in r for r in rows) and any("guardrail" in r for r in rows)


def test_export_keys_say_where_the_report_went_on_screen_at_80x24(verdict_data):
    """m and h write the reports next to the session file, and the line saying so is on the
    screen at once (it was the scroll's last line, below the fold at 80×24), whole, however
    many lines a long path wraps to (CI's temporary directories are long)."""

    async def drive():
        app = AbtuiApp()
        shown = []
        async with app.run_test(size=(80, 24)) as pilot:
            await app.push_screen(VerdictScreen(verdict_data))
            await pilot.pause()
            for key in ("m", "h"):
                await pilot.press(key)
                await pilot.pause()
                await pilot.pause()
                region = app.screen.query_one("#exported").region
                lines = [s.text.rstrip() for s in app.screen._compositor.render_strips()]
                shown.append((lines, region))
            await pilot.press("q")
        return shown

    shown = asyncio.run(drive())
    path = verdict_data.sv.path
    for fmt, (lines, region) in zip(("md", "html"), shown, strict=True):
        out = path.with_suffix(f".{fmt}")
        assert out.exists() and out.stat().st_size > 1000, out
        assert len(lines) == 24 and lines[0].strip().startswith("Verdict"), lines[0]
        # on screen, above the footer, and the last thing before it
        assert region.height >= 1 and region.y + region.height == 23, region
        said = lines[region.y : region.y + region.height]
        assert said[0].strip().startswith(f"wrote {fmt} report to"), said
        assert str(out) in "".join(ln.strip() for ln in said), said
    assert "<html" in path.with_suffix(".html").read_text().lower()
    assert "fp8" in path.with_suffix(".md").read_text()
