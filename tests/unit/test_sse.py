"""Unit tests of the incremental SSE parser (abtui.client.sse)."""

from __future__ import annotations

import random

import pytest

from abtui.client.sse import SSEParser


def feed_all(pieces: list[bytes], close: bool = True) -> tuple[list, SSEParser]:
    p = SSEParser()
    events = []
    for piece in pieces:
        events.extend(p.feed(piece))
    if close:
        events.extend(p.close())
    return events, p


def split_random(data: bytes, rng: random.Random, max_piece: int = 7) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, max_piece)
        out.append(data[i : i + n])
        i += n
    return out


# A realistic stream: a vLLM-like chat prelude, comments, a multi-line event, an error event,
# an ``id:`` / ``retry:`` field (ignored), an event name reset by its dispatch, and [DONE].
STREAM = (
    b": ping\n\n"
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"content":"h\xc3\xa9"}}]}\n\n'
    b": keep-alive\n"
    b"id: 7\nretry: 100\n"
    b"data:first\ndata: second\ndata:  third\n\n"
    b'event: error\ndata: {"error":{"message":"boom"}}\n\n'
    b"data: after\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    (None, b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'),
    (None, b'{"choices":[{"index":0,"delta":{"content":"h\xc3\xa9"}}]}'),
    (None, b"first\nsecond\n third"),
    (b"error", b'{"error":{"message":"boom"}}'),
    (None, b"after"),
    (None, b"[DONE]"),
]


def _crlf(s: bytes) -> bytes:
    return s.replace(b"\n", b"\r\n")


def _cr(s: bytes) -> bytes:
    return s.replace(b"\n", b"\r")


@pytest.mark.parametrize("conv", [lambda s: s, _crlf, _cr], ids=["lf", "crlf", "cr"])
def test_whole_stream(conv):
    events, p = feed_all([conv(STREAM)])
    assert events == EXPECTED
    assert p.comments == 2
    assert not p.pending


@pytest.mark.parametrize("conv", [lambda s: s, _crlf, _cr], ids=["lf", "crlf", "cr"])
def test_one_byte_at_a_time(conv):
    data = conv(STREAM)
    events, p = feed_all([data[i : i + 1] for i in range(len(data))])
    assert events == EXPECTED
    assert p.comments == 2


@pytest.mark.parametrize("conv", [lambda s: s, _crlf, _cr], ids=["lf", "crlf", "cr"])
def test_random_pieces(conv):
    data = conv(STREAM)
    rng = random.Random(1234)
    for _ in range(200):
        events, p = feed_all(split_random(data, rng))
        assert events == EXPECTED
        assert p.comments == 2


@pytest.mark.parametrize("conv", [lambda s: s, _crlf, _cr], ids=["lf", "crlf", "cr"])
def test_every_two_way_split(conv):
    data = conv(STREAM)
    for i in range(len(data) + 1):
        events, _ = feed_all([data[:i], data[i:]])
        assert events == EXPECTED, i


def test_mixed_line_endings():
    data = b"data: a\r\n\r\ndata: b\n\ndata: c\r\rdata: d\r\ndata: e\n\r\n"
    want = [(None, b"a"), (None, b"b"), (None, b"c"), (None, b"d\ne")]
    assert feed_all([data])[0] == want
    assert feed_all([data[i : i + 1] for i in range(len(data))])[0] == want


def test_events_dispatched_by_the_feed_that_completes_them():
    """An event is returned by the feed that brings its blank line, not a later one: the client
    timestamps it with that read's arrival time."""
    for end in (b"\n", b"\r\n", b"\r"):
        p = SSEParser()
        assert p.feed(b"data: x" + end) == []
        assert p.feed(end) == [(None, b"x")], end
        assert p.feed(b"data: y" + end + end) == [(None, b"y")], end


def test_crlf_split_across_feeds():
    p = SSEParser()
    assert p.feed(b"data: a\r") == []
    assert p.feed(b"\n\r") == [(None, b"a")]
    # The LF completing that CRLF must not be read as a second (empty) line.
    assert p.feed(b"\ndata: b\r") == []
    assert p.feed(b"\n") == []
    assert p.feed(b"\r\n") == [(None, b"b")]
    assert p.close() == []


