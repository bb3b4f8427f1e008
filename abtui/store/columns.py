"""Request records → the column arrays of one bulk insert into the session file (the writer's
``requests``, ``chunks`` and ``server_timings`` rows; NULL-able integers as masked arrays)."""

from __future__ import annotations

import numpy as np

from abtui.client.records import RequestRecord
from abtui.metrics.table import NA, NULLABLE_COLUMNS, ROW_COLUMNS, RequestTable
from abtui.store.schema import TIMING_COLUMNS


def objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def nullable(values: list, dtype: type) -> np.ndarray:
    """An integer array, masked where a value is None (DuckDB inserts NULL there)."""
    n = len(values)
    mask = np.fromiter((v is None for v in values), dtype=bool, count=n)
    data = np.fromiter((0 if v is None else v for v in values), dtype=dtype, count=n)
    return np.ma.masked_array(data, mask=mask) if mask.any() else data


def record_columns(
    records: list[RequestRecord], texts: list[str | None], first_req: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Columns of ``requests`` and ``chunks`` for ``records`` (req ids from ``first_req``).

    Built through :meth:`RequestTable.from_records`, so the live and the stored tables are
    derived by the same code; ``NA`` entries become masked (NULL).
    """
    t = RequestTable.from_records(records)
    rows: dict[str, np.ndarray] = {}
    for name in ROW_COLUMNS:
        col = getattr(t, name)
        if name in NULLABLE_COLUMNS and (col == NA).any():
            col = np.ma.masked_equal(col, NA)
        rows[name] = col
    rows["req"] = t.req + first_req
    rows["error_message"] = objects([r.error_message for r in records])
    rows["finish_reason"] = objects([r.finish_reason for r in records])
    rows["text"] = objects(texts)
    rows["conversation_id"] = objects([r.conversation_id for r in records])
    starts = np.cumsum(t.n_chunks) - t.n_chunks
    chunks = {
        "req": rows["req"][t.chunk_req_idx],
        "seq": np.arange(t.n_chunk_rows, dtype=np.int64) - starts[t.chunk_req_idx],
        "t_ns": t.chunk_t_ns,
        "n_tokens": t.chunk_n,
    }
    return rows, chunks


def timing_rows(records: list[RequestRecord], first_req: int) -> list[tuple]:
    """Rows of ``server_timings`` for the records that carry the server's own timings."""
    out = []
    for i, r in enumerate(records):
        if r.timings is None and r.timings_note is None:
            continue
        t = r.timings or {}
        out.append((first_req + i, *(t.get(c) for c in TIMING_COLUMNS[1:-1]), r.timings_note))
    return out
