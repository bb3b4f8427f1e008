"""``abtui open``'s timeline driven through Pilot, on real sessions with no endpoint up: a short
demo run to its end, and a demo killed with SIGKILL mid-run (its file says ``running``). The keys
move the playhead, change the speed, play and pause (and are all in the help); the panes show what the replay computes
for the playhead's time; a replay played to the end shows the verdict; ``v`` goes to the verdict
and back; ``q`` quits."""

from __future__ import annotations

import asyncio
import io
import re
import subprocess
import sys
import time

import pytest
from rich.console import Console
from tui_fixtures import drawn, shows

from abtui.demo import DemoOptions, run_demo
from abtui.runner.live_replay import SEEK_STEP, SPEEDS, Replay
from abtui.runner.session import run_session
from abtui.store.reader import SessionReader
from abtui.tui.app import AbtuiApp, HelpScreen
from abtui.tui.keys import OPEN, START, VERDICT
from abtui.tui.screens.open import OpenScreen
from abtui.tui.screens.verdict import VerdictScreen


def text_of(widget) -> str:
    buf = io.StringIO()
    Console(file=buf, width=300, color_system=None).print(widget.content)
    return buf.getvalue()


async def wait_for(pilot, cond, timeout_s: float = 60.0) -> None:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout_s, "timed out waiting for the app"
        await pilot.pause(0.1)


def verdict_shown(app) -> bool:
    return isinstance(app.screen, VerdictScreen) and bool(app.screen.query("#banner"))


