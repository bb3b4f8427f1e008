"""``abtui open``: the live panes re-played from a stored session, with a timeline.

The screen only drives a :class:`abtui.runner.live_replay.Playhead` with keys and a timer, and
renders what :class:`abtui.runner.live_replay.Replay` computes for the playhead's time, through
the live screen's own rendering. It opens paused at the end state: the finished picture, what
the run ended on and what the verdict is computed from (space replays from the start). A replay
that plays into the end says so (:class:`OpenScreen.Ended`): the app shows the verdict, as the
live run does when it ends.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Footer

from abtui.runner.live_replay import SEEK_STEP, Playhead, Replay
from abtui.tui.keys import OPEN
from abtui.tui.messages import ArmState, RunProgress
from abtui.tui.screens.live import LiveScreen
from abtui.tui.widgets.charts import Chart
from abtui.tui.widgets.strip import REPLAY, VERDICT

TICK_S = 0.2  # redraws while playing: five a second, as coalesced as the live run's


def progress_of(replay: Replay, ph: Playhead) -> RunProgress:
    """The live screen's message for the playhead's time (end state: the session's means)."""
    end = ph.at_end_state
    arms = replay.end_state() if end else replay.at(ph.t_s)
    states = [ArmState(progress=p, view=p.live.view()) for p in arms]
    seg = None if end else replay.segment_at(ph.t_s)  # as the live run: none once it ended
    profiling = not end and any(lo <= ph.t_s <= hi for lo, hi in replay.profiled)
    phase = "done" if end else "replaying"
    return RunProgress(ph.t_s, phase, states, seg, profiling=profiling)


def timeline_text(ph: Playhead, width: int, profiled=()) -> Text:
    """``t = 41.2 s / 120.0 s ▶ 4×`` and a bar of where the playhead is in the run; the
    profiling windows (``profiled``: ``[(from_s, to_s)]``, run --profile) drawn ``▒`` in it."""
    t = Text(ph.label() + (" playing  " if ph.playing else " paused  "), "bold")
    note = "  end: gauges are session means" if ph.at_end_state else "  gauges at t"
    if profiled:
        inside = any(lo <= ph.t_s <= hi for lo, hi in profiled) and not ph.at_end_state
        legend = "  ▒ profiling now" if inside else "  ▒ profiled"
        # the legend before the gauges' note: that one goes where both leave the bar short
        note = legend + (note if width - len(t) - len(legend + note) - 6 >= 10 else "")
    bar_w = max(10, width - len(t) - len(note) - 6)
    frac = ph.t_s / ph.duration_s if ph.duration_s > 0 else 1.0
    filled = round(frac * bar_w)
    for i in range(bar_w):
        lo, hi = ph.duration_s * i / bar_w, ph.duration_s * (i + 1) / bar_w
        if any(a < hi and b > lo for a, b in profiled):
            t.append("▒", "magenta" if i < filled else "dim magenta")
        else:
            t.append("━" if i < filled else "─", "cyan" if i < filled else "dim")
    t.append(f" {frac:4.0%}")
    if len(t) + len(note) <= width:
        t.append(note, "dim")
    return t


class OpenScreen(LiveScreen):
    """The live panes of a stored session, at the playhead's time."""

    HELP, HELP_TITLE = OPEN, "the replay (abtui open)"
    BINDINGS = [
        Binding("space", "play", "play/pause", priority=True),
        Binding("plus,greater_than_sign,equals_sign", "faster", "faster", show=False),
        Binding("minus,less_than_sign", "slower", "slower", show=False),
        Binding("left", "seek(-1)", "back", show=False, priority=True),
        Binding("right", "seek(1)", "forward", show=False, priority=True),
        Binding("home", "jump(0)", "start", show=False, priority=True),
        Binding("end", "jump(1)", "end", show=False, priority=True),
    ]

    class Ended(Message):
        """A playing replay reached the end of the run (once per arrival: a paused jump to the
        end is not one)."""

    def __init__(self, replay: Replay, status: str = "", note: str = "") -> None:
        self.replay = replay
        self.playhead = Playhead.at_end(replay.duration_s)
        super().__init__(replay.info, progress_of(replay, self.playhead), status)
        self._wall = time.monotonic()
        self._pending = False
        self.touched = False  # a key moved the playhead: the app then does not cover the replay
        self._first_note = note

    def compose(self) -> ComposeResult:
        for w in super().compose():
            if isinstance(w, Footer):  # the timeline goes above the footer
                yield Chart(id="timeline")
            yield w

    def on_mount(self) -> None:
        super().on_mount()
        self._draw_timeline()
        self.timer = self.set_interval(TICK_S, self._tick, pause=True)
        if self._first_note:
            self.note(self._first_note)

    def strip_mode(self) -> str:
        """At the end state, once the verdict is in: its figures; before it, replayed ones."""
        if self.playhead.at_end_state and self.verdict_pairs is not None:
            return VERDICT
        return REPLAY

    def on_screen_suspend(self) -> None:  # the verdict or help on top: stop playing
        if self.playhead.playing:
            self.action_play()

    def _tick(self) -> None:
        now = time.monotonic()
        was = self.playhead.playing
        if self.playhead.advance(now - self._wall):
            self._render_now()
        self._wall = now
        if not self.playhead.playing:
            self.timer.pause()
        self._ended(was)

    def _ended(self, was_playing: bool) -> None:
        if was_playing and self.playhead.at_end_state:
            self.post_message(self.Ended())

    # ------------------------------------------------------------------ keys
    def action_play(self) -> None:
        self.touched = True
        self.playhead.toggle()
        self._wall = time.monotonic()
        if self.playhead.playing:
            self.timer.resume()
        else:
            self.timer.pause()
        self._changed()

    def action_faster(self) -> None:
        self.playhead.faster()
        self._draw_timeline()

    def action_slower(self) -> None:
        self.playhead.slower()
        self._draw_timeline()

    def action_seek(self, direction: int) -> None:
        self.touched = True
        was = self.playhead.playing
        self.playhead.seek(direction * SEEK_STEP)
        self._changed()
        self._ended(was)

    def action_jump(self, fraction: float) -> None:
        self.touched = True
        was = self.playhead.playing
        self.playhead.jump(fraction * self.replay.duration_s)
        self._changed()
        self._ended(was)

    # ------------------------------------------------------------------ drawing
    def _changed(self) -> None:
        """Redraw once after a burst of keys (a held arrow key), not once per key."""
        self._draw_timeline()
        if not self._pending:
            self._pending = True
            self.call_after_refresh(self._render_now)

    def _render_now(self) -> None:
        self._pending = False
        self.show_progress(progress_of(self.replay, self.playhead), self._status)
        self._draw_timeline()

    def _draw_timeline(self) -> None:
        ph = self.playhead
        spans = self.replay.profiled
        self.query_one("#timeline", Chart).show(lambda w: timeline_text(ph, w, spans))
