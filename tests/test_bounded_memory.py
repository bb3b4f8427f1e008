"""The main process's live state does not grow with the number of requests (issue 10, soak).

Each test feeds N requests, then 4N more, through one component and compares its size: the
session writer's DuckDB memory (its cache of blocks already written was the soak's growth),
and the runner's live counts and histograms. Sizes, never times."""

from __future__ import annotations

import base64
import pickle
import random

from abtui.client.records import OK, RequestRecord
from abtui.runner.session import _Live
from abtui.store.writer import SessionWriter

N = 3000


def _text(rng: random.Random) -> str:
    return base64.b64encode(rng.randbytes(1500)).decode()  # 2000 chars, incompressible


def _rec(i: int, text: str | None = None, n_chunks: int = 8) -> RequestRecord:
    t = 10**12 + i * 50_000_000  # one every 50 ms: N requests span 150 s, past SERIES_S
    chunks = [t + 20_000_000 + k * 5_000_000 for k in range(n_chunks)]
    return RequestRecord(arm=i % 2, item=i // 2, scheduled_ns=t, dispatched_ns=t,
                         first_byte_ns=chunks[0], done_ns=chunks[-1], chunk_ns=chunks,
                         chunk_tokens=[1] * n_chunks, status=OK, n_input=64, n_output=n_chunks,
                         finish_reason="length", text=text)  # fmt: skip


def _duckdb_mb(w: SessionWriter) -> float:
    (b,) = w.con.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()
    return b / 2**20


def _file_mb(w: SessionWriter) -> float:
    return sum(p.stat().st_size for p in w.path.parent.glob(w.path.name + "*")) / 2**20


def test_session_writer_memory_does_not_grow_with_requests(tmp_path):
    # 2 KB of incompressible text per request: 4N requests make a file several times the
    # writer's cache floor (CACHE_TRIM_LIMIT, 8 MB), so a cache that kept every written block
    # would show. DuckDB checkpoints at 1 MB of WAL here (16 MB by default) to get there fast.
    rng = random.Random(10)
    w = SessionWriter(tmp_path / "s.duckdb")
    w.con.execute("SET wal_autocheckpoint = '1MB'")
    peak: list[float] = []
    sizes: list[float] = []
    i = 0
    for total in (N, 5 * N):
        top = 0.0
        while i < total:
            w.add_records([_rec(i + k, _text(rng)) for k in range(100)])
            i += 100
            w.flush()
            top = max(top, _duckdb_mb(w))
        peak.append(top)
        sizes.append(_file_mb(w))
    w.close()
    assert sizes[1] > 3 * sizes[0] and sizes[1] > 25, sizes  # the file did grow 4N worth
    # Bounded: the peak after 4N more requests is within 4 MB of the peak after N (margin for
    # DuckDB's own allocations); a cache of every written block would add ≥ 20 MB here.
    assert peak[1] <= peak[0] + 4, (peak, sizes)


def test_live_counts_and_histograms_do_not_grow_with_requests():
    live = _Live(["a", "b"], planned=5 * N, slo={"ttft": 0.5})
    stats = {"in_flight": 3, "cpu_s": 1.0, "lag_max_s": 0.001}
    sizes = []
    i = 0
    for total in (N, 5 * N):
        while i < total:
            batch = [_rec(i + k) for k in range(50)]
            i += 50
            for arm in (0, 1):
                live.add(arm, [r for r in batch if r.arm == arm], stats)
        sizes.append(len(pickle.dumps((live.arms, live._ttft, live._tpot))))
    assert live.arms[0].done == 5 * N // 2  # every record was counted
    assert live.arms[0].live.ttft.n == 5 * N // 2
    assert sizes[1] <= sizes[0] * 1.02 + 256, sizes  # no list grows with the run
