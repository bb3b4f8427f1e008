"""The verdict screen's metrics table fits the terminal: at 80×24 every row is one line with
its metric name whole (short names, δ and p left out, said under the table); at 160×48 the
full table (role, δ, p) with the report's metric names. Outcomes are words at any width. The
quality table likewise: one line per row at 80 and 100 columns (suite, length and gate word
whole, what was left out said under it), every column of the report's table at 160."""

from __future__ import annotations

import asyncio

import pytest
from tui_fixtures import write_session

from abtui.report import quality as quality_report
from abtui.report.verdict_text import rows_of, short_label
from abtui.stats.labels import label
from abtui.tui.app import AbtuiApp
from abtui.tui.screens.verdict import VerdictScreen, load_verdict


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


# ------------------------------------------------------------------------------ the quality table


@pytest.fixture(scope="module")
def quality_data(tmp_path_factory):
    return load_verdict(write_session(tmp_path_factory.mktemp("q"), "q", seed=1, quality=True))


async def _quality_lines(data, size) -> list[str]:
    """The screen's lines of the quality section, scrolled to the top of the screen."""
    app = AbtuiApp()
    async with app.run_test(size=size) as pilot:
        await app.push_screen(VerdictScreen(data))
        await pilot.pause()
        chart = app.screen.query_one("#quality-0")
        app.screen.query_one("VerticalScroll").scroll_to_widget(chart, animate=False, top=True)
        await pilot.pause()
        await pilot.pause()
        region = chart.region
        assert region.y + region.height <= size[1] - 1, region  # whole above the footer
        lines = [s.text.rstrip() for s in app.screen._compositor.render_strips()]
        await pilot.press("q")
    return [ln.strip() for ln in lines[region.y : region.y + region.height]]


def _flat(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())


@pytest.mark.parametrize("size", [(80, 24), (100, 32)])
def test_quality_rows_are_one_line_each_at_80_and_100_columns(quality_data, size):
    qual = quality_data.sv.verdict.pairs[0].quality
    cells = quality_report.short_rows(qual)
    assert len(cells) == 7 and {r[9] for r in cells} == {"pass", "FAIL", ""}
    lines = asyncio.run(_quality_lines(quality_data, size))
    head = next(i for i, ln in enumerate(lines) if ln.startswith("suite "))
    header, rows, after = lines[head], lines[head + 1 : head + 1 + len(cells)], lines[head + 1 :]
    for col in ("suite", "Δacc (pp)", "gate"):
        assert col in header, (col, header)
    for r, line in zip(cells, rows, strict=True):  # the suite, its length and gate word whole
        assert line.split()[:2] == r[:2], (r, line)
        assert r[5] in line.split(), (r, line)  # Δacc
        assert line.endswith(r[9]), (r[9], line)
    assert after[len(cells)].startswith("gate: pass when"), after  # no row's continuation
    under = _flat(after[len(cells) :])
    assert under.startswith("gate: pass when the CI's lower bound ≥ −margin (exact 1 pp, niah 15")
    gone = [c for c in quality_report.SHORT_COLUMNS if c not in header]
    if size[0] == 80:
        assert gone, header  # the whole short table is wider than 76 columns
    for col in gone:  # said under the table, with the width it shows from
        assert f"{col} from " in under.partition("left out: ")[2], (col, under)
    assert "the report's full table from 1" in under
    for note in quality_report.notes(qual):  # sentences, wrapped but whole
        assert note in under, (note, under)
    assert quality_report.mode_line(quality_report.QualityMode("separate")) in _flat(lines[:head])


def test_quality_table_keeps_every_column_at_160(quality_data):
    qual = quality_data.sv.verdict.pairs[0].quality
    cells = quality_report.rows(qual)
    lines = asyncio.run(_quality_lines(quality_data, (160, 48)))
    head = next(i for i, ln in enumerate(lines) if ln.startswith("suite "))
    for col in quality_report.COLUMNS:
        assert col in lines[head], col
    for r, line in zip(cells, lines[head + 1 : head + 1 + len(cells)], strict=True):
        at = 0
        for c in r:  # every cell, in order, as the report writes it
            at = line.index(c, at) + len(c)
    assert "full table from" not in _flat(lines) and "FAIL (≥ −1 pp)" in lines[head + 1]
    assert quality_report.mode_line(quality_report.QualityMode("separate")) in _flat(
        lines[:head]
    )  # the mode that ran


def test_gate_rule_states_one_margin_or_each_suites():
    from abtui.quality.gates import PASS, QualityVerdict, SuiteGate

    def qual(*margins: float) -> QualityVerdict:
        gates = [SuiteGate(s, m, -0.001, 0.001, PASS, True, None, False) for s, m in margins]
        return QualityVerdict((), (), 0, tuple(gates), (), (), ())

    one = qual(("a", 0.01), ("b", 0.01))
    assert quality_report.gate_rule(one) == "gate: pass when the CI's lower bound ≥ −1 pp"
    each = qual(("a", 0.01), ("b", 0.025))
    assert quality_report.gate_rule(each).endswith("≥ −margin (a 1 pp, b 2.5 pp)")
    assert quality_report.gate_rule(qual()) is None


def test_the_width_the_metrics_caption_names_is_the_terminals(verdict_data):
    """'δ and p (adj) from N columns wide' names a terminal width: at N columns the full table
    shows, at N - 1 the compact one (the screen's border and scrollbar take a few columns)."""
    import re

    lines = asyncio.run(_screen_lines(verdict_data, (80, 24)))
    said = next(ln for ln in lines if "δ and p (adj) from" in ln)
    n = int(re.search(r"from (\d+) columns wide", said).group(1))
    assert n > 100, said  # more than the table's own threshold
    full = asyncio.run(_screen_lines(verdict_data, (n, 40)))
    assert "δ" in _table_rows(full, 1)[0], full
    compact = asyncio.run(_screen_lines(verdict_data, (n - 1, 40)))
    header = _table_rows(compact, 1)[0]
    assert "δ" not in header and "95% CI (%)" in header, header
