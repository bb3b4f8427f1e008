"""The command palette's own commands (ctrl+p), beside Textual's (theme, keys, quit): the app's
actions, named as a user looks for them, as harlequin and posting fill theirs. Which commands
are offered depends on the screen: on the start screen, opening each listed session, comparing
two, filtering, deleting, the demo and a spec; once a session's verdict is in, jumping to it and
exporting its Markdown and HTML reports; on the live panes, the compare view and the pages.

Every command calls an action a key also calls: the palette adds a way in, not a behaviour."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from textual.app import SystemCommand
from textual.screen import Screen

from abtui.report.untrusted import printable
from abtui.tui.screens.live import LiveScreen, page_of
from abtui.tui.screens.start import StartScreen, per_arm, status_word
from abtui.tui.screens.verdict import VerdictScreen


def _start(screen: StartScreen) -> Iterator[SystemCommand]:
    rows = [r for r in screen.rows if r.openable]
    for r in rows:
        yield SystemCommand(
            printable(f"Open session {r.name}"),  # Textual's widgets: made inert here
            printable(
                f"{r.path} · {status_word(r)} · verdict {r.verdict or '—'} · {per_arm(r)} req/arm"
            ),
            partial(screen.open_row, r),
        )
    sel = screen._selected()
    first = screen.marked or (sel.path if sel is not None and sel.openable else None)
    if first is not None:
        for r in rows:
            if r.path != first:
                yield SystemCommand(
                    printable(f"Compare {first.stem} with {r.name}"),
                    "two sessions side by side: every arm's figures, B's change against A",
                    partial(screen.compare, first, r.path),
                    discover=False,  # one per session: found by typing, not listed
                )
    yield SystemCommand(
        "Compare two sessions",
        "mark the selected session (c); c on another compares them",
        screen.action_compare,
    )
    yield SystemCommand(
        "Filter the sessions", "only the rows with these words (/)", screen.action_filter
    )
    yield SystemCommand("Delete the selected session", "asks first (x)", screen.action_delete)
    yield SystemCommand("Run the demo", "two simulated GPUs, offline (d)", screen.action_demo)
    yield SystemCommand(
        "Run a spec file", "an experiment from a TOML spec (r)", screen.action_ask_spec
    )


def _export(app, fmt: str) -> None:
    """Export from any screen: the verdict screen is shown (where its message appears)."""
    if not isinstance(app.screen, VerdictScreen):
        app.push_screen(VerdictScreen(app.verdict))
    app.call_after_refresh(lambda: app.screen.action_export(fmt))


def commands(app, screen: Screen) -> Iterator[SystemCommand]:
    """The app's commands for ``screen`` (the screen the palette was opened on)."""
    if isinstance(screen, StartScreen):
        yield from _start(screen)
        return
    if isinstance(screen, LiveScreen):
        yield SystemCommand(
            "Compare the arms", "every arm's CDFs overlaid, a table (c)", screen.action_compare
        )
        if page_of(len(screen.info.arm_names), screen.size.width or 80, 0)[2] > 1:
            yield SystemCommand(
                "Next page of arms", "the next candidates (])", partial(screen.action_page, 1)
            )
    if app.verdict is not None:
        if not isinstance(screen, VerdictScreen):
            yield SystemCommand(
                "Jump to the verdict", "GO / NO-GO / INCONCLUSIVE (v)", app.action_show_verdict
            )
        for fmt, name in (("md", "Markdown"), ("html", "HTML")):
            yield SystemCommand(
                f"Export the {name} report",
                f"written next to the session file ({fmt[0]} on the verdict)",
                partial(_export, app, fmt),
            )
