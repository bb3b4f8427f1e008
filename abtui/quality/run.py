"""Running the quality items against every arm, and storing each output with its score.

Every item goes through the load test's default client (:func:`abtui.client.fast.fast_stream_request`,
which retries once a kept-alive connection the server closed while idle — llama-server closes
them after 5 s, which used to lose quality items sent after a slow arm's turn) with
greedy decoding: ``temperature`` 0, the suite's fixed ``seed``, natural stop (``ignore_eos`` and
``min_tokens`` from the load test's request settings are dropped) and ``max_tokens`` as a cap.
Before the items are built the endpoints are asked how to send them and timed
(:mod:`abtui.quality.sizing`): every item goes on one path (chat messages or a plain prompt,
``quality.api``), the retrieval grid keeps the lengths that fit the context and
``quality.budget_s``, and each item's timeout (the longest silence while it is answered, never
less than the arm's) follows from the measured speed; what will be run and about how long it
will take is said first (message, event, ``meta.quality_plan``). ``quality.mode`` says when: ``separate`` (here, :func:`run_for_session`) after the load test,
each arm with at most ``concurrency`` in flight, the arms at the same time; ``interleaved``
(:mod:`abtui.quality.interleave`) during it. One row per arm × item goes to the session's
``quality`` table: ``score`` 1/0 and ``correct``, or NULL for a request that failed (it is left
out of the pairing); ``detail`` holds the item (suite, cluster, bucket, references), the output
text and the finish reason. Perplexity and logprob agreement are measured after the load test in
both modes (:func:`finish`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from abtui.client import records
from abtui.client.fast import FastClient, fast_stream_request
from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.client.target import Target, build_body
from abtui.errors import AbtuiError
from abtui.quality import builtin, logprobs, sizing, userfile
from abtui.quality.items import QualityItem
from abtui.quality.ppl import measure
from abtui.quality.scorers import score

DROP_PARAMS = ("ignore_eos", "min_tokens", "temperature", "top_p", "top_k", "seed")
MAX_OUTPUT_CHARS = 2000
DEFAULT_CONTEXT = 8192  # when an endpoint does not list its max_model_len


def greedy_target(t: Target, seed: int) -> Target:
    """``t`` with greedy decoding, a fixed seed and a natural stop."""
    params = {k: v for k, v in t.params.items() if k not in DROP_PARAMS}
    params.update(temperature=0.0, seed=seed)
    return dataclasses.replace(t, params=params)


def as_request(k: int, qi: QualityItem, cap: int) -> Item:
    return Item(
        index=k,
        id=qi.id,
        prompt=qi.prompt,
        messages=[dict(m) for m in qi.messages] if qi.messages is not None else None,
        max_tokens=qi.max_tokens or cap,
        n_input=qi.context_tokens,
        expected=qi.references[0],
        suite=qi.suite,
    )


def row(arm: int, k: int, qi: QualityItem, rec: RequestRecord) -> dict:
    """The quality table's row of one answered (or failed) request."""
    ok = rec.status == records.OK
    text = rec.text or ""
    right = score(qi, text) if ok else None
    detail = qi.detail_doc() | {
        "output": text[:MAX_OUTPUT_CHARS],
        "finish_reason": rec.finish_reason,
        "status": rec.status,
        "error": None if ok else f"{rec.error_class}: {rec.error_message}",
    }
    return {
        "arm": arm,
        "item": k,
        "run": 0,
        "score": None if right is None else float(right),
        "correct": right,
        "detail": detail,
    }


def client_for(target: Target, concurrency: int):
    """The HTTP client of one arm's quality requests (the load test's; it pools connections as
    the ``concurrency`` in flight need them)."""
    return FastClient()


def item_target(t: Target, qi: QualityItem) -> Target:
    """``t`` as item ``qi`` is sent: its path (chat or completion) and timeout, when set."""
    changes: dict = {}
    if qi.api and qi.api != t.api:
        changes["api"] = qi.api
    if qi.timeout_s and qi.timeout_s > t.read_timeout_s:
        changes["read_timeout_s"] = qi.timeout_s
        changes["timeout_s"] = max(t.timeout_s, 2 * qi.timeout_s)
    return dataclasses.replace(t, **changes) if changes else t


async def send(
    client, target: Target, arm: int, k: int, qi: QualityItem, cap: int
) -> RequestRecord:
    """Send item ``k`` to one arm; its record (``CancelledError`` propagates, rec marked)."""
    req = as_request(k, qi, cap)
    rec = RequestRecord(arm=arm, item=k)
    t = item_target(target, qi)
    extra = {"stop": list(qi.stop)} if qi.stop and t.api == "completions" else None
    await fast_stream_request(client, t, req, build_body(t, req, extra), rec)
    return rec