def test_split_crlf_is_one_line_end_not_two():
    """``data: a\\r`` + ``\\ndata: b\\r\\n\\r\\n`` is one event with two data lines."""
    p = SSEParser()
    assert p.feed(b"data: a\r") == []
    assert p.feed(b"\ndata: b\r\n\r\n") == [(None, b"a\nb")]


def test_empty_feed_is_harmless():
    p = SSEParser()
    assert p.feed(b"data: a\r") == []
    assert p.feed(b"") == []
    assert p.feed(b"\n") == []
    assert p.feed(b"") == []
    assert p.feed(b"\r\n") == [(None, b"a")]


def test_multiline_data_joined_with_lf():
    events, _ = feed_all([b'data: {"a":\ndata: 1}\n\n'])
    assert events == [(None, b'{"a":\n1}')]


def test_data_with_and_without_space():
    events, _ = feed_all([b"data:x\n\ndata: x\n\ndata:  x\n\ndata:\n\n"])
    # Only ONE leading space is stripped; ``data:`` alone is an empty data line (dispatched).
    assert events == [(None, b"x"), (None, b"x"), (None, b" x"), (None, b"")]


def test_comments_counted_not_events():
    events, p = feed_all([b": ping\n\n:\n\n: ping\n\n:x\n"])
    assert events == []
    assert p.comments == 4


def test_comment_between_data_lines_does_not_split_event():
    events, p = feed_all([b"data: a\n: ping\ndata: b\n\n"])
    assert events == [(None, b"a\nb")]
    assert p.comments == 1


def test_event_name_carried_and_reset():
    events, _ = feed_all([b"event: error\ndata: x\n\ndata: y\n\nevent:message\ndata: z\n\n"])
    assert events == [(b"error", b"x"), (None, b"y"), (b"message", b"z")]


def test_event_name_without_data_is_dropped_and_reset():
    events, _ = feed_all([b"event: error\n\ndata: y\n\n"])
    assert events == [(None, b"y")]


def test_blank_lines_without_data_produce_nothing():
    events, p = feed_all([b"\n\n\r\n\r\r\n\n"])
    assert events == []
    assert not p.pending
    events, _ = feed_all([b"\n\n\ndata: a\n\n\n\n\ndata: b\n\n\n"])
    assert events == [(None, b"a"), (None, b"b")]


def test_unknown_fields_ignored():
    events, _ = feed_all([b"id: 1\nretry: 5\nfoo: bar\ndata: a\n\n"])
    assert events == [(None, b"a")]


def test_close_dispatches_event_without_blank_line():
    p = SSEParser()
    assert p.feed(b"data: a\n\ndata: [DONE]\n") == [(None, b"a")]
    assert p.pending
    assert p.close() == [(None, b"[DONE]")]
    assert not p.pending


def test_close_dispatches_event_without_newline():
    for tail in (b"data: [DONE]", b"data: [DONE]\r"):
        p = SSEParser()
        assert p.feed(b"data: a\n\n" + tail) == [(None, b"a")]
        assert p.pending
        assert p.close() == [(None, b"[DONE]")]
        assert not p.pending


def test_close_multiline_without_newline():
    p = SSEParser()
    assert p.feed(b"event: error\ndata: a\ndata: b") == []
    assert p.close() == [(b"error", b"a\nb")]


def test_close_nothing_pending():
    p = SSEParser()
    assert p.feed(b"data: a\n\n") == [(None, b"a")]
    assert not p.pending
    assert p.close() == []
    p = SSEParser()
    assert p.close() == []


def test_close_after_comment_only():
    p = SSEParser()
    assert p.feed(b": ping") == []
    assert p.close() == []
    assert p.comments == 1


def test_binary_utf8_split_is_preserved():
    data = b'data: {"text":"\xc3\xa9\xe2\x82\xac"}\n\n'
    for i in range(len(data) + 1):
        events, _ = feed_all([data[:i], data[i:]])
        assert events == [(None, b'{"text":"\xc3\xa9\xe2\x82\xac"}')]
