"""A live update repaints the panes without laying the whole screen out again when no widget
changes height (a relayout of the live screen was most of the TUI's CPU per update, taken from
the load generators on a small machine: scripts/bench_tui.py --relayout), and still lays out
when a widget's height does change."""

from __future__ import annotations

import asyncio

from test_tui_snapshots import fixed_screen
from textual.widget import Widget

from abtui.tui.app import AbtuiApp


def test_same_shaped_updates_do_not_relayout(monkeypatch):
    layouts: list[str] = []
    refresh = Widget.refresh

    def counting(self, *regions, layout: bool = False, **kw):
        if layout:
            layouts.append(f"{type(self).__name__}#{self.id}.{'.'.join(self.classes)}")
        return refresh(self, *regions, layout=layout, **kw)

    async def drive():
        app = AbtuiApp()
        async with app.run_test(size=(160, 48)) as pilot:
            screen = fixed_screen()
            await app.push_screen(screen)
            for _ in range(4):
                await pilot.pause()
            msg = screen.last
            msg.elapsed_s = 9.5
            screen.show_progress(msg)  # the first update after mount measures every widget
            await pilot.pause()
            monkeypatch.setattr(Widget, "refresh", counting)
            for k in range(5):  # the same figures, a new elapsed time: one header line changes
                msg.elapsed_s = 10.0 + k
                screen.show_progress(msg)
                await pilot.pause()
            steady = list(layouts)
            layouts.clear()
            note = screen.query_one("#delta")
            from abtui.tui.widgets.charts import set_content

            set_content(note, "one line\ntwo lines\nthree lines\nfour lines")  # taller
            await pilot.pause()
            grew = list(layouts)
            monkeypatch.setattr(Widget, "refresh", refresh)
            await pilot.press("q")
        return steady, grew

    steady, grew = asyncio.run(drive())
    assert steady == [], steady
    assert "Chart#delta." in grew, grew
