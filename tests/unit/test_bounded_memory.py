"""The main process's live state does not grow with the number of requests.

Each test feeds N requests, then 4N more, through one component and compares its size: the
session writer's DuckDB memory (its cache of blocks already written was the soak's growth),
and the runner's live counts and histograms. Sizes, never times."""

from __future__ import annotations

import base64
import pickle
import random

from abtui.client.records import OK, RequestRecord
from abtui.runner.messages import GeneratorStats
from abtui.runner.session import _Live
from abtui.store.writer import SessionWriter

N = 3000


def _text(rng: random.Random) -> str:
    return base64.b64encode(rng.randbytes(1500)).decode()  # 2000 chars, incompressible


def _rec(i: int, text: str | None = None, n_chunks: int = 8) -> RequestRecord:
    t = 10**12 + i * 50_000_000  # one every 50 ms: N requests span 150 s, past SERIES_S
    chunks = [t + 20_000_000 + k * 5_000_000 for k in range(n_chunks)]
    return RequestRecord(
        arm=i % 2,
        item=i // 2,
        scheduled_ns=t,
        dispatched_ns=t,
        first_byte_ns=chunks[0],
        done_ns=chunks[-1],
        chunk_ns=chunks,
        chunk_tokens=[1] * n_chunks,
        status=OK,
        n_input=64,
        n_output=n_chunks,
        finish_reason="length",
        text=text,
    )


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


def test_writing_the_workload_holds_duckdb_under_its_limit(tmp_path):
    """A session streams its items into the file a batch at a time (abtui.runner.schedule):
    under ITEMS_MEMORY_LIMIT DuckDB evicts the prompts it has written. Unlimited, it kept them
    all (~95 MB after the 100 MB of text here; 614 MB in a 100,000 × 512-token run)."""
    from abtui.client.items import Item

    rng = random.Random(11)
    w = SessionWriter(tmp_path / "s.duckdb")
    top = 0.0
    for b in range(50):
        w.write_items(
            [
                Item(index=b * 1000 + k, id=f"i{b * 1000 + k}", prompt=_text(rng))
                for k in range(1000)
            ]
        )
        top = max(top, _duckdb_mb(w))
    (stored,) = w.con.execute("SELECT sum(strlen(prompt)) FROM items").fetchone()
    w.close()
    assert stored == 50 * 1000 * 2000
    assert top < 70, top


def test_a_batch_the_items_limit_cannot_hold_is_written_without_it(tmp_path, monkeypatch):
    """DuckDB spills what the limit cannot hold; should it refuse instead (OutOfMemory), the
    batch is written again under its default limit, nothing lost, and the default stays."""
    from contextlib import contextmanager

    import duckdb

    from abtui.client.items import Item

    w = SessionWriter(tmp_path / "s.duckdb")
    real = SessionWriter._transaction
    limits: list[str] = []

    @contextmanager
    def refuse_once(self):
        limits.append(self.con.execute("SELECT current_setting('memory_limit')").fetchone()[0])
        if len(limits) == 1:
            raise duckdb.OutOfMemoryException("could not allocate block (test)")
        with real(self) as con:
            yield con

    monkeypatch.setattr(SessionWriter, "_transaction", refuse_once)
    w.write_items([Item(index=k, id=f"i{k}", prompt=f"prompt {k}") for k in range(500)])
    after = w.con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    (n,) = w.con.execute("SELECT count(*) FROM items").fetchone()
    monkeypatch.undo()
    w.close()
    assert n == 500 and len(limits) == 2
    assert limits[0] != limits[1] == after  # limited, then DuckDB's default, which stays


def test_live_counts_and_histograms_do_not_grow_with_requests():
    live = _Live(["a", "b"], planned=5 * N, slo={"ttft": 0.5})
    stats = GeneratorStats(in_flight=3, cpu_s=1.0, lag_max_s=0.001)
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


