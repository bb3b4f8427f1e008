"""Synthetic request tables with known truth, for validating the statistics and benchmarking.

:func:`synthetic_table` builds a :class:`~abtui.metrics.table.RequestTable` of ``n`` requests per
arm: request ``i`` of every arm is item ``i`` scheduled at ``i / rate`` seconds; TTFT and TPOT
are log-normal around each arm's medians, multiplied by ``scale`` (e.g. ``1.10`` for a known 10%
regression); ``ar`` > 0 makes each arm's latencies an AR(1) series in log space (dependent
consecutive requests, as under load), each arm its own independent series; ``shared`` (a log
multiplier per item, e.g. from :func:`shared_load`) multiplies TTFT and TPOT of item ``i`` in
*every* arm alike (a load or drift both arms see: the case pairing cancels); each request
streams ``n_output`` one-token chunks. ``tail_share`` of the requests get ``tail_scale`` times
their TTFT (a tail regression). ``vary_input`` gives item ``i`` a prompt of
``64 · 2^(i mod 4)`` tokens (else 256).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from abtui.metrics.table import RequestTable

NS = 1_000_000_000


@dataclass
class ArmTruth:
    ttft_s: float = 0.040  # median
    tpot_s: float = 0.010  # median
    sigma: float = 0.25  # log-normal spread of TTFT and TPOT
    ttft_scale: float = 1.0
    tpot_scale: float = 1.0
    ar: float = 0.0  # AR(1) coefficient of the log multipliers (0 = independent)
    error_rate: float = 0.0
    lag_s: float = 0.0  # extra schedule lag (dispatched − scheduled) of every 10th request
    tail_share: float = 0.0  # share of requests whose TTFT is multiplied by tail_scale
    tail_scale: float = 1.0  # (a heavier tail: P99 moves, P50 hardly)
    stall_s: float = 0.0  # a busy client: stalls of mean stall_s on 30% of its loop wake-ups
    # (exponential), drawn anew for each send (schedule lag) and each read of the first and
    # last token (inflating TTFT and E2E as a starved event loop does): lag P99 ≈ 3.4 × stall_s
    n_output: int | None = None  # this arm's output length (default: the table's n_output)
    usage_tokens: int | None = None  # what its usage claims instead of the chunks it streamed
    reasoning: int = 0  # its first tokens that are thinking (the answer starts after them)


def busy_stalls(rng: np.random.Generator, n: int, mean_s: float) -> np.ndarray:
    """``n`` stalls (ns) of a client loop on a busy machine (:attr:`ArmTruth.stall_s`)."""
    if mean_s <= 0:
        return np.zeros(n, dtype=np.int64)
    return ((rng.random(n) < 0.3) * rng.exponential(mean_s, n) * NS).astype(np.int64)


def _log_noise(rng: np.random.Generator, n: int, sigma: float, ar: float) -> np.ndarray:
    e = rng.standard_normal(n) * sigma
    if ar <= 0:
        return e
    # AR(1) with stationary variance σ²: x_i = φ x_{i-1} + √(1−φ²) e_i, via a linear filter
    from scipy.signal import lfilter

    x = lfilter([np.sqrt(1 - ar * ar)], [1.0, -ar], e)
    x[0] = e[0]
    return x


def shared_load(
    n: int,
    *,
    seed: int = 0,
    sigma: float = 0.0,
    ar: float = 0.0,
    drift: float = 0.0,
    periods: float = 1.0,
    bursts: int = 0,
    burst_len: int = 20,
    burst_log: float = 0.7,
) -> np.ndarray:
    """A log multiplier per item, common to every arm (``synthetic_table(shared=...)``): an
    AR(1) series of stationary SD ``sigma`` and coefficient ``ar``, plus a slow sinusoidal drift
    of amplitude ``drift`` (log) over ``periods`` periods of the run, plus ``bursts`` bursts of
    ``burst_len`` consecutive items slowed by ``exp(burst_log)`` at random places."""
    rng = np.random.default_rng([seed, 0x5A4ED])
    x = _log_noise(rng, n, sigma, ar) if sigma > 0 else np.zeros(n)
    if drift:
        x = x + drift * np.sin(2 * np.pi * periods * np.arange(n) / n + rng.uniform(0, 2 * np.pi))
    for start in rng.integers(0, max(n - burst_len, 1), size=bursts):
        x[start : start + burst_len] += burst_log
    return x


def synthetic_table(
    n: int,
    arms: list[ArmTruth],
    *,
    n_output: int = 16,
    rate: float = 20.0,
    seed: int = 0,
    itl_jitter: float = 0.05,
    vary_input: bool = False,
    shared: np.ndarray | None = None,
) -> RequestTable:
    """``n`` requests for each arm in ``arms`` (arm index = position); see the module doc."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list[np.ndarray]] = {}
    chunk_req, chunk_t = [], []
    width = n_output
    for arm, truth in enumerate(arms):
        n_output = truth.n_output or width
        sched = (np.arange(n) * (NS / rate)).astype(np.int64) + 10 * NS
        disp = sched + 20_000 + np.where(np.arange(n) % 10 == 0, int(truth.lag_s * NS), 0)
        disp = disp + busy_stalls(rng, n, truth.stall_s)
        common = 0.0 if shared is None else np.asarray(shared, dtype=np.float64)[:n]
        ttft = (
            truth.ttft_s
            * truth.ttft_scale
            * np.exp(_log_noise(rng, n, truth.sigma, truth.ar) + common)
        )
        if truth.tail_share > 0:
            ttft = np.where(rng.random(n) < truth.tail_share, ttft * truth.tail_scale, ttft)
        tpot = (
            truth.tpot_s
            * truth.tpot_scale
            * np.exp(_log_noise(rng, n, truth.sigma, truth.ar) + common)
        )
        first = disp + (ttft * NS).astype(np.int64)
        gaps = tpot[:, None] * np.exp(rng.standard_normal((n, n_output - 1)) * itl_jitter)
        times = np.concatenate(
            [first[:, None], first[:, None] + np.cumsum((gaps * NS).astype(np.int64), axis=1)],
            axis=1,
        )
        if truth.stall_s > 0:  # late reads of the first and the last token
            times[:, 0] += busy_stalls(rng, n, truth.stall_s)
            times[:, -1] += busy_stalls(rng, n, truth.stall_s)
            times = np.maximum.accumulate(times, axis=1)
            first = times[:, 0]
        err = rng.random(n) < truth.error_rate
        last = times[:, -1]
        row = np.arange(n, dtype=np.int64) + arm * n
        na = np.iinfo(np.int64).min
        parts = {
            "req": row,
            "arm": np.full(n, arm),
            "item": np.arange(n),
            "run": np.zeros(n, dtype=np.int64),
            "warmup": np.zeros(n, dtype=bool),
            "scheduled_ns": sched,
            "dispatched_ns": disp,
            "first_byte_ns": np.where(err, na, first - 1000),
            "done_ns": np.where(err, disp + 1_000_000, last + 1000),
            "first_token_ns": np.where(err, na, first),
            "last_token_ns": np.where(err, na, last),
            "n_chunks": np.where(err, 0, n_output),
            "empty_token_chunks": np.zeros(n, dtype=np.int64),
            "n_input": 64 * 2 ** (np.arange(n) % 4) if vary_input else np.full(n, 256),
            "n_output": np.where(err, na, truth.usage_tokens or n_output),
            "http_status": np.where(err, 500, 200),
            "status": np.array(["ok", "error"], dtype=object)[err.astype(np.int64)],
            "error_class": np.array([None, "http"], dtype=object)[err.astype(np.int64)],
            "token_source": np.full(n, "usage", dtype=object),
        }
        if any(a.reasoning for a in arms):  # the answer's first chunk, the thinking's tokens
            parts["first_output_ns"] = np.where(err, na, times[:, truth.reasoning])
            parts["reasoning_tokens"] = np.full(n, truth.reasoning or na)
        for k, v in parts.items():
            cols.setdefault(k, []).append(np.asarray(v))
        ok_rows = np.flatnonzero(~err)
        chunk_req.append(np.repeat(row[ok_rows], n_output))
        chunk_t.append(times[ok_rows].ravel())
    rows = {k: np.concatenate(v) for k, v in cols.items()}
    creq = np.concatenate(chunk_req)
    return RequestTable.from_columns(
        rows, creq, np.concatenate(chunk_t), np.ones(len(creq), np.int64)
    )


