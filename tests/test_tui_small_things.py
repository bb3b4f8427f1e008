"""Small things a user trips on (issue 37, item 9), at 80×24: the verdict's footer offers the
ablation key only for a session with an ablation, and the help's palette line promises no
start-screen command on a session's screens."""

from __future__ import annotations

import asyncio

from tui_fixtures import write_session

from abtui.tui.app import AbtuiApp
from abtui.tui.keys import keys_of
from abtui.tui.screens.live import LiveScreen
from abtui.tui.screens.verdict import VerdictScreen, load_verdict


def test_the_verdict_footer_has_no_ablation_key_without_an_ablation(tmp_path):
    data = load_verdict(write_session(tmp_path, "plain", n=40))
    assert not data.sv.verdict.factorial

    async def drive() -> str:
        app = AbtuiApp()
        async with app.run_test(size=(80, 24)) as pilot:
            await app.push_screen(VerdictScreen(data))
            await pilot.pause()
            await pilot.pause()
            footer = app.screen._compositor.render_strips()[-1].text
            await pilot.press("a")  # does nothing, says nothing
            await pilot.press("q")
        return footer

    footer = asyncio.run(drive())
    assert "export md" in footer and "ablation" not in footer, footer


def test_the_palette_line_of_a_sessions_help_promises_only_what_it_has():
    _, keys = keys_of(LiveScreen)
    palette = dict(keys)["ctrl+p"]
    assert "this screen's actions" in palette
    assert not palette.startswith("the command palette: open a session"), palette
