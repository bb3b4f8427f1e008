"""The requests of a session file as a :class:`~abtui.metrics.table.RequestTable`, in memory
that grows with the requests only (docs/reliability.md, Memory).

- **Rows** are read :data:`ROW_SLICE` at a time in storage order (``rowid`` ranges, no sort)
  into preallocated arrays; the writer appends requests in id order, and a file stored in
  another order is sorted by ``req`` afterwards, one column at a time. A column that holds
  only zeros (``level`` and ``block`` of most sessions, ``run``, ``empty_token_chunks``, often
  ``connect_ns``) is given back as ``np.zeros``: pages the kernel maps on first write, so it
  costs no resident memory. String columns
  (``status``, ``error_class``, ``token_source``) come back as small integer codes that index
  one Python string per distinct value: a fetched string column costs ~100 bytes a row
  (2 M rows: +215 MB), a code 8.
- **Chunks** stay in the file (``chunks=False``, the default): the table's ``chunk_source``
  streams them (:class:`abtui.store.chunks.FileChunks`) and one pass reads, per request, the
  number of gaps between its chunks, their sum and the largest (``itl_n``, ``itl_sum_ns``,
  ``itl_max_ns``: the ITL SLO), and the first pass of each arm's ok rows' ITL
  (:func:`abtui.metrics.gaps.first_pass`, kept as ``table.gap_first_pass``). ITL's
  distribution is then read in one more pass that never holds the gaps
  (:mod:`abtui.metrics.gaps`). ``chunks=True`` loads them as arrays (:func:`chunk_columns`).
"""

from __future__ import annotations

import duckdb
import numpy as np

from abtui.metrics import gaps
from abtui.metrics.keys import unique_ints
from abtui.metrics.table import INT_COLUMNS, NA, NULLABLE_COLUMNS, STR_COLUMNS, RequestTable
from abtui.store.chunks import FileChunks, Opener, Unordered
from abtui.store.damage import times
from abtui.store.profiled import outside_sql

ROW_SLICE = 1 << 15  # requests per query (1 << 18 held ~50 MB more while reading, no faster)
CHUNK_SLICE = 250_000  # chunk_columns reads the chunks of this many at a time (its peak)


def _plain(col: np.ndarray, fill=None) -> np.ndarray:
    if isinstance(col, np.ma.MaskedArray):
        return col.filled(fill)
    return np.asarray(col)


def read_rows(con: duckdb.DuckDBPyConnection, include_warmup: bool) -> dict[str, np.ndarray]:
    """Every column of ``RequestTable`` but the chunks, sorted by ``req`` (module docstring)."""
    have = {
        r[0]
        for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'requests'"
        ).fetchall()
    }
    end = int(con.execute("SELECT COALESCE(max(rowid), -1) + 1 FROM requests").fetchone()[0])
    where = "rowid < ?" + ("" if include_warmup else " AND NOT warmup")  # rows a writer adds
    if not include_warmup:  # the items a profiling window slowed, as warm-up is
        where += outside_sql(con)
    n = con.execute(f"SELECT count(*) FROM requests WHERE {where}", [end]).fetchone()[0]
    words = {
        c: [
            r[0]
            for r in con.execute(
                f"SELECT DISTINCT {c} FROM requests WHERE {c} IS NOT NULL ORDER BY 1"
            ).fetchall()
        ]
        for c in STR_COLUMNS
    }
    select, params = [], []
    for c in INT_COLUMNS:
        if c == "first_output_ns" and c not in have:  # a file before it: the first token
            select.append(f"COALESCE(first_token_ns, {NA}) AS {c}")
        elif c in NULLABLE_COLUMNS and c not in have:  # reasoning_tokens: unknown
            select.append(f"{NA} AS {c}")
        elif c not in have:
            select.append(f"0 AS {c}")  # a column newer than the file (level, block)
        elif c in NULLABLE_COLUMNS:
            select.append(f"COALESCE({c}, {NA}) AS {c}")
        else:
            select.append(c)
    select.append("warmup")
    for c in STR_COLUMNS:  # code k ≥ 1 is words[c][k − 1]; 0 is NULL
        cases = " ".join(f"WHEN ? THEN {k + 1}" for k in range(len(words[c])))
        select.append(
            f"(CASE {c} {cases} ELSE 0 END)::INTEGER AS {c}" if cases else f"0::INTEGER AS {c}"
        )
        params += words[c]
    out = {c: np.empty(n, dtype=np.int64) for c in INT_COLUMNS}
    out["warmup"] = np.empty(n, dtype=bool)
    codes = {c: np.empty(n, dtype=np.int32) for c in STR_COLUMNS}
    sql = f"SELECT {', '.join(select)} FROM requests WHERE rowid >= ? AND {where}"
    at = 0
    for lo in range(0, end, ROW_SLICE):
        got = con.execute(sql, [*params, lo, min(lo + ROW_SLICE, end)]).fetchnumpy()
        m = len(got["req"])
        for c in INT_COLUMNS:
            out[c][at : at + m] = _plain(got[c], 0)
        out["warmup"][at : at + m] = _plain(got["warmup"], False)
        for c in STR_COLUMNS:
            codes[c][at : at + m] = _plain(got[c], 0)
        at += m
        del got
    for c in [*INT_COLUMNS, "warmup"]:  # a column of zeros (level, block, run, ...) costs no
        if not out[c].any():  # memory as fresh zeroed pages, which are never written
            out[c] = np.zeros(n, dtype=out[c].dtype)
    req = out["req"]
    if n > 1 and not (req[1:] > req[:-1]).all():  # not stored in id order: sort each column
        order = np.argsort(req, kind="stable")
        for cols in (out, codes):
            for c in cols:
                cols[c] = cols[c][order]
    for c in STR_COLUMNS:
        lookup = np.empty(len(words[c]) + 1, dtype=object)
        lookup[1:] = words[c]
        out[c] = lookup[codes.pop(c)]
    return out


