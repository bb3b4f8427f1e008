"""The Textual app: runs one session (or opens a saved one) and shows the live panes, then the
verdict. A thin layer: the run is one core call in a thread worker that reports through
:class:`abtui.tui.observer.TuiObserver`; the verdict is loaded by another worker.

Started on the start screen (``abtui`` with no arguments), a run or an opened session goes back
to the start screen when left (``q``, or Esc on the panes), the list read again; ``q`` there, or
ctrl+q anywhere, quits. A running session is never left without asking (:class:`ConfirmQuit`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer
from textual.worker import Worker, WorkerState

from abtui.runner.observer import Observer
from abtui.store.reader import never_closed
from abtui.tui.keys import QUESTION, Keys, keys_of
from abtui.tui.messages import RunFinished, RunNote, RunProgress, RunStarted
from abtui.tui.observer import TuiObserver
from abtui.tui.screens.live import LiveScreen
from abtui.tui.screens.open import OpenScreen
from abtui.tui.screens.start import StartScreen
from abtui.tui.screens.verdict import VerdictData, VerdictScreen, load_verdict
from abtui.tui.widgets.inert import Static

# Job: runs the session (abtui.runner.session.run_session) with the observer and stop event.
Job = Callable[[Observer, threading.Event], object]


class HelpScreen(ModalScreen):
    """The keys of the screen it was opened on (:mod:`abtui.tui.keys`), and those of
    everywhere."""

    BINDINGS = [("escape", "app.pop_screen", "close"), ("question_mark", "app.pop_screen", "close")]

    def __init__(self, title: str, keys: Keys) -> None:
        super().__init__()
        self.title_text, self.keys = title, keys

    def compose(self) -> ComposeResult:
        keys = Table.grid(padding=(0, 2))  # wrapped descriptions stay in their column
        keys.add_column(justify="right", style="bold", no_wrap=True)
        keys.add_column()
        for k, what in self.keys:
            keys.add_row(k, what)
        head = f"Keys: {self.title_text}\n" if self.title_text else "Keys\n"
        t = Group(
            Text(head, "bold"), keys, Text("\nEsc or ? closes this list (arrows scroll it).", "dim")
        )
        with VerticalScroll(id="dialog"):  # taller than 24 rows: scrolls
            yield Static(t, id="keys")


class ConfirmQuit(ModalScreen[bool]):
    HELP, HELP_TITLE = QUESTION, "stop the running session?"
    BINDINGS = [
        ("y", "answer(True)", "yes, stop"),
        ("n", "answer(False)", "no"),
        ("escape", "answer(False)", "no"),
    ]

    def __init__(self, then: str = "quit") -> None:
        super().__init__()
        self.then = then  # what follows the stop: "quit" or "go back to the list"

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(
                f"A session is running. Stop it and {self.then}?\n\n"
                "Every sample so far is kept; the session is marked interrupted.\n\n"
                f"y: stop and {self.then}    n / Esc: keep running",
                id="question",
            )

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class AbtuiApp(App):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses live elsewhere
    TITLE = "abtui"
    BINDINGS = [
        Binding("q", "request_quit", "quit"),
        Binding("q", "leave", "list"),  # instead, in a session from the start screen
        Binding("question_mark", "help", "keys"),
        Binding("v", "show_verdict", "verdict", show=False),  # the verdict screen's way back
    ]

    def __init__(
        self, job: Job | None = None, session: Path | None = None, start: StartScreen | None = None
    ) -> None:
        super().__init__()
        if job is not None or start is not None:
            # multiprocessing starts its resource tracker on first use, passing it stderr's file
            # descriptor; under the app stderr is Textual's capture (no descriptor): start it now
            from multiprocessing import resource_tracker

            resource_tracker.ensure_running()
        self.start = start  # the start screen (abtui with no arguments), shown first
        self.ran: list[tuple[str, object]] = []  # (run or demo, SessionResult) started there
        self._reset(job, session)

    def _reset(self, job: Job | None = None, session: Path | None = None) -> None:
        """The state of one session shown (run or opened)."""
        self.job = job
        self.session = session
        self.stop = threading.Event()
        self.running = False
        self.quitting: str | None = None  # after the stop: "exit", or "start" (the list)
        self.result = None  # the run's SessionResult
        self.status: str | None = None
        self.error: BaseException | None = None
        self.verdict: VerdictData | None = None
        self.launched: str | None = None  # what the start screen started: run, demo or open
        self.workers_of_session: set[Worker] = set()  # a worker of a session left is ignored

    def compose(self) -> ComposeResult:
        yield Static("abtui: starting…", id="boot")
        yield Footer()

    def on_mount(self) -> None:
        if self.start is not None:
            self.push_screen(self.start)
        else:
            self._begin()

    def launch(self, *, job: Job | None = None, session: Path | None = None, kind: str) -> None:
        """From the start screen: run ``job`` or open ``session`` as `abtui run` / `abtui open`
        would (the same workers); the start screen is closed until the session is left."""
        if self.launched is not None or not isinstance(self.screen, StartScreen):
            return
        self.launched, self.job, self.session = kind, job, session
        self.pop_screen()
        self.refresh_bindings()  # q: back to the list
        if job is not None:
            self._note(f"{kind}: starting…")
        self._begin()

    def _begin(self) -> None:
        if self.job is not None:
            self.running = True
            self.workers_of_session.add(self.run_job())
        elif self.session is not None:
            self._note(f"opening {self.session}…")
            self.workers_of_session.add(self.open_stored(self.session))

    def _verdict_of(self, path: Path, tail: str = "") -> None:
        """Compute the verdict of ``path`` in a worker; the note says so and counts the seconds
        (a big session's takes tens of them), with ``tail`` after the count."""
        worker = self.load_verdict(path)
        self.workers_of_session.add(worker)
        t0 = time.monotonic()

        def tick() -> None:
            busy = worker.state in (WorkerState.PENDING, WorkerState.RUNNING)
            if not busy or worker not in self.workers_of_session:
                timer.stop()
                return
            self._note(f"computing the verdict… {time.monotonic() - t0:.0f} s{tail}")

        timer = self.set_interval(1.0, tick)

    def back_to_start(self, notice: str = "") -> None:
        """Leave the session shown (not running) for a fresh start screen: the list read again,
        the session just left selected, ``notice`` under the list."""
        left = self.session or (Path(self.result.path) if self.result is not None else None)
        self._reset()
        while len(self.screen_stack) > 1:
            self.pop_screen()
        self.push_screen(self.start.again(select=left, notice=notice))
        self.refresh_bindings()

    # ---------------------------------------------------------------- workers (thin shims)
    @work(thread=True, exclusive=True, exit_on_error=False, group="run")
    def run_job(self):
        return self.job(TuiObserver(self), self.stop)

    @work(thread=True, exclusive=True, exit_on_error=False, group="verdict")
    def load_verdict(self, path: Path) -> VerdictData:
        return load_verdict(path, store=self.job is not None)  # a run's; not one opened

    @work(thread=True, exclusive=True, exit_on_error=False, group="open")
    def open_stored(self, path: Path):
        from abtui.runner.live_replay import Replay

        return Replay(path)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        w = event.worker
        if w not in self.workers_of_session:  # the start screen's, or of a session left
            return
        if event.state == WorkerState.ERROR:
            if w.group == "run":
                self.running = False
            text = f"error: {w.error}" + (
                f" — {w.error.hint}" if getattr(w.error, "hint", "") else ""
            )
            if self.launched is not None and w.group in ("run", "open") and self.live is None:
                self.back_to_start(notice=text)  # it never started: say why under the list
                return
            # the CLI raises it after the app closes; a verdict that fails after a run is only
            # shown (the run is stored), of a file opened it is the file's error too
            if w.group in ("run", "open") or (w.group == "verdict" and self.job is None):
                self.error = w.error
            self._note(text)
            if self.quitting == "start":
                self.back_to_start(notice=text)
            elif self.quitting or w.group in ("run", "open") and self.live is None:
                self.exit(self.result)
        elif event.state == WorkerState.SUCCESS:
            if w.group == "run":
                self.running = False
                self.result = w.result
                if self.result is not None and self.launched is not None:
                    self.ran.append((self.launched, self.result))
                if self.quitting:
                    self._stopped()
                elif self.result is not None:
                    self._note("computing the verdict…")
                    self._verdict_of(Path(self.result.path))
            elif w.group == "open":
                status = w.result.status  # "running" with no writer left: the run was killed
                killed = never_closed(self.session, status)
                self.status = (
                    f"stored session, {status}{' (killed: never closed)' if killed else ''}"
                )
                tail = " · it opens by itself; space replays meanwhile"
                self.push_screen(
                    OpenScreen(w.result, self.status, note=f"computing the verdict…{tail}")
                )
                self._verdict_of(self.session, tail)
            elif w.group == "verdict":
                self.verdict = w.result
                if self.live is not None and self.live.is_mounted:  # its figures in the strip
                    self.live.set_verdict(w.result.sv.verdict.pairs)
                self._note("the verdict is ready (v shows it)")
                # a replay the user started (or moved) while it was computed is not covered
                if not (isinstance(self.screen, OpenScreen) and self.screen.touched):
                    self.push_screen(VerdictScreen(w.result))

    # ---------------------------------------------------------------- the run's messages
    @property
    def live(self) -> LiveScreen | None:
        for s in self.screen_stack:
            if isinstance(s, LiveScreen):
                return s
        return None

    def on_run_started(self, msg: RunStarted) -> None:
        self.push_screen(LiveScreen(msg.info))

    def on_run_progress(self, msg: RunProgress) -> None:
        if self.live is not None and self.live.is_mounted:
            self.live.show_progress(msg, self.status)

    def on_open_screen_ended(self, msg: OpenScreen.Ended) -> None:
        """A replay played into the end of the run: the verdict, as after a live run."""
        if isinstance(self.screen, OpenScreen):  # not under help or the verdict already
            self.action_show_verdict()

    def on_run_note(self, msg: RunNote) -> None:
        self._note(msg.text)

    def on_run_finished(self, msg: RunFinished) -> None:
        self.status = msg.status
        if self.live is not None and self.live.last is not None and self.live.is_mounted:
            self.live.show_progress(self.live.last, msg.status)

    def _note(self, text: str) -> None:
        if self.live is not None and self.live.is_mounted:
            self.live.note(text)
        else:
            self.query_one("#boot", Static).update(text)

    # ---------------------------------------------------------------- keys
    def get_system_commands(self, screen):
        """The command palette: Textual's commands and the app's own (abtui.tui.palette)."""
        from abtui.tui.palette import commands

        yield from super().get_system_commands(screen)
        yield from commands(self, screen)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(*keys_of(self.screen)))

    def action_show_verdict(self) -> None:
        if isinstance(self.screen, VerdictScreen):  # v again: back to the panes
            self.screen.action_back()
        elif isinstance(self.screen, ModalScreen):
            return
        elif self.verdict is not None:
            self.push_screen(VerdictScreen(self.verdict))
        elif self.running:  # v said nothing before: say when it comes
            self._note("the verdict comes when the run has finished (v then shows it)")
        elif any(w.group == "verdict" and w.is_running for w in self.workers_of_session):
            self._note("computing the verdict…")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        in_session = self.start is not None and self.launched is not None
        if action == "leave":  # q and the panes' Esc: back to the start screen's list
            return in_session
        if action == "request_quit":  # q: quit, from the start screen or a plain run / open
            return not in_session
        return True

    def action_request_quit(self) -> None:
        self._leave("exit")

    def action_help_quit(self) -> None:
        """ctrl+c: what q does (Textual's own only showed a "press ctrl+q" toast over the
        strip): stop a running session after asking, quit or go back to the list."""
        if self.check_action("leave", ()):
            self.action_leave()
        else:
            self.action_request_quit()

    def action_quit(self) -> None:  # ctrl+q: Textual's own quit, which would not ask
        self._leave("exit")

    def action_leave(self) -> None:
        self._leave("start")

    def _leave(self, to: str) -> None:
        """Quit the app (``to="exit"``) or go back to the start screen (``"start"``); a running
        session is stopped first, once the user says yes, keeping every sample."""
        if not self.running:
            self.quitting = to
            self._stopped()
            return
        if isinstance(self.screen, ConfirmQuit):
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self.quitting = to
                if not self.running:  # it ended while the question was up
                    self._stopped()
                    return
                self.stop.set()
                self._note("stopping: cancelling in-flight requests, keeping what was measured")

        self.push_screen(ConfirmQuit("quit" if to == "exit" else "go back to the list"), answer)

    def _stopped(self) -> None:
        """The run is over (or there is none): do what the user asked to leave for."""
        if self.quitting == "start" and self.start is not None:
            self.back_to_start()
        else:
            self.exit(self.result)
