"""One streamed request to an OpenAI-compatible endpoint, measured (docs/methods.md §1).

The hot path of the load generator: every read is timestamped the moment it arrives, SSE is
parsed on raw bytes, and a chunk's JSON is decoded once. A chunk is *token-bearing* if it carries
non-empty ``text`` / ``delta.content`` / ``delta.reasoning_content`` / ``delta.tool_calls``; the
chat role prelude, comments, finish-only chunks and the trailing usage-only chunk are not, so
they never move TTFT or E2E.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from dataclasses import dataclass, field

import httpx

from abtui.client import records
from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.client.sse import SSEParser
from abtui.client.timings import parse_timings
from abtui.client.tls import describe, find_cert_error, ssl_context

_now = time.perf_counter_ns
_MAX_ERROR_BODY = 8192
# After ``[DONE]`` the response is complete; a connection waits this long (at most the read
# timeout) for the body's end before it is closed instead of reused.
TAIL_S = 1.0
# An error status (>= 300) is the outcome; its body is only the message. It is read until it
# ends, reaches _MAX_ERROR_BODY, or this long after the head (at most the read timeout), then
# the request is an ``http`` error with what came, and an unfinished body costs the connection
# (docs/compatibility.md, rule 9). Servers send an error body with its head or right after it.
ERROR_BODY_S = 1.0
DONE = b"[DONE]"  # the stream's end marker (rule 10: ends the stream at its line end)
# Generated text stored per request at most (characters); the rest is counted, not kept
# (RequestRecord.cut_text). One SSE event's bound: abtui.client.sse.MAX_EVENT_BYTES.
MAX_TEXT_CHARS = 1 << 20
# httpcore's trace events of opening a connection (``….started`` / ``.complete`` / ``.failed``)
_CONNECT_EVENTS = ("connection.connect_tcp.", "connection.start_tls.")


@dataclass(slots=True)
class Target:
    """A resolved endpoint as the client needs it. Holds headers (and so credentials):
    it is never written to a session file."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1 (no trailing slash)
    model: str
    api: str = "completions"  # "completions" | "chat"
    headers: dict[str, str] = field(default_factory=dict)
    params: dict = field(default_factory=dict)  # extra body fields: temperature, seed, ignore_eos…
    include_usage: bool = True
    timeout_s: float = 600.0  # whole request
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 120.0  # longest silence between two reads
    insecure: bool = False  # https without certificate checks (--insecure; abtui.client.tls)
    ca_bundle: str | None = None  # a private CA's PEM file, trusted on top of the system's

    @property
    def tls(self) -> ssl.SSLContext:
        """The TLS context of this endpoint (verification on unless ``insecure``)."""
        return ssl_context(self.insecure, self.ca_bundle)

    @property
    def url(self) -> str:
        return (
            f"{self.base_url}/chat/completions"
            if self.api == "chat"
            else f"{self.base_url}/completions"
        )


def build_body(target: Target, item: Item, extra: dict | None = None) -> bytes:
    """The request body for ``item``, serialised once, before its send time comes."""
    body: dict = {"model": target.model}
    if target.api == "chat":
        body["messages"] = item.chat_messages()
    else:
        body["prompt"] = item.prompt if item.prompt is not None else _flatten(item.chat_messages())
    body["max_tokens"] = item.max_tokens
    body["stream"] = True
    if target.include_usage:
        body["stream_options"] = {"include_usage": True}
    body.update(target.params)
    if extra:
        body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()


def _flatten(messages: list[dict]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)


def make_client(max_connections: int, verify: ssl.SSLContext | bool = True) -> httpx.AsyncClient:
    """An HTTP/1.1 client sized so that requests never wait for a pooled connection.

    ``trust_env=False``: a proxy from the environment must never sit between abtui and the
    endpoint it measures.
    """
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=30.0,
    )
    return httpx.AsyncClient(limits=limits, trust_env=False, timeout=None, verify=verify)


def _fail(rec: RequestRecord, cls: str, msg: str, status: str = records.ERROR) -> None:
    rec.status = status
    rec.error_class = cls
    rec.error_message = msg[:500]
    if rec.done_ns is None:
        rec.done_ns = _now()


