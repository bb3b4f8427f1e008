"""Small modal questions. A destructive action is never taken without one: the answer is an
explicit ``y``; ``n``, Esc or anything else keeps things as they are."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen

from abtui.tui.keys import QUESTION
from abtui.tui.widgets.inert import Static


class Confirm(ModalScreen[bool]):
    """A yes/no question; dismissed with True only on ``y``."""

    HELP, HELP_TITLE = QUESTION, "a question"
    BINDINGS = [
        ("y", "answer(True)", "yes"),
        ("n", "answer(False)", "no"),
        ("escape", "answer(False)", "no"),
    ]

    def __init__(self, question: Text | str, yes: str, no: str = "keep it") -> None:
        super().__init__()
        self.question, self.yes, self.no = question, yes, no

    def compose(self) -> ComposeResult:
        t = Text.assemble(
            self.question,
            "\n\n",
            ("y", "bold"),
            f": {self.yes}    ",
            ("n / Esc", "bold"),
            f": {self.no}",
        )
        with Vertical(id="dialog"):
            yield Static(t, id="question")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
