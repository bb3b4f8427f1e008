"""A streamed response's decoding state and outcomes, shared by both streaming paths.

:class:`StreamState` turns the SSE events of one response into the facts of its
``RequestRecord`` (token-bearing chunks and their times, text, usage, finish reason, llama.cpp's
``timings``); :func:`fail` and :func:`fail_http` mark how a request failed. The fast path
(:mod:`abtui.client.fast`) and the httpx path (:mod:`abtui.client.stream`) differ only in how
they read the bytes, so that both record the same facts for the same stream.

A chunk is *token-bearing* if it carries non-empty ``text`` / ``delta.content`` /
``delta.reasoning_content`` / ``delta.reasoning`` / ``delta.tool_calls``; the chat role prelude,
comments, finish-only chunks and the trailing usage-only chunk are not, so they never move TTFT
or E2E. Of those, a chunk with ``text``, ``content`` or ``tool_calls`` is part of the *answer*
(its first one is ``first_output_ns``: TTFO); one with only reasoning is thinking, its tokens
counted apart (``reasoning_chunk_tokens``).
"""

from __future__ import annotations

import json
import time

from abtui.client import records
from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.client.sse import SSEParser
from abtui.client.timings import parse_timings

_now = time.perf_counter_ns  # a Ray actor swaps in its clock (abtui.runner.ray.actor)
# After ``[DONE]`` the response is complete; a connection waits this long (at most the read
# timeout) for the body's end before it is closed instead of reused.
TAIL_S = 1.0
# An error status (>= 300) is the outcome; its body is only the message. It is read until it
# ends, reaches MAX_ERROR_BODY, or this long after the head (at most the read timeout), then
# the request is an ``http`` error with what came, and an unfinished body costs the connection
# (docs/compatibility.md, rule 9). Servers send an error body with its head or right after it.
ERROR_BODY_S = 1.0
MAX_ERROR_BODY = 8192
DONE = b"[DONE]"  # the stream's end marker (rule 10: ends the stream at its line end)
# Generated text stored per request at most (characters); the rest is counted, not kept
# (RequestRecord.cut_text). One SSE event's bound: abtui.client.sse.MAX_EVENT_BYTES.
MAX_TEXT_CHARS = 1 << 20


def fail(rec: RequestRecord, cls: str, msg: str, status: str = records.ERROR) -> None:
    """Mark ``rec`` failed with error class ``cls`` (its message cut to 500 characters); it
    ends now unless it ended already."""
    rec.status = status
    rec.error_class = cls
    rec.error_message = msg[:500]
    if rec.done_ns is None:
        rec.done_ns = _now()


def fail_http(rec: RequestRecord, status: int, body: bytes) -> None:
    """An error status: ``http``, with the message of whatever part of its body came."""
    fail(rec, records.E_HTTP, f"HTTP {status}: {error_text(body)}")


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def error_text(body: bytes) -> str:
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


def _reasoning_tokens(usage: dict | None, counted: int) -> int | None:
    """A request's reasoning tokens: the server's ``usage.completion_tokens_details
    .reasoning_tokens`` (OpenAI, vLLM), else the reasoning chunks' tokens counted, None when
    neither shows any."""
    details = usage.get("completion_tokens_details") if usage else None
    if isinstance(details, dict) and (n := _count(details.get("reasoning_tokens"))) is not None:
        return n
    return counted or None


def _cached_tokens(usage: dict | None) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens``: the prompt tokens served from the server's
    prefix cache (None when absent or not a count)."""
    details = usage.get("prompt_tokens_details") if usage else None
    return _count(details.get("cached_tokens")) if isinstance(details, dict) else None


_NO_TIMINGS = object()


class StreamState:
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
                answer = bool(text) or bool(delta.get("tool_calls"))
                thinking = not answer and bool(
                    delta.get("reasoning_content") or delta.get("reasoning")
                )
                tokens = answer or thinking
                is_token_chunk = "content" in delta and "role" not in delta
                lp = ch.get("logprobs")
                n = (
                    len(lp["content"])
                    if isinstance(lp, dict) and isinstance(lp.get("content"), list)
                    else 1
                )
            else:
                text = ch.get("text")
                tokens = answer = bool(text)
                thinking = False
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
                if thinking:
                    rec.reasoning_chunk_tokens += n or 1
                elif rec.first_output_ns is None:
                    rec.first_output_ns = t
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
            fail(
                rec,
                records.E_DISCONNECTED,
                f"stream ended with [DONE] but no finish_reason after {len(rec.chunk_ns)} token "
                "chunks: the server cut it short (llama-cpp-python does when another request "
                "arrives, unless started with --interrupt_requests False)",
            )
        elif rec.first_byte_ns is None:
            fail(rec, records.E_DISCONNECTED, "the server closed the response without a body")
        else:
            fail(
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
        rec.reasoning_tokens = _reasoning_tokens(u, rec.reasoning_chunk_tokens)
        rec.cached_tokens = _cached_tokens(u)
        if self.store_text:
            rec.text = "".join(self.texts)
        rec.cut_events, rec.cut_bytes = self.parser.cut_events, self.parser.cut_bytes
        if self.timings is not _NO_TIMINGS:
            rec.timings, rec.timings_note = parse_timings(self.timings)
