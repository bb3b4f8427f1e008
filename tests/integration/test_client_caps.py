"""The client's bounds, on both streaming paths against a loopback server: one SSE event over
``MAX_EVENT_BYTES`` is dropped as it comes (never held), the text stored per request stops at
``MAX_TEXT_CHARS``, and both are counted on the record and, per arm, in the session file. The
huge event is 8 MiB sent in 64 KiB pieces of one shared buffer, so the test itself stays small;
tracemalloc holds the peak under the event's size (it held the event, and copies of it)."""

from __future__ import annotations

import asyncio
import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_client_streams import (  # the loopback server and helpers (no fixtures imported)
    DONE,
    END,
    ITEM,
    SSE_HEAD,
    Server,
    chat,
    chunk,
    new_record,
    sse,
    target,
)

from abtui.client import records
from abtui.client import stream as httpx_path
from abtui.client.fast import FastClient, fast_stream_request
from abtui.client.sse import SSEParser
from abtui.client.stream import build_body
from abtui.client.stream_state import MAX_TEXT_CHARS

PIECE = b"x" * (64 << 10)
HUGE = 8 << 20  # bytes of the hostile event's data


async def _request(path: str, port: int):
    tgt = target(port)
    rec = new_record()
    if path == "fast":
        async with FastClient() as c:
            return await fast_stream_request(c, tgt, ITEM, build_body(tgt, ITEM), rec)
    async with httpx_path.make_client(8) as c:
        return await httpx_path.stream_request(c, tgt, ITEM, build_body(tgt, ITEM), rec)


def _serve(path: str, script: list, trace: bool = False):
    async def go():
        async with Server(script) as srv:
            if trace:
                tracemalloc.start()
            try:
                rec = await _request(path, srv.port)
                peak = tracemalloc.get_traced_memory()[1] if trace else 0
            finally:
                if trace:
                    tracemalloc.stop()
        return rec, peak

    return asyncio.run(go())


@pytest.mark.parametrize("path", ["fast", "httpx"])
def test_a_huge_sse_event_is_dropped_as_it_comes_and_counted(path):
    head = b'data: {"choices": [{"index": 0, "delta": {"content": "'
    script = [SSE_HEAD, sse(chat("a")), chunk(head)]
    script += [chunk(PIECE)] * (HUGE // len(PIECE))
    script += [chunk(b'"}}]}\n\n'), sse(chat("b", finish="stop")), DONE, END]
    rec, peak = _serve(path, script, trace=True)
    assert rec.status == records.OK, rec.error_message
    assert rec.text == "ab" and len(rec.chunk_ns) == 2 and rec.finish_reason == "stop"
    assert rec.cut_events == 1 and rec.cut_bytes >= HUGE
    # the event was never held: 3-5 MiB (the bound, reads, both ends' buffers); holding it
    # took 33-35 MiB (the event, its copies, the text)
    assert peak < HUGE, f"peak {peak / 2**20:.1f} MiB"


@pytest.mark.parametrize("path", ["fast", "httpx"])
def test_stored_text_stops_at_the_bound_and_the_rest_is_counted(path):
    words = 1100
    part = "y" * 1000
    script = [SSE_HEAD] + [sse(chat(part)) for _ in range(words)]
    script += [sse(chat(finish="length")), DONE, END]
    rec, _ = _serve(path, script)
    assert rec.status == records.OK and len(rec.chunk_ns) == words  # every token still measured
    assert len(rec.text) == MAX_TEXT_CHARS
    assert rec.cut_text == words * len(part) - MAX_TEXT_CHARS and rec.cut_events == 0


def _feed(parser: SSEParser, data: bytes, step: int) -> list:
    out = []
    for i in range(0, len(data), step):
        out += parser.feed(data[i : i + step])
    return out + parser.close()


@pytest.mark.parametrize("step", [1, 7, 64, 10_000])
@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_the_parser_drops_only_the_event_over_the_bound(step, eol):
    bound = 100
    big_line = b"data: " + b"z" * 250 + eol  # one line over the bound
    many = b"".join(b"data: " + b"w" * 40 + eol for _ in range(5))  # lines summing over it
    stream = (
        b"data: a"
        + eol
        + eol
        + big_line
        + b"data: more"
        + eol
        + eol
        + b"data: b"
        + eol
        + eol
        + many
        + eol
        + b"event: x"
        + eol
        + b"data: c"
        + eol
        + eol
    )
    p = SSEParser(max_event=bound)
    events = _feed(p, stream, step)
    assert events == [(None, b"a"), (None, b"b"), (b"x", b"c")]
    assert p.cut_events == 2 and p.cut_bytes >= 250 + 200


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.lists(st.integers(0, 60), min_size=1, max_size=3), max_size=6),
    cuts=st.lists(st.integers(1, 50), min_size=1, max_size=6),
    eol=st.sampled_from([b"\n", b"\r\n", b"\r"]),
)
def test_the_bounded_parser_keeps_exactly_the_events_within_the_bound(sizes, cuts, eol):
    """Events of data lines, split anywhere: the bounded parser returns the unbounded one's
    events whose data (their lines' values together) fit the bound, and counts the rest."""
    bound = 50
    events = [[bytes([97 + i % 26]) * n for n in lines] for i, lines in enumerate(sizes)]
    stream = b"".join(b"".join(b"data: " + v + eol for v in ev) + eol for ev in events)
    pieces, at = [], 0
    for c in cuts * (len(stream) // max(sum(cuts), 1) + 1):
        pieces.append(stream[at : at + c])
        at += c
    pieces.append(stream[at:])
    p = SSEParser(max_event=bound)
    got = [e for piece in pieces for e in p.feed(piece)] + p.close()
    full = SSEParser(max_event=10**9)
    want = full.feed(stream) + full.close()
    assert got == [e for e, ev in zip(want, events, strict=True) if sum(map(len, ev)) <= bound]
    assert p.cut_events == sum(sum(map(len, ev)) > bound for ev in events)


def test_the_session_file_counts_what_was_cut_per_arm(tmp_path):
    import duckdb

    from abtui.runner.session import _Live
    from abtui.store.writer import SessionWriter

    live = _Live(["base", "cand"], 3)  # the main process's running counts, fed as batches come
    cut = records.RequestRecord(arm=1, item=0, cut_events=1, cut_bytes=HUGE, cut_text=0)
    long = records.RequestRecord(arm=1, item=1, cut_text=5000)
    live.add(1, [cut, long, records.RequestRecord(arm=1, item=2)], {})
    live.add(0, [records.RequestRecord(arm=0, item=0)], {})
    path = tmp_path / "s.duckdb"

    class Obs:
        messages: list[str] = []

        def message(self, text: str) -> None:
            self.messages.append(text)

    with SessionWriter(path) as w:
        live.cuts.store(w, ["base", "cand"], Obs())
    con = duckdb.connect(str(path), read_only=True)
    meta = json.loads(con.execute("SELECT value FROM meta WHERE key = 'capped'").fetchone()[0])
    assert meta == {"cand": {"requests": 2, "events": 1, "event_bytes": HUGE, "text_chars": 5000}}
    ev = con.execute("SELECT arm, message FROM events WHERE kind = 'capped'").fetchall()
    assert ev == [
        (
            1,
            f"cand: 2 responses cut by abtui's bounds: 1 SSE events over 1 MiB dropped "
            f"({HUGE:,} bytes); 5,000 characters of text past {MAX_TEXT_CHARS:,} a "
            "request not stored",
        )
    ]
    assert Obs.messages and Obs.messages[0].startswith("CAPPED: cand: 2 responses")