def read_request_table(
    con: duckdb.DuckDBPyConnection,
    connect: Opener,
    keep: object,
    include_warmup: bool = False,
    chunks: bool = False,
    name: object = None,
) -> RequestTable:
    """The table of the file ``con`` reads (module docstring). ``connect`` opens a new
    connection to the same file for each later pass over the chunks; ``keep`` is kept alive
    with the table (the reader's private copy of a locked file); ``name``: the file, for the
    error a chunk time out of range raises (:func:`abtui.store.damage.times`)."""
    rows = read_rows(con, include_warmup)
    if chunks:
        idx, t_ns, n_tok = chunk_columns(con, rows["req"], name)
        return RequestTable(**rows, chunk_req_idx=idx, chunk_t_ns=t_ns, chunk_n=n_tok)
    source = FileChunks(connect, keep, name)
    empty = np.zeros(0, dtype=np.int64)
    t = RequestTable(
        **rows, chunk_req_idx=empty, chunk_t_ns=empty, chunk_n=empty, chunk_source=source
    )
    # each arm's ok rows: the groups whose ITL the verdict and the summary scan
    ok = t.ok
    groups = [(t.arm == a) & ok for a in unique_ints(t.arm)]
    n_chunks = int(con.execute("SELECT count(*) FROM chunks").fetchone()[0])
    try:
        per_row, first = gaps.first_pass(t, groups, n_chunks)
    except Unordered:
        source.use_sorted()
        per_row, first = gaps.first_pass(t, groups, n_chunks)
    t.itl_n, t.itl_sum_ns, t.itl_max_ns = per_row.n, per_row.sum_ns, per_row.max_ns
    t.gap_first_pass = first  # not a column: a table selected from it scans afresh
    return t


def chunk_columns(
    con, req: np.ndarray, name: object = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chunks of the requests ``req`` (sorted ids), in (req, seq) order: each one's row
    index into ``req``, arrival time and tokens, as int64 arrays filled in place.

    The peak is those arrays plus one slice of :data:`CHUNK_SLICE` chunks: the count per
    request is read first (one row per request), then ranges of requests holding at most
    that many chunks are read and sorted one range at a time. One query over every chunk
    (a join with ``requests`` and an ORDER BY over all of them) peaked at ~4× the arrays in
    DuckDB's sort and numpy's copies (docs/reliability.md, Memory)."""
    counts = con.execute("SELECT req, count(*) FROM chunks GROUP BY req ORDER BY req").fetchnumpy()
    c_req, c_n = _plain(counts["req"]).astype(np.int64), _plain(counts["count_star()"])
    pos = np.searchsorted(req, c_req)
    hit = pos < len(req)
    hit[hit] = req[pos[hit]] == c_req[hit]
    c_req, c_n = c_req[hit], c_n[hit].astype(np.int64)
    total = int(c_n.sum())
    idx = np.empty(total, dtype=np.int64)
    t_ns = np.empty(total, dtype=np.int64)
    n_tok = np.empty(total, dtype=np.int64)
    ends = np.cumsum(c_n)
    at, k = 0, 0
    while k < len(c_req):  # requests k … j−1: at most CHUNK_SLICE chunks (or one request)
        j = max(
            k + 1, int(np.searchsorted(ends, (ends[k - 1] if k else 0) + CHUNK_SLICE, side="right"))
        )
        lo, hi = int(c_req[k]), int(c_req[j - 1])
        got = con.execute(
            "SELECT req, t_ns, n_tokens FROM chunks WHERE req BETWEEN ? AND ? ORDER BY req, seq",
            [lo, hi],
        ).fetchnumpy()
        g_req = _plain(got["req"]).astype(np.int64, copy=False)
        p = np.searchsorted(req, g_req)
        keep = p < len(req)
        keep[keep] = req[p[keep]] == g_req[keep]  # warm-up chunks in the range: left out
        m = int(keep.sum())
        idx[at : at + m] = p[keep]
        t_ns[at : at + m] = times(got["t_ns"], name, "a chunk's t_ns")[keep]
        n_tok[at : at + m] = _plain(got["n_tokens"], 1)[keep]
        at, k = at + m, j
        del got, g_req, p, keep
    return idx[:at], t_ns[:at], n_tok[:at]
