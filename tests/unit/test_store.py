"""The session file on real DuckDB files: round trip, secrets, durability, errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pytest

from abtui.client.items import Item
from abtui.client.records import CANCELLED, E_TIMEOUT, ERROR, OK, RequestRecord
from abtui.client.redact import is_secret_key, scrub_config, scrub_url
from abtui.errors import StoreError
from abtui.metrics import request as request_metrics
from abtui.metrics.table import NA, RequestTable
from abtui.store import writer as writer_mod
from abtui.store.reader import SessionReader
from abtui.store.schema import SCHEMA_VERSION
from abtui.store.writer import SessionWriter

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-THIS-IS-A-SECRET-0123456789"


def rec(item: int, arm: int = 0, *, t0: int = 10**12, n: int = 3, **kw) -> RequestRecord:
    chunks = [t0 + 100_000_000 + 10_000_000 * k for k in range(n)]
    base = dict(
        arm=arm,
        item=item,
        scheduled_ns=t0,
        dispatched_ns=t0 + 1_000_000,
        first_byte_ns=t0 + 50_000_000,
        done_ns=(chunks[-1] if chunks else t0) + 5_000_000,
        chunk_ns=chunks,
        chunk_tokens=[1] * n,
        n_input=10,
        n_output=n,
        text=f"answer {item}",
        finish_reason="length",
        http_status=200,
    )
    base.update(kw)
    return RequestRecord(**base)


def arms(secret: str = SECRET) -> list[dict]:
    return [
        {
            "arm": 0,
            "name": "bf16",
            "role": "baseline",
            "url": f"http://user:{secret}@127.0.0.1:8000/v1?api_key={secret}&x=1",
            "model": "m",
            "api": "chat",
            "config": {
                "api_key": secret,
                "max_tokens": 128,
                "tokenizer": "t",
                "headers": {"Authorization": f"Bearer {secret}"},
                "extra": {"hf_token": secret, "Client-Secret": secret, "keep": 1},
                "list": [{"password": secret, "n": 2}],
            },
            "gpu": "H100",
        },
        {
            "arm": 1,
            "name": "fp8",
            "role": "candidate",
            "url": "http://h/v1",
            "model": "m",
            "api": "chat",
            "config": {"ApiKey": secret, "dtype": "fp8"},
        },
    ]


def test_round_trip(tmp_path):
    path = tmp_path / "sub" / "dir" / "s.duckdb"  # parent dirs are created
    items = [
        Item(index=0, id="a", arrival_s=0.0, prompt="hello", max_tokens=16, n_input=3),
        Item(
            index=1,
            id="b",
            arrival_s=0.5,
            messages=[{"role": "user", "content": "hi"}],
            expected="x",
            suite="needle",
            tags=["long", "k2"],
        ),
    ]
    records = [rec(0), rec(1, arm=1), rec(0, warmup=True)]
    records.append(
        rec(1, status=ERROR, error_class=E_TIMEOUT, error_message="read timeout", n=0, n_output=0)
    )
    with SessionWriter(path) as w:
        w.write_meta(spec_text="[workload]\nn = 2\n", spec={"workload": {"n": 2}}, name="s")
        w.write_arms(arms())
        w.write_items(items)
        w.add_records(records)
        w.add_records([rec(0, arm=1, text="hidden")], store_text=False)
        w.event("start", "go", arm=None)
        w.add_telemetry([(0, "nvml", 123, "power_w", 300.5), (None, "host", 124, "cpu", None)])
        w.write_quality([{"arm": 0, "item": 1, "score": 1.0, "correct": True, "detail": {"a": 1}}])
        w.write_verdict({"delta": 0.02}, {"decision": "GO"})

    with SessionReader(path) as r:
        m = r.meta()
        assert m["status"] == "complete" and r.complete
        assert m["schema_version"] == SCHEMA_VERSION
        assert m["spec"] == {"workload": {"n": 2}} and m["spec_text"].startswith("[workload]")
        assert m["name"] == "s" and m["ended"] and m["created"]
        assert {"hostname", "python", "cpu_count", "versions"} <= set(m["host"])
        assert "duckdb" in m["host"]["versions"]
        anchor = m["clock_anchor"]
        assert (
            abs(r.to_wall(anchor["perf_counter_ns"]).timestamp() - anchor["wall_ns"] / 1e9) < 1e-3
        )

        a = r.arms()
        assert [x["name"] for x in a] == ["bf16", "fp8"]
        assert a[0]["config"] == {
            "max_tokens": 128,
            "tokenizer": "t",
            "extra": {"keep": 1},
            "list": [{"n": 2}],
            "gpu": "H100",
        }
        assert a[0]["url"] == "http://127.0.0.1:8000/v1?x=1"
        assert a[1]["config"] == {"dtype": "fp8"}
        assert SECRET not in json.dumps(a)

        assert r.items() == items

        t = r.request_table()
        assert len(t) == 4  # warm-up excluded by default
        assert not t.warmup.any()
        assert list(t.status) == [OK, OK, ERROR, OK]
        assert t.error_class[2] == E_TIMEOUT and t.error_class[0] is None
        assert t.first_token_ns[2] == NA and t.done_ns[2] != NA
        assert t.n_chunks.tolist() == [3, 3, 0, 3]
        assert len(r.request_table(include_warmup=True)) == 5
        texts = r.texts()
        assert texts[0] == "answer 0" and texts[4] is None  # store_text=False

        ev = r.events()
        assert ev[-1]["kind"] == "start" and ev[-1]["message"] == "go"
        tel = r.telemetry()
        assert tel["metric"].tolist() == ["power_w", "cpu"]
        assert tel["arm"][1] == NA and np.isnan(tel["value"][1])
        assert r.quality()[0]["correct"] is True
        assert r.verdicts()[0]["result"] == {"decision": "GO"}
    assert SECRET.encode() not in path.read_bytes()


def test_server_timings_round_trip_and_a_file_without_the_table(tmp_path):
    path = tmp_path / "t.duckdb"
    full = {
        "cache_n": 0,
        "prompt_n": 5,
        "prompt_ms": 12.5,
        "predicted_n": 3,
        "predicted_ms": 8.0,
        "draft_n": 4,
        "draft_n_accepted": 3,
    }
    records = [
        rec(0, timings=full),
        rec(1),  # no timings (vLLM, SGLang...): no row
        rec(2, arm=1, timings={"prompt_n": 7}, timings_note="timings: prompt_ms is not a number"),
        rec(3, arm=1, timings_note="timings is not an object (str)"),
        rec(4, warmup=True, timings=full),
    ]
    with SessionWriter(path) as w:
        w.write_arms([{"arm": 0, "name": "a"}, {"arm": 1, "name": "b"}])
        w.add_records(records[:2])
        w.flush()  # req ids continue across flushes
        w.add_records(records[2:])
    with SessionReader(path) as r:
        t = r.server_timings()
        assert t["req"].tolist() == [0, 2, 3] and t["arm"].tolist() == [0, 1, 1]
        assert t["prompt_ms"][0] == 12.5 and t["draft_n_accepted"][0] == 3.0
        assert t["prompt_n"][1] == 7.0 and np.isnan(t["prompt_ms"][1])  # NULL → NaN
        assert t["note"].tolist() == [
            None,
            "timings: prompt_ms is not a number",
            "timings is not an object (str)",
        ]
        assert len(r.server_timings(include_warmup=True)["req"]) == 4
    # a session written before the table existed still opens, with no timings
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE server_timings")
    con.close()
    with SessionReader(path) as r:
        t = r.server_timings()
        assert t["req"].size == 0 and t["prompt_ms"].dtype == float
        assert len(r.request_table()) == 4
    from abtui.telemetry.diagnosis import diagnose

    diags = diagnose(path)  # and its diagnosis has no check, rather than failing
    assert len(diags) == 2 and all(d.timings is None for d in diags)


def test_secret_keys():
    for k in (
        "api_key",
        "API-KEY",
        "apikey",
        "Authorization",
        "token",
        "hf_token",
        "headers",
        "extra_headers",
        "client_secret",
        "password",
        "access_token",
    ):
        assert is_secret_key(k), k
    for k in ("max_tokens", "tokenizer", "model", "ignore_eos", "n_tokens", "dtype", "api_key_env"):
        assert not is_secret_key(k), k
    assert scrub_config({"a": [{"token": 1, "b": 2}], "c": ({"secret": 3},)}) == {
        "a": [{"b": 2}],
        "c": [{}],
    }
    assert scrub_url("https://h:1/v1") == "https://h:1/v1"
    assert scrub_url(None) is None


def test_meta_drops_credential_keys_of_the_spec_only(tmp_path):
    """The spec's credential keys go; data keyed by text keeps every key: a model's top-k
    logprobs are keyed by token, and ``token`` or ``auth`` can be one."""
    path = tmp_path / "m.duckdb"
    logprobs = {"a": {"sequences": [[["token", {"token": -0.1, "auth": -2.0, "x": -3.0}]]]}}
    with SessionWriter(path) as w:
        w.write_meta(
            spec={"arms": [{"name": "a", "params": {"api_key": "k" * 12, "t": 1}}]},
            quality_logprobs=logprobs,
        )
    with SessionReader(path) as rd:
        meta = rd.meta()
    assert meta["spec"]["arms"][0]["params"] == {"t": 1}
    assert meta["quality_logprobs"] == logprobs


def test_table_from_reader_matches_records(tmp_path):
    records = [rec(i, arm=i % 2, t0=10**12 + i * 10**7, n=1 + i % 5) for i in range(50)]
    records[7] = rec(7, arm=1, status=CANCELLED, error_class="cancelled", n=0, n_output=None)
    with SessionWriter(tmp_path / "s.duckdb") as w:
        for k in range(0, 50, 10):  # several flushes
            w.add_records(records[k : k + 10])
            w.flush()
    a = RequestTable.from_records(records)
    with SessionReader(tmp_path / "s.duckdb") as r:
        b = r.request_table(chunks=True)
        lean = r.request_table()  # chunks left in the file, their gaps summed per request
    for name in (
        "req",
        "arm",
        "item",
        "dispatched_ns",
        "first_token_ns",
        "last_token_ns",
        "done_ns",
        "n_output",
        "n_input",
        "chunk_req_idx",
        "chunk_t_ns",
        "chunk_n",
    ):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert list(a.status) == list(b.status)
    assert list(a.error_class) == list(b.error_class)
    assert list(lean.status) == list(a.status) and list(lean.token_source) == list(a.token_source)
    assert len(lean.chunk_t_ns) == 0 and lean.n_chunk_rows == a.n_chunk_rows
    assert np.array_equal(lean.itl_n, np.maximum(a.n_chunks - 1, 0))
    span = np.where(a.n_chunks > 1, a.last_token_ns - a.first_token_ns, 0)
    assert np.array_equal(lean.itl_sum_ns, span)
    assert np.array_equal(
        request_metrics.itl_max_s(lean), request_metrics.itl_max_s(a), equal_nan=True
    )


def test_large_batch(tmp_path):
    n_req, n_chunks = 1000, 100  # 100k chunks in one flush
    records = [rec(i, t0=10**12 + i, n=n_chunks) for i in range(n_req)]
    items = [Item(index=i, id=f"i{i}", prompt="w " * 20) for i in range(100_000)]
    with SessionWriter(tmp_path / "big.duckdb") as w:
        w.write_items(items)
        w.add_records(records)
        w.flush()
    with SessionReader(tmp_path / "big.duckdb") as r:
        assert r.query("SELECT count(*) FROM chunks")[0][0] == n_req * n_chunks
        assert r.query("SELECT count(*) FROM items")[0][0] == 100_000
        assert r.query("SELECT max(seq) FROM chunks")[0][0] == n_chunks - 1
        t = r.request_table()
        assert len(t) == n_req and t.n_chunk_rows == n_req * n_chunks


def test_refuses_overwrite(tmp_path):
    path = tmp_path / "s.duckdb"
    SessionWriter(path).close()
    with pytest.raises(StoreError) as e:
        SessionWriter(path)
    assert e.value.hint and "overwrite" in e.value.hint
    with SessionWriter(path, overwrite=True) as w:
        w.add_records([rec(0)])
    with SessionReader(path) as r:
        assert len(r.request_table()) == 1


def test_context_manager_statuses(tmp_path):
    with pytest.raises(RuntimeError), SessionWriter(tmp_path / "f.duckdb") as w:
        w.add_records([rec(0)])
        raise RuntimeError("boom")
    with SessionReader(tmp_path / "f.duckdb") as r:
        assert r.meta()["status"] == "failed" and not r.complete
        assert len(r.request_table()) == 1  # flushed on the way out
        assert "boom" in r.events()[-1]["message"]
    with pytest.raises(KeyboardInterrupt), SessionWriter(tmp_path / "i.duckdb") as w:
        raise KeyboardInterrupt
    with SessionReader(tmp_path / "i.duckdb") as r:
        assert r.status == "interrupted"


def test_maybe_flush(tmp_path, monkeypatch):
    w = SessionWriter(tmp_path / "s.duckdb")
    assert not w.maybe_flush()  # nothing pending
    w.add_records([rec(0)])
    monkeypatch.setattr(writer_mod, "FLUSH_INTERVAL_S", 3600.0)
    assert not w.maybe_flush() and w.pending == 1
    monkeypatch.setattr(writer_mod, "FLUSH_RECORDS", 1)
    assert w.maybe_flush() and w.pending == 0 and w.n_written == 1
    monkeypatch.setattr(writer_mod, "FLUSH_RECORDS", 10**9)
    monkeypatch.setattr(writer_mod, "FLUSH_INTERVAL_S", 0.0)
    w.event("x", "y")
    assert w.maybe_flush()
    w.close()
    w.close()  # idempotent
    with pytest.raises(StoreError):
        w.add_records([rec(1)]) or w.flush()


WRITER_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from abtui.client.records import RequestRecord
    from abtui.store.writer import SessionWriter

    def rec(i):
        t0 = 10**12 + i * 10**6
        return RequestRecord(arm=0, item=i, scheduled_ns=t0, dispatched_ns=t0 + 1,
                             done_ns=t0 + 100, chunk_ns=[t0 + 10, t0 + 20], chunk_tokens=[1, 1],
                             n_output=2, n_input=3)

    w = SessionWriter({path!r})
    i = 0
    for batch in range(3):
        w.add_records([rec(i + k) for k in range(100)])
        i += 100
        w.event("batch", str(batch))
        w.flush()
    w.add_records([rec(i + k) for k in range(50)])  # buffered, never flushed: lost
    if {mode!r} == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    print("ready", flush=True)
    sys.stdin.readline()
    w.add_records([rec(i + 50)])
    w.close()
    """
)


