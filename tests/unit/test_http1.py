"""HTTP/1.1 framing of the fast path (abtui.client.http1): every split of a body across reads."""

from __future__ import annotations

import pytest

from abtui.client.http1 import ChunkedDecoder, Malformed, parse_head

BODY = b"5\r\nhello\r\n1;ext=1\r\n \r\n6\r\nworld!\r\n0\r\nx-trailer: 1\r\n\r\n"


def decode(reads: list[bytes]) -> tuple[bytes, bytes | None, int]:
    """(body, what followed its end, index of the read that ended it)."""
    d, pieces = ChunkedDecoder(), []
    for i, r in enumerate(reads):
        after = d.feed(r, pieces)
        if after is not None:
            return b"".join(pieces), after, i
    return b"".join(pieces), None, -1


def test_every_two_and_three_way_split():
    for i in range(len(BODY) + 1):
        for j in range(i, len(BODY) + 1, 3):
            reads = [BODY[:i], BODY[i:j], BODY[j:]]
            last = max(k for k, r in enumerate(reads) if r)  # the read with the final byte
            assert decode(reads) == (b"hello world!", b"", last), (i, j)


def test_one_byte_at_a_time_ends_on_the_last_byte():
    body, after, at = decode([BODY[k : k + 1] for k in range(len(BODY))])
    assert (body, after, at) == (b"hello world!", b"", len(BODY) - 1)


def test_bytes_after_the_end_are_returned():
    assert decode([BODY + b"HTTP/1.1 200"]) == (b"hello world!", b"HTTP/1.1 200", 0)


def test_not_ended_without_the_last_empty_line():
    assert decode([BODY[:-2]])[1] is None


@pytest.mark.parametrize(
    "bad",
    [b"zz\r\n", b"-5\r\nhello\r\n", b"\r\n", b"5\r\nhelloXX", b"f" * 1100],
    ids=["not-hex", "negative", "empty", "no-crlf-after-data", "endless-size-line"],
)
def test_bad_framing_raises_and_keeps_what_came_before(bad):
    d, pieces = ChunkedDecoder(), []
    with pytest.raises(Malformed, match="chunked body"):
        d.feed(b"3\r\nabc\r\n" + bad, pieces)
    assert pieces[0] == b"abc"


def test_head_split_and_interim_response():
    raw = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello"
    )
    for i in range(len(raw) - 10):
        assert parse_head(raw[:i]) is None or i > raw.index(b"\r\n\r\n5")
    h = parse_head(raw)
    assert (h.status, h.keep_alive, h.mode, h.rest) == (200, True, "chunked", b"5\r\nhello")
    h = parse_head(b"HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\n")
    assert (h.keep_alive, h.mode, h.length) == (False, "length", 7)
    assert parse_head(b"HTTP/1.1 200 OK\r\n\r\n").mode == "close"
    with pytest.raises(Malformed, match="not an HTTP response"):
        parse_head(b"SSH-2.0-x\r\n\r\n")
    with pytest.raises(Malformed, match="Content-Length"):
        parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")
