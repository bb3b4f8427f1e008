"""Incremental Server-Sent Events parser (the WHATWG event-stream format), on bytes.

Only what OpenAI-compatible servers use: ``data:`` fields (several lines joined with ``\\n``),
``event:`` names, ``:`` comments (counted, never events), blank-line dispatch, and any of
``\\r\\n`` / ``\\n`` / ``\\r`` as line ends, split anywhere across network reads.

One departure from the spec, only when asked (the clients do, for ``[DONE]``): a ``data:`` line
whose value is exactly the stream's end marker and which opens an event is dispatched at its own
line end, without waiting for the blank line (docs/compatibility.md, rule 10).

One bound: an event (or a line) over ``max_event`` bytes is never held. Its bytes are dropped
as they come, up to the event's end, and counted (:attr:`SSEParser.cut_events`,
:attr:`SSEParser.cut_bytes`); the events around it are parsed as usual. A chunk of an
OpenAI-compatible stream is a few hundred bytes (a few KB with logprobs): one of 50 MB made the
process that read it hold gigabytes (docs/reliability.md).
"""

from __future__ import annotations

MAX_EVENT_BYTES = 1 << 20  # one SSE event's data at most (1 MiB); a larger one is dropped, counted


class SSEParser:
    """Feed raw body bytes; get back complete events as ``(event_name, data_bytes)``."""

    __slots__ = (
        "_buf",
        "_data",
        "_size",
        "_event",
        "_skip_lf",
        "_end",
        "_max",
        "_drop_line",
        "_dropping",
        "comments",
        "cut_events",
        "cut_bytes",
    )

    def __init__(self, end_marker: bytes | None = None, max_event: int = MAX_EVENT_BYTES) -> None:
        """``end_marker``: a ``data:`` value (``b"[DONE]"``) that, as the first data line of an
        event, is dispatched as an event of its own as soon as its line ends; the same value on
        a later data line of an event is that event's content, as the spec says."""
        self._buf = b""
        self._data: list[bytes] = []
        self._size = 0  # bytes in _data
        self._event: bytes | None = None
        self._skip_lf = False  # the last byte fed was a CR: a LF opening the next feed ends no line
        self._end = end_marker
        self._max = max_event
        self._drop_line = False  # inside a line over the bound: its bytes are dropped to its end
        self._dropping = False  # the current event is over the bound: dropped to its blank line
        self.comments = 0  # ``:`` lines seen (keep-alive pings); never events
        self.cut_events = 0  # events over max_event, dropped
        self.cut_bytes = 0  # their bytes (about: line ends not counted)

    def _cut(self, n: int) -> None:
        """``n`` bytes of the current event dropped; the event is dropped to its end."""
        if not self._dropping:
            self._dropping = True
            self.cut_events += 1
            n += self._size
            self._data, self._size = [], 0
        self.cut_bytes += n

    def _skip_long_line(self, chunk: bytes) -> bytes:
        """Drop the rest of a line over the bound (and its line end) from ``chunk``."""
        ends = [i for i in (chunk.find(b"\n"), chunk.find(b"\r")) if i >= 0]
        if not ends:
            self._cut(len(chunk))
            return b""
        i = min(ends)
        self._cut(i)
        self._drop_line = False
        if chunk[i] == 13:  # CR: a LF right after it is the same line end
            if chunk[i + 1 : i + 2] == b"\n":
                i += 1
            elif i + 1 == len(chunk):
                self._skip_lf = True
        return chunk[i + 1 :]

    def feed(self, chunk: bytes) -> list[tuple[bytes | None, bytes]]:
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if self._drop_line:
            chunk = self._skip_long_line(chunk)
            if not chunk:
                return []
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            # A trailing CR ends its line now (an event it completes is dispatched by this read,
            # not the next); if it is the first half of a CRLF split across reads, the LF that
            # opens the next read is dropped.
            self._skip_lf = buf.endswith(b"\r")
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        end = buf.rfind(b"\n")
        rest = buf[end + 1 :] if end >= 0 else buf
        if len(rest) > self._max + 6:  # longer than "data: " and an event's most: dropped
            self._drop_line = True
            self._cut(len(rest))
            rest = b""
        self._buf = rest
        if end < 0:
            return []
        events: list[tuple[bytes | None, bytes]] = []
        end_marker = self._end
        for line in buf[:end].split(b"\n"):
            if not line:
                if self._data:
                    data = self._data
                    events.append((self._event, data[0] if len(data) == 1 else b"\n".join(data)))
                    self._data, self._size = [], 0
                self._dropping = False  # a dropped event ends here too
                self._event = None
            elif self._dropping:
                self.cut_bytes += len(line)
            elif line.startswith(b"data:"):
                v = line[5:]
                if v[:1] == b" ":
                    v = v[1:]
                if v == end_marker and not self._data:  # the stream's end: no blank line awaited
                    events.append((self._event, v))
                elif self._size + len(v) > self._max:
                    self._cut(len(v))
                else:
                    self._data.append(v)
                    self._size += len(v)
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
        if self._data and not self._dropping:
            events.append((self._event, b"\n".join(self._data)))
        self._data, self._size, self._buf = [], 0, b""
        self._drop_line = self._dropping = False
        return events

    @property
    def pending(self) -> bool:
        """True if bytes of an unfinished event are buffered."""
        return bool(self._buf.strip() or self._data)