def _writer_proc(path: Path, mode: str) -> subprocess.Popen:
    script = WRITER_SCRIPT.format(root=str(ROOT), path=str(path), mode=mode)
    return subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def test_sigkill_durability(tmp_path):
    path = tmp_path / "killed.duckdb"
    proc = _writer_proc(path, "kill")
    proc.wait(timeout=60)
    assert proc.returncode == -9
    with SessionReader(path) as r:
        assert r.meta()["status"] == "running" and not r.complete
        t = r.request_table()
        assert len(t) == 300 and t.n_chunk_rows == 600
        assert t.req.tolist() == list(range(300))
        assert [e["message"] for e in r.events()] == ["0", "1", "2"]
    with SessionReader(path) as r:  # opening did not damage it
        assert len(r.request_table()) == 300


def test_read_while_other_process_writes(tmp_path):
    path = tmp_path / "live.duckdb"
    proc = _writer_proc(path, "wait")
    try:
        assert proc.stdout.readline().strip() == "ready"
        with SessionReader(path) as r:  # the writer holds the lock: a snapshot copy
            assert r.snapshot
            assert len(r.request_table()) == 300 and not r.complete
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    with SessionReader(path) as r:
        assert r.complete and not r.snapshot and len(r.request_table()) == 351


def test_read_while_same_process_writes(tmp_path):
    path = tmp_path / "s.duckdb"
    w = SessionWriter(path)
    w.add_records([rec(0), rec(1)])
    w.flush()
    with SessionReader(path) as r:
        assert len(r.request_table()) == 2 and r.status == "running"
        w.add_records([rec(2)])
        w.flush()
        assert len(r.request_table()) == 3  # shares the instance: sees new commits
    w.close()
    with SessionReader(path) as r:
        assert r.complete


def test_bad_files(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        SessionReader(tmp_path / "missing.duckdb")
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"this is not a database" * 1000)
    with pytest.raises(StoreError, match="not a DuckDB file"):
        SessionReader(bad)
    with pytest.raises(StoreError):
        SessionReader(tmp_path)
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE t (x INT)")
    con.close()
    with pytest.raises(StoreError, match="not an abtui session"):
        SessionReader(other)
    newer = tmp_path / "newer.duckdb"
    with SessionWriter(newer) as w:
        w.write_meta(schema_version=SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match="newer") as e:
        SessionReader(newer)
    assert "upgrade" in e.value.hint