@pytest.fixture(scope="module")
def complete(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("open")
    opts = DemoOptions(
        seed=5,
        name="open-demo",
        sessions_dir=str(tmp),
        requests=30,
        rate=15,
        time_scale=10,
        quality=False,
    )
    res = run_demo(opts, lambda spec, items: run_session(spec, "", items=items))
    assert res.status == "complete"
    return res.path


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """A demo killed with SIGKILL once some requests are committed: status stays ``running``."""
    tmp = tmp_path_factory.mktemp("killed")
    path = tmp / "k.duckdb"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "abtui",
            "demo",
            "--headless",
            "--requests",
            "5000",
            "--rate",
            "20",
            "--time-scale",
            "10",
            "--name",
            "k",
            "--sessions-dir",
            str(tmp),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 90
    n = 0
    while n < 20 and time.monotonic() < deadline:
        time.sleep(0.3)
        try:
            with SessionReader(path) as rd:
                n = rd.query("SELECT count(*) FROM requests WHERE NOT warmup")[0][0]
        except Exception:  # noqa: BLE001 - the file may not exist yet, or be mid-write
            n = 0
    proc.kill()
    proc.wait(timeout=30)
    assert n >= 20, "the demo committed no requests"
    return path


def state(app):
    """(t, duration, playing, speed) from the timeline line, and the header's request count."""
    s = app.screen
    line = text_of(s.query_one("#timeline"))
    m = re.search(r"t = ([\d.]+) s / ([\d.]+) s (▶|⏸) (\d+)×", line)
    assert m, line
    header = text_of(s.query_one("#header"))
    done = int(re.search(r"(\d+)/\d+ req", header).group(1))
    return float(m[1]), float(m[2]), m[3] == "▶", int(m[4]), done, line


class Clock:
    """The replay's wall clock (``time.monotonic`` as the open screen reads it), moved by the test
    alone: a playing replay moves only as far as the test says, however slow the box is (on
    real time, a loaded box took 1.2 to 2.8 s between the key presses that play and pause it,
    while the replay had 1.1 s left to play before its end)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_keys_drive_the_playhead_and_the_panes_follow(complete, monkeypatch):
    rp = Replay(complete)
    dur = rp.duration_s
    clock = Clock()
    monkeypatch.setattr("abtui.tui.screens.open.time", clock)

    async def drive():
        app = AbtuiApp(session=complete)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: verdict_shown(app) or app.error)
            assert app.error is None, app.error
            await pilot.press("v")  # v again: back to the panes, opened at the end state
            await pilot.pause()
            assert isinstance(app.screen, OpenScreen)
            scr = app.screen
            t, d, playing, speed, done, line = state(app)
            assert (t, playing, done) == (round(dur, 1), False, 60) and d == round(dur, 1)
            assert "session means" in line and "stored session, complete" in text_of(
                scr.query_one("#header")
            )

            await pilot.press("home")
            await drawn(pilot, scr)
            t, _, _, _, done, line = state(app)
            assert t == 0.0 and done == 0 and "gauges at t" in line
            assert "0/30 done" in text_of(scr.query_one("#arm-0 .counts"))

            for _ in range(6):  # a burst of seeks, drawn once
                await pilot.press("right")
            await drawn(pilot, scr)
            want = rp.at(6 * SEEK_STEP * dur)
            t, _, _, _, done, _ = state(app)
            assert abs(t - 6 * SEEK_STEP * dur) < 0.051
            assert done == sum(p.done for p in want) and 0 < done < 60
            counts = text_of(scr.query_one("#arm-1 .counts"))
            assert f"{want[1].done}/30 done" in counts and f"ok {want[1].ok}" in counts
            await pilot.press("left")
            await pilot.pause()
            assert abs(state(app)[0] - 5 * SEEK_STEP * dur) < 0.051

            sp = state(app)[3]
            await pilot.press("plus")
            await pilot.press("greater_than_sign")
            await pilot.pause()
            assert state(app)[3] == min(64, sp * 4)
            await pilot.press("minus")
            await pilot.pause()
            assert state(app)[3] == min(64, sp * 4) // 2

            t_before, _, _, speed, _, _ = state(app)
            await pilot.press("space")  # play: the playhead moves and the panes follow
            clock.now += 0.5  # half a second passes: the next tick moves it speed × 0.5 s
            await wait_for(pilot, lambda: state(app)[0] > t_before + 0.05, 20)
            assert state(app)[2] and abs(state(app)[0] - (t_before + 0.5 * speed)) < 0.11
            await pilot.press("space")
            await drawn(pilot, scr)
            t_paused, _, playing, _, done_paused, _ = state(app)
            assert not playing
            assert done_paused == sum(p.done for p in rp.at(scr.playhead.t_s))
            clock.now += 5
            await pilot.pause(0.5)
            assert state(app)[0] == t_paused  # paused: it stays

            await pilot.press("home", "minus", "minus", "minus", "space")
            await pilot.pause()  # playing from 0 at 1×: the verdict on top pauses it
            assert state(app)[2] and state(app)[3] == 1
            await pilot.press("v")
            await pilot.pause()
            assert verdict_shown(app) and not app.screen_stack[-2].playhead.playing
            await pilot.press("v")
            await pilot.pause()
            assert isinstance(app.screen, OpenScreen) and not state(app)[2]

            for _ in range(len(SPEEDS)):
                await pilot.press("plus")
            await pilot.press("space")  # at 64× it runs into the end, stops, and the verdict
            clock.now += dur  # (more than the dur / 64 s it needs)
            await wait_for(pilot, lambda: verdict_shown(app), 30)  # comes up by itself
            await pilot.press("escape")  # back to the panes, at the end
            await pilot.pause()
            t, d, playing, speed, done, line = state(app)
            assert (t, playing, speed, done) == (d, False, 64, 60) and "session means" in line

            await pilot.press("end")  # paused: a jump to the end is not a replay's end
            await pilot.press("home")
            await pilot.press("end")
            await pilot.pause(0.5)
            assert isinstance(app.screen, OpenScreen) and state(app)[0] == d
            await pilot.press("space")  # replay (from the start): the verdict again at the end
            clock.now += dur
            await wait_for(pilot, lambda: verdict_shown(app), 30)
            await pilot.press("v")
            await pilot.pause()
            assert isinstance(app.screen, OpenScreen) and not state(app)[2]
            await pilot.press("home", "space", "end")  # playing, End: it arrived at the end
            await wait_for(pilot, lambda: verdict_shown(app), 30)
            await pilot.press("v")
            await pilot.pause()
            assert isinstance(app.screen, OpenScreen)
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            keys = text_of(app.screen.query_one("#keys"))
            await pilot.press("escape")
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running, 10)
        return keys

    keys = asyncio.run(drive())
    # the help lists the replay's keys (the timeline's among them), not the other screens'
    for row, what in OPEN:
        assert row in keys and what in keys
    for _row, what in START + VERDICT:
        assert (_row, what) in OPEN or not shows(keys, _row, what), what


def test_a_killed_session_opens_and_replays(killed):
    rp = Replay(killed)
    assert rp.status == "running"
    n = sum(tr.planned for tr in rp.tracks)

    async def drive():
        app = AbtuiApp(session=killed)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: verdict_shown(app) or app.error)
            assert app.error is None, app.error
            banner = text_of(app.screen.query_one("#banner"))
            await pilot.press("escape")
            await pilot.pause()
            assert isinstance(app.screen, OpenScreen)
            header = text_of(app.screen.query_one("#header"))
            end = state(app)
            await pilot.press("home")
            await drawn(pilot, app.screen)
            start = state(app)
            await pilot.press("q")
        return banner, header, end, start, app.status

    banner, header, end, start, status = asyncio.run(drive())
    assert "session running" in banner and "GO " not in banner.replace("NO-GO", "")
    assert status == "stored session, running (killed: never closed)"
    # the header says it whole where it fits: at 80 columns only beside 'gen ok'. A demo killed
    # on a loaded box may have been late ('gen LATE 122.6ms'), and the header then shortens the
    # state to 'killed', least needed first (live.header_text), as it is meant to
    assert status in header or header.split(" · ")[1] == "killed", header
    assert end[4] == n and start[4] == 0 and end[0] == end[1] > 0


def test_a_replay_started_while_the_verdict_computes_is_not_covered(complete, monkeypatch):
    """Space pressed before the verdict is ready: the replay plays on, the panes say the verdict
    is ready, and v shows it — it does not pop over the replay. Untouched, it opens by itself."""
    import abtui.tui.app as appmod

    slow = appmod.load_verdict
    gate = {"go": False}

    def held(path, **kw):
        t0 = time.monotonic()
        while not gate["go"] and time.monotonic() - t0 < 30:
            time.sleep(0.02)
        return slow(path, **kw)

    monkeypatch.setattr(appmod, "load_verdict", held)
    # the replay's clock stands still: on real time a loaded box can play the short run to its
    # end before the verdict is in, and a replay played to the end shows the verdict (by design)
    monkeypatch.setattr("abtui.tui.screens.open.time", Clock())

    async def drive():
        app = AbtuiApp(session=complete)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, OpenScreen) or app.error)
            scr = app.screen
            await pilot.pause()
            assert "computing the verdict" in text_of(scr.query_one("#note"))
            await pilot.press("home")  # the user starts a replay from the start
            await pilot.press("space")
            gate["go"] = True
            await wait_for(pilot, lambda: app.verdict is not None)
            await pilot.pause(0.3)
            assert app.screen is scr and not verdict_shown(app)
            assert "the verdict is ready (v shows it)" in text_of(scr.query_one("#note"))
            await pilot.press("v")
            await wait_for(pilot, lambda: verdict_shown(app))

    asyncio.run(drive())