_TIME_COLUMNS = (
    "scheduled_ns",
    "dispatched_ns",
    "first_byte_ns",
    "done_ns",
    "first_token_ns",
    "last_token_ns",
    "first_output_ns",
)


def alternating_table(
    per_block: int,
    blocks: list[list[ArmTruth]],
    *,
    n_output: int = 16,
    rate: float = 20.0,
    seed: int = 0,
    gap_s: float = 1.0,
) -> RequestTable:
    """A session played in alternation blocks: ``blocks[j]`` is the truth of every arm in block
    ``j`` (``per_block`` requests each, items ``j·per_block …``); the arms take turns A B | B A …
    (:func:`abtui.workload.segments.alternate_order`), one after the other with ``gap_s`` between
    turns, so no two arms are ever in flight at once. ``block`` is set on every row."""
    from abtui.workload.segments import alternate_order

    parts, start = [], 0
    for j, truths in enumerate(blocks):
        t = synthetic_table(per_block, truths, n_output=n_output, rate=rate, seed=seed * 7919 + j)
        t.item = t.item + j * per_block
        t.block = np.full(len(t), j, dtype=np.int64)
        chunk_arm = t.arm[t.chunk_req_idx]
        for arm in alternate_order(j, len(truths)):
            rows = t.arm == arm
            first = int(t.scheduled_ns[rows].min())
            shift = start - first
            for name in _TIME_COLUMNS:
                col = getattr(t, name)
                present = rows & (col != np.iinfo(np.int64).min)
                col[present] += shift
            t.chunk_t_ns[chunk_arm == arm] += shift
            start = int(t.done_ns[rows].max()) + int(gap_s * NS)
        parts.append(t)
    out = RequestTable.concat(parts)
    out.req = np.arange(len(out), dtype=np.int64)
    return out
