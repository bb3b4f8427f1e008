"""The built-in quality suites against one real model on llama-server: accuracy per suite, task
and length, and the time each item took against the time :mod:`abtui.quality.sizing` expected.

``scripts/quality_calibration.py`` prints it for SmolLM2 and Gemma 3 (docs/methods.md §4 has
the tables); ``tests/engine/test_quality_real.py`` checks SmolLM2's baseline floor at the shortest
length. The items go the way ``abtui run`` sends them: the endpoint is probed and timed first
(path chosen by ``quality.api``, ``auto`` by default), the items are built for the measured
tokenizer and sent one at a time, greedy, through the run's own client and scorers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from abtui.client.fast import FastClient
from abtui.client.target import Target
from abtui.engine.server import LlamaCppServer
from abtui.quality import builtin, sizing
from abtui.quality import run as qrun
from abtui.quality.items import QualityItem


@dataclass
class Cell:
    """One suite × task × length: items, right answers, seconds taken and expected."""

    suite: str
    task: str
    bucket: str
    n: int = 0
    right: int = 0
    failed: int = 0  # requests that did not answer (timeouts, errors)
    seconds: float = 0.0
    expected_s: float = 0.0

    @property
    def accuracy(self) -> float:
        scored = self.n - self.failed
        return self.right / scored if scored else float("nan")


@dataclass
class Calibration:
    model: str
    profile: sizing.Profile
    cells: list[Cell] = field(default_factory=list)
    wrong: list[tuple[str, str, str]] = field(default_factory=list)  # id, reference, output
    wall_s: float = 0.0
    probe_s: float = 0.0

    def accuracy(self, suite: str, bucket: str | None = None) -> float:
        cs = [c for c in self.cells if c.suite == suite and (bucket is None or c.bucket == bucket)]
        scored = sum(c.n - c.failed for c in cs)
        return sum(c.right for c in cs) / scored if scored else float("nan")


def _task(it: QualityItem) -> str:
    return it.suite if it.suite != "exact" else it.id.split("-")[0]


async def _send_all(
    target: Target, items: list[QualityItem], max_tokens: int, seed: int, prof: sizing.Profile
) -> list[tuple[QualityItem, dict, float, float]]:
    greedy = qrun.greedy_target(target, seed)
    out = []
    async with FastClient() as client:
        for k, it in enumerate(items):
            t0 = time.perf_counter()
            rec = await qrun.send(client, greedy, 0, k, it, max_tokens)
            took = time.perf_counter() - t0
            est = sizing.item_s(prof, it.context_tokens or 0, max_tokens) or 0.0
            out.append((it, qrun.row(0, k, it, rec), took, est))
    return out


def calibrate(
    model: Path,
    *,
    name: str,
    lengths: list[int],
    suites: list[str],
    per_cell: int,
    ctx: int,
    threads: int = 1,
    api: str = "auto",
    seed: int = 0,
    max_tokens: int = 32,
    extra_args: tuple[str, ...] = (),
    log: Callable[[str], None] = lambda s: None,
) -> Calibration:
    """Serve ``model`` (one slot of ``ctx`` tokens) and run ``suites`` at ``lengths``."""
    with LlamaCppServer(model, name=name, ctx=ctx, threads=threads, extra_args=extra_args) as srv:
        target = Target(base_url=srv.url, model=name)
        t0 = time.perf_counter()
        prof = sizing.probe([target], [name], api, seed=seed)
        probe_s = time.perf_counter() - t0
        c = prof.cost
        log(
            f"{name}: {prof.api} ({prof.api_why}); context {prof.context}; "
            f"tokens/word {prof.tokens_per_word and round(prof.tokens_per_word, 3)}; "
            + (
                f"t(n) = {c.a:.3f} + {c.b * 1e3:.3f}e-3 n + {c.c * 1e6:.4f}e-6 n² s, "
                f"{c.decode * 1e3:.0f} ms/token"
                if c
                else "not timed: " + "; ".join(prof.notes)
            )
            + f" (probe {probe_s:.0f} s)"
        )
        fit = builtin.lengths_for(ctx, max_tokens, None, prof.tokens_per_word)
        run_lengths = [n for n in lengths if n in fit]
        items = builtin.build(
            suites,
            seed=seed,
            max_context=ctx,
            max_tokens=max_tokens,
            per_cell=per_cell,
            tokens_per_word=prof.tokens_per_word,
            lengths=run_lengths or None,
        )
        items = sizing.with_timeouts(
            items, prof, api=prof.api, max_tokens=max_tokens, concurrency=1
        )
        log(f"{name}: {len(items)} items, lengths {run_lengths}")
        t1 = time.perf_counter()
        done = asyncio.run(_send_all(target, items, max_tokens, seed, prof))
        cal = Calibration(name, prof, wall_s=time.perf_counter() - t1, probe_s=probe_s)
    cells: dict[tuple[str, str, str], Cell] = {}
    for it, row, took, est in done:
        key = (it.suite, _task(it), it.bucket)
        cell = cells.setdefault(key, Cell(*key))
        cell.n += 1
        cell.seconds += took
        cell.expected_s += est
        if row["correct"] is None:
            cell.failed += 1
        elif row["correct"]:
            cell.right += 1
        else:
            cal.wrong.append((it.id, it.references[0], row["detail"]["output"]))
    order = {s: i for i, s in enumerate(builtin.SUITES)}
    cal.cells = sorted(
        cells.values(),
        key=lambda c: (
            order.get(c.suite, 9),
            c.task,
            int(c.bucket[:-1]) if c.bucket[:-1].isdigit() else 0,
        ),
    )
    return cal


def table(cals: list[Calibration]) -> str:
    """A Markdown table: accuracy (right / scored) per model, suite, task and length, with the
    seconds per item taken and expected."""
    lines = [
        "| model | suite | task | length | right | accuracy | s/item | expected s/item |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for cal in cals:
        for c in cal.cells:
            scored = c.n - c.failed
            fail = f" ({c.failed} failed)" if c.failed else ""
            lines.append(
                f"| {cal.model} | {c.suite} | {c.task} | {c.bucket} | "
                f"{c.right}/{scored}{fail} | {100 * c.accuracy:.0f} % | "
                f"{c.seconds / c.n:.1f} | {c.expected_s / c.n:.1f} |"
            )
    return "\n".join(lines)
