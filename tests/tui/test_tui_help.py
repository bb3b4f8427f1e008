"""Per-screen help: ``?`` lists the keys of the screen it is pressed on (and
the few of everywhere), never another screen's; every key a screen binds is in its list."""

from __future__ import annotations

import asyncio

import pytest
from test_tui import text_of
from test_tui_snapshots import fixed_screen
from tui_fixtures import shows

from abtui.tui import keys
from abtui.tui.app import AbtuiApp, ConfirmQuit, HelpScreen
from abtui.tui.screens.compare import CompareScreen
from abtui.tui.screens.dialogs import Confirm
from abtui.tui.screens.live import LiveScreen
from abtui.tui.screens.open import OpenScreen
from abtui.tui.screens.start import StartScreen
from abtui.tui.screens.verdict import VerdictScreen

NAMES = {
    "question_mark": "?",
    "escape": "Esc",
    "enter": "Enter",
    "slash": "/",
    "right_square_bracket": "]",
    "left_square_bracket": "[",
    "delete": "Delete",
    "plus": "+",
    "greater_than_sign": ">",
    "equals_sign": "=",
    "minus": "-",
    "less_than_sign": "<",
    "home": "Home",
    "end": "End",
}


def bound_keys(cls) -> set[str]:
    """Every key ``cls`` binds, its base classes' included (Textual merges them)."""
    out = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("abtui."):  # Textual's own (tab, ctrl+p) aside
            continue
        for b in klass.__dict__.get("BINDINGS", []):
            key = b.key if hasattr(b, "key") else b[0]
            out.update(NAMES.get(k, k) for k in key.split(","))
    return out


def listed(rows: keys.Keys) -> set[str]:
    return {k.strip() for row, _ in rows for k in row.split(" / ")}


@pytest.mark.parametrize(
    "cls", [StartScreen, LiveScreen, OpenScreen, VerdictScreen, CompareScreen, Confirm, ConfirmQuit]
)
def test_every_key_a_screen_binds_is_in_its_own_help(cls):
    shown = listed(cls.HELP)
    for key in bound_keys(cls):
        assert key in shown, (cls.__name__, key)
    assert cls.HELP_TITLE


def test_the_lists_are_each_screens_own():
    assert not listed(keys.START) & {"v", "space", "m", "h", "[", "]"}
    assert not listed(keys.VERDICT) & {"/", "space", "d", "r", "x"}
    assert not listed(keys.LIVE) & {"/", "m", "h", "d", "r", "space"}
    assert listed(keys.LIVE) <= listed(keys.OPEN)  # the replay is the live panes, and a timeline


def test_help_on_the_live_panes_lists_theirs(tmp_path):
    async def drive():
        app = AbtuiApp()
        async with app.run_test(size=(80, 24)) as pilot:
            await app.push_screen(fixed_screen())
            await pilot.pause()
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            shown = text_of(app.screen.query_one("#keys"))
            await pilot.press("escape")
            await pilot.pause()
            back = isinstance(app.screen, LiveScreen)
            await pilot.press("q")
        return shown, back

    shown, back = asyncio.run(drive())
    assert back and "Keys: the live panes" in shown
    for row, what in keys.LIVE + keys.EVERYWHERE:
        assert row in shown and what in shown
    for _row, what in keys.START + keys.VERDICT:
        assert (_row, what) in keys.LIVE or not shows(shown, _row, what), what
