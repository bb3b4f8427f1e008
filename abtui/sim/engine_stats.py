"""What the batching engine reports about itself: :class:`EngineStats` and :class:`Histogram`.

A snapshot, cheap to take (:meth:`abtui.sim.batching.BatchEngine.stats`), safe to call from the
server's event loop. The ``/metrics`` face renders it in Prometheus text with vLLM's names
(``vllm:num_requests_running`` …) and DCGM-exporter-style GPU gauges; every GPU figure is
*simulated* (derived from the roofline model, not measured).

Times are in the endpoint's clock (what a client measures): with ``--time-scale 20`` a
simulated 2 s prefill shows as 0.1 s, exactly as the client sees it. Power and energy are
physical (simulated watts and joules of the modelled GPU, energy over *simulated* time).

Histogram bucket edges are vLLM's (``vllm/v1/metrics/loggers.py``): the request-latency edges
for queue / prefill / decode / inference / e2e times, the TTFT edges for time to first token,
the per-output-token edges for TPOT.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

# vLLM's bucket upper bounds, seconds (a final +Inf bucket is implied)
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
TTFT_BUCKETS: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
TPOT_BUCKETS: tuple[float, ...] = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)


@dataclass(slots=True)
class Histogram:
    """Bucketed observations: ``counts[i]`` observations ``<= edges[i]`` and above the edge
    before it (not cumulative); ``counts[-1]`` is the +Inf bucket; plus ``sum`` and ``count``."""

    edges: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    sum: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.edges) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.edges, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[int]:
        """Prometheus ``_bucket`` values: observations ``<= edges[i]``, then the +Inf total."""
        out, total = [], 0
        for c in self.counts:
            total += c
            out.append(total)
        return out

    def copy(self) -> Histogram:
        return Histogram(self.edges, list(self.counts), self.sum, self.count)


def _hist(edges: tuple[float, ...]):
    return field(default_factory=lambda: Histogram(edges))


@dataclass(slots=True)
class EngineStats:
    """A snapshot of the batching engine (see the module docstring for units)."""

    # scheduler gauges
    running: int = 0  # requests in the running batch (prefilling or decoding)
    waiting: int = 0  # requests queued for admission (FCFS)
    kv_usage: float = 0.0  # fraction of KV-cache tokens reserved, 0..1
    kv_capacity_tokens: int = 0  # KV-cache size in tokens (per replica, all TP ranks together)
    # counters since start
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    requests_finished_total: int = 0  # requests that generated all their tokens
    requests_cancelled_total: int = 0  # requests whose client went away first
    preemptions_total: int = 0  # requests preempted (kv_policy "grow"; "reserve" never does)
    steps_total: int = 0  # engine iterations (forward passes) run
    spec_drafts_total: int = 0  # speculative verify passes (one per decoding request per step)
    spec_draft_tokens_total: int = 0  # draft tokens proposed
    spec_accepted_tokens_total: int = 0  # draft tokens accepted
    prefix_caching: bool = False  # the engine models a prefix cache (abtui.sim.prefix_cache)
    prefix_cache_queries_total: int = 0  # prompt tokens looked up in it
    prefix_cache_hits_total: int = 0  # prompt tokens found there
    # completed requests' phase times, seconds of the endpoint's clock
    queue_s: Histogram = _hist(REQUEST_LATENCY_BUCKETS)  # arrival -> admitted to the batch
    prefill_s: Histogram = _hist(REQUEST_LATENCY_BUCKETS)  # admitted -> first token
    decode_s: Histogram = _hist(REQUEST_LATENCY_BUCKETS)  # first token -> last token
    inference_s: Histogram = _hist(REQUEST_LATENCY_BUCKETS)  # admitted -> last token
    e2e_s: Histogram = _hist(REQUEST_LATENCY_BUCKETS)  # arrival -> last token
    ttft_s: Histogram = _hist(TTFT_BUCKETS)  # arrival -> first token
    tpot_s: Histogram = _hist(TPOT_BUCKETS)  # decode_s / (generated tokens - 1), if > 1 token
    # simulated GPU (per GPU of the replica; all TP ranks behave alike)
    gpu_count: int = 1  # tensor-parallel degree
    gpu_memory_used_bytes: int = 0  # weights + activation reserve + KV blocks in use
    gpu_memory_total_bytes: int = 0
    # activity and power: averages over the last GAUGE_WINDOW_S (abtui.sim.gpu_model), as DCGM
    dram_active: float = 0.0  # bytes moved / (peak BW x window): the window's MBU
    tensor_active: float = 0.0  # FLOPs / (peak matmul FLOP/s x window): the window's MFU
    sm_active: float = 0.0  # kernel time / window (the rest: overhead, idle)
    power_w: float = 0.0  # per step idle + (TDP - idle) x max(DRAM, tensor activity); idle power
    energy_j_total: float = 0.0  # per GPU, over simulated time
    simulated: bool = True  # every GPU figure is modelled, never measured


@dataclass(slots=True)
class RequestTiming:
    """One request's life in :func:`abtui.sim.offline.simulate`, seconds from the run's start."""

    arrival: float
    admitted: float = -1.0
    first_token: float = -1.0
    finished: float = -1.0
    prompt_tokens: int = 0
    tokens: int = 0  # generated
    chunks: int = 0  # token deliveries (steps that gave this request tokens)

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def queue(self) -> float:
        return self.admitted - self.arrival

    @property
    def e2e(self) -> float:
        return self.finished - self.arrival

    @property
    def tpot(self) -> float:
        return (self.finished - self.first_token) / max(1, self.tokens - 1)
