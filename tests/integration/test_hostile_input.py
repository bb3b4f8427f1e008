"""Hostile and malformed input, property-based (hypothesis): whatever bytes an endpoint sends or
a user's file holds, abtui never fails with a traceback. Parsers of untrusted bytes either
return data of the documented types or raise an :class:`AbtuiError` that names where (file,
line, field); the Prometheus parser skips and counts a bad line and never raises.
"""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from abtui.client import records
from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.client.sse import SSEParser
from abtui.client.stream_state import StreamState
from abtui.errors import AbtuiError, SpecError, WorkloadError
from abtui.spec import load_spec, spec_from_dict, validate
from abtui.telemetry import promtext
from abtui.workload.importers import import_trace
from abtui.workload.jsonl import read_workload

SETTINGS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
INT64 = 2**63 - 1

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)

# --- SSE: any bytes, split anywhere ---


def _feed_all(chunks: list[bytes]) -> list:
    p = SSEParser()
    out = []
    for c in chunks:
        out += p.feed(c)
    return out + p.close()


sse_bytes = st.lists(
    st.sampled_from([b"data:", b"data: ", b"event: error", b": ping", b"\r", b"\n", b"\r\n", b"x"])
    | st.binary(max_size=12),
    max_size=30,
).map(b"".join)


@SETTINGS
@given(body=sse_bytes, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
@example(body=b"data: a\r\n\r\n", cuts=[8])
def test_sse_parser_takes_any_bytes_split_anywhere(body, cuts):
    whole = _feed_all([body])
    pieces, last = [], 0
    for c in sorted(set(min(c, len(body)) for c in cuts)):
        pieces.append(body[last:c])
        last = c
    pieces.append(body[last:])
    assert _feed_all(pieces) == whole  # where the network splits the body changes nothing
    for name, data in whole:
        assert (name is None or isinstance(name, bytes)) and isinstance(data, bytes)


# --- a stream's events: any JSON a server sends ---

ITEM = Item(index=0, id="i", prompt="a b", max_tokens=4, n_input=2)


def _check_record(rec: RequestRecord) -> None:
    """The fields the session file stores have the types its columns hold."""
    assert rec.status in (records.OK, records.ERROR)
    assert rec.finish_reason is None or isinstance(rec.finish_reason, str)
    for v in (rec.n_input, rec.n_output):
        assert isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= INT64
    assert all(isinstance(n, int) and 0 < n <= INT64 for n in rec.chunk_tokens)
    assert rec.text is None or isinstance(rec.text, str)
    assert rec.error_message is None or isinstance(rec.error_message, str)


chunk = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "index": json_values,
                    "finish_reason": json_values,
                    "delta": json_values
                    | st.fixed_dictionaries(
                        {}, optional={"content": json_values, "role": json_values}
                    ),
                    "text": json_values,
                    "logprobs": json_values,
                },
            ),
            max_size=3,
        )
        | json_values,
        "usage": json_values
        | st.fixed_dictionaries(
            {}, optional={"completion_tokens": json_values, "prompt_tokens": json_values}
        ),
        "error": json_values,
    },
)


@SETTINGS
@given(events=st.lists(chunk | json_values, max_size=6), raw=st.binary(max_size=20))
@example(events=[{"choices": [{"text": "x", "finish_reason": {"a": 1}}]}], raw=b"")
@example(events=[{"usage": {"completion_tokens": 2**70, "prompt_tokens": "many"}}], raw=b"")
@example(events=[{"usage": {"completion_tokens": -3, "prompt_tokens": -1}}], raw=b"")
@example(events=[], raw=b"[" * 5000)
def test_stream_events_of_any_shape_give_a_storable_record(events, raw):
    rec = RequestRecord(arm=0, item=0, scheduled_ns=0)
    state = StreamState(rec, store_text=True)
    for i, ev in enumerate([*events, raw]):
        data = ev if isinstance(ev, bytes) else json.dumps(ev).encode()
        msg = state.on_event(None, data, 1000 + i)
        if msg is not None:
            assert isinstance(msg, str)
            break
    state.finish(ITEM)
    _check_record(rec)


# --- Prometheus text: never raises ---

