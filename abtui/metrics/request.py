"""Per-request metrics: the ONE place the formulas of docs/methods.md §1 live.

Every function takes a :class:`~abtui.metrics.table.RequestTable` and returns float64 seconds,
one value per row (or per chunk gap for :func:`itl_s`), NaN where an input is missing (NULL).
Differences are taken in int64 ns and converted once, so they are exact.

- ``TTFT = first_token − dispatched`` (service view)
- ``TTFT_user = first_token − scheduled`` (includes client queueing: coordinated omission)
- ``E2E = last_token − dispatched`` — the last *token-bearing* chunk, not ``done``: the
  trailing usage-only chunk and ``[DONE]`` must not move E2E
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


def ttft_s(t: RequestTable) -> np.ndarray:
    """Time to first token, service view: first token-bearing chunk − dispatched."""
    return diff_s(t.first_token_ns, t.dispatched_ns)


def ttft_user_s(t: RequestTable) -> np.ndarray:
    """Time to first token, user view: first token-bearing chunk − scheduled."""
    return diff_s(t.first_token_ns, t.scheduled_ns)


def e2e_s(t: RequestTable) -> np.ndarray:
    """End-to-end latency: last token-bearing chunk − dispatched (``done`` is not used)."""
    return diff_s(t.last_token_ns, t.dispatched_ns)


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
