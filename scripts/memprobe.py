#!/usr/bin/env python3
"""Run ``abtui`` with a memory probe in its main process: where does its memory go over time?

    python scripts/memprobe.py --out probe.jsonl --every 30 -- run --baseline ... --headless

Every ``--every`` seconds a background thread in the main process writes one JSON line:
the process's RSS and its peak so far (``hwm_mb``), where the main thread is (``at``: its
innermost frame in abtui, which tells the phases apart: measuring, reading back, the verdict),
what ``tracemalloc`` traces (Python objects and numpy buffers) in total and its top allocation
sites by growth since the first sample, glibc's heap (``mallinfo2``: in use vs free-but-kept),
and DuckDB's own view of the session file's database (``duckdb_memory()``, ``pragma
database_size``), read through a cursor of the session writer's connection; and one more line
when the run ends (``"final": true``: its ``hwm_mb`` is the whole run's peak, the summary and
verdict after the last sample included).
``scripts/soak.py --probe FILE`` runs the soak's main process through this. ``--tui``: the
run with the live TUI attached (``abtui run``'s own TUI path, the app in Textual's headless
driver at 160x48: the same rendering as on a terminal, without writing to one), quitting
once the verdict is shown. Nothing of it is
loaded by ``abtui`` itself: off, it costs nothing. Linux only (/proc, glibc).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import threading
import time
import tracemalloc
from pathlib import Path

TOP = 15
TUI_UPDATES = [0]  # live-screen updates rendered (--tui), reported in every sample


def rss_mb(field: str = "VmRSS:") -> float:
    """The process's resident memory now (``VmHWM:``: its peak so far), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return float("nan")


def main_thread_at() -> str:
    """Where the main thread is: its innermost frame in abtui (``file:line:function``)."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        path = frame.f_code.co_filename
        if "/abtui/" in path:
            return f"{path.split('/abtui/')[-1]}:{frame.f_lineno}:{frame.f_code.co_name}"
        frame = frame.f_back
    return ""


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def malloc_mb() -> dict:
    """glibc heap: bytes in use, free but kept (fragmentation), and mmapped chunks."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        m = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    return {
        "in_use": m.uordblks / 2**20,
        "free_kept": m.fordblks / 2**20,
        "mmapped": m.hblkhd / 2**20,
        "arena": m.arena / 2**20,
    }


class Probe:
    def __init__(self, out: Path, every_s: float) -> None:
        self.out, self.every_s = out, every_s
        self.writer = None
        self.cur = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.base = None

    def attach(self, writer) -> None:
        """Called in the main thread right after the session writer opened its file."""
        with self.lock:
            self.writer = writer
            self.cur = writer.con.cursor()

    def detach(self) -> None:
        with self.lock:
            if self.cur is not None:
                try:
                    self.cur.close()
                except Exception:  # noqa: BLE001 (closed with its connection)
                    pass
            self.cur, self.writer = None, None

    def _duckdb(self) -> dict:
        with self.lock:
            if self.cur is None:
                return {}
            try:
                mem = self.cur.execute(
                    "SELECT tag, memory_usage_bytes, temporary_storage_bytes FROM duckdb_memory()"
                ).fetchall()
                size = self.cur.execute("PRAGMA database_size").fetchone()
                cols = [d[0] for d in self.cur.description]
            except Exception as e:  # noqa: BLE001 (a probe never stops the run)
                return {"error": repr(e)}
            n = self.writer.n_written if self.writer is not None else None
        return {
            "n_written": n,
            "memory_mb": {t: round(b / 2**20, 2) for t, b, _ in mem if b},
            "memory_total_mb": round(sum(b for _, b, _ in mem) / 2**20, 2),
            "database_size": dict(zip(cols, [str(v) for v in size], strict=True)),
        }

    def sample(self) -> dict:
        row = {
            "t": round(time.monotonic() - self.t0, 1),
            "rss_mb": round(rss_mb(), 1),
            "hwm_mb": round(rss_mb("VmHWM:"), 1),
            "at": main_thread_at(),
            "malloc_mb": {k: round(v, 2) for k, v in malloc_mb().items()},
            "duckdb": self._duckdb(),
            "tui_updates": TUI_UPDATES[0],
        }
        if not tracemalloc.is_tracing():
            return row
        snap = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        row["traced_mb"] = round(tracemalloc.get_traced_memory()[0] / 2**20, 2)
        if self.base is None:
            self.base = snap
        else:
            diff = snap.compare_to(self.base, "lineno")
            row["top_growth"] = [
                {
                    "site": str(d.traceback[0]),
                    "size_kb": round(d.size / 1024, 1),
                    "diff_kb": round(d.size_diff / 1024, 1),
                    "count_diff": d.count_diff,
                }
                for d in sorted(diff, key=lambda d: -d.size_diff)[:TOP]
            ]
        return row

    def loop(self) -> None:
        with self.out.open("w") as f:
            while not self.stop.wait(self.every_s):
                f.write(json.dumps(self.sample()) + "\n")
                f.flush()
            # one more at the end: its hwm_mb is the whole run's peak, whenever it fell
            f.write(json.dumps(dict(self.sample(), final=True)) + "\n")


