"""The live ✓/✗ strip does not mislead: a minimum sample before a figure,
an "≈" band within ±δ, the estimator said plainly (binned, provisional), and once the verdict
is computed the strip shows the verdict's figures; a replay of a finished session is never
called provisional."""

from __future__ import annotations

import asyncio
import io
import time

from rich.console import Console
from tui_fixtures import write_session

from abtui.client.records import OK, RequestRecord
from abtui.metrics.live import LiveArm, deltas
from abtui.stats.labels import pct
from abtui.tui.app import AbtuiApp
from abtui.tui.screens.open import OpenScreen
from abtui.tui.screens.verdict import VerdictScreen
from abtui.tui.widgets.strip import delta_text


def rec(k: int, ttft: float, tpot: float, n: int = 20) -> RequestRecord:
    t0 = k * 100_000_000
    first = t0 + int(ttft * 1e9)
    last = first + int(tpot * (n - 1) * 1e9)
    return RequestRecord(
        arm=0,
        item=k,
        scheduled_ns=t0,
        dispatched_ns=t0,
        chunk_ns=[first, last],
        done_ns=last,
        status=OK,
        n_output=n,
    )


def arms(n: int, ttft_b: float, tpot_b: float) -> tuple:
    """Arm A: TTFT ~50 ms, TPOT ~10 ms (spread over a factor 2); arm B the same shape around
    ``ttft_b``, ``tpot_b``."""
    a, b = LiveArm(), LiveArm()
    for k in range(n):
        f = 2 ** (k / n)
        a.add(rec(k, 0.050 * f, 0.010 * f))
        b.add(rec(k, ttft_b * f, tpot_b * f))
    return a.view(), b.view()


def test_one_request_shows_no_figure_and_a_p99_waits_for_the_verdicts_minimum():
    d = {x.label: x for x in deltas(*arms(1, 0.7, 0.010))}  # +1300 % at n = 1
    assert d["TTFT P50"].state == "few" and d["TTFT P50"].need == 30
    text = delta_text("a", [("b", list(d.values()))], 80).plain
    assert "%" not in text.splitlines()[0] and "n<30" in text  # no "+1300.0%✓" at n = 1
    d = {x.label: x for x in deltas(*arms(200, 0.025, 0.010))}
    assert d["TTFT P50"].state == "better" and d["TTFT P99"].state == "few"
    assert d["TTFT P99"].need == 1000  # abtui.stats.decide.tail_min_n("p99")
    d = {x.label: x for x in deltas(*arms(1000, 0.025, 0.010))}
    assert d["TTFT P99"].state == "better"


def test_a_change_within_delta_is_approximately_equal_not_worse():
    a, b = arms(100, 0.050, 0.01001)  # TPOT +0.1 %: the bins give ~0, within ±2 %
    d = {x.label: x for x in deltas(a, b)}
    assert d["TPOT P50"].state == "same" and d["TPOT P50"].better is None
    line = delta_text("a", [("b", list(d.values()))], 80).plain.splitlines()[0]
    assert "≈" in line and "✗" not in line
    a, b = arms(100, 0.050, 0.0104)  # +4 %: beyond δ = 2 %, within a policy's δ = 5 %
    assert {x.label: x for x in deltas(a, b)}["TPOT P50"].state == "worse"
    assert {x.label: x for x in deltas(a, b, delta=0.05)}["TPOT P50"].state == "same"


def test_the_live_legend_says_provisional_and_binned_at_80_and_wide():
    d = deltas(*arms(100, 0.025, 0.005))
    for width in (80, 160):
        legend = delta_text("bf16", [("fp8", d)], width).plain.splitlines()[-1]
        assert "provisional" in legend and "binned" in legend and "≈ within ±δ" in legend


def text_of(widget) -> str:
    buf = io.StringIO()
    Console(file=buf, width=300, color_system=None).print(widget.content)
    return buf.getvalue()


async def wait_for(pilot, cond, timeout_s: float = 120.0) -> None:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout_s, "timed out waiting for the app"
        await pilot.pause(0.1)


def test_a_finished_sessions_strip_ends_on_the_verdicts_figures_never_provisional(tmp_path):
    path = write_session(tmp_path, "done", n=60)
    seen: dict = {}

    async def drive():
        app = AbtuiApp(session=path)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, VerdictScreen))
            await pilot.press("l")  # back to the panes, at the run's end state
            await wait_for(pilot, lambda: isinstance(app.screen, OpenScreen))
            screen = app.screen
            await pilot.pause()
            seen["end"] = text_of(screen.query_one("#delta"))
            seen["pair"] = app.verdict.sv.verdict.pairs[0]
            await pilot.press("home")  # the replay's start: replayed estimates
            await wait_for(pilot, lambda: not screen.playhead.at_end_state and not screen._pending)
            await pilot.pause()
            seen["start"] = text_of(screen.query_one("#delta"))
            await pilot.press("end")
            await wait_for(pilot, lambda: screen.playhead.at_end_state and not screen._pending)
            await pilot.pause()
            seen["end_again"] = text_of(screen.query_one("#delta"))
            await pilot.press("q")

    asyncio.run(drive())
    comp = seen["pair"].comparison
    want = [
        pct(comp.get(k).ratio)
        for k in ("ttft.p50", "ttft.p99", "tpot.p50", "tpot.p99", "throughput.output_tokens")
    ]
    for text in (seen["end"], seen["end_again"]):
        assert "provisional" not in text and "the verdict's figures" in text, text
        at = 0
        for fig in want:  # the verdict's own figures, in the strip's order
            at = text.index(fig, at) + len(fig)
        # P99 at 60 requests: the verdict cannot call it (INCONCLUSIVE: "?"), not ✓
        assert comp.get("ttft.p99").outcome == "INCONCLUSIVE"
        assert text.split("TTFT")[1].split("TPOT")[0].count("?") >= 1, text
    assert "provisional" not in seen["start"] and "replayed" in seen["start"], seen["start"]