_PEAK_CHILD = r"""
import json, sys
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
what = sys.argv[1]
if what == "table":
    from abtui.store.reader import SessionReader
    rd = SessionReader(sys.argv[2]).__enter__()
    rd.request_table(chunks=True)  # once, so that DuckDB's and numpy's fixed costs are in the base
else:
    import numpy as np
    from abtui.stats.bootstrap import circular_block_weights
    circular_block_weights(500, 1, 100, np.random.default_rng(0))
open("/proc/self/clear_refs", "w").write("5")  # VmHWM := VmRSS
base = hwm()
if what == "table":
    t = rd.request_table(chunks=True)
    arrays = sum(getattr(t, c).nbytes for c in ("chunk_req_idx", "chunk_t_ns", "chunk_n"))
    n = len(t.chunk_t_ns)
else:
    w = circular_block_weights(500, int(sys.argv[2]), 10_000, np.random.default_rng(1))
    arrays, n = w.nbytes, w.size
print(json.dumps({"extra_mb": hwm() - base, "arrays_mb": arrays / 2**20, "n": n}))
"""


def _peak(*args) -> dict:
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _PEAK_CHILD, *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(out.stdout)


def test_reading_a_session_costs_its_arrays_and_one_slice_not_a_sort_of_every_chunk(tmp_path):
    """A real session file of 2,000 requests × 400 chunks (800,000 chunks, 18 MB as int64
    arrays): request_table's peak above its base is the arrays plus one slice of chunks. One
    query joining and sorting every chunk peaked at ~4× the arrays (docs/reliability.md)."""
    w = SessionWriter(tmp_path / "big.duckdb")
    for k in range(0, 2000, 200):
        w.add_records([_rec(i, n_chunks=400) for i in range(k, k + 200)], store_text=False)
        w.flush()
    w.close()
    got = _peak("table", tmp_path / "big.duckdb")
    assert got["n"] == 800_000
    assert got["extra_mb"] < 1.6 * got["arrays_mb"] + 12, got


def test_resample_weights_cost_their_matrix_not_three_int64_copies():
    """10,000 resamples × 500 units (the verdict's): 19 MB of float32 weights; drawing and
    counting every resample at once held int64 matrices of 38 MB each beside it."""
    for ell in (1, 7):
        got = _peak("weights", ell)
        assert got["extra_mb"] < got["arrays_mb"] + 25, got