async def _arm(
    arm: int,
    target: Target,
    items: list[QualityItem],
    cap: int,
    concurrency: int,
    stop: Callable[[], bool],
) -> list[dict]:
    sem = asyncio.Semaphore(max(1, concurrency))
    out: list[dict | None] = [None] * len(items)
    async with client_for(target, concurrency) as client:

        async def one(k: int, qi: QualityItem) -> None:
            async with sem:
                if stop():
                    return
                out[k] = row(arm, k, qi, await send(client, target, arm, k, qi, cap))

        await asyncio.gather(*(one(k, qi) for k, qi in enumerate(items)))
    return [r for r in out if r is not None]


def run_items(
    items: list[QualityItem],
    targets: list[Target],
    *,
    max_tokens: int,
    seed: int,
    concurrency: int = 4,
    stop: Callable[[], bool] = lambda: False,
) -> list[dict]:
    """Send every item to every target (greedy); the quality rows, arm by arm."""
    greedy = [greedy_target(t, seed) for t in targets]

    async def main() -> list[list[dict]]:
        return await asyncio.gather(
            *(_arm(a, t, items, max_tokens, concurrency, stop) for a, t in enumerate(greedy))
        )

    return [r for rows in asyncio.run(main()) for r in rows]


def build_items(qspec, prof: sizing.Profile) -> tuple[list[QualityItem], sizing.Plan]:
    """The spec's quality items on the path and with the timeouts ``prof`` found: built-in
    suites (lengths that fit the smallest arm context and the budget), then the user file's."""
    items: list[QualityItem] = []
    ctx = prof.context or DEFAULT_CONTEXT
    suites = list(qspec.suites)
    pl = sizing.plan(
        prof,
        suites,
        per_cell=qspec.per_cell,
        max_tokens=qspec.max_tokens,
        max_length=qspec.max_length,
        budget_s=qspec.budget_s,
        context=ctx,
    )
    if suites:
        items += builtin.build(
            suites,
            seed=qspec.seed,
            max_context=ctx,
            max_tokens=qspec.max_tokens,
            per_cell=qspec.per_cell,
            max_length=qspec.max_length,
            tokens_per_word=prof.tokens_per_word,
            lengths=pl.lengths,
        )
    if qspec.file:
        items += userfile.load(qspec.file)
    items = sizing.with_timeouts(
        items, prof, api=prof.api, max_tokens=qspec.max_tokens, concurrency=qspec.concurrency
    )
    return items, pl


def session_items(spec, targets: list[Target], writer, obs) -> list[QualityItem]:
    """The session's quality items (none when the suites cannot be built: said, and the load
    test still counts)."""
    q = spec.quality
    obs.message("quality: asking the endpoints how to send the items, and timing them")
    try:
        prof = sizing.probe(targets, [a.name for a in spec.arms], q.api, seed=q.seed)
        items, pl = build_items(q, prof)
    except AbtuiError as e:  # e.g. a context too small for a haystack
        writer.event("quality", f"quality suites not run: {e}")
        obs.message(f"quality suites not run: {e}")
        return []
    if items:
        suites = ", ".join(sorted({i.suite for i in items}))
        text = sizing.message(prof, pl, len(items), q.budget_s, q.concurrency)
        obs.message(f"quality ({q.mode}, {suites}): {text}")
        writer.event("quality", text)
        writer.write_meta(quality_plan=prof.to_dict() | pl.to_dict())
    return items


def finish(
    spec,
    targets: list[Target],
    writer,
    items: list[QualityItem],
    rows: list[dict],
    stop: Callable[[], bool],
    **meta,
) -> None:
    """After the items (``rows`` already stored): the mode in meta, perplexity and logprob
    agreement (unless stopped), and one event."""
    q = spec.quality
    writer.write_meta(quality_mode=q.mode, **meta)
    if not stop():
        writer.write_meta(
            quality_ppl={
                a.name: measure(t).to_dict() for a, t in zip(spec.arms, targets, strict=True)
            }
        )
    if not stop():
        writer.write_meta(
            quality_logprobs={
                a.name: logprobs.collect(t, logprobs.prompts(), q.seed)
                for a, t in zip(spec.arms, targets, strict=True)
            }
        )
    failed = sum(1 for r in rows if r["correct"] is None)
    writer.event(
        "quality",
        f"{q.mode}: {len(items)} items per arm, {len(rows)} outputs stored, {failed} failed",
    )


def run_for_session(spec, targets: list[Target], writer, obs, stop: Callable[[], bool]) -> int:
    """The quality phase of ``abtui run`` in ``separate`` mode: build, send, store. Returns the
    rows stored."""
    q = spec.quality
    items = session_items(spec, targets, writer, obs)
    if not items:
        return 0
    rows = run_items(
        items, targets, max_tokens=q.max_tokens, seed=q.seed, concurrency=q.concurrency, stop=stop
    )
    writer.write_quality(rows)
    finish(spec, targets, writer, items, rows, stop)
    return len(rows)
