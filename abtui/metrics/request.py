"""Per-request metrics: the ONE place the formulas of docs/methods.md §1 live.

Every function takes a :class:`~abtui.metrics.table.RequestTable` and returns float64 seconds,
one value per row (or per chunk gap for :func:`itl_s`), NaN where an input is missing (NULL).
Differences are taken in int64 ns and converted once, so they are exact. ``rows`` (a boolean
mask or positions) limits a per-request metric to those rows without copying the table: only
the columns the formula reads are indexed.

- ``sent = dispatched + connect`` — when the request went out on an open connection: a request
  that had to open one first (TCP + TLS; ``connect_ns``, 0 on a connection opened before
  ``t0``) starts its service view after it
- ``TTFT = first_token − sent`` (service view)
- ``TTFO = first_output − sent`` — the first chunk of the *answer* (``content``, ``text`` or
  ``tool_calls``); a reasoning model's thinking chunks come before it (TTFT counts them)
- ``TTFT_user = first_token − scheduled`` (includes client queueing and the connect phase:
  everything the user waited for)
- ``E2E = last_token − sent`` — the last *token-bearing* chunk, not ``done``: the
  trailing usage-only chunk and ``[DONE]`` must not move E2E
- ``connect = connect_ns`` (its own phase, shown in the diagnosis)
- ``TPOT = (E2E − TTFT) / (n_output − 1)`` for ``n_output > 1``, NaN otherwise
- ``TPOT_reasoning = (first_output − first_token) / reasoning`` — the thinking's pace: its
  ``reasoning`` tokens span that many steps to the answer's first chunk (a stream that ended
  while thinking: ``(last_token − first_token) / (reasoning − 1)``); NaN without reasoning
- ``TPOT_answer = (last_token − first_output) / (answer − 1)``, ``answer = n_output −
  reasoning`` (reasoning unknown: 0, so TPOT where nothing was thought) for ``answer > 1``
- ``ITL`` = gaps between consecutive token-bearing chunks of one request (per chunk)
- ``schedule lag = dispatched − scheduled`` (load-generator health)
"""

from __future__ import annotations

import numpy as np

from abtui.metrics import gaps
from abtui.metrics.table import NA, RequestTable

NS_PER_S = 1e9


def diff_s(later: np.ndarray, earlier: np.ndarray) -> np.ndarray:
    """``later − earlier`` in seconds; NaN where either is NULL (``NA``)."""
    later = np.asarray(later, dtype=np.int64)
    earlier = np.asarray(earlier, dtype=np.int64)
    out = np.full(len(later), np.nan)
    valid = (later != NA) & (earlier != NA)
    out[valid] = (later[valid] - earlier[valid]) / NS_PER_S
    return out


def _col(t: RequestTable, name: str, rows) -> np.ndarray:
    col = getattr(t, name)
    return col if rows is None else col[rows]


def sent_ns(t: RequestTable, rows=None) -> np.ndarray:
    """When each request went out on an open connection: dispatched + its connect phase."""
    dispatched = _col(t, "dispatched_ns", rows)
    return np.where(dispatched != NA, dispatched + _col(t, "connect_ns", rows), NA)


def connect_s(t: RequestTable, rows=None) -> np.ndarray:
    """Time each request spent opening its connection (0 on one already open)."""
    return _col(t, "connect_ns", rows) / NS_PER_S


def ttft_s(t: RequestTable, rows=None) -> np.ndarray:
    """Time to first token, service view: first token-bearing chunk − sent (the connect phase
    is not in it)."""
    return diff_s(_col(t, "first_token_ns", rows), sent_ns(t, rows))


def ttfo_s(t: RequestTable, rows=None) -> np.ndarray:
    """Time to first output token, service view: first chunk of the answer − sent. A reasoning
    model's thinking comes first and is not in it; without reasoning it is TTFT. NaN when no
    answer chunk came."""
    return diff_s(_col(t, "first_output_ns", rows), sent_ns(t, rows))


def ttft_user_s(t: RequestTable, rows=None) -> np.ndarray:
    """Time to first token, user view: first token-bearing chunk − scheduled (the client's
    queueing and the connect phase are in it)."""
    return diff_s(_col(t, "first_token_ns", rows), _col(t, "scheduled_ns", rows))


def e2e_s(t: RequestTable, rows=None) -> np.ndarray:
    """End-to-end latency: last token-bearing chunk − sent (``done`` is not used)."""
    return diff_s(_col(t, "last_token_ns", rows), sent_ns(t, rows))


