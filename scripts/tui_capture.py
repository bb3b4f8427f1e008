"""Text captures of the TUI from a real run: ``abtui demo`` (simulated GPUs on 127.0.0.1,
time-scaled) driven under Textual's test harness; prints the live panes as the run ended and
the verdict screen, as plain text (what the README and docs/tui.md show); ``--compare`` also
the compare view (``c``: both arms' CDFs overlaid).

    .venv/bin/python scripts/tui_capture.py --size 80x24 --requests 1100 --rate 13 --compare
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

from abtui.demo import DemoOptions, run_demo
from abtui.runner.session import run_session
from abtui.tui.app import AbtuiApp
from abtui.tui.screens.verdict import VerdictScreen


def screen_text(app) -> str:
    """The current screen as plain text, one line per terminal row."""
    return "\n".join(s.text.rstrip() for s in app.screen._compositor.render_strips())


async def capture(
    opts: DemoOptions, size: tuple[int, int], compare: bool = False
) -> tuple[str, str, str]:
    def job(obs, stop):
        return run_demo(
            opts, lambda spec, items: run_session(spec, "", obs, items=items, stop_request=stop)
        )

    app = AbtuiApp(job=job)
    async with app.run_test(size=size) as pilot:
        t0 = time.monotonic()
        while not isinstance(app.screen, VerdictScreen):
            if app.error is not None or time.monotonic() - t0 > 600:
                raise SystemExit(f"no verdict: {app.error}")
            await pilot.pause(0.3)
        await pilot.pause(0.5)
        verdict = screen_text(app)
        await pilot.press("l")
        await pilot.pause(0.5)
        live = screen_text(app)
        view = ""
        if compare:
            await pilot.press("c")
            await pilot.pause(0.5)
            view = screen_text(app)
        await pilot.press("q")
    return live, verdict, view


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="100x34", help="COLSxROWS")
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--time-scale", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--no-quality", action="store_true", help="skip the demo's quality suites")
    ap.add_argument("--compare", action="store_true", help="also the compare view (c)")
    a = ap.parse_args()
    cols, rows = (int(x) for x in a.size.lower().split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        opts = DemoOptions(
            requests=a.requests,
            rate=a.rate,
            time_scale=a.time_scale,
            seed=a.seed,
            name="demo",
            sessions_dir=tmp,
            quality=not a.no_quality,
        )
        live, verdict, view = asyncio.run(capture(opts, (cols, rows), a.compare))
    print(live)
    print()
    print(verdict)
    if view:
        print()
        print(view)


if __name__ == "__main__":
    main()