prom_lines = st.lists(
    st.sampled_from(["m", "m_total", 'm{a="x"}', 'm{a="\\"}', "m{", "# TYPE m counter", "# EOF"])
    .flatmap(
        lambda head: st.tuples(
            st.just(head),
            st.sampled_from(
                [
                    "",
                    " ",
                    " 1",
                    " NaN",
                    " +Inf",
                    " 1e999",
                    " 1 1e999",
                    " 1 inf",
                    " 1 nan",
                    " 1 2 3",
                    ' 1 # {t="x"} 1',
                ]
            ),
        )
    )
    .map("".join)
    | st.text(string.printable, max_size=30),
    max_size=10,
).map("\n".join)


@SETTINGS
@given(text=prom_lines)
@example(text="m 1 1e999")
@example(text="m 1 -1e999")
def test_prometheus_text_never_raises(text):
    scrape = promtext.parse(text)
    n_lines = sum(
        1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#")
    )
    assert len(scrape.samples) + scrape.skipped <= n_lines
    for s in scrape.samples:
        assert isinstance(s.value, float)
        assert s.timestamp_ms is None or isinstance(s.timestamp_ms, int)
    if scrape.skipped:
        assert scrape.first_error.startswith("line ")


# --- spec files: any TOML document, any bytes ---

spec_keys = st.sampled_from(
    ["name", "arms", "slo", "workload", "load", "request", "policy", "store", "cost", "bogus"]
)
arm = st.fixed_dictionaries(
    {},
    optional={
        "name": json_values,
        "url": json_values | st.just("http://127.0.0.1:1/v1"),
        "role": json_values | st.sampled_from(["baseline", "candidate"]),
        "model": json_values,
        "api_key_env": json_values,
        "headers": json_values,
        "params": json_values,
    },
)
spec_docs = st.dictionaries(
    spec_keys,
    json_values
    | st.lists(arm, max_size=3)
    | st.dictionaries(st.text(max_size=10), json_values, max_size=4),
    max_size=5,
)


@SETTINGS
@given(doc=spec_docs)
def test_spec_of_any_shape_is_a_spec_or_a_spec_error(doc):
    try:
        validate(spec_from_dict(doc, "x.toml"), "x.toml")
    except SpecError as e:
        assert "x.toml" in e.message or "x.toml" in str(e)
    except AbtuiError:
        pass  # another of abtui's errors (message + hint) is fine too


@SETTINGS
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
@example(raw=b"\xff\xfe[arms]")
@example(raw=b"[[arms]]\nurl = 1\n")
@example(raw=b"a = " + b"[" * 5000)
def test_spec_file_of_any_bytes(tmp_path, raw):
    p = tmp_path / "s.toml"
    p.write_bytes(raw)
    try:
        spec, _ = load_spec(p)
        validate(spec, str(p))
    except AbtuiError as e:
        assert str(p) in str(e)


# --- workload and trace files: any lines ---

wl_line = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values,
        "arrival_s": json_values,
        "prompt": json_values,
        "input_tokens": json_values | st.integers(1, 64),
        "max_tokens": json_values,
        "messages": json_values,
        "prefix_ids": json_values,
        "tags": json_values,
    },
).map(json.dumps) | st.text(max_size=30).filter(lambda s: "\n" not in s and "\r" not in s)


@SETTINGS
@given(lines=st.lists(wl_line, min_size=1, max_size=6), junk=st.binary(max_size=8))
@example(lines=["[" * 5000], junk=b"")
@example(lines=['{"input_tokens": 8}'], junk=b"\xff")
def test_workload_file_of_any_lines(tmp_path, lines, junk):
    p = tmp_path / "w.jsonl"
    p.write_bytes("\n".join(lines).encode() + b"\n" + junk)
    for skip_bad in (False, True):
        try:
            wl = read_workload(p, skip_bad=skip_bad)
        except WorkloadError as e:
            assert str(p) in e.message, e.message
            continue
        assert wl.items and all(isinstance(it.prompt, str) or it.messages for it in wl.items)


@pytest.mark.parametrize("fmt", ["sharegpt", "mooncake", "azure", "burstgpt"])
@SETTINGS
@given(
    raw=st.lists(wl_line | st.text(",0123456789abcTIMESTAMP", max_size=40), max_size=5),
    junk=st.binary(max_size=8),
)
@example(raw=["[" * 5000], junk=b"")
@example(raw=['{"a": ' + "[" * 5000], junk=b"")
@example(raw=['[{"conversations": []},'], junk=b"\xff]")
@example(raw=["TIMESTAMP,ContextTokens,GeneratedTokens", "1,2,3"], junk=b"4,\xfe,5\n")
def test_trace_import_of_any_lines(tmp_path, fmt, raw, junk):
    p = tmp_path / f"t.{fmt}"
    p.write_bytes(("\n".join(raw) + "\n").encode() + junk)
    for skip_bad in (False, True):
        try:
            recs, stats, _ = import_trace(fmt, p, skip_bad=skip_bad)
        except AbtuiError as e:
            assert str(p) in str(e), str(e)
            continue
        assert isinstance(recs, list)


