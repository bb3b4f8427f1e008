"""Session files with fixed contents for the TUI's start-screen and verdict tests: real store
writes (``SessionWriter``) of seeded request records, a real verdict computed and stored."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np

from abtui.client.records import OK, RequestRecord
from abtui.store.writer import SessionWriter

ARMS = [
    {
        "arm": 0,
        "name": "bf16",
        "role": "baseline",
        "url": "http://127.0.0.1:8001/v1",
        "model": "llama-3-8b-bf16",
        "api": "completions",
        "config": {},
    },
    {
        "arm": 1,
        "name": "fp8",
        "role": "candidate",
        "url": "http://127.0.0.1:8002/v1",
        "model": "llama-3-8b-fp8",
        "api": "completions",
        "config": {},
    },
]
# 60 requests per arm cannot call a P99: with the default guardrails (P99 among them) no such
# session is GO. These sessions are about the screens, so their policy guards the medians only.
SPEC = {"slo": {"ttft": 0.2, "tpot": 0.01}, "policy": {"guardrails": ["ttft.p50", "tpot.p50"]}}


def records(seed: int, n: int) -> list[RequestRecord]:
    """``n`` requests per arm; the candidate has ~40% lower TTFT and TPOT."""
    rng = np.random.default_rng(seed)
    out = []
    for arm, scale in ((0, 1.0), (1, 0.6)):
        for k in range(n):
            t0 = 10**12 + k * 50_000_000
            ttft = float(rng.lognormal(np.log(0.05 * scale), 0.3))
            tpot = float(rng.lognormal(np.log(0.012 * scale), 0.1))
            n_out = int(rng.integers(20, 200))
            first = t0 + 200_000 + int(ttft * 1e9)
            last = first + int(tpot * (n_out - 1) * 1e9)
            out.append(
                RequestRecord(
                    arm=arm,
                    item=k,
                    scheduled_ns=t0,
                    dispatched_ns=t0 + 200_000,
                    chunk_ns=[first, last],
                    chunk_tokens=[1, n_out - 1],
                    done_ns=last,
                    status=OK,
                    n_output=n_out,
                    n_input=512,
                )
            )
    return out


def quality_rows() -> list[dict]:
    """Scored quality items of both arms, as ``abtui.quality.run`` stores them (with
    :data:`QUALITY_SPEC`): ``niah`` in five length buckets passes its 15 pp margin overall,
    though the candidate loses 9 of 24 answers at 16k (a warning); ``exact``, with no buckets,
    drops 10 pp and fails its 1 pp gate; one item failed in the candidate (left out)."""
    out, k = [], 0
    for bucket in ("1k", "2k", "4k", "8k", "16k", None):
        suite = "exact" if bucket is None else "niah"
        for j in range(40 if bucket is None else 24):
            if bucket is None:
                a = j % 5 != 4
                b = a and j % 10 != 1
            else:
                a = j % 6 != 5
                b = (a and j >= 10) if bucket == "16k" else (a or j % 12 == 5)
            detail = {"suite": suite, "bucket": bucket, "cluster": f"{suite}-{bucket}-{j // 4}"}
            for arm, ok in ((0, a), (1, None if k == 3 else b)):
                out.append(
                    {
                        "arm": arm,
                        "item": k,
                        "score": None if ok is None else float(ok),
                        "correct": ok,
                        "detail": detail,
                    }
                )
            k += 1
    return out


QUALITY_SPEC = {**SPEC, "quality": {"suites": ["niah", "exact"], "margins": {"niah": 0.15}}}


def write_session(
    folder: Path,
    name: str,
    *,
    seed: int = 1,
    n: int = 60,
    status: str = "complete",
    verdict: bool = True,
    mtime: float | None = None,
    quality: bool = False,
    meta: dict | None = None,
) -> Path:
    """A session file ``folder/name.duckdb`` closed with ``status`` ("running": as a killed
    writer leaves it), its verdict computed and stored when ``verdict``; with ``quality``, the
    scored items of :func:`quality_rows` (quality mode ``separate``); ``meta``: more meta keys."""
    path = folder / f"{name}.duckdb"
    w = SessionWriter(path)
    w.write_meta(
        session_name=name,
        spec=QUALITY_SPEC if quality else SPEC,
        created=f"2026-01-0{1 + seed % 9}T10:00:00+00:00",
        load="poisson 20 req/s",
    )
    w.write_arms(ARMS)
    w.add_records(records(seed, n))
    if quality:
        w.write_quality(quality_rows())
        w.write_meta(quality_mode="separate")
    if meta:
        w.write_meta(**meta)  # e.g. a degraded mark, as abtui.runner.session writes it
    w.close(status=status)
    if verdict and status != "running":
        from abtui.verdict.saved import session_verdict

        session_verdict(path, store=True)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def session_folder(folder: Path) -> dict[str, Path]:
    """Four sessions (finished, interrupted, killed, a corrupt file), oldest to newest."""
    folder.mkdir(parents=True, exist_ok=True)
    got = {
        "finished": write_session(folder, "ab-finished", seed=1, mtime=1_700_000_000),
        "interrupted": write_session(
            folder, "ab-stopped", seed=2, n=30, status="interrupted", mtime=1_700_000_100
        ),
        "killed": write_session(
            folder, "ab-killed", seed=3, n=20, status="running", mtime=1_700_000_200
        ),
    }
    bad = folder / "garbage.duckdb"
    bad.write_bytes(b"not a database at all " * 200)
    os.utime(bad, (1_700_000_300, 1_700_000_300))
    got["corrupt"] = bad
    return got


async def drawn(pilot, screen, timeout_s: float = 30.0) -> None:
    """Wait until an OpenScreen's panes show its playhead's time. They are redrawn after the
    screen's next refresh (OpenScreen._changed), which a loaded box runs late: read after a fixed
    pause, the header could still show the time before the key (reproduced with TEXTUAL_FPS=2)."""
    t0 = time.monotonic()
    while screen._pending or screen.last.elapsed_s != screen.playhead.t_s:
        assert time.monotonic() - t0 < timeout_s, "the open screen never drew its playhead's time"
        await pilot.pause(0.05)


def shows(text: str, row: str, what: str) -> bool:
    """Whether the help ``text`` has the row of key ``row`` described as ``what`` (the key and
    its description's start on one line: another screen's word elsewhere does not count)."""
    end = r"[ \t]*$" if len(what) <= 24 else ""  # a short one whole: 'quit' is not 'quit (…'
    return re.search(rf"{re.escape(row)}\s+{re.escape(what[:24])}{end}", text, re.M) is not None


def ablation_verdict_data(verdict, names: list[str], folder: Path):
    """The verdict screen's data for an in-memory factorial ``verdict`` (no session file): what
    the ablation view tests push a ``VerdictScreen`` with."""
    from abtui.tui.screens.verdict import VerdictData
    from abtui.verdict.saved import SessionVerdict

    sv = SessionVerdict(
        verdict, Path(folder / "x.duckdb"), [{"name": n} for n in names], {}, {}, False, None, True
    )
    return VerdictData(
        sv, {"status": "complete", "summaries": {}, "config_diff": [], "slo": {}}, []
    )


def screen_text(app) -> str:
    """What the app's screen would write to the terminal now, as text: every segment of a full
    redraw of its compositor but the cursor and screen commands (Textual's own), lines joined.
    Under ``run_test`` nothing reaches a terminal; this is what would."""
    update = app.screen._compositor.render_update(full=True)
    lines = []
    for line in update.strips:
        lines.append("".join(seg.text for strip in line for seg in strip if not seg.control))
    return "\n".join(lines)


def compare_view_lines(path: Path, size: tuple[int, int]) -> list[str]:
    """The compare view (``c``) of the stored session at ``path``, opened as `abtui open`
    opens it, at ``size``: one string per terminal row."""
    import asyncio

    from abtui.runner.live_replay import Replay
    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.open import OpenScreen

    async def drive() -> list[str]:
        app = AbtuiApp()
        async with app.run_test(size=size) as pilot:
            await app.push_screen(OpenScreen(Replay(path), "stored session, complete"))
            for _ in range(3):
                await pilot.pause()
            await pilot.press("c")
            for _ in range(3):
                await pilot.pause()
            text = [s.text for s in app.screen._compositor.render_strips()]
            await pilot.press("q")
        return text

    return asyncio.run(drive())
