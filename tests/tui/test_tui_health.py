"""The TUI says when the box a session runs on stalls: the live header says the main process is
reading the generators' finished records seconds late (while it is), and the verdict screen —
live or re-opened — shows the generator-health notes stored in the session, in the words
``abtui report`` prints. And the delta strip keeps one line per candidate at 80 columns."""

from __future__ import annotations

import asyncio
import math
import re
import time

import pytest
from test_tui import text_of, verdict_shown, wait_for
from test_tui_snapshots import arms_screen, fixed_screen

from abtui.metrics.live import deltas
from abtui.runner.health import BEHIND_NOTE_S, RECENT_S, Delivery
from abtui.runner.messages import GeneratorStats
from abtui.runner.observer import NullObserver
from abtui.tui.app import AbtuiApp

S = 1_000_000_000


async def _header(screen, size, behind_s: float, waiting: int) -> tuple[str, int]:
    app = AbtuiApp()
    async with app.run_test(size=size) as pilot:
        await app.push_screen(screen)
        await pilot.pause()
        msg = screen.last
        for k, st in enumerate(msg.arms):  # the backlog as the runner hands it over, per arm
            st.progress.reading_behind_s = behind_s * (1 if k == 0 else 0.5)
            st.progress.records_waiting = waiting // len(msg.arms)
        screen.show_progress(msg)
        await pilot.pause()
        await pilot.pause()
        h = screen.query_one("#header")
        got = text_of(h).strip(), h.size.height
        await pilot.press("q")
    return got


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_live_header_says_when_records_are_read_seconds_late(size):
    text, height = asyncio.run(_header(fixed_screen(), size, 3.24, 122))
    assert height == 1, text  # shortened, not wrapped
    assert "reading" in text and "3.2s behind" in text, text
    assert "gen ok" in text or "generator ok" in text  # the schedule itself was kept
    if size[0] >= 160:
        assert "reading records 3.2s behind (122 waiting)" in text, text
    # under the note's threshold the header does not cry wolf
    text, _ = asyncio.run(_header(fixed_screen(), size, BEHIND_NOTE_S * 0.8, 40))
    assert "behind" not in text, text