def _fail_http(rec: RequestRecord, status: int, body: bytes) -> None:
    """An error status: ``http``, with the message of whatever part of its body came."""
    _fail(rec, records.E_HTTP, f"HTTP {status}: {_error_text(body)}")


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def _error_text(body: bytes) -> str:
    """The message of an error body, on one line: OpenAI's ``{"error": {"message"}}``, vLLM's
    top-level ``message``, TGI's ``{"error": "..."}``, FastAPI's ``detail`` list (docs/compatibility.md)."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return _one_line(body[:300].decode("utf-8", "replace")) or "(empty body)"
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        elif isinstance(err, list):  # FastAPI validation errors: [{"loc": [...], "msg": ...}]
            err = "; ".join(
                f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', e)}"
                if isinstance(e, dict)
                else str(e)
                for e in err
            )
        if err is not None:
            return _one_line(str(err))
    return _one_line(str(obj))


def _count(v: object) -> int | None:
    """A token count from a server's ``usage``: a whole number a BIGINT column holds, else None
    (a hostile or broken server's value is not stored as if measured)."""
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63:
        return v
    return None


_NO_TIMINGS = object()


class _StreamState:
    """Per-request decoding state: the SSE parser, what the chunks said, and when."""

    __slots__ = ("rec", "texts", "store_text", "text_room", "done", "usage", "timings", "parser")

    def __init__(self, rec: RequestRecord, store_text: bool) -> None:
        self.rec = rec
        self.texts: list[str] = []
        self.store_text = store_text
        self.text_room = MAX_TEXT_CHARS  # characters of text still stored
        self.done = False
        self.usage: dict | None = None
        self.timings: object = _NO_TIMINGS  # the last ``timings`` seen (checked at the end)
        self.parser = SSEParser(DONE)  # bounded: an event over its limit is dropped, counted

    def _keep_text(self, text: str) -> None:
        """Store ``text`` up to the request's bound; count what is left out."""
        room = self.text_room
        if len(text) > room:
            self.rec.cut_text += len(text) - room
            text = text[:room]
        if text:
            self.texts.append(text)
            self.text_room = room - len(text)

    def on_event(self, event: bytes | None, data: bytes, t: int) -> str | None:
        """Handle one SSE event that arrived at ``t``; return an error message if malformed."""
        if data == b"[DONE]":
            self.done = True
            return None
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            return f"chunk is not JSON: {data[:120]!r}"
        if not isinstance(obj, dict):
            return f"chunk is not a JSON object: {data[:120]!r}"
        if event == b"error" or "error" in obj:
            err = obj.get("error", obj)
            msg = err.get("message", err) if isinstance(err, dict) else err
            rec = self.rec
            rec.status, rec.error_class = records.ERROR, records.E_HTTP
            rec.error_message = f"error in stream: {str(msg)[:300]}"
            self.done = True
            return None
        usage = obj.get("usage")
        if usage and isinstance(usage, dict):
            self.usage = usage
        if "timings" in obj:  # llama.cpp, in its last chunk (every chunk with timings_per_token)
            self.timings = obj["timings"]
        choices = obj.get("choices")
        if not choices:
            return None
        if not isinstance(choices, list):
            return "chunk 'choices' is not a list"
        rec = self.rec
        for ch in choices:
            if not isinstance(ch, dict):
                return "chunk choice is not an object"
            if ch.get("index"):
                continue  # n > 1 is not measured; a null or missing index is the first choice
            fr = ch.get("finish_reason")
            if fr is not None:
                rec.finish_reason = fr if isinstance(fr, str) else str(fr)[:100]
            delta = ch.get("delta")
            if delta is not None:
                if not isinstance(delta, dict):
                    return "chunk 'delta' is not an object"
                text = delta.get("content")
                tokens = bool(text) or bool(
                    delta.get("reasoning_content")
                    or delta.get("reasoning")
                    or delta.get("tool_calls")
                )
                is_token_chunk = "content" in delta and "role" not in delta
                lp = ch.get("logprobs")
                n = (
                    len(lp["content"])
                    if isinstance(lp, dict) and isinstance(lp.get("content"), list)
                    else 1
                )
            else:
                text = ch.get("text")
                tokens = bool(text)
                is_token_chunk = text is not None
                lp = ch.get("logprobs")
                n = (
                    len(lp["tokens"])
                    if isinstance(lp, dict) and isinstance(lp.get("tokens"), list)
                    else 1
                )
            if tokens:
                rec.chunk_ns.append(t)
                rec.chunk_tokens.append(n or 1)
                if self.store_text and text:
                    self._keep_text(text if isinstance(text, str) else str(text)[:MAX_TEXT_CHARS])
            elif is_token_chunk and fr is None:
                # Text-less token (llama.cpp: a token ending inside a UTF-8 character).
                rec.empty_token_chunks += 1
        return None

    def on_end(self, parser: SSEParser, t: int) -> tuple[str, str] | None:
        """The body ended at ``t``: handle the event the parser still holds (one without its
        blank line). ``[DONE]`` or a JSON object still counts; anything else is a stream cut off
        inside an event (``disconnected``), not a malformed one. Returns (error class, message)."""
        if self.done:
            return None
        for ev, data in parser.close():
            if data != b"[DONE]":
                try:
                    json.loads(data)
                except (ValueError, RecursionError):
                    return records.E_DISCONNECTED, (
                        f"stream cut off inside an event after {len(self.rec.chunk_ns)} token "
                        f"chunks: {data[:80]!r}"
                    )
            err = self.on_event(ev, data, t)
            if err:
                return records.E_MALFORMED, err
        return None

    def check_end(self) -> None:
        """After the body ended cleanly: a stream without a finish reason was cut short
        (docs/methods.md §1: it must not pass as a complete response), whether or not ``[DONE]`` came.
        llama-cpp-python's server ends a running stream with ``[DONE]`` and no finish reason
        when another request arrives (its default ``--interrupt_requests``)."""
        rec = self.rec
        if rec.status != records.OK or rec.finish_reason is not None:
            return
        if self.done:
            _fail(
                rec,
                records.E_DISCONNECTED,
                f"stream ended with [DONE] but no finish_reason after {len(rec.chunk_ns)} token "
                "chunks: the server cut it short (llama-cpp-python does when another request "
                "arrives, unless started with --interrupt_requests False)",
            )
        elif rec.first_byte_ns is None:
            _fail(rec, records.E_DISCONNECTED, "the server closed the response without a body")
        else:
            _fail(
                rec,
                records.E_DISCONNECTED,
                f"stream ended after {len(rec.chunk_ns)} token chunks without [DONE] or a finish_reason",
            )

    def finish(self, item: Item) -> None:
        rec = self.rec
        u = self.usage
        if u and _count(u.get("completion_tokens")) is not None:
            rec.n_output = u["completion_tokens"]
            n_in = _count(u.get("prompt_tokens"))
            rec.n_input = n_in if n_in is not None else item.n_input
            rec.token_source = records.TOKENS_USAGE
        else:
            rec.n_output = sum(rec.chunk_tokens) + rec.empty_token_chunks
            rec.n_input = item.n_input
            rec.token_source = records.TOKENS_CHUNKS
        if self.store_text:
            rec.text = "".join(self.texts)
        rec.cut_events, rec.cut_bytes = self.parser.cut_events, self.parser.cut_bytes
        if self.timings is not _NO_TIMINGS:
            rec.timings, rec.timings_note = parse_timings(self.timings)


async def stream_request(  # noqa: C901  (split in issue 36)
    client: httpx.AsyncClient,
    target: Target,
    item: Item,
    body: bytes,
    rec: RequestRecord,
    *,
    store_text: bool = True,
) -> RequestRecord:
    """Send ``body`` for ``item`` and fill ``rec`` in place as the stream arrives.

    Never raises for endpoint trouble: the outcome is in ``rec`` (status, error class, message).
    Cancellation (Ctrl-C, end of run) marks ``rec`` cancelled and propagates, so the caller's
    reference to ``rec`` always holds what was measured.
    """
    st = _StreamState(rec, store_text)
    err_body: bytearray | None = None  # an error status's body, as it comes
    timeout = httpx.Timeout(
        connect=target.connect_timeout_s,
        read=target.read_timeout_s,
        write=target.connect_timeout_s,
        pool=target.connect_timeout_s,
    )
    headers = {"content-type": "application/json", "accept-encoding": "identity", **target.headers}

    async def trace(event: str, info: dict) -> None:
        # httpcore's connect events for this request: the connect phase ends when the connection
        # it opened is up (TCP, then TLS for https), as on the fast path
        if event.startswith(_CONNECT_EVENTS) and not event.endswith(".started"):
            rec.connect_ns = _now() - rec.dispatched_ns

    try:
        async with asyncio.timeout(target.timeout_s) as deadline:
            rec.dispatched_ns = _now()
            async with client.stream(
                "POST",
                target.url,
                content=body,
                headers=headers,
                timeout=timeout,
                extensions={"trace": trace},
            ) as resp:
                rec.http_status = resp.status_code
                if not 200 <= resp.status_code < 300:
                    err_body = bytearray()
                    # a body cut off, stalled or broken is still this status's error (rule 9);
                    # leaving it unread makes httpx close the connection
                    with contextlib.suppress(TimeoutError, httpx.HTTPError):
                        async with asyncio.timeout(min(ERROR_BODY_S, target.read_timeout_s)):
                            async for piece in resp.aiter_raw():
                                if rec.first_byte_ns is None:
                                    rec.first_byte_ns = _now()
                                err_body += piece
                                if len(err_body) >= _MAX_ERROR_BODY:
                                    break
                    _fail_http(rec, resp.status_code, bytes(err_body))
                    return rec
                parser = st.parser
                feed = parser.feed
                on_event = st.on_event
                pieces = resp.aiter_raw()
                t = 0
                async for piece in pieces:
                    t = _now()
                    if rec.first_byte_ns is None:
                        rec.first_byte_ns = t
                    for ev, data in feed(piece):
                        err = on_event(ev, data, t)
                        if err:
                            _fail(rec, records.E_MALFORMED, err)
                            return rec
                        if st.done:
                            break
                    if st.done:
                        break
                if st.done:
                    # [DONE] (or an error event): complete when it came. The body's end is read
                    # for a moment more only so that httpx can reuse the connection.
                    rec.done_ns = t
                    deadline.reschedule(None)
                    with contextlib.suppress(TimeoutError, httpx.HTTPError):
                        async with asyncio.timeout(min(TAIL_S, target.read_timeout_s)):
                            async for _ in pieces:
                                pass
                else:
                    t = _now()
                    err = st.on_end(parser, t)
                    if err:
                        _fail(rec, *err)
                        return rec
                    rec.done_ns = t
        st.check_end()
    except TimeoutError:
        if err_body is not None:  # the whole request's time ran out while reading an error body
            _fail_http(rec, rec.http_status, bytes(err_body))
        else:
            _fail(rec, records.E_TIMEOUT, f"no complete response within {target.timeout_s:g} s")
    except httpx.ConnectTimeout:
        _fail(rec, records.E_TIMEOUT, f"connect timed out after {target.connect_timeout_s:g} s")
    except httpx.ReadTimeout:
        _fail(rec, records.E_TIMEOUT, f"no data for {target.read_timeout_s:g} s")
    except httpx.TimeoutException as e:
        _fail(rec, records.E_TIMEOUT, f"{type(e).__name__}: {e}")
    except httpx.ConnectError as e:
        tls = find_cert_error(e)
        why = f"TLS failed: {describe(tls)}" if tls else str(e)
        _fail(rec, records.E_CONNECT, f"cannot connect to {target.url}: {why}")
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
        cls = (
            records.E_CONNECT
            if rec.http_status is None
            and rec.first_byte_ns is None
            and isinstance(e, httpx.WriteError)
            else records.E_DISCONNECTED
        )
        _fail(rec, cls, f"connection lost ({type(e).__name__}: {e or 'closed'})")
    except httpx.HTTPError as e:
        _fail(rec, records.E_OTHER, f"{type(e).__name__}: {e}")
    except asyncio.CancelledError:
        if st.done:  # cancelled while reading past [DONE]: the response was complete
            st.check_end()
        else:
            _fail(rec, records.E_CANCELLED, "cancelled by abtui", status=records.CANCELLED)
        raise
    finally:
        st.finish(item)
    return rec
