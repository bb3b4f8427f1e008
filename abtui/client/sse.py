"""Incremental Server-Sent Events parser (the WHATWG event-stream format), on bytes.

Only what OpenAI-compatible servers use: ``data:`` fields (several lines joined with ``\\n``),
``event:`` names, ``:`` comments (counted, never events), blank-line dispatch, and any of
``\\r\\n`` / ``\\n`` / ``\\r`` as line ends, split anywhere across network reads.

One departure from the spec, only when asked (the clients do, for ``[DONE]``): a ``data:`` line
whose value is exactly the stream's end marker and which opens an event is dispatched at its own
line end, without waiting for the blank line (docs/compatibility.md, rule 10).
"""

from __future__ import annotations


class SSEParser:
    """Feed raw body bytes; get back complete events as ``(event_name, data_bytes)``."""

    __slots__ = ("_buf", "_data", "_event", "_skip_lf", "_end", "comments")

    def __init__(self, end_marker: bytes | None = None) -> None:
        """``end_marker``: a ``data:`` value (``b"[DONE]"``) that, as the first data line of an
        event, is dispatched as an event of its own as soon as its line ends; the same value on
        a later data line of an event is that event's content, as the spec says."""
        self._buf = b""
        self._data: list[bytes] = []
        self._event: bytes | None = None
        self._skip_lf = False  # the last byte fed was a CR: a LF opening the next feed ends no line
        self._end = end_marker
        self.comments = 0  # ``:`` lines seen (keep-alive pings); never events

    def feed(self, chunk: bytes) -> list[tuple[bytes | None, bytes]]:
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            # A trailing CR ends its line now (an event it completes is dispatched by this read,
            # not the next); if it is the first half of a CRLF split across reads, the LF that
            # opens the next read is dropped.
            self._skip_lf = buf.endswith(b"\r")
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        end = buf.rfind(b"\n")
        if end < 0:
            self._buf = buf
            return []
        self._buf = buf[end + 1 :]
        events: list[tuple[bytes | None, bytes]] = []
        data = self._data
        end_marker = self._end
        for line in buf[:end].split(b"\n"):
            if not line:
                if data:
                    events.append((self._event, data[0] if len(data) == 1 else b"\n".join(data)))
                    data = self._data = []
                self._event = None
            elif line.startswith(b"data:"):
                v = line[5:]
                if v[:1] == b" ":
                    v = v[1:]
                if v == end_marker and not data:  # the stream's end: no blank line awaited
                    events.append((self._event, v))
                else:
                    data.append(v)
            elif line[0] == 58:  # b":"
                self.comments += 1
            else:
                name, _, v = line.partition(b":")
                if name == b"event":
                    self._event = v[1:] if v[:1] == b" " else v
                # ``id`` and ``retry`` carry nothing we use; unknown fields are ignored (spec).
        return events

    def close(self) -> list[tuple[bytes | None, bytes]]:
        """End of stream: an event without its final blank line is still dispatched.

        (The spec says to drop it; real servers that close right after ``data: [DONE]\\n``
        exist, and losing their last event would misreport a complete response.)
        """
        self._skip_lf = False
        events = self.feed(b"\n") if self._buf.rstrip(b"\r") else []
        if self._data:
            events.append((self._event, b"\n".join(self._data)))
            self._data = []
        self._buf = b""
        return events

    @property
    def pending(self) -> bool:
        """True if bytes of an unfinished event are buffered."""
        return bool(self._buf.strip() or self._data)