def test_delivery_current_is_the_worst_read_of_the_last_seconds():
    d = Delivery()
    arm_of = [0, 0, 1]  # workers 0 and 1 play arm 0, worker 2 arm 1
    d.on_batch(0, 5, GeneratorStats(shipped=5, shipped_ns=0), S // 100)  # read 10 ms after shipping
    d.on_batch(2, 5, GeneratorStats(shipped=5, shipped_ns=0), S // 100)
    assert d.current(arm_of, S // 100) == {0: (0.01, 5), 1: (0.01, 5)}
    # worker 0 stalls: three batches shipped at 1, 2, 3 s are read at 4 s
    for k in range(3):
        d.on_batch(0, 10, GeneratorStats(shipped=15 + 10 * k, shipped_ns=(k + 1) * S), 4 * S)
    d.on_batch(
        1, 7, GeneratorStats(shipped=7, shipped_ns=4 * S - S // 2), 4 * S
    )  # its sibling: 0.5 s
    behind, waiting = d.current(arm_of, 4 * S)[0]
    assert behind == 3.0 and waiting == 30 + 7  # shipped since the last read, both processes
    assert 1 not in d.current(arm_of, 4 * S)  # arm 1 read nothing for 4 s: no figure
    # held for the window after the burst, gone after it
    assert d.current(arm_of, 4 * S + int(RECENT_S * S))[0][0] == 3.0
    assert 0 not in d.current(arm_of, 4 * S + int(RECENT_S * S) + 1)


# ----------------------------------------- a real run whose main process stalls reading records

STALL_S = 2.0


class Stalling(NullObserver):
    """Passes everything to the TUI's observer; once some requests are done, blocks the
    runner's loop for STALL_S inside ``progress`` (as a slow disk or a stopped process would:
    nothing reads the generators' records meanwhile)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.stalled_at: float | None = None  # the run's elapsed seconds when it resumed

    def started(self, info):
        self.inner.started(info)

    def message(self, text):
        self.inner.message(text)

    def finished(self, snap, status):
        self.inner.finished(snap, status)

    def progress(self, snap):
        self.inner.progress(snap)
        if (
            self.stalled_at is None
            and snap.phase == "measuring"
            and all(a.done >= 10 for a in snap.arms)
        ):
            time.sleep(STALL_S)
            self.stalled_at = snap.elapsed_s + STALL_S


@pytest.fixture(scope="module")
def stalled_run(tmp_path_factory):
    """An 8 s run at 40 req/s per arm against two simulators under the TUI at 160×48, its main
    loop blocked for 2 s early on; the headers it showed, then the verdict screen's banner."""
    from abtui.runner.session import run_session
    from abtui.sim.engine import SimConfig
    from abtui.sim.process import SimProcess
    from abtui.spec import spec_from_dict, validate

    tmp = tmp_path_factory.mktemp("stall")
    with (
        SimProcess(SimConfig(ttft_ms=30, itl_ms=2, model="sim-a", seed=1)) as a,
        SimProcess(SimConfig(ttft_ms=30, itl_ms=2, model="sim-b", seed=2)) as b,
    ):
        spec = validate(
            spec_from_dict(
                {
                    "name": "tui-stall",
                    "arms": [{"name": "bf16", "url": a.url}, {"name": "fp8", "url": b.url}],
                    "workload": {"requests": 320, "input_tokens": 16, "output_tokens": 8},
                    "load": {"rate": 40, "warmup": 0},
                    "store": {"dir": str(tmp)},
                    "policy": {"resamples": 500},
                },
                "t.toml",
            )
        )
        stalls: list[Stalling] = []

        def job(obs, stop):
            stalls.append(Stalling(obs))
            return run_session(spec, "", stalls[0], stop_request=stop)

        async def drive():
            app = AbtuiApp(job=job)
            seen = []
            async with app.run_test(size=(160, 48)) as pilot:
                while app.status is None:
                    assert app.error is None, app.error
                    live = app.live
                    if live is not None and live.last and live.last.phase == "measuring":
                        behind = max(a.progress.reading_behind_s for a in live.last.arms)
                        seen.append(
                            (live.last.elapsed_s, text_of(live.query_one("#header")), behind)
                        )
                    await pilot.pause(0.1)
                await wait_for(pilot, lambda: verdict_shown(app) or app.error)
                assert app.error is None, app.error
                banner = text_of(app.screen.query_one("#banner"))
                await pilot.press("q")
            return app.return_value, seen, banner

        result, seen, banner = asyncio.run(drive())
    assert result is not None and result.status == "complete"
    return result.path, stalls[0].stalled_at, seen, banner


BEHIND = re.compile(r"reading records (\d+\.\d)s behind \((\d+) waiting\)")


def test_live_header_shows_the_stall_of_a_real_run_then_clears(stalled_run):
    _, resumed, seen, _ = stalled_run
    assert resumed is not None
    after = [(t, BEHIND.search(h)) for t, h, _ in seen if t >= resumed]
    said = [m for _, m in after if m]
    assert said, seen
    # the worst batch waited about the stall (less the time to its shipping): ≥ 0.9 × stall
    assert max(float(m[1]) for m in said) >= STALL_S * 0.9, said
    assert max(int(m[2]) for m in said) >= 2 * 40 * STALL_S * 0.4  # both arms' records
    # the header says it exactly while the figure the runner hands over is over the threshold
    for _, h, behind in seen:
        assert ("behind" in h) == (behind > BEHIND_NOTE_S), (behind, h)
    # caught up: the figure falls back once the backlog is read and RECENT_S has passed (how
    # long reading the backlog takes is the box's: under load, batches read after the stall
    # were still 1.3 s late at resumed + 3.2 s, when the test allowed RECENT_S + 1 s), and from
    # then on the header is back to the generator's health, before the run ends
    t_back = next((t for t, _, b in seen if t > resumed and b <= BEHIND_NOTE_S), None)
    late = [h for t, h, _ in seen if t_back is not None and t >= t_back]
    assert late and not any("behind" in h for h in late), (t_back, late)
    assert all("generator ok" in h or "gen ok" in h or "LATE" in h for _, h, _ in seen)


def test_verdict_shows_the_stored_backlog_note_as_the_report_does(stalled_run, capsys):
    from abtui.cli import main
    from abtui.report.health import stored_health
    from abtui.stats.reasons import Code, codes
    from abtui.store.reader import SessionReader

    path, _, _, banner = stalled_run
    with SessionReader(path) as rd:
        notes = stored_health(rd.meta()).notes
    assert Code.MAIN_BEHIND in codes(notes), notes
    assert main(["report", str(path)]) in (0, 3, 4)
    printed = [ln.strip() for ln in capsys.readouterr().out.splitlines() if ln.startswith("note:")]
    assert len(printed) == len(notes) >= 1
    flat = " ".join(banner.split())
    for line in printed:  # the report's words, on the verdict screen
        assert " ".join(line.split()) in flat, (line, banner)

    async def reopen():  # abtui open: the same verdict screen from the file
        app = AbtuiApp(session=path)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: verdict_shown(app) or app.error)
            got = text_of(app.screen.query_one("#banner"))
            await pilot.press("q")
        return got

    assert " ".join(printed[0].split()) in " ".join(asyncio.run(reopen()).split())


def test_verdict_health_from_a_hostile_file_is_inert_and_never_crashes():
    from abtui.tui.screens.verdict import health_text

    meta = {
        "degraded": True,
        "generator_health": {"reasons": ["a: lag \x1b[2J P99 [bold]x[/]"], "notes": "not a list"},
    }
    t = health_text(meta).plain
    assert "DEGRADED SESSION" in t and "\x1b" not in t and "\\x1b[2J" in t and "[bold]x[/]" in t
    assert "note:" not in t
    assert health_text({"generator_health": 5}).plain == ""


@pytest.mark.parametrize("notes", [["generator baseline used 93% of a core"], "not a list"])
def test_report_and_verdict_screen_say_the_stored_health_in_the_same_words(notes):
    """One source for the words (abtui.report.health): the summary ``abtui report`` prints and
    the verdict screen show the same lines; a note list that is not a list (a hostile file) was
    printed by the report one character a line."""
    from io import StringIO

    from rich.console import Console

    from abtui.report.console import _print_generator_health
    from abtui.tui.screens.verdict import health_text

    meta = {"degraded": True, "generator_health": {"reasons": ["a: lag P99 2.1 s"], "notes": notes}}
    out = StringIO()
    _print_generator_health(Console(file=out, width=300), meta)
    printed = sorted(ln.strip() for ln in out.getvalue().splitlines() if ln.strip())
    shown = sorted(ln.strip() for ln in health_text(meta).plain.splitlines() if ln.strip())
    assert printed == shown and len(printed) == 2 + isinstance(notes, list), printed
    assert any(ln.startswith("DEGRADED SESSION: the load generator did not keep") for ln in shown)


# ------------------------------------------------------------------ the delta strip at 80 columns


async def _strip(n: int, size) -> tuple[list[str], list[str], object]:
    app = AbtuiApp()
    async with app.run_test(size=size) as pilot:
        screen = arms_screen(n)
        await app.push_screen(screen)
        await pilot.pause()
        await pilot.pause()
        lines = [s.text.rstrip() for s in app.screen._compositor.render_strips()]
        delta = screen.query_one("#delta")
        region = delta.region
        strip = lines[region.y + 1 : region.y + region.height]  # under its top border
        msg = screen.last
        msg.shown = list(screen.shown)  # the arms on screen (more than fit are paged)
        await pilot.press("q")
    return lines, strip, msg


@pytest.mark.parametrize("n", [2, 3, 4])
def test_delta_strip_is_one_line_per_candidate_at_80x24_with_every_figure(n):
    lines, strip, msg = asyncio.run(_strip(n, (80, 24)))
    assert len(lines) == 24
    cands = [msg.arms[i] for i in msg.shown[1:]]  # four arms at 80: the page's two
    assert len(cands) == min(n - 1, 2)
    assert len(strip) == len(cands) + 1, strip  # one line each, then the legend
    for st, line in zip(cands, strip[:-1], strict=True):
        assert line.split()[0] == st.progress.name, line
        ds = deltas(msg.arms[0].view, st.view)
        figs = [
            f"n<{d.need}"
            if d.state == "few"
            else f"{d.ratio:+.1%}"
            if math.isfinite(d.ratio)
            else "n/a"
            for d in ds
        ]
        at = 0
        for f in figs:  # every figure, in the order of the wide strip
            at = line.index(f, at) + len(f)
        # an open-loop rate sets throughput: its figure is never marked better or worse
        marked = sum(d.state in ("better", "worse", "same") and d.label != "throughput" for d in ds)
        assert line.count("✓") + line.count("✗") + line.count("≈") == marked
        assert line.count("n<1000") == 2  # 177 requests: no P99 delta yet (the verdict's rule)
    assert "provisional" in strip[-1] and "vs bf16" in strip[-1] and "P50 P99" in strip[-1]
    # what it gave back: the panes show their sparkline rows with three arms too
    if n == 3:
        assert any("tok/s" in ln for ln in lines), "\n".join(lines)


def test_delta_strip_keeps_its_words_where_they_fit():
    _, strip, msg = asyncio.run(_strip(3, (160, 48)))
    assert strip[0].strip().startswith("fp8 vs bf16: TTFT P50 ")
    assert strip[1].strip().startswith("int4 vs bf16: TTFT P50 ")
    assert strip[2].strip().startswith("provisional running estimates")
