"""The TUI's observer: copies each runner snapshot (in the runner's thread) into a message.

The runner calls ``progress`` a couple of times a second; the copies make the message
independent of the runner's state, and ``RunProgress.can_replace`` drops stale ones when the
screen is slower than the run. Nothing here blocks the runner or waits for the screen.
"""

from __future__ import annotations

import copy

from textual.app import App

from abtui.metrics.live import GaugeHistory
from abtui.runner.observer import ArmProgress, RunInfo, Snapshot
from abtui.tui.messages import ArmState, RunFinished, RunNote, RunProgress, RunStarted


def arm_state(a: ArmProgress) -> ArmState:
    p = copy.copy(a)
    p.errors = dict(a.errors)
    p.telemetry = dict(a.telemetry)
    p.history = GaugeHistory(a.history.series())
    return ArmState(progress=p, view=a.live.view())


class TuiObserver:
    def __init__(self, app: App) -> None:
        self.app = app

    def started(self, info: RunInfo) -> None:
        self.app.post_message(RunStarted(info))

    def progress(self, snap: Snapshot) -> None:
        arms = [arm_state(a) for a in snap.arms]
        self.app.post_message(
            RunProgress(
                snap.elapsed_s,
                snap.phase,
                arms,
                snap.segment,
                snap.sequential,
                snap.look,
                profiling=snap.profiling,
            )
        )

    def arm_finished(self, arm: int, progress: ArmProgress) -> None:
        pass

    def message(self, text: str) -> None:
        self.app.post_message(RunNote(text))

    def finished(self, snap: Snapshot, status: str) -> None:
        self.progress(snap)
        self.app.post_message(RunFinished(status))