def tpot_s(t: RequestTable, rows=None) -> np.ndarray:
    """Time per output token after the first: (E2E − TTFT)/(n_output − 1), n_output > 1."""
    decode = diff_s(_col(t, "last_token_ns", rows), _col(t, "first_token_ns", rows))  # E2E − TTFT
    n = _col(t, "n_output", rows)
    out = np.full(len(n), np.nan)
    multi = (n != NA) & (n > 1)
    out[multi] = decode[multi] / (n[multi] - 1)
    return out


def tpot_reasoning_s(t: RequestTable, rows=None) -> np.ndarray:
    """Time per reasoning token: (first answer chunk − first chunk) / reasoning tokens, for
    requests that reasoned; one that ended while still thinking (no answer chunk): (last −
    first chunk) / (reasoning − 1). NaN without reasoning tokens."""
    think = _col(t, "reasoning_tokens", rows)
    first, out_first = _col(t, "first_token_ns", rows), _col(t, "first_output_ns", rows)
    answered = out_first != NA
    span = diff_s(np.where(answered, out_first, _col(t, "last_token_ns", rows)), first)
    steps = np.where(answered, think, think - 1)
    out = np.full(len(think), np.nan)
    some = (think != NA) & (think > 0) & (steps > 0)
    out[some] = span[some] / steps[some]
    return out


def tpot_answer_s(t: RequestTable, rows=None) -> np.ndarray:
    """Time per answer token after the answer's first: (last chunk − first answer chunk) /
    (answer tokens − 1), answer tokens = n_output − reasoning tokens (unknown reasoning: 0),
    for more than one. Without reasoning it is TPOT."""
    n, think = _col(t, "n_output", rows), _col(t, "reasoning_tokens", rows)
    answer = n - np.where(think != NA, think, 0)
    decode = diff_s(_col(t, "last_token_ns", rows), _col(t, "first_output_ns", rows))
    out = np.full(len(n), np.nan)
    multi = (n != NA) & (answer > 1)
    out[multi] = decode[multi] / (answer[multi] - 1)
    return out


def schedule_lag_s(t: RequestTable, rows=None) -> np.ndarray:
    """How late the generator sent each request: dispatched − scheduled."""
    return diff_s(_col(t, "dispatched_ns", rows), _col(t, "scheduled_ns", rows))


def chunk_gaps(t: RequestTable) -> tuple[np.ndarray, np.ndarray]:
    """``(row, gap_s)``: every gap between consecutive token chunks of one request.

    Chunks are ordered by row then time (a RequestTable invariant), so a gap is a difference of
    neighbours that belong to the same row. A table read without its chunks streams them from
    its file (:mod:`abtui.metrics.gaps`), and this holds every gap: the verdict and the summary
    use :class:`abtui.metrics.gaps.GapScan` instead, which does not.
    """
    if t.chunk_source is not None:
        parts = list(gaps.gap_batches(t))
        if not parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        return (
            np.concatenate([r for r, _ in parts]),
            np.concatenate([g for _, g in parts]) / NS_PER_S,
        )
    rows = t.chunk_req_idx
    same = rows[1:] == rows[:-1]
    return rows[1:][same], np.diff(t.chunk_t_ns)[same] / NS_PER_S


def itl_s(t: RequestTable) -> np.ndarray:
    """Inter-token latency per chunk gap, all requests of ``t`` pooled (not per row)."""
    return chunk_gaps(t)[1]


def itl_max_s(t: RequestTable, rows=None) -> np.ndarray:
    """Per request: the largest gap between token chunks (NaN with fewer than two chunks)."""
    per_row = gaps.row_gaps(t)
    n, top = _col(per_row, "n", rows), _col(per_row, "max_ns", rows)
    out = np.full(len(n), np.nan)
    some = n > 0
    out[some] = top[some] / NS_PER_S
    return out


PER_REQUEST = {  # every per-request metric, keyed by the SLO names of abtui.metrics.summary
    "ttft": ttft_s,
    "ttft_user": ttft_user_s,
    "ttfo": ttfo_s,
    "tpot": tpot_s,
    "tpot_reasoning": tpot_reasoning_s,
    "tpot_answer": tpot_answer_s,
    "e2e": e2e_s,
    "itl": itl_max_s,
    "schedule_lag": schedule_lag_s,
}
