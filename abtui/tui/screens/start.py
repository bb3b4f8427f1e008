"""The start screen (``abtui`` with no arguments): the recent sessions of a folder, and keys to
open one, filter the list (``/``, as k9s and lazygit filter theirs), compare two, delete one
(after a question: never without one, and only a session file of this folder), start the demo,
or run an experiment from a spec file.

Thin over the core: the rows come from :func:`abtui.store.listing.list_sessions` (read in a
thread worker), a spec is checked by the spec loader, and a run or an open is handed to the
app's own paths (:meth:`abtui.tui.app.AbtuiApp.launch`), which run the session in a thread
worker whose load generators are their own processes, exactly as ``abtui run`` does. Left, a
session comes back to a fresh start screen (:meth:`StartScreen.again`): the list read again.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Input
from textual.worker import Worker, WorkerState

from abtui.demo import DemoOptions
from abtui.errors import AbtuiError
from abtui.store.listing import UNREADABLE, SessionRow, delete_session, list_sessions
from abtui.tui.keys import START
from abtui.tui.widgets.inert import DataTable, Static

STATUS_STYLE = {
    "finished": "green",
    "interrupted": "yellow",
    "killed": "bold red",
    "running": "bold cyan",
    "failed": "bold red",
    "write failed": "bold red",
    UNREADABLE: "bold red",
    "degraded": "bold yellow",
}
DEGRADED = "degraded"  # the status cell of a degraded session (its stored status in the detail)
VERDICT_STYLE = {"GO": "bold green", "NO-GO": "bold red", "INCONCLUSIVE": "yellow"}
WIDE = 120  # from this many columns: the full date and wider name / arms columns


def _started(row: SessionRow):
    """The session's start (aware), else the file's last change: the "started" column."""
    from datetime import datetime

    try:
        when = datetime.fromisoformat(row.created) if row.created else None
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        when = (when or datetime.fromtimestamp(row.mtime)).astimezone()
    return when


def _date(row: SessionRow, wide: bool) -> str:
    """``2026-01-02 10:00`` (wide) or ``01-02 10:00``; the session's start, else the file's."""
    return _started(row).strftime("%Y-%m-%d %H:%M" if wide else "%m-%d %H:%M")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def _cut_name(text: str, width: int) -> str:
    """A session name cut in the middle, its end kept: two demos' names differ only in their
    timestamp's last digits (``demo-20261206-101500``), which a cut at the end hid."""
    if len(text) <= width:
        return text
    head = max(1, (width - 1) // 3)
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def status_word(row: SessionRow) -> str:
    """The status cell: ``degraded`` for a finished or interrupted session whose load
    generators lagged (the verdict then refuses GO), else the listing's word."""
    return DEGRADED if row.degraded and row.status in ("finished", "interrupted") else row.status


def per_arm(row: SessionRow) -> str:
    """The req/arm cell: ``720`` when every arm has as many measured requests, else each
    arm's (``720/698``); ``—`` when unknown."""
    if not row.per_arm:
        return "—" if row.requests is None else str(row.requests)
    return str(row.per_arm[0]) if len(set(row.per_arm)) == 1 else "/".join(map(str, row.per_arm))


def matches(row: SessionRow, words: str) -> bool:
    """Whether every word of the filter ``words`` is in the row (name, arms, status, verdict,
    date), case-insensitively."""
    hay = " ".join(
        [
            row.name,
            *row.arms,
            row.status,
            status_word(row),
            row.verdict or "",
            _date(row, True),
            row.path.name,
        ]
    ).lower()
    return all(w in hay for w in words.lower().split())


def check_spec(path: str):
    """The spec file at ``path`` loaded and validated as ``abtui run SPEC`` does; raises the
    loader's :class:`~abtui.errors.SpecError` (file, line, field) when it is not valid."""
    from abtui.spec import load_spec, validate

    spec, text = load_spec(path.strip())
    spec = validate(spec, path.strip())
    if spec.policy.noise_floor:  # as abtui run: a bad A/A session fails now
        from abtui.verdict.saved import load_noise_floor

        load_noise_floor(spec.policy.noise_floor)
    return spec, text


class StartScreen(Screen):
    HELP, HELP_TITLE = START, "the start screen"
    BINDINGS = [
        Binding("enter", "open", "open", show=False),
        Binding("slash", "filter", "filter"),
        Binding("c", "compare", "compare"),
        Binding("x,delete", "delete", "delete"),
        Binding("d", "demo", "demo"),
        Binding("r", "ask_spec", "run a spec"),
        Binding("escape", "cancel", "cancel", show=False),
    ]

    def __init__(
        self,
        folder: str | Path = "sessions",
        demo: DemoOptions | None = None,
        select: Path | None = None,
        notice: str = "",
    ) -> None:
        super().__init__(id="start")
        self.folder = Path(folder)
        self.demo = demo or DemoOptions()
        self.rows: list[SessionRow] = []  # every session of the folder
        self.shown: list[SessionRow] = []  # the rows the filter lets through, as listed
        self.filter = ""
        self.marked: Path | None = None  # the first of two sessions to compare (c)
        self.select = select  # the row the cursor starts on (the session just left)
        self.notice = notice  # why the last launch did not start, shown under the list

    def again(self, select: Path | None = None, notice: str = "") -> StartScreen:
        """A new start screen on the same folder (its list read again), ``select`` selected."""
        return StartScreen(self.folder, self.demo, select, notice)

    def compose(self) -> ComposeResult:
        yield Static(
            Text.assemble(("abtui", "bold"), f" · recent sessions in {self.folder}/"), id="title"
        )
        table = DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
        yield table
        yield Static("reading the session files…", id="detail")
        yield Input(placeholder="path/to/spec.toml  (Enter runs it, Esc cancels)", id="spec")
        yield Static("", id="spec-error")
        yield Input(
            placeholder="filter: words of the name, arms, status, verdict or date "
            "(Enter keeps it, Esc clears it)",
            id="filter",
        )
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#spec", Input).display = False
        self.query_one("#filter", Input).display = False
        if self.notice:
            self.query_one("#spec-error", Static).update(Text(self.notice, "bold red"))
        self.load_rows()

    # ------------------------------------------------------------------ the list
    @work(thread=True, exclusive=True, exit_on_error=False, group="list")
    def load_rows(self) -> list[SessionRow]:
        return list_sessions(self.folder)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "list":
            return
        if event.state == WorkerState.SUCCESS:
            self.rows = event.worker.result
            self._fill()
        elif event.state == WorkerState.ERROR:  # list_sessions does not raise for a bad file
            self._detail(Text(f"cannot list {self.folder}: {event.worker.error}", "bold red"))

    def _fill(self) -> None:
        table = self.query_one("#sessions", DataTable)
        if table.row_count and (cur := self._selected()) is not None:
            self.select = cur.path  # a refill (resize, filter) keeps the selected row
        table.clear(columns=True)
        width = self.size.width or 80
        wide = width >= WIDE
        # date status req/arm verdict, padding
        fixed = (16 if wide else 11) + 11 + 7 + 12 + 2 * 6 + 2
        arms_w = 24 if wide else 12
        name_w = min(40, max(10, width - fixed - arms_w))
        table.add_column("session", width=name_w)
        table.add_column("started", width=16 if wide else 11)
        table.add_column("status", width=11)
        table.add_column("arms", width=arms_w)
        table.add_column("req/arm", width=7)
        table.add_column("verdict", width=12)
        self.shown = [r for r in self.rows if matches(r, self.filter)]
        for r in self.shown:
            word = status_word(r)
            mark = "▸" if self.marked is not None and r.path == self.marked else ""
            table.add_row(
                _cut_name(mark + r.name, name_w),
                _date(r, wide),
                Text(word, STATUS_STYLE.get(word, "")),
                _cut(" vs ".join(r.arms) if r.arms else "—", arms_w),
                per_arm(r),
                Text(r.verdict or "—", VERDICT_STYLE.get(r.verdict or "", "dim")),
            )
        self._title()
        if not self.rows:
            self._detail(
                Text(
                    f"no session files in {self.folder}/ yet: d runs the demo, r runs a spec", "dim"
                )
            )
        elif not self.shown:
            self._detail(Text(f"no session matches “{self.filter}” (Esc clears the filter)", "dim"))
        else:
            if not self.query_one("#filter", Input).has_focus:
                table.focus()
            for i, r in enumerate(self.shown):
                if self.select is not None and r.path.resolve() == self.select.resolve():
                    table.move_cursor(row=i)
            self._show_detail(table.cursor_row)

    def _title(self) -> None:
        """``abtui · recent sessions in FOLDER/``; filtered, the filter and its count come
        first (a long folder is cut, never them)."""
        t = Text.assemble(("abtui", "bold"), no_wrap=True, overflow="ellipsis")
        if self.filter:
            t.append(f" · filter “{self.filter}”: {len(self.shown)} of {len(self.rows)}", "bold")
        t.append(f" · recent sessions in {self.folder}/")
        self.query_one("#title", Static).update(t)

    def on_resize(self) -> None:
        if self.rows:
            self._fill()

    def _selected(self) -> SessionRow | None:
        table = self.query_one("#sessions", DataTable)
        if not self.shown or not 0 <= table.cursor_row < len(self.shown):
            return None
        return self.shown[table.cursor_row]

    def _detail(self, text: Text | str) -> None:
        self.query_one("#detail", Static).update(text)

    def _show_detail(self, index: int) -> None:
        if not 0 <= index < len(self.shown):
            return
        r = self.shown[index]
        if r.status == UNREADABLE:
            self._detail(Text(f"unreadable: {r.error}", "bold red"))
            return
        if r.status == "running":
            t = Text(f"{r.path}: being written by a running abtui (opens as a snapshot)")
        elif r.degraded:
            t = Text(f"{r.path} · {r.status}, ", "")
            t.append("DEGRADED", "bold yellow")
            t.append(": the load generators lagged (figures skewed; no GO) · Enter opens it")
        else:
            t = Text(f"{r.path} · Enter opens it")
        if self.marked is not None:
            t.append(
                f"\nmarked {self.marked.stem}: c on another compares them (c on it: unmark)",
                "bold cyan",
            )
        self._detail(t)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail(event.cursor_row)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()

    # ------------------------------------------------------------------ keys
    def action_open(self) -> None:
        row = self._selected()
        if row is None:
            return
        self.open_row(row)

    def open_row(self, row: SessionRow) -> None:
        if not row.openable:
            self._detail(Text(f"cannot open {row.path}: {row.error}", "bold red"))
            return
        self.app.launch(session=row.path, kind="open")

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.filter = event.value.strip()
            if self.rows:
                self._fill()

    def action_compare(self) -> None:
        """The first ``c`` marks the selected session, the second (on another) compares them;
        ``c`` on the marked one unmarks it."""
        row = self._selected()
        if row is None or not row.openable:
            self._detail(Text("select a readable session to compare", "bold red"))
            return
        if self.marked is None or self.marked == row.path:
            self.marked = None if self.marked == row.path else row.path
            self.select = row.path
            self._fill()
            return
        self.compare(self.marked, row.path)

    def compare(self, a: Path, b: Path) -> None:
        from abtui.tui.screens.compare import CompareScreen

        self.marked = None
        self.app.push_screen(CompareScreen(a, b), lambda _=None: self._fill())

    def action_delete(self) -> None:
        """Ask, then delete the selected session file (y only; anything else keeps it)."""
        from abtui.tui.screens.dialogs import Confirm

        row = self._selected()
        if row is None:
            return
        what = f"{status_word(row)} · verdict {row.verdict or '—'} · {per_arm(row)} req/arm"
        q = Text.assemble(
            "Delete the session file ",
            (str(row.path), "bold"),
            "?\n",
            (f"{row.name}: {what}", "dim"),
            "\nIt cannot be undone; reports written next to it (.md, .html) are kept.",
        )

        def answer(yes: bool | None) -> None:
            if not yes:
                self._detail(Text(f"kept {row.path}", "dim"))
                return
            try:
                gone = delete_session(self.folder, row.path)
            except AbtuiError as e:
                self._detail(Text(e.message + (f" — {e.hint}" if e.hint else ""), "bold red"))
                return
            if self.marked == row.path:
                self.marked = None
            self.notice = f"deleted {', '.join(str(p) for p in gone)}"
            self.query_one("#spec-error", Static).update(Text(self.notice, "green"))
            self.load_rows()

        self.app.push_screen(Confirm(q, "delete it"), answer)

    def action_demo(self) -> None:
        from abtui.demo import run_demo
        from abtui.runner.session import run_session

        opts = replace(self.demo, sessions_dir=self.demo.sessions_dir or str(self.folder))

        def job(obs, stop):
            return run_demo(
                opts, lambda spec, items: run_session(spec, "", obs, items=items, stop_request=stop)
            )

        self.app.launch(job=job, kind="demo")

    def action_ask_spec(self) -> None:
        box = self.query_one("#spec", Input)
        box.display = True
        box.focus()

    def action_cancel(self) -> None:
        box = self.query_one("#spec", Input)
        filt = self.query_one("#filter", Input)
        if box.display:
            box.display = False
            self.query_one("#spec-error", Static).update("")
        elif filt.display or self.filter:
            filt.value = ""
            filt.display = False
            self.filter = ""
            self._fill()
        elif self.marked is not None:
            self.marked = None
            self._fill()
        self.query_one("#sessions", DataTable).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == "filter":  # the filter stays; the list has the keys again
            event.input.display = bool(self.filter)
            self.query_one("#sessions", DataTable).focus()
            return
        path = event.value.strip()
        err = self.query_one("#spec-error", Static)
        if not path:
            err.update(Text("give the path of a spec file (TOML)", "bold red"))
            return
        try:
            spec, text = check_spec(path)
        except AbtuiError as e:  # the loader's message names the file, line and field
            err.update(Text(e.message + (f" — {e.hint}" if e.hint else ""), "bold red"))
            return
        from abtui.runner.session import run_session

        def job(obs, stop):
            return run_session(spec, text, obs, overwrite=False, stop_request=stop)

        self.app.launch(job=job, kind="run")
