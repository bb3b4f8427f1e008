"""Live panes with 4–8 arms and the compare view, driven with
run_test() at 80×24 and 160×48, asserting on what is on screen: the baseline keeps the first
column, the candidates come a page at a time beside it (``]`` / ``[``), each page's panes fit
unwrapped and row-aligned, the strip names the page's candidates against the baseline, and
``c`` overlays every arm's CDFs in one chart with a table of all of them."""

from __future__ import annotations

import asyncio

import pytest
from test_tui_snapshots import arms_screen, fixed_screen

from abtui.tui.app import AbtuiApp
from abtui.tui.screens.live import MIN_PANE, ArmPane, page_of, page_size

NAMES = ["bf16", "fp8", "int4", "awq", "gptq", "int4+awq", "fp8+spec", "all-three"]


def test_page_size_keeps_the_baseline_and_fills_the_width():
    assert page_size(2, 80) == 1 and page_size(3, 80) == 2  # all fit: no paging
    assert page_size(4, 80) == 2 and page_size(8, 80) == 2  # three columns of 26 at 80
    assert page_size(4, 160) == 3 and page_size(6, 160) == 5  # six fit at 160
    assert page_size(8, 160) == 5
    assert page_size(8, 40) == 1  # narrow: the baseline and one candidate
    assert page_of(8, 80, 0) == ([0, 1, 2], 0, 4)
    assert page_of(8, 80, 3) == ([0, 7], 3, 4)
    assert page_of(8, 80, 4) == ([0, 1, 2], 0, 4)  # wraps round
    assert page_of(8, 160, 1) == ([0, 6, 7], 1, 2)
    assert page_of(4, 160, 0) == ([0, 1, 2, 3], 0, 1)
    # every candidate is on exactly one page
    for n in range(2, 9):
        for w in (40, 80, 100, 160):
            pages = page_of(n, w, 0)[2]
            seen = [i for p in range(pages) for i in page_of(n, w, p)[0][1:]]
            assert sorted(seen) == list(range(1, n)), (n, w)


def screen_lines(app) -> list[str]:
    return [s.text for s in app.screen._compositor.render_strips()]


async def _pages(n: int, size: tuple[int, int]) -> list[dict]:
    """Each page of the ``n``-arm screen: its lines, the panes shown (name, width, rows and
    where they are), and the strip's text."""
    app = AbtuiApp()
    out = []
    async with app.run_test(size=size) as pilot:
        await app.push_screen(arms_screen(n))
        await pilot.pause()
        await pilot.pause()
        pages = page_of(n, size[0], 0)[2]
        for _ in range(pages):
            await pilot.pause()
            screen = app.screen
            shown = []
            for pane in screen.query(ArmPane):
                if not pane.display:
                    continue
                rows = {}
                for w in pane.children:
                    if w.display:
                        need = w.get_content_height(
                            w.container_size, app.size, w.content_size.width
                        )
                        rows[next(iter(w.classes))] = (w.region.y, w.size.height, need)
                shown.append(
                    {
                        "name": pane.arm_name,
                        "width": pane.outer_size.width,
                        "rows": rows,
                        "scrollbar": pane.show_vertical_scrollbar,
                        "virtual": pane.virtual_size.height,
                        "inside": pane.content_size.height,
                    }
                )
            from test_tui import text_of

            out.append(
                {
                    "lines": screen_lines(app),
                    "panes": shown,
                    "page": screen.page,
                    "delta": text_of(screen.query_one("#delta")),
                }
            )
            await pilot.press("right_square_bracket")
        await pilot.press("q")
    return out