def test_resample_weights_are_the_same_counted_in_slices(monkeypatch):
    import numpy as np

    from abtui.stats import bootstrap

    def reference(n_units, ell, n_res, rng):  # all resamples at once (before slicing)
        n_blocks = -(-n_units // ell)
        starts = rng.integers(0, n_units, size=(n_res, n_blocks))
        flat = (starts + (np.arange(n_res) * n_units)[:, None]).ravel()
        counts = np.bincount(flat, minlength=n_res * n_units).reshape(n_res, n_units)
        ext = np.concatenate([counts[:, n_units - ell + 1 :], counts], axis=1)
        cs = np.concatenate([np.zeros((n_res, 1), np.int64), np.cumsum(ext, axis=1)], axis=1)
        return (cs[:, ell:] - cs[:, :-ell]).astype(np.float32)

    # one slice; slices of odd sizes (27 × 37, …)
    for cells in (bootstrap.WEIGHT_ROWS_CELLS, 999):
        monkeypatch.setattr(bootstrap, "WEIGHT_ROWS_CELLS", cells)
        for n_units, ell in ((500, 1), (500, 9), (37, 5), (37, 1)):
            got = bootstrap.circular_block_weights(n_units, ell, 3001, np.random.default_rng(4))
            assert (got == reference(n_units, ell, 3001, np.random.default_rng(4))).all()


# -- the verdict's ITL: read from the file, never held -----------------------------

_ITL_CHILD = r"""
import json, sys, tracemalloc
from abtui.metrics import gaps
from abtui.store import chunks
gaps.BATCH = chunks.SLICE = 1 << 14  # both files span many slices: what is left is growth
from abtui.verdict.saved import session_verdict
session_verdict(sys.argv[1], store=False)  # imports, scipy and DuckDB's own set-up: the base
tracemalloc.start()
sv = session_verdict(sys.argv[1], store=False)
itl = {e.key: [e.a, e.b] for p in sv.verdict.pairs for e in p.comparison.effects
       if e.metric == "itl"}
print(json.dumps({"peak_mb": tracemalloc.get_traced_memory()[1] / 2**20, "itl": itl}))
"""


def _itl_session(path, n: int, k: int) -> None:
    rng = random.Random(k)
    with SessionWriter(path) as w:
        w.write_meta(spec={"slo": {"itl": 0.02}, "policy": {"resamples": 200}})
        w.write_arms(
            [
                {"arm": 0, "name": "a", "url": "http://a/v1"},
                {"arm": 1, "name": "b", "url": "http://b/v1"},
            ]
        )
        for i in range(0, n, 50):
            batch = []
            for j in range(i, i + 50):
                r = _rec(j, n_chunks=k)
                t = r.chunk_ns[0]
                r.chunk_ns = [t := t + int(rng.expovariate(1 / 4e6)) for _ in range(k)]
                r.done_ns = r.chunk_ns[-1]
                batch.append(r)
            w.add_records(batch)
            w.flush()


def test_a_verdict_holds_no_more_when_requests_stream_more_tokens(tmp_path):
    """The same 400 requests with 100 and with 3,000 token chunks each (1.2 M chunks: 27 MB
    as the reader's int64 arrays, and the verdict's per-gap arrays were several times that):
    the verdict's traced peak (Python objects and numpy buffers) grows by less than 3 MB."""
    peaks = []
    for k in (100, 3000):
        _itl_session(tmp_path / f"s{k}.duckdb", 400, k)
        got = _peak_of(_ITL_CHILD, tmp_path / f"s{k}.duckdb")
        assert got["itl"]["itl.p99"][0] > 0  # ITL was computed
        peaks.append(got["peak_mb"])
    assert peaks[1] < peaks[0] + 3, peaks


def test_a_verdict_never_loads_the_chunks(tmp_path, monkeypatch):
    """The verdict reads a table without chunk arrays, and its ITL rows equal those of the
    same records in memory (the arrays path)."""
    from abtui.metrics.table import RequestTable
    from abtui.stats.effects import compare
    from abtui.store import request_table
    from abtui.store.reader import SessionReader
    from abtui.verdict.saved import session_verdict

    def refuse(*a, **kw):
        raise AssertionError("the chunks were loaded")

    path = tmp_path / "s.duckdb"
    _itl_session(path, 200, 40)
    with SessionReader(path) as rd:
        records_table = rd.request_table(chunks=True)
    monkeypatch.setattr(request_table, "chunk_columns", refuse)
    sv = session_verdict(path, store=False)
    with SessionReader(path) as rd:
        assert len(rd.request_table().chunk_t_ns) == 0
    got = {e.key: (e.a, e.b) for e in sv.verdict.pairs[0].comparison.effects if e.metric == "itl"}
    ref = compare(RequestTable.concat([records_table]), 0, 1, {"itl": 0.02}, resamples=200)
    assert got == {e.key: (e.a, e.b) for e in ref.effects if e.metric == "itl"}


def test_the_main_process_does_not_import_scipy_stats_to_measure():
    """scipy.stats is ~50 MB of the main process's memory: the run's modules load it only
    when the verdict needs it (a rank test, a t quantile)."""
    import subprocess
    import sys

    code = (
        "import sys, abtui.cli.run, abtui.headless, abtui.runner.session, abtui.store.writer, "
        "abtui.report.console; print('scipy.stats' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _peak_of(child: str, *args) -> dict:
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", child, *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


_NO_SCIPY_CHILD = r"""
import json, sys
from abtui.verdict.saved import session_verdict
sv = session_verdict(sys.argv[1], store=False)
p = sv.verdict.pairs[0]
print(json.dumps({"loaded": sorted(m for m in ("scipy.stats", "scipy.special") if m in sys.modules),
                  "tests": sorted({t.test for t in p.comparison.rank_tests.values()}),
                  "p_errors": p.errors.p_higher,
                  "widened": any(e.hi != e.lo for e in p.comparison.effects)}))
"""


def _error_session(path, gap_ms: int, backwards: bool = False) -> None:
    """600 requests, the candidate's every tenth an HTTP error; ``gap_ms`` apart per arm.
    ``backwards``: each chunk's time drawn afresh, so some arrive before the one stored ahead."""
    from abtui.client.records import ERROR

    rng = random.Random(gap_ms)
    recs = []
    for i in range(600):
        r = _rec(i)
        t = 10**12 + i // 2 * gap_ms * 1_000_000
        c = t + int(rng.expovariate(1 / 2e7))
        r.chunk_ns = [
            (t + int(rng.expovariate(1 / 2e7)) if backwards else c) + k * 5_000_000
            for k in range(8)
        ]
        r.scheduled_ns = r.dispatched_ns = t
        r.first_byte_ns, r.done_ns = min(r.chunk_ns), max(r.chunk_ns)
        if r.arm == 1 and i % 20 == 1:
            r.status, r.error_class, r.chunk_ns, r.chunk_tokens = ERROR, "http", [], []
        recs.append(r)
    with SessionWriter(path) as w:
        w.write_meta(spec={"slo": {"ttft": 0.1}, "policy": {"resamples": 300}})
        w.write_arms(
            [
                {"arm": 0, "name": "a", "url": "http://a/v1"},
                {"arm": 1, "name": "b", "url": "http://b/v1"},
            ]
        )
        w.add_records(recs)


def test_a_verdict_does_not_import_scipy_stats(tmp_path):
    """scipy.stats costs a process ~72 MB and ~0.8 s of CPU (scipy.special alone 26 MB): a
    verdict takes its t and normal quantiles, rank-test tails and Fisher's test from
    abtui.stats.distributions. One session under load (Mann–Whitney), one light (Wilcoxon),
    both with errors in the candidate (Fisher's test)."""
    for gap_ms in (10, 200):  # in flight ≈ 5 (load) and ≈ 0.3 (light)
        _error_session(tmp_path / f"s{gap_ms}.duckdb", gap_ms)
        got = _peak_of(_NO_SCIPY_CHILD, tmp_path / f"s{gap_ms}.duckdb")
        assert got["loaded"] == [], got
        assert got["tests"] == (["mann-whitney"] if gap_ms == 10 else ["wilcoxon"]), got
        assert 0 < got["p_errors"] < 0.05 and got["widened"], got


def test_a_verdict_of_chunks_stored_out_of_time_order(tmp_path):
    """Negative gaps (a chunk stored after one that arrived later: hand-made or damaged files)
    fall in the ITL histogram's first bin; they made an index of −2⁶³ and the verdict raised."""
    from abtui.verdict.saved import session_verdict

    _error_session(tmp_path / "s.duckdb", 10, backwards=True)
    sv = session_verdict(tmp_path / "s.duckdb", store=False)
    for stat in ("p50", "p99", "mean"):
        e = sv.verdict.pairs[0].comparison.get(f"itl.{stat}")
        assert e.n_a == 300 * 7 and 0 < e.a < 0.2 and e.lo <= e.ratio <= e.hi, e


_SLOPE_CHILD = r"""
import importlib.util, json, sys, tracemalloc
spec = importlib.util.spec_from_file_location("synthetic_session", sys.argv[1])
ss = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ss)
from pathlib import Path
from abtui.verdict.saved import session_verdict
small, big = (Path(sys.argv[2]) / f"s{n}.duckdb" for n in (5000, 25000))
ss.write_session(small, 5000, 4, resamples=200)
ss.write_session(big, 25000, 4, resamples=200)
session_verdict(small, store=False)  # imports and DuckDB's own set-up: the base
peaks = []
for path in (small, big):
    tracemalloc.start()
    session_verdict(path, store=False)
    peaks.append(tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
print(json.dumps({"per_request": (peaks[1] - peaks[0]) / 40000, "peaks": peaks}))
"""


def test_a_verdict_holds_under_350_bytes_per_request(tmp_path):
    """The verdict's traced peak (numpy buffers and Python objects) of 25,000 and of 5,000
    requests per arm, 4 chunks each: what each further request costs. The table is ~190 bytes
    a request (~150 resident: zero columns are untouched pages, traced whole here); compare
    held ~290 more at once, reading 262,144 rows per query a slice that grew with them:
    ~290 in all (docs/reliability.md)."""
    from pathlib import Path

    script = Path(__file__).parents[2] / "scripts" / "synthetic_session.py"
    got = _peak_of(_SLOPE_CHILD, script, tmp_path)
    assert got["per_request"] < 350, got
