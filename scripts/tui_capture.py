"""Text captures of the TUI from a real run: ``abtui demo`` (simulated GPUs on 127.0.0.1,
time-scaled) driven under Textual's test harness; prints the live panes as the run ended and
the verdict screen, as plain text (what README.md and docs/guide.md show).

    .venv/bin/python scripts/tui_capture.py --size 100x34 --requests 60 --time-scale 2
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


async def capture(opts: DemoOptions, size: tuple[int, int]) -> tuple[str, str]:
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
        await pilot.press("q")
    return live, verdict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="100x34", help="COLSxROWS")
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--time-scale", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    cols, rows = (int(x) for x in a.size.lower().split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        opts = DemoOptions(requests=a.requests, rate=a.rate, time_scale=a.time_scale, seed=a.seed,
                           name="demo", sessions_dir=tmp)  # fmt: skip
        live, verdict = asyncio.run(capture(opts, (cols, rows)))
    print(live)
    print()
    print(verdict)


if __name__ == "__main__":
    main()
