"""Every non-decision shows its reason wherever its row is shown: the TUI's
verdict screen at 80×24 and the terminal verdict gave the reason of an INCONCLUSIVE row only for
the primary and the guardrails, so throughput, goodput and SLO attainment rows said
INCONCLUSIVE with their CI beyond δ and no word why (the Markdown and HTML reports had it)."""

from __future__ import annotations

import asyncio
import io
import re

import pytest
from tui_fixtures import write_session

from abtui.report.verdict_text import print_verdict, rows_of
from abtui.stats.labels import label
from abtui.tui.app import AbtuiApp
from abtui.tui.screens.verdict import VerdictScreen, load_verdict


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return load_verdict(write_session(tmp_path_factory.mktemp("reasons"), "r", n=60))


def _undecided(data):
    pair, pol = data.sv.verdict.pairs[0], data.sv.verdict.policy
    rows = [e for e in rows_of(pair, pol) if e.outcome == "INCONCLUSIVE"]
    side = [e for e in rows if e.key not in (pol.primary, *pol.guardrails)]
    assert side, "the fixture should leave a row beyond the guardrails undecided"
    assert all(e.note for e in rows)
    return rows


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_the_terminal_verdict_gives_every_undecided_rows_reason(data):
    out = io.StringIO()
    print_verdict(data.sv, out, width=80)
    text = _flat(out.getvalue())
    for e in _undecided(data):
        assert _flat(f"{label(e.key)}: {e.note}") in text, (e.key, e.note)


def test_the_tui_verdict_screen_gives_every_undecided_rows_reason_at_80x24(data):
    async def drive() -> str:
        app = AbtuiApp()
        async with app.run_test(size=(80, 24)) as pilot:
            await app.push_screen(VerdictScreen(data))
            await pilot.pause()
            notes = app.screen.query(".notes").first()
            notes.scroll_visible(animate=False)
            await pilot.pause()
            text = "\n".join(notes.render_line(y).text for y in range(notes.size.height))
            await pilot.press("q")
        return text

    text = _flat(asyncio.run(drive()))
    for e in _undecided(data):
        assert _flat(f"{label(e.key)}: {e.note}") in text, (e.key, text)