@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_many_arms_are_paged_beside_the_baseline_and_every_page_fits(n, size):
    pages = asyncio.run(_pages(n, size))
    per = page_size(n, size[0])
    assert len(pages) == -(-(n - 1) // per)
    seen = []
    for k, pg in enumerate(pages):
        lines, panes = pg["lines"], pg["panes"]
        assert len(lines) == size[1] and all(len(ln) <= size[0] for ln in lines)
        names = [p["name"] for p in panes]
        assert names[0] == "bf16", names  # the baseline keeps the first column
        assert len(names) <= per + 1 and pg["page"] == k
        seen += names[1:]
        assert sum(p["width"] for p in panes) <= size[0]
        assert min(p["width"] for p in panes) >= MIN_PANE
        for p in panes:  # each pane fits: no scrollbar, nothing wrapped, nothing below
            assert not p["scrollbar"] and p["virtual"] <= p["inside"], p
            for row, (_y, h, need) in p["rows"].items():
                assert need == h, (row, need, h)
        assert all(p["rows"] == panes[0]["rows"] for p in panes[1:])  # row-aligned
        top = next(i for i, ln in enumerate(lines) if "╭" in ln)
        title = lines[top + 1]
        for nm in names:
            assert nm in title, (nm, title)  # every pane's title row is on screen
        # the letters on the borders: A for the baseline, the candidates' own after it
        assert "─ A ─" in lines[top] and all(
            f"─ {'ABCDEFGH'[NAMES.index(nm)]} ─" in lines[top] for nm in names
        )
        # the strip: this page's candidates against the baseline, no other
        delta = pg["delta"].strip().splitlines()
        heads = [ln.split()[0].rstrip("…") for ln in delta[:-1]]  # a long name is cut with …
        assert len(heads) == len(names) - 1, delta
        assert all(nm.startswith(h) for h, nm in zip(heads, names[1:], strict=True)), delta
        assert "vs bf16" in "\n".join(delta) and all(len(ln) <= size[0] - 2 for ln in delta)
        # the page and how to turn it, on the last column's border
        bottom = next(ln for ln in lines[top + 1 :] if "╰" in ln)
        if len(pages) > 1:
            assert f"page {k + 1}/{len(pages)}" in bottom, bottom
        else:
            assert "page" not in bottom
    assert sorted(seen) == sorted(NAMES[1:n])  # every candidate on exactly one page


def test_left_bracket_turns_back_and_a_screen_with_room_has_no_pages():
    async def drive():
        app = AbtuiApp()
        async with app.run_test(size=(80, 24)) as pilot:
            await app.push_screen(arms_screen(8))
            await pilot.pause()
            await pilot.press("left_square_bracket")  # from the first page: the last one
            await pilot.pause()
            last = app.screen.shown
            await pilot.press("left_square_bracket")
            await pilot.pause()
            before = app.screen.shown
            await pilot.press("q")
        app2 = AbtuiApp()
        async with app2.run_test(size=(80, 24)) as pilot:
            await app2.push_screen(fixed_screen())
            await pilot.pause()
            await pilot.press("right_square_bracket")  # two arms: nothing to page
            await pilot.pause()
            two = (app2.screen.shown, app2.screen.page)
            await pilot.press("q")
        return last, before, two

    last, before, two = asyncio.run(drive())
    assert last == [0, 7] and before == [0, 5, 6]
    assert two == ([0, 1], 0)


async def _compare(screen, size) -> tuple[list[str], str]:
    app = AbtuiApp()
    async with app.run_test(size=size) as pilot:
        await app.push_screen(screen)
        await pilot.pause()
        await pilot.press("c")
        for _ in range(3):
            await pilot.pause()
        lines = screen_lines(app)
        panes_hidden = not app.screen.query_one("#arms").display
        await pilot.press("c")
        await pilot.pause()
        back = app.screen.query_one("#arms").display
        await pilot.press("q")
    assert panes_hidden and back
    return lines


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_compare_view_overlays_both_arms_in_one_chart(size):
    lines = asyncio.run(_compare(fixed_screen(), size))
    text = "\n".join(lines)
    assert len(lines) == size[1] and all(len(ln) <= size[0] for ln in lines)
    # both CDFs side by side, one shared axis each, both arms drawn in each
    charts = [ln for ln in lines if "┤" in ln]
    assert len(charts) >= 5, text
    assert "TTFT: share of requests by time" in text and "TPOT: share of requests by time" in text
    assert any("100%┤" in ln for ln in charts) and any("50%┤" in ln for ln in charts)
    left = [ln[: size[0] // 2] for ln in charts]
    right = [ln[size[0] // 2 :] for ln in charts]
    for half in (left, right):
        body = "".join(half)
        assert "A" in body.replace("A bf16", "") and "B" in body, half  # both arms' curves
    # fp8 (B) is faster: at the median row its curve is left of bf16's (A) in both charts
    mid = next(ln for ln in lines if "50%┤" in ln)
    for part in mid.split("50%┤")[1:]:
        assert 0 <= part.find("B") < part.find("A"), mid
    assert "A bf16  B fp8" in text and "left is faster" in text  # the legend, in words
    table = [ln for ln in lines if ln.strip().startswith(("A bf16", "B fp8")) and " 177 " in ln]
    assert len(table) == 2, text
    assert "47.5ms" in table[0] and "36.0ms" in table[1]  # the panes' own P50s
    assert any(ln.startswith(" fp8 ") and "TTFT" in ln for ln in lines)  # the strip stays


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_compare_view_is_the_grouped_view_of_eight_arms(size):
    lines = asyncio.run(_compare(arms_screen(8), size))
    text = "\n".join(lines)
    assert len(lines) == size[1] and all(len(ln) <= size[0] for ln in lines)
    for k, nm in enumerate(NAMES):  # every arm in the table and the legend, each its letter
        row = [ln for ln in lines if ln.strip().startswith(f"{'ABCDEFGH'[k]} {nm}")]
        assert row, (nm, text)
    assert sum(ln.count("┤") for ln in lines) >= 2 * 5  # two charts of ≥ 5 rows each
    body = "".join(ln.split("┤", 1)[1] for ln in lines if "┤" in ln)
    assert sum(ch in body for ch in "ABCDEFGH") >= 6  # most curves visible, not one blur


def test_the_ablation_demo_runs_four_arms_live_at_80x24(tmp_path):
    """`abtui demo --ablation` (four simulated GPUs on 127.0.0.1, short and time-scaled) under
    the TUI at 80×24: while it runs the first page (base, int4, spec) fills and says there is
    another; after the verdict, ] brings int4+spec beside base, and c overlays all four."""
    from test_tui import verdict_shown, wait_for

    from abtui.demo_ablation import AblationOptions, run_ablation_demo
    from abtui.runner.session import run_session
    from abtui.tui.screens.live import LiveScreen

    opts = AblationOptions(
        requests=60,
        concurrency=8,
        time_scale=4,
        resamples=200,
        name="abl",
        sessions_dir=str(tmp_path),
    )

    def job(obs, stop):
        return run_ablation_demo(
            opts, lambda spec, items: run_session(spec, "", obs, items=items, stop_request=stop)
        )

    seen = {}

    async def drive():
        app = AbtuiApp(job=job)
        async with app.run_test(size=(80, 24)) as pilot:

            def live_filled():
                s = app.screen
                return (
                    isinstance(s, LiveScreen)
                    and s.last is not None
                    and all(a.progress.ok >= 5 for a in s.last.arms[:3])
                )

            await wait_for(pilot, lambda: live_filled() or verdict_shown(app) or app.error, 300)
            if isinstance(app.screen, LiveScreen):
                seen["running"] = screen_lines(app)
            await wait_for(pilot, lambda: verdict_shown(app) or app.error, 300)
            assert app.error is None, app.error
            await pilot.press("l")
            await pilot.pause(0.5)
            seen["end"] = screen_lines(app)
            await pilot.press("right_square_bracket")
            await pilot.pause(0.5)
            seen["page2"] = screen_lines(app)
            await pilot.press("c")
            await pilot.pause(0.5)
            seen["compare"] = screen_lines(app)
            await pilot.press("q")

    asyncio.run(drive())
    for key in ("running", "end"):
        if key not in seen:  # a loaded box can finish before the panes were caught mid-run
            continue
        lines = seen[key]
        top = next(i for i, ln in enumerate(lines) if "╭" in ln)
        assert all(nm in lines[top + 1] for nm in ("base", "int4", "spec")), lines[top + 1]
        assert "int4+spec" not in lines[top + 1]
        assert "page 1/2 ] next" in "\n".join(lines)
        assert all(len(ln) <= 80 for ln in lines) and len(lines) == 24
    page2 = seen["page2"]
    top = next(i for i, ln in enumerate(page2) if "╭" in ln)
    assert "base" in page2[top + 1] and "int4+spec" in page2[top + 1]
    assert "─ A ─" in page2[top] and "─ D ─" in page2[top]
    assert any("60/60" in ln for ln in page2) and "page 2/2 [ back" in "\n".join(page2)
    text = "\n".join(seen["compare"])
    assert "A base  B int4  C spec  D int4+spec" in text
    assert all(
        any(ln.strip().startswith(f"{c} {nm}") and " 60 " in ln for ln in seen["compare"])
        for c, nm in zip("ABCD", ("base", "int4", "spec", "int4+spec"), strict=True)
    )