# --- huge and hostile files: streamed, bounded, named ---


def _big_jsonl(path, n: int, prompt_bytes: int) -> int:
    """``n`` lines with ``prompt_bytes``-byte prompts, arrivals descending for the first half
    (so the earliest items are not simply the first lines); returns the file's size. Long words,
    not many: tracemalloc makes every allocation slow."""
    with path.open("w") as fh:
        for i in range(n):
            arrival = (n // 2 - i) * 0.01 if i < n // 2 else 100 + i * 0.01
            fh.write(
                json.dumps(
                    {"id": f"r{i}", "arrival_s": arrival, "prompt": f"p{i} " + "x" * prompt_bytes}
                )
                + "\n"
            )
    return path.stat().st_size


def _peak(fn):
    import tracemalloc

    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_first_n_of_a_big_workload_take_memory_for_n_items(tmp_path):
    p = tmp_path / "big.jsonl"
    size = _big_jsonl(p, 4_000, 6_000)  # ~24 MB
    wl, peak = _peak(lambda: read_workload(p, limit=50))
    # the 50 earliest arrivals, in order, from anywhere in the file; every line was checked
    assert [it.id for it in wl.items[:3]] == ["r1999", "r1998", "r1997"]
    assert len(wl.items) == 50 and wl.stats.kept == 4_000
    # 50 items of ~6 kB: the peak is the item heap and one line, not the file (margin ×50)
    assert peak < size / 50, (peak, size)


def test_trace_import_streams(tmp_path):
    from abtui.workload.importers import TraceImport

    mc = tmp_path / "mc.jsonl"
    with mc.open("w") as fh:
        for i in range(10_000):  # ~10 MB, out of order at the start; few allocations a line
            ts = 5000 - i if i < 100 else i * 10
            fh.write(
                json.dumps(
                    {
                        "timestamp": ts,
                        "input_length": 100 + i % 50,
                        "output_length": 20,
                        "hash_ids": [1, 2, 3],
                        "note": "n" * 1000,
                    }
                )
                + "\n"
            )
    sg = tmp_path / "sg.json"
    with sg.open("w") as fh:  # a ~10 MB ShareGPT JSON array
        fh.write("[\n")
        for i in range(2_000):
            conv = [
                {"from": "human", "value": f"q{i} " + "a" * 5_000},
                {"from": "gpt", "value": "b" * 200},
            ]
            fh.write(("," if i else "") + json.dumps({"id": f"c{i}", "conversations": conv}) + "\n")
        fh.write("]\n")
    for fmt, path, n in (("mooncake", mc, 10_000), ("sharegpt", sg, 2_000)):
        size = path.stat().st_size

        def consume(fmt=fmt, path=path):
            imp = TraceImport(fmt, path)
            count, first = 0, None
            for r in imp.records():
                first = first or r
                count += 1
            return count, first

        (count, first), peak = _peak(consume)
        assert count == n
        assert peak < size / 4, (fmt, peak, size)  # a piece at a time (256 KiB reads), not the file
        if fmt == "mooncake":
            assert first["arrival_s"] == 4.0  # offsets from the earliest request (ts 1000 ms)


def test_a_line_over_the_limit_is_an_error_not_a_whole_read(tmp_path, monkeypatch):
    from abtui.workload import importers_io, jsonl

    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(importers_io, "MAX_PIECE_BYTES", 4096)
    p = tmp_path / "w.jsonl"
    p.write_text('{"prompt": "ok"}\n' + '{"prompt": "' + "x" * 10_000)  # no newline at all
    with pytest.raises(WorkloadError, match=r"w.jsonl:2: line longer than"):
        read_workload(p, skip_bad=True)
    p.write_text('[{"conversations": [{"from": "human", "value": "' + "x" * 10_000)  # unclosed
    with pytest.raises(WorkloadError, match=r"w.jsonl:1: a line or entry longer than"):
        import_trace("sharegpt", p)


def test_a_10mb_prompt_is_sent_and_accounted_for(tmp_path, capsys):
    from abtui.cli import main
    from abtui.sim.process import SimProcess
    from abtui.store.reader import SessionReader

    p = tmp_path / "huge.jsonl"
    with p.open("w") as fh:
        fh.write(json.dumps({"id": "big", "prompt": "word " * 2_000_000, "max_tokens": 4}) + "\n")
        fh.write(
            json.dumps({"id": "small", "arrival_s": 0.1, "prompt": "hi", "max_tokens": 4}) + "\n"
        )
    assert read_workload(p).items[0].n_input == 2_000_000
    with SimProcess(ttft_ms=5, itl_ms=1) as sim:
        rc = main(
            [
                "run",
                "--baseline",
                sim.url,
                "--candidate",
                sim.url,
                "--workload",
                str(p),
                "--rate",
                "10",
                "--warmup",
                "0",
                "--name",
                "h",
                "--sessions-dir",
                str(tmp_path),
                "--headless",
            ]
        )
    err = capsys.readouterr().err
    assert rc in (0, 3, 4) and "Traceback" not in err, err[-2000:]
    with SessionReader(tmp_path / "h.duckdb") as rd:
        rows = rd.query("SELECT item, status FROM requests ORDER BY arm, item")
        stored = rd.query("SELECT max(length(prompt)) FROM items")[0][0]
    assert [r[1] for r in rows] == ["ok"] * 4  # both items, both arms, sent and answered
    assert stored == 10_000_000


NOT_UTF8 = b"\xff\xfe"


@pytest.mark.parametrize(
    ("fmt", "text", "line"),
    [
        (
            "mooncake",
            b'{"timestamp": 1, "input_length": 3, "output_length": 2}\n{"timestamp": 2, '
            b'"input_length": 3, "output_length": 2, "x": "\xff"}\n',
            2,
        ),
        ("azure", b"TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n2,\xff,3\n", 3),
        ("burstgpt", b"Timestamp,Request tokens,Response tokens\n1,2,3\n\xfe,2,3\n", 3),
        (
            "sharegpt",
            b'{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", '
            b'"value": "yo"}]}\n{"conversations": "\xff"}\n',
            2,
        ),
        ("sharegpt", b'[{"conversations": []},\n\n {"conversations": "\xff"}]', 3),
    ],
)
def test_non_utf8_bytes_in_a_trace_name_the_file_and_line(tmp_path, fmt, text, line):
    p = tmp_path / f"t.{fmt}"
    p.write_bytes(text)
    with pytest.raises(WorkloadError) as e:
        import_trace(fmt, p)
    assert f"{p}:{line}: not UTF-8 text (byte 0x" in e.value.message


def test_non_utf8_bytes_in_a_workload_or_spec_name_the_line(tmp_path):
    p = tmp_path / "w.jsonl"
    p.write_bytes(b'{"prompt": "a"}\n{"prompt": "' + NOT_UTF8 + b'"}\n{"prompt": "c"}\n')
    with pytest.raises(WorkloadError, match=rf"{p}:2: not UTF-8 text \(byte 0xff at column 13\)"):
        read_workload(p)
    wl = read_workload(p, skip_bad=True)  # a bad line can be skipped, and is counted
    assert [it.prompt for it in wl.items] == ["a", "c"] and wl.stats.skipped == 1
    s = tmp_path / "s.toml"
    s.write_bytes(b'name = "x"\n\n[[arms]]\nname = "' + NOT_UTF8 + b'"\n')
    with pytest.raises(SpecError, match=rf"{s}:4: not UTF-8 text"):
        load_spec(s)


def test_a_spec_with_10000_arms_is_refused_quickly_naming_the_count(tmp_path, capsys):
    from abtui.cli import main
    from abtui.spec import MAX_ARMS

    s = tmp_path / "many.toml"
    s.write_text(
        "".join(f'[[arms]]\nname = "a{i}"\nurl = "http://127.0.0.1:9/v1"\n' for i in range(10_000))
    )
    rc = main(["run", str(s), "--requests", "1", "--rate", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"10000 arms; abtui compares at most {MAX_ARMS}" in err
    # the same from flags
    flags = ["run", "--baseline", "http://127.0.0.1:9/v1"]
    flags += [x for i in range(MAX_ARMS) for x in ("--candidate", f"http://127.0.0.1:{i + 10}/v1")]
    assert main([*flags, "--requests", "1", "--rate", "1"]) == 2
    assert f"{MAX_ARMS + 1} arms" in capsys.readouterr().err
