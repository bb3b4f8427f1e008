"""The batching engine's offline driver: :func:`simulate` a list of requests, no HTTP.

The same step code as the live server (:meth:`BatchEngine._plan_step` and ``_end_step``), driven
by a loop that jumps the engine clock from step end to step end (and over idle gaps to the next
arrival). Without speculative decoding the per-request bookkeeping is skipped: a heap of
finishing steps replaces it, so a step costs O(changes) (``tests/unit/test_sim_physics.py`` checks
both paths agree). ``scripts/bench_sim.py`` times 10,000 requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from abtui.sim.batching import BatchEngine, _Seq
from abtui.sim.engine_stats import RequestTiming


def simulate(
    engine: BatchEngine,
    requests: Iterable[tuple[float, int, int]],
    *,
    per_seq: bool | None = None,
) -> list[RequestTiming]:
    """Serve ``(arrival_s, prompt_tokens, max_tokens)`` requests on ``engine`` at full speed.

    Arrivals need not be sorted; the timings come back in the order of ``requests``.
    Requests that could never be served (see
    :meth:`BatchEngine.check`) get ``admitted = -1``. ``per_seq`` forces the live path's
    per-request bookkeeping (for checking both paths agree); default: only with speculative
    decoding or ``kv_policy="grow"``.
    """
    if engine._loop is not None:
        raise RuntimeError("simulate() on an engine attached to a live loop")
    # (the heap path cannot follow preemptions: kv_policy "grow" walks every request)
    engine._per_seq = engine._grow or (bool(engine._k) if per_seq is None else per_seq)
    reqs = list(requests)
    out = [RequestTiming(arrival=float(a), prompt_tokens=p) for a, p, _ in reqs]
    pending: deque[_Seq] = deque()
    for i in sorted(range(len(reqs)), key=lambda i: reqs[i][0]):  # stable: ties keep order
        arrival, prompt, max_tokens = reqs[i]
        if engine.check(prompt, max_tokens) is None:
            seq = engine._new_seq(prompt, max_tokens, float(arrival))
            seq.timing = out[i]
            pending.append(seq)
    engine.now = engine.gpu.t0 = pending[0].arrival if pending else 0.0
    waiting = engine._waiting
    while pending or waiting or engine._prefilling or engine._decoding:
        while pending and pending[0].arrival <= engine.now:
            waiting.append(pending.popleft())
        d = engine._plan_step()
        if d is None:  # idle: jump to the next arrival
            engine.now = pending[0].arrival
            continue
        engine.now += d
        engine._end_step()
    return out
