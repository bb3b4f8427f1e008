"""Requests in columnar numpy form, for fast vectorised metrics.

A :class:`RequestTable` holds one row per request and, separately, every token-bearing chunk
of those requests (``chunk_req_idx`` is the row a chunk belongs to; chunks are ordered by row,
then by time within a row).

A table read back from a session file usually has no chunk arrays (they are empty): its
``chunk_source`` streams the chunks from the file instead, and ``itl_n`` / ``itl_sum_ns`` /
``itl_max_ns`` hold, per request, the number of gaps between its token chunks, their sum and the
largest (ns), read in one pass (:mod:`abtui.metrics.gaps`: ITL without holding every chunk).

NULL representation: integer columns that may be NULL (``first_byte_ns``, ``done_ns``,
``first_token_ns``, ``last_token_ns``, ``n_input``, ``n_output``, ``http_status``,
``first_output_ns``, ``reasoning_tokens``, ``cached_tokens``, ``turn``) are plain
``int64`` arrays holding the sentinel :data:`NA` (the smallest int64) where the value is missing;
``table.valid("done_ns")`` is the mask of present values. Metric functions in
:mod:`abtui.metrics.request` turn missing inputs into NaN seconds. String columns (``status``,
``error_class``, ``token_source``) are object arrays with ``None`` for NULL.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from abtui.client.records import OK, RequestRecord

NA = np.iinfo(np.int64).min  # NULL sentinel of integer columns

INT_COLUMNS = (
    "req",
    "arm",
    "item",
    "run",
    "level",
    "block",
    "scheduled_ns",
    "dispatched_ns",
    "first_byte_ns",
    "done_ns",
    "first_token_ns",
    "last_token_ns",
    "n_chunks",
    "empty_token_chunks",
    "n_input",
    "n_output",
    "http_status",
    "connect_ns",
    "first_output_ns",
    "reasoning_tokens",
    "cached_tokens",
    "turn",
)
NULLABLE_COLUMNS = (
    "first_byte_ns",
    "done_ns",
    "first_token_ns",
    "last_token_ns",
    "n_input",
    "n_output",
    "http_status",
    "first_output_ns",
    "reasoning_tokens",
    "cached_tokens",
    "turn",
)
STR_COLUMNS = ("status", "error_class", "token_source")
SEGMENT_COLUMNS = ("level", "block")  # optional in from_columns (default 0)
# optional in from_columns and the constructor (default 0): tables built before they existed
# optional, defaulted otherwise: a table built before them took the first token of any kind for
# the first of the answer, and knew no reasoning tokens
ANSWER_COLUMNS = ("first_output_ns", "reasoning_tokens")
# optional, NA otherwise: the prompt tokens the server served from its prefix cache
CACHE_COLUMNS = ("cached_tokens",)
OPTIONAL_COLUMNS = SEGMENT_COLUMNS + ("connect_ns",) + ANSWER_COLUMNS + CACHE_COLUMNS + ("turn",)
ROW_COLUMNS = INT_COLUMNS + ("warmup",) + STR_COLUMNS
CHUNK_COLUMNS = ("chunk_req_idx", "chunk_t_ns", "chunk_n")
ITL_COLUMNS = ("itl_n", "itl_sum_ns", "itl_max_ns")  # per request, when read without chunks


def _int_or_na(values: list, n: int) -> np.ndarray:
    return np.fromiter((NA if v is None else v for v in values), np.int64, n)


def _objects(values) -> np.ndarray:
    values = list(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@dataclass(eq=False)
class RequestTable:
    """Columnar requests and their chunks. See the module docstring for NULLs."""

    req: np.ndarray  # request id (the store's ``req``; the record's position for from_records)
    arm: np.ndarray
    item: np.ndarray
    run: np.ndarray
    warmup: np.ndarray  # bool
    scheduled_ns: np.ndarray
    dispatched_ns: np.ndarray
    first_byte_ns: np.ndarray
    done_ns: np.ndarray
    first_token_ns: np.ndarray
    last_token_ns: np.ndarray
    n_chunks: np.ndarray
    empty_token_chunks: np.ndarray
    n_input: np.ndarray
    n_output: np.ndarray
    http_status: np.ndarray
    status: np.ndarray  # object: "ok" / "error" / "cancelled"
    error_class: np.ndarray  # object, None when no error
    token_source: np.ndarray  # object
    chunk_req_idx: np.ndarray  # int64 row index of each chunk
    chunk_t_ns: np.ndarray  # int64 arrival time of each token-bearing chunk
    chunk_n: np.ndarray  # int64 tokens carried by each chunk
    # sweep level and schedule block of each request (all 0 when not given: tables built
    # before these columns existed, synthetic tables)
    level: np.ndarray | None = None
    block: np.ndarray | None = None
    # ns each request spent opening its connection (RequestRecord.connect_ns; 0 when it went
    # out on an open one, and in sessions written before the column existed)
    connect_ns: np.ndarray | None = None
    # the first chunk of the answer (not reasoning; NA when none came: TTFO) and the reasoning
    # tokens (NA when unknown); when not given, first_token_ns and NA
    first_output_ns: np.ndarray | None = None
    reasoning_tokens: np.ndarray | None = None
    # the prompt tokens the server said it served from its prefix cache (NA when it did not say)
    cached_tokens: np.ndarray | None = None
    # a conversation's turn index (NA: the request is no turn of a conversation)
    turn: np.ndarray | None = None
    # read without chunks (abtui.store.reader): where the chunks are, and per request the number
    # of gaps between its chunks, their sum and the largest (ns; NA with no gap)
    chunk_source: Any = None  # abtui.metrics.gaps.ChunkSource
    itl_n: np.ndarray | None = None
    itl_sum_ns: np.ndarray | None = None
    itl_max_ns: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.first_output_ns is None:
            self.first_output_ns = np.array(self.first_token_ns, dtype=np.int64)
        if self.reasoning_tokens is None:
            self.reasoning_tokens = np.full(len(self.req), NA, dtype=np.int64)
        if self.cached_tokens is None:
            self.cached_tokens = np.full(len(self.req), NA, dtype=np.int64)
        if self.turn is None:
            self.turn = np.full(len(self.req), NA, dtype=np.int64)
        for name in OPTIONAL_COLUMNS:
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(len(self.req), dtype=np.int64))
        for name in INT_COLUMNS + CHUNK_COLUMNS:
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        for name in ITL_COLUMNS:
            if getattr(self, name) is not None:
                setattr(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        self.warmup = np.asarray(self.warmup, dtype=bool)
        for name in STR_COLUMNS:
            col = getattr(self, name)
            if not (isinstance(col, np.ndarray) and col.dtype == object):
                setattr(self, name, _objects(col))
        n = len(self.req)
        for name in ROW_COLUMNS + self._itl_columns():
            if len(getattr(self, name)) != n:
                raise ValueError(f"column {name} has {len(getattr(self, name))} rows, not {n}")

    def __len__(self) -> int:
        return len(self.req)

    def __repr__(self) -> str:
        arms = sorted({int(a) for a in np.unique(self.arm)})
        where = " in the file" if self.chunk_source is not None else ""
        return f"RequestTable({len(self)} requests, {self.n_chunk_rows} chunks{where}, arms={arms})"

    def _itl_columns(self) -> tuple[str, ...]:
        return ITL_COLUMNS if self.itl_n is not None else ()

    @property
    def n_chunk_rows(self) -> int:
        """Token chunks of these requests (read without chunks: their gaps plus one per request
        with a first token)."""
        if self.chunk_source is not None and self.itl_n is not None:
            return int(self.itl_n.sum()) + int((self.first_token_ns != NA).sum())
        return len(self.chunk_t_ns)

    def valid(self, column: str) -> np.ndarray:
        """Mask of rows where an integer ``column`` is not NULL."""
        return getattr(self, column) != NA

    @property
    def ok(self) -> np.ndarray:
        return self.status == OK

    # -- constructors -----------------------------------------------------------------------

    @classmethod
    def empty(cls) -> RequestTable:
        return cls(**{f.name: [] for f in fields(cls) if f.name in ROW_COLUMNS + CHUNK_COLUMNS})

    @classmethod
    def from_records(cls, records: list[RequestRecord]) -> RequestTable:
        """From live records (``req`` = position in ``records``)."""
        n = len(records)
        lens = np.fromiter((len(r.chunk_ns) for r in records), np.int64, n)
        total = int(lens.sum())
        chunk_n = np.fromiter(
            (
                k
                for r in records
                for k in (
                    r.chunk_tokens
                    if len(r.chunk_tokens) == len(r.chunk_ns)
                    else [1] * len(r.chunk_ns)
                )
            ),
            np.int64,
            total,
        )
        return cls(
            req=np.arange(n, dtype=np.int64),
            arm=np.fromiter((r.arm for r in records), np.int64, n),
            item=np.fromiter((r.item for r in records), np.int64, n),
            run=np.fromiter((r.run for r in records), np.int64, n),
            level=np.fromiter((r.level for r in records), np.int64, n),
            block=np.fromiter((r.block for r in records), np.int64, n),
            warmup=np.fromiter((bool(r.warmup) for r in records), bool, n),
            scheduled_ns=np.fromiter((r.scheduled_ns for r in records), np.int64, n),
            dispatched_ns=np.fromiter((r.dispatched_ns for r in records), np.int64, n),
            first_byte_ns=_int_or_na([r.first_byte_ns for r in records], n),
            done_ns=_int_or_na([r.done_ns for r in records], n),
            first_token_ns=_int_or_na([r.chunk_ns[0] if r.chunk_ns else None for r in records], n),
            last_token_ns=_int_or_na([r.chunk_ns[-1] if r.chunk_ns else None for r in records], n),
            n_chunks=lens,
            empty_token_chunks=np.fromiter((r.empty_token_chunks for r in records), np.int64, n),
            n_input=_int_or_na([r.n_input for r in records], n),
            n_output=_int_or_na([r.n_output for r in records], n),
            http_status=_int_or_na([r.http_status for r in records], n),
            connect_ns=np.fromiter((r.connect_ns for r in records), np.int64, n),
            first_output_ns=_int_or_na([r.first_output_ns for r in records], n),
            reasoning_tokens=_int_or_na([r.reasoning_tokens for r in records], n),
            cached_tokens=_int_or_na([r.cached_tokens for r in records], n),
            turn=_int_or_na([r.turn for r in records], n),
            status=_objects(r.status for r in records),
            error_class=_objects(r.error_class for r in records),
            token_source=_objects(r.token_source for r in records),
            chunk_req_idx=np.repeat(np.arange(n, dtype=np.int64), lens),
            chunk_t_ns=np.fromiter((t for r in records for t in r.chunk_ns), np.int64, total),
            chunk_n=chunk_n,
        )

    @classmethod
    def from_columns(
        cls, rows: dict[str, np.ndarray], chunk_req: np.ndarray, chunk_t_ns, chunk_n
    ) -> RequestTable:
        """From column arrays (NULLs already ``NA``/None) and chunks keyed by request id.

        ``rows`` must be sorted by ``req`` and the chunks by (req, time); chunks whose request
        is not in ``rows`` are dropped.
        """
        req = np.asarray(rows["req"], dtype=np.int64)
        chunk_req = np.asarray(chunk_req, dtype=np.int64)
        idx = np.searchsorted(req, chunk_req)
        keep = idx < len(req)
        keep[keep] = req[idx[keep]] == chunk_req[keep]
        return cls(
            **{name: rows[name] for name in ROW_COLUMNS if name not in OPTIONAL_COLUMNS},
            **{name: rows.get(name) for name in OPTIONAL_COLUMNS},
            chunk_req_idx=idx[keep],
            chunk_t_ns=np.asarray(chunk_t_ns, dtype=np.int64)[keep],
            chunk_n=np.asarray(chunk_n, dtype=np.int64)[keep],
        )

    @classmethod
    def concat(cls, tables: list[RequestTable]) -> RequestTable:
        """Rows of ``tables`` one after the other (e.g. live batches)."""
        tables = [t for t in tables if len(t)]
        if not tables:
            return cls.empty()
        if any(t.chunk_source is not None for t in tables):
            raise ValueError("tables read without their chunks cannot be concatenated")
        offsets = np.cumsum([0] + [len(t) for t in tables[:-1]])
        cols = {name: np.concatenate([getattr(t, name) for t in tables]) for name in ROW_COLUMNS}
        cols["chunk_req_idx"] = np.concatenate(
            [t.chunk_req_idx + off for t, off in zip(tables, offsets, strict=True)]
        )
        for name in ("chunk_t_ns", "chunk_n"):
            cols[name] = np.concatenate([getattr(t, name) for t in tables])
        return cls(**cols)

    # -- subsets ------------------------------------------------------------------------------

    def select(self, mask: np.ndarray) -> RequestTable:
        """The rows where boolean ``mask`` is true, with their chunks (order kept)."""
        mask = np.asarray(mask)
        if mask.dtype != bool:  # integer positions
            positions = mask
            mask = np.zeros(len(self), dtype=bool)
            mask[positions] = True
        if len(mask) != len(self):
            raise ValueError(f"mask has {len(mask)} entries for a table of {len(self)} rows")
        new_index = np.cumsum(mask) - 1
        chunk_keep = mask[self.chunk_req_idx]
        return RequestTable(
            **{name: getattr(self, name)[mask] for name in ROW_COLUMNS + self._itl_columns()},
            chunk_req_idx=new_index[self.chunk_req_idx[chunk_keep]],
            chunk_t_ns=self.chunk_t_ns[chunk_keep],
            chunk_n=self.chunk_n[chunk_keep],
            chunk_source=self.chunk_source,
        )

    def for_arm(self, arm: int) -> RequestTable:
        return self.select(self.arm == arm)
