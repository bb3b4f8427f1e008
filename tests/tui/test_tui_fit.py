"""At 80×24 every arm's live pane fits: no row wraps, no pane grows its own scrollbar, and the
arms stay row-aligned. The order in which a short pane condenses is
:data:`abtui.tui.widgets.pane.CONDENSE_ORDER`, tested here row by row."""

from __future__ import annotations

import asyncio
from dataclasses import fields, replace

import pytest
from test_tui_snapshots import arms_screen, fixed_screen, fixed_session

from abtui.tui.app import AbtuiApp
from abtui.tui.screens.live import ArmPane
from abtui.tui.widgets.pane import (
    CONDENSE_ORDER,
    HISTORY_MIN_BARS,
    HISTORY_ROWS,
    MAX_BAR_ROWS,
    PanePlan,
    pane_plan,
)


def test_a_short_pane_shrinks_the_bars_then_drops_rows_in_the_stated_order():
    full = PanePlan()
    assert pane_plan(100) == full and full.lines == 15 + HISTORY_ROWS + 2 * MAX_BAR_ROWS
    # the gauges' histories stay while the histograms keep HISTORY_MIN_BARS rows
    keep = replace(full, bars=HISTORY_MIN_BARS).lines
    assert pane_plan(keep) == replace(full, bars=HISTORY_MIN_BARS)
    assert pane_plan(keep - 1).history is False and pane_plan(keep - 1).bars > HISTORY_MIN_BARS
    assert pane_plan(40).history and pane_plan(40).bars == MAX_BAR_ROWS  # 160×48, two arms
    no_hist = replace(full, history=False)
    assert pane_plan(16) == replace(no_hist, bars=1, phase_bar=False)  # 80×24, two arms
    assert pane_plan(15) == replace(no_hist, bars=1, phase_bar=False, errors=False)  # timeline
    dropped: list[str] = []
    for h in range(full.lines, 6, -1):
        plan = pane_plan(h)
        assert plan.lines <= h or all(not getattr(plan, n) for n, _ in CONDENSE_ORDER), h
        assert plan.history or plan.bars < MAX_BAR_ROWS or h >= full.lines, h  # histories first
        gone = [
            f.name
            for f in fields(plan)
            if f.name not in ("bars", "history") and not getattr(plan, f.name)
        ]
        assert gone == [n for n, _ in CONDENSE_ORDER][: len(gone)], (h, gone)  # in order
        if gone:
            assert plan.bars == 1 and not plan.history, "rows go once the bars are down to one"
        dropped = gone
    assert dropped == [n for n, _ in CONDENSE_ORDER]


async def _panes(screen, size):
    app = AbtuiApp()
    async with app.run_test(size=size) as pilot:
        await app.push_screen(screen)
        for _ in range(3):
            await pilot.pause()
        lines = [s.text for s in app.screen._compositor.render_strips()]
        out = []
        for pane in app.screen.query(ArmPane):
            rows = {}
            for w in pane.children:
                if not w.display:
                    continue
                need = w.get_content_height(w.container_size, app.size, w.content_size.width)
                rows[w.classes and next(iter(w.classes))] = (w.region.y, w.size.height, need)
            out.append(
                {
                    "scrollbar": pane.show_vertical_scrollbar,
                    "virtual": pane.virtual_size.height,
                    "inside": pane.content_size.height,
                    "rows": rows,
                    "region": pane.region,
                }
            )
        await pilot.press("q")
    return lines, out


def _open_screen(tmp_path):
    from abtui.runner.live_replay import Replay
    from abtui.tui.screens.open import OpenScreen

    return OpenScreen(Replay(fixed_session(tmp_path / "s.duckdb")), "stored session, complete")


@pytest.mark.parametrize("which", ["two arms", "three arms", "open (timeline)"])
def test_every_pane_fits_at_80x24_unwrapped_and_row_aligned(which, tmp_path):
    screen = {
        "two arms": fixed_screen,
        "three arms": lambda: arms_screen(3),
        "open (timeline)": lambda: _open_screen(tmp_path),
    }[which]()
    lines, panes = asyncio.run(_panes(screen, (80, 24)))
    assert len(lines) == 24
    for p in panes:
        assert not p["scrollbar"], p
        assert p["virtual"] <= p["inside"], p  # nothing below the fold
        for row, (_y, height, need) in p["rows"].items():
            assert need == height, (row, need, height)  # one row per line: nothing wrapped
        # the pane's lines on screen: none reaches the border (nothing cut either)
        reg = p["region"]
        for ln in lines[reg.y + 1 : reg.y + reg.height - 1]:
            inner = ln[reg.x + 1 : reg.x + reg.width - 1]
            assert inner.startswith(" ") and inner.endswith(" "), ln  # the padding is intact
    # row-aligned: the same rows, at the same heights, on the same screen lines in every arm
    assert all(p["rows"] == panes[0]["rows"] for p in panes[1:]), [p["rows"] for p in panes]
    shown = set(panes[0]["rows"])
    assert {"title", "counts", "ttft", "tpot", "spark", "gpu", "engine", "phase"} <= shown
    if which == "two arms":  # 16 rows: only the time split's bar is left out
        assert "errors" in shown
        text = "\n".join(lines)
        for needle in (
            "errors: http 1, timeout 2",
            "time: wait",
            "vllm run 31",
            "good ",
            "GPU mem 71.5G/80G",
        ):
            assert needle in text, needle


def _long_screen():
    """Two arms with 200 s of one request a second: the sparkline series fill any row."""
    from abtui.client.records import OK, RequestRecord
    from abtui.runner.observer import ArmProgress, RunInfo
    from abtui.tui.messages import RunProgress
    from abtui.tui.observer import arm_state
    from abtui.tui.screens.live import LiveScreen

    arms = []
    for name in ("bf16", "fp8"):
        p = ArmProgress(name=name, planned=200, done=200, ok=200)
        p.live.slo = {"ttft": 0.2}
        for k in range(200):
            t0 = k * 1_000_000_000
            first, last = t0 + 50_000_000, t0 + 50_000_000 + (k % 7 + 1) * 100_000_000
            p.live.add(
                RequestRecord(
                    arm=0,
                    item=k,
                    scheduled_ns=t0,
                    dispatched_ns=t0,
                    chunk_ns=[first, last],
                    done_ns=last,
                    status=OK,
                    n_output=20 + k % 13,
                )
            )
        arms.append(p)
    info = RunInfo(
        "long",
        "sessions/long.duckdb",
        ["bf16", "fp8"],
        ["u0", "u1"],
        ["m0", "m1"],
        200,
        "poisson 1 req/s",
    )
    return LiveScreen(info, RunProgress(200.0, "measuring", [arm_state(a) for a in arms]))


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (160, 48)])
def test_the_good_sparkline_stays_when_its_series_fills_the_row(size):
    lines, _ = asyncio.run(_panes(_long_screen(), size))
    tok = [ln for ln in lines if "│ tok/s" in ln]
    good = [ln for ln in lines if "│ good" in ln]
    assert len(tok) == 1 and len(good) == 1, "\n".join(lines)  # one row each, both arms on it
    spark = "▁▂▃▄▅▆▇█"
    for t_row, g_row in zip(tok, good, strict=True):
        assert "…" not in g_row
        t_runs = [s for s in "".join(c if c in spark else " " for c in t_row).split() if s]
        g_runs = [s for s in "".join(c if c in spark else " " for c in g_row).split() if s]
        assert len(g_runs) == len(t_runs) == 2, (t_row, g_row)  # each arm's sparkline shows
        assert [len(s) for s in g_runs] == [len(s) for s in t_runs]  # as long as throughput's
