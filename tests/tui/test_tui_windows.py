"""The live view agrees with the verdict, at 80×24: every rate says its
window (``10s`` while running, ``run`` for the verdict's whole-run figures), throughput under
an open-loop rate — which the design fixes — is never marked ✓/✗, and once the verdict is in,
the panes and the compare view show its figures, not last-10-second rates beside a strip that
says "the verdict's figures"."""

from __future__ import annotations

import asyncio
import dataclasses

from test_tui_snapshots import fixed_screen
from test_tui_strip import text_of, wait_for
from tui_fixtures import write_session

from abtui.tui.app import AbtuiApp
from abtui.tui.screens.open import OpenScreen
from abtui.tui.screens.verdict import VerdictScreen
from abtui.tui.widgets.charts import fmt_s


def _screen(load: str):
    """The snapshot's live screen with fp8's throughput 30 % above bf16's (beyond δ)."""
    screen = fixed_screen()
    screen.info = dataclasses.replace(screen.info, load=load)
    msg = screen._initial[0]
    a, b = msg.arms[0].view, msg.arms[1].view
    b.out_tok_s = a.out_tok_s * 1.3
    return screen


async def _live_lines(load: str) -> tuple[list[str], str]:
    app = AbtuiApp()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = _screen(load)
        await app.push_screen(screen)
        await pilot.pause()
        await pilot.pause()
        lines = [s.text.rstrip() for s in app.screen._compositor.render_strips()]
        strip = text_of(screen.query_one("#delta"))
        await pilot.press("q")
    return lines, strip


def _tok_cell(strip: str) -> str:
    return strip.splitlines()[0].split("tok/s")[1].split("good")[0].strip()


def test_open_loop_throughput_is_never_marked_and_rates_say_10s():
    lines, strip = asyncio.run(_live_lines("poisson 20 req/s"))
    cell = _tok_cell(strip)
    assert cell == "+30.0%", strip  # the figure, no ✓ although beyond δ
    assert "fixed rate" in strip.splitlines()[-1], strip  # the legend says why
    assert "rates last 10 s" in strip or "rates 10 s" in strip, strip
    assert sum("tok/s 10s" in ln for ln in lines) == 1, "\n".join(lines)  # both panes' row
    assert sum(ln.count("tok/s 10s") for ln in lines) == 2
    # a closed loop does not fix throughput: there the same change is marked
    _, closed = asyncio.run(_live_lines("closed loop, concurrency 8"))
    assert _tok_cell(closed) == "+30.0%✓", closed
    assert "fixed rate" not in closed


def test_once_the_verdict_is_in_panes_and_compare_view_show_its_figures(tmp_path):
    path = write_session(tmp_path, "done", n=60)  # poisson 20 req/s: an open-loop rate
    seen: dict = {}

    async def drive():
        app = AbtuiApp(session=path)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, VerdictScreen))
            await pilot.press("l")  # the panes at the end state, the verdict in
            await wait_for(pilot, lambda: isinstance(app.screen, OpenScreen))
            screen = app.screen
            await wait_for(pilot, lambda: not screen._pending)
            await pilot.pause()
            seen["panes"] = [s.text.rstrip() for s in screen._compositor.render_strips()]
            seen["strip"] = text_of(screen.query_one("#delta"))
            await pilot.press("c")
            await pilot.pause()
            await pilot.pause()
            seen["compare"] = [s.text.rstrip() for s in screen._compositor.render_strips()]
            seen["pair"] = app.verdict.sv.verdict.pairs[0]
            await pilot.press("q")

    asyncio.run(drive())
    comp = seen["pair"].comparison
    tok = comp.get("throughput.output_tokens")
    p50 = comp.get("ttft.p50")
    panes = "\n".join(seen["panes"])
    spark = next(ln for ln in seen["panes"] if "tok/s" in ln)
    assert spark.count("tok/s run") == 2, spark  # the whole run's, labelled so
    assert f"tok/s run {tok.a:>7,.0f}" in spark and f"tok/s run {tok.b:>7,.0f}" in spark, spark
    assert f"▲P50 {fmt_s(p50.a)}" in panes and f"▲P50 {fmt_s(p50.b)}" in panes, panes
    assert "tok/s 10s" not in panes
    assert "✓" not in _tok_cell(seen["strip"]) and "✗" not in _tok_cell(seen["strip"])
    table = seen["compare"]
    head = next(ln for ln in table if "TTFT P50" in ln)
    assert head.rstrip().endswith("tok/s run"), head
    rows = [ln for ln in table if ln.split()[:1] in (["A"], ["B"]) and ln.split()[2].isdigit()]
    assert len(rows) == 2, "\n".join(table)
    for row, (p, t) in zip(rows, ((p50.a, tok.a), (p50.b, tok.b)), strict=True):
        assert fmt_s(p) in row and row.rstrip().endswith(f"{t:,.0f}"), row
