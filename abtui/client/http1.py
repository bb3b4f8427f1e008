"""HTTP/1.1 framing for the fast streaming path (:mod:`abtui.client.fast`): the request bytes,
the response head, and chunked transfer decoding, split anywhere across reads. Pure functions on
bytes; the protocol, the timestamps and the pool stay in ``fast``."""

from __future__ import annotations

from typing import NamedTuple


class Malformed(Exception):
    """The response breaks HTTP/1.1 framing (or its stream breaks SSE/JSON); the message says how."""


class Head(NamedTuple):
    status: int
    keep_alive: bool
    mode: str  # "chunked" | "length" | "close"
    length: int  # Content-Length in "length" mode
    rest: bytes  # body bytes that came with the head


def request_bytes(path: str, host: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}",
        "Content-Type: application/json",
        "Accept: text/event-stream",
        "Accept-Encoding: identity",
        f"Content-Length: {len(body)}",
    ]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def parse_head(buf: bytes) -> Head | None:
    """The final response head at the start of ``buf`` (interim 1xx ones skipped), or None while
    it is incomplete. Raises :class:`Malformed`."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > 65536:
                raise Malformed("response headers larger than 64 KiB")
            return None
        lines = buf[:end].split(b"\r\n")
        buf = buf[end + 4 :]
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise Malformed(f"not an HTTP response: {lines[0][:80]!r}")
        status = int(parts[1])
        if not 100 <= status < 200:  # an interim response: the real one follows
            break
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower()] = v.strip()
    conn = headers.get(b"connection", b"").lower()
    keep_alive = conn != b"close" if parts[0] == b"HTTP/1.1" else conn == b"keep-alive"
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        return Head(status, keep_alive, "chunked", 0, buf)
    if b"content-length" in headers:
        try:
            length = int(headers[b"content-length"])
        except ValueError:
            raise Malformed("bad Content-Length") from None
        return Head(status, keep_alive, "length", length, buf)
    return Head(status, False, "close", 0, buf)


class ChunkedDecoder:
    """Chunked transfer decoding, fed reads as they come."""

    __slots__ = ("_buf", "_left")

    def __init__(self) -> None:
        self._buf = b""
        # > 0: chunk bytes to come; 0: a size line; -2: the CRLF after a chunk; -3: trailers
        self._left = 0

    def feed(self, data: bytes, pieces: list[bytes]) -> bytes | None:
        """Append the body bytes in ``data`` to ``pieces``. Returns None while the body goes on,
        else what followed its end (``b""`` from a well-behaved server). Raises
        :class:`Malformed`, with ``pieces`` holding what came before the fault."""
        if not self._buf and not self._left:  # the common read: one whole chunk
            eol = data.find(b"\r\n", 0, 18)
            if eol > 0:
                try:
                    size = int(data[:eol], 16)
                except ValueError:
                    size = 0
                end = eol + 2 + size
                if size > 0 and len(data) == end + 2 and data.endswith(b"\r\n"):
                    pieces.append(data[eol + 2 : end])
                    return None
        buf = self._buf + data if self._buf else data
        pos, n = 0, len(buf)
        while pos < n:
            left = self._left
            if left > 0:
                take = min(left, n - pos)
                pieces.append(buf[pos : pos + take])
                pos += take
                self._left = left - take or -2  # then the CRLF after the chunk data
                continue
            if left == -2:
                if n - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise Malformed("chunked body: missing CRLF after a chunk")
                pos += 2
                self._left = 0
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if n - pos > 1024:
                    raise Malformed("chunked body: chunk size or trailer line too long")
                break
            line, pos = buf[pos:eol], eol + 2
            if left == -3:  # after the last chunk: trailers until an empty line
                if not line:
                    self._buf = b""
                    return buf[pos:]
                continue
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                size = -1
            if size < 0:
                raise Malformed(f"chunked body: bad chunk size {size_text[:20]!r}")
            self._left = size if size else -3
        self._buf = buf[pos:] if pos < n else b""
        return None