def run_in_headless_tui(job):
    """``abtui.cli.run.run_in_tui`` without a terminal: Textual's headless driver."""
    import asyncio

    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.live import LiveScreen
    from abtui.tui.screens.verdict import VerdictScreen

    show = LiveScreen.show_progress

    def counted(self, *a, **kw):
        TUI_UPDATES[0] += 1
        return show(self, *a, **kw)

    LiveScreen.show_progress = counted

    async def drive() -> AbtuiApp:
        app = AbtuiApp(job=job)
        async with app.run_test(size=(160, 48)) as pilot:
            while app.error is None and (app.running or not isinstance(app.screen, VerdictScreen)):
                await pilot.pause(0.5)
            await pilot.press("q")
        return app

    app = asyncio.run(drive())
    if app.error is not None:
        raise app.error
    return app.result, app.verdict.sv if app.verdict is not None else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--every", type=float, default=30.0)
    ap.add_argument("--frames", type=int, default=1, help="tracemalloc frames per trace")
    ap.add_argument(
        "--no-trace",
        action="store_true",
        help="no tracemalloc (it slows the process and adds its own memory): "
        "RSS, glibc heap and DuckDB only",
    )
    ap.add_argument("--tui", action="store_true", help="the run with the live TUI attached")
    ap.add_argument("argv", nargs=argparse.REMAINDER, help="-- then abtui's arguments")
    args = ap.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv

    from abtui.cli import RUNS_A_SESSION
    from abtui.hardware.memory import quiet_duckdb_allocator

    if argv[:1] and argv[0] in RUNS_A_SESSION:  # as abtui.cli.main does, before DuckDB loads
        quiet_duckdb_allocator()
    if not args.no_trace:
        tracemalloc.start(args.frames)
    from abtui import cli
    from abtui.cli import run as cli_run
    from abtui.store import writer as writer_mod

    probe = Probe(args.out, args.every)
    init, close = writer_mod.SessionWriter.__init__, writer_mod.SessionWriter.close

    def patched_init(self, *a, **kw):
        init(self, *a, **kw)
        probe.attach(self)

    def patched_close(self, *a, **kw):
        probe.detach()
        return close(self, *a, **kw)

    writer_mod.SessionWriter.__init__ = patched_init
    writer_mod.SessionWriter.close = patched_close
    if args.tui:
        cli_run.use_tui = lambda a: True
        cli_run.run_in_tui = run_in_headless_tui
    t = threading.Thread(target=probe.loop, name="memprobe", daemon=True)
    t.start()
    try:
        return cli.main(argv)
    finally:
        probe.stop.set()
        t.join(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
