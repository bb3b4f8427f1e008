"""The quality phase of a run ``--until-decided`` (``quality.mode = "separate"``): items are sent
in rounds until the anytime-valid gate (:mod:`abtui.quality.seqgate`) is decided or the budget
is spent.

Round ``r`` is cell ``r`` of every built-in suite: haystack ``r`` of each length at every depth
(niah), its questions (keys), the ``r``-th group of exact items — new items with their own
seeds, so each round is a fresh draw per bucket; a user file's items all go in the first round.
A bucket already shown within the margin gets no more items. After each round the rows are
stored and the gate looks: it stops on a failed suite (the pair is NO-GO), on every suite
passed, on ``quality.budget_s`` seconds, after :data:`MAX_ROUNDS` rounds, or on a stop request.
The first ``quality.per_cell`` rounds are the fixed design's items, on the same lengths.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from abtui.client.stream import Target
from abtui.errors import AbtuiError
from abtui.quality import builtin, run, sizing, userfile
from abtui.quality.gates import PASS, pp
from abtui.quality.items import QualityItem
from abtui.quality.seqgate import Look, SequentialGate, SequentialQuality, sequential_gate

MAX_ROUNDS = 200
SAY_EVERY_S = 5.0  # a round's line on the console at most this often (every one in the events)


def round_items(q, prof: sizing.Profile, lengths, r: int) -> list[QualityItem]:
    """The items of round ``r`` (cell ``r`` of each built-in suite; a user file in round 0)."""
    items: list[QualityItem] = []
    if q.suites:
        items += builtin.build(
            list(q.suites),
            seed=q.seed,
            max_context=prof.context or run.DEFAULT_CONTEXT,
            max_tokens=q.max_tokens,
            per_cell=1,
            max_length=q.max_length,
            tokens_per_word=prof.tokens_per_word,
            lengths=lengths,
            start=r,
        )
    if r == 0 and q.file:
        items += userfile.load(q.file)
    return sizing.with_timeouts(
        items, prof, api=prof.api, max_tokens=q.max_tokens, concurrency=q.concurrency
    )


def _line(r: int, gate: SequentialGate) -> str:
    parts = []
    for s in gate.suites:
        worst = min(s.buckets, key=lambda x: x.hi if s.state == "fail" else x.lo)
        where = "" if worst.bucket == "all" else f" {worst.bucket}"
        parts.append(
            f"{s.suite} {s.state} (worst{where} {pp(worst.delta)} [{pp(worst.lo)}, {pp(worst.hi)}])"
        )
    return f"quality until decided, round {r + 1}: " + "; ".join(parts)


def run_until_decided(
    spec, targets: list[Target], writer, obs, stop: Callable[[], bool]
) -> SequentialQuality | None:
    """Send, store and look, round by round (module docstring); the last gate with its looks
    and why it stopped (None when no item could be built)."""
    q = spec.quality
    qspec = {"margin": q.margin, "margins": dict(q.margins)}
    obs.message("quality: asking the endpoints how to send the items, and timing them")
    try:
        prof = sizing.probe(targets, [a.name for a in spec.arms], q.api, seed=q.seed)
        _, pl = run.build_items(q, prof)
    except AbtuiError as e:
        writer.event("quality", f"quality suites not run: {e}")
        obs.message(f"quality suites not run: {e}")
        return None
    t0 = said = time.monotonic()
    rows: list[dict] = []
    sent: list[QualityItem] = []
    looks: list[Look] = []
    gate: SequentialGate | None = None
    reason = "budget"
    line = None  # the last round's line not yet said
    for r in range(MAX_ROUNDS):
        if stop():
            reason = "interrupted"
            break
        passed = {
            (s.suite, b.bucket)
            for s in (gate.suites if gate else ())
            for b in s.buckets
            if b.state == PASS
        }
        items = [
            i for i in round_items(q, prof, pl.lengths, r) if (i.suite, i.bucket) not in passed
        ]
        if not items:
            reason = "items" if r else "none"
            break
        new = run.run_items(
            items,
            targets,
            max_tokens=q.max_tokens,
            seed=q.seed,
            concurrency=q.concurrency,
            stop=stop,
        )
        for x in new:
            x["item"] += len(sent)  # unique over the rounds, in the order sent
            x["detail"]["round"] = r
        sent += items
        writer.write_quality(new)
        rows += new
        gate = sequential_gate(rows, 0, 1, qspec)
        looks.append(Look(r + 1, len(sent), gate.decided))
        line = _line(r, gate)
        writer.event("quality", line)
        if gate.decided or time.monotonic() - said >= SAY_EVERY_S:
            said = time.monotonic()
            obs.message(line)
            line = None
        if gate.decided:
            reason = "decided"
            break
        if time.monotonic() - t0 > q.budget_s:
            break
    if line:  # the last round's, when it was not said
        obs.message(line)
    run.finish(spec, targets, writer, sent, rows, stop)
    return SequentialQuality(
        gate, tuple(looks), len(sent), reason, round(time.monotonic() - t0, 1), q.budget_s
    )
