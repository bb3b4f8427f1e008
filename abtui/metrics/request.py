"""Per-request metrics: the ONE place the formulas of docs/methods.md §1 live.

Every function takes a :class:`~abtui.metrics.table.RequestTable` and returns float64 seconds,
one value per row (or per chunk gap for :func:`itl_s`), NaN where an input is missing (NULL).
Differences are taken in int64 ns and converted once, so they are exact.

- ``sent = dispatched + connect`` — when the request went out on an open connection: a request
  that had to open one first (TCP + TLS; ``connect_ns``, 0 on a connection opened before
  ``t0``) starts its service view after it
- ``TTFT = first_token − sent`` (service view)
- ``TTFT_user = first_token − scheduled`` (includes client queueing and the connect phase:
  everything the user waited for)
- ``E2E = last_token − sent`` — the last *token-bearing* chunk, not ``done``: the
  trailing usage-only chunk and ``[DONE]`` must not move E2E
- ``connect = connect_ns`` (its own phase, shown in the diagnosis)
- ``TPOT = (E2E − TTFT) / (n_output − 1)`` for ``n_output > 1``, NaN otherwise
- ``ITL`` = gaps between consecutive token-bearing chunks of one request (per chunk)
- ``schedule lag = dispatched − scheduled`` (load-generator health)
"""

from __future__ import annotations

import numpy as np

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


def sent_ns(t: RequestTable) -> np.ndarray:
    """When each request went out on an open connection: dispatched + its connect phase."""
    return np.where(t.dispatched_ns != NA, t.dispatched_ns + t.connect_ns, NA)


def connect_s(t: RequestTable) -> np.ndarray:
    """Time each request spent opening its connection (0 on one already open)."""
    return t.connect_ns / NS_PER_S


def ttft_s(t: RequestTable) -> np.ndarray:
    """Time to first token, service view: first token-bearing chunk − sent (the connect phase
    is not in it)."""
    return diff_s(t.first_token_ns, sent_ns(t))


def ttft_user_s(t: RequestTable) -> np.ndarray:
    """Time to first token, user view: first token-bearing chunk − scheduled (the client's
    queueing and the connect phase are in it)."""
    return diff_s(t.first_token_ns, t.scheduled_ns)


def e2e_s(t: RequestTable) -> np.ndarray:
    """End-to-end latency: last token-bearing chunk − sent (``done`` is not used)."""
    return diff_s(t.last_token_ns, sent_ns(t))


def tpot_s(t: RequestTable) -> np.ndarray:
    """Time per output token after the first: (E2E − TTFT)/(n_output − 1), n_output > 1."""
    decode = diff_s(t.last_token_ns, t.first_token_ns)  # = E2E − TTFT, exactly
    n = t.n_output
    out = np.full(len(n), np.nan)
    multi = (n != NA) & (n > 1)
    out[multi] = decode[multi] / (n[multi] - 1)
    return out


def schedule_lag_s(t: RequestTable) -> np.ndarray:
    """How late the generator sent each request: dispatched − scheduled."""
    return diff_s(t.dispatched_ns, t.scheduled_ns)


def chunk_gaps(t: RequestTable) -> tuple[np.ndarray, np.ndarray]:
    """``(row, gap_s)``: every gap between consecutive token chunks of one request.

    Chunks are ordered by row then time (a RequestTable invariant), so a gap is a difference of
    neighbours that belong to the same row.
    """
    rows = t.chunk_req_idx
    same = rows[1:] == rows[:-1]
    gaps = np.diff(t.chunk_t_ns)[same] / NS_PER_S
    return rows[1:][same], gaps


def itl_s(t: RequestTable) -> np.ndarray:
    """Inter-token latency per chunk gap, all requests of ``t`` pooled (not per row)."""
    return chunk_gaps(t)[1]


def itl_max_s(t: RequestTable) -> np.ndarray:
    """Per request: the largest gap between token chunks (NaN with fewer than two chunks)."""
    rows, gaps = chunk_gaps(t)
    out = np.full(len(t), np.nan)
    np.fmax.at(out, rows, gaps)
    return out


def request_metrics(t: RequestTable) -> dict[str, np.ndarray]:
    """Every per-request metric, keyed by the SLO names of :mod:`abtui.metrics.summary`."""
    return {
        "ttft": ttft_s(t),
        "ttft_user": ttft_user_s(t),
        "tpot": tpot_s(t),
        "e2e": e2e_s(t),
        "itl": itl_max_s(t),
        "schedule_lag": schedule_lag_s(t),
    }
