"""Messages from the run (posted by :class:`abtui.tui.observer.TuiObserver` from the runner's
thread) to the app. Progress coalesces: a burst of snapshots collapses to the newest."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from abtui.metrics.live import ArmView
from abtui.runner.observer import ArmProgress, RunInfo, SeqLook
from abtui.workload.segments import Position


class RunStarted(Message):
    def __init__(self, info: RunInfo) -> None:
        super().__init__()
        self.info = info


@dataclass
class ArmState:
    progress: ArmProgress  # a copy (the runner keeps mutating its own)
    view: ArmView


class RunProgress(Message):
    def __init__(
        self,
        elapsed_s: float,
        phase: str,
        arms: list[ArmState],
        segment: Position | None = None,
        sequential: str | None = None,
        look: SeqLook | None = None,
        profiling: bool = False,
    ) -> None:
        super().__init__()
        self.elapsed_s = elapsed_s
        self.phase = phase
        self.arms = arms
        self.segment = segment  # sweep level, run, block and turn; None: a plain run
        self.sequential = sequential  # --until-decided: the anytime-valid status, one line
        self.look = look  # --until-decided: the last look's rows, for the strip
        self.profiling = profiling  # --profile: a window is open (the header says so)

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunProgress)


class RunNote(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class RunFinished(Message):
    def __init__(self, status: str) -> None:
        super().__init__()
        self.status = status
