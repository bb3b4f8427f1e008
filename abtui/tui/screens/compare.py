"""Two sessions side by side (``c`` twice on the start screen, or the command palette): what
:func:`abtui.report.compare.compare_sessions` computes, read in a thread worker, shown as a
table with the core's caveat (two runs are not paired: descriptive, no CI)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer
from textual.worker import Worker, WorkerState

from abtui.report.untrusted import printable
from abtui.tui.keys import COMPARE
from abtui.tui.widgets.inert import Static

CHANGE_STYLE = {"better": "green", "worse": "red"}


def compare_renderable(c) -> Group:
    """The comparison ``c`` (:class:`abtui.report.compare.Compared`): both sessions named, the
    caveat, and the table of every arm's figures (the stored strings shown inert)."""
    from abtui.report.compare import CAVEAT, compare_lines

    head = Text()
    for tag, side in (("A", c.a), ("B", c.b)):
        head.append(f"{tag} ", "bold")
        head.append(printable(side.name), "bold")
        head.append(f"  {side.created or '—'} · {side.status} · verdict {side.verdict or '—'}")
        head.append(
            " · DEGRADED (the load generators lagged)\n" if side.degraded else "\n", "bold yellow"
        )
    head.append(CAVEAT, "dim")
    cols, rows = compare_lines(c)
    t = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
    for i, h in enumerate(cols):
        t.add_column(h, justify="left" if i < 2 else "right", no_wrap=True)
    last = None
    for r in rows:
        arm = printable(r[0]) if r[0] != last else ""
        last = r[0]
        t.add_row(
            Text(arm, "bold"),
            r[1],
            r[2],
            r[3],
            Text(r[4], CHANGE_STYLE.get(r[4].split(" ")[-1], "")),
        )
    return Group(head, Text(""), t)


class CompareScreen(Screen):
    HELP, HELP_TITLE = COMPARE, "two sessions compared"
    BINDINGS = [Binding("escape,q", "back", "back to the list")]

    def __init__(self, a: Path, b: Path) -> None:
        super().__init__(id="compare-sessions")
        self.a, self.b = a, b
        self.compared = None

    def compose(self) -> ComposeResult:
        yield Static(
            Text(f"comparing {self.a.name} (A) with {self.b.name} (B)…", "bold"), id="title"
        )
        with VerticalScroll():
            yield Static("reading both sessions…", id="table")
        yield Footer()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="compare")
    def load(self):
        from abtui.report.compare import compare_sessions

        return compare_sessions(self.a, self.b)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "compare":
            return
        out = self.query_one("#table", Static)
        if event.state == WorkerState.SUCCESS:
            self.compared = event.worker.result
            out.update(compare_renderable(self.compared))
        elif event.state == WorkerState.ERROR:
            e = event.worker.error
            msg = getattr(e, "message", None) or str(e)
            out.update(Text(f"cannot compare: {msg}", "bold red"))

    def action_back(self) -> None:
        self.dismiss()
