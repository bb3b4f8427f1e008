"""One streamed request to an OpenAI-compatible endpoint, measured (docs/methods.md §1).

The httpx path (the load generator's default is :mod:`abtui.client.fast`): every read is
timestamped the moment it arrives, SSE is parsed on raw bytes, and a chunk's JSON is decoded once,
by the same :class:`~abtui.client.stream_state.StreamState` as the fast path. The endpoint's
``Target`` and the request body, which both paths send, live in :mod:`abtui.client.target` and
are importable from here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time

import httpx

from abtui.client import records
from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.client.stream_state import (
    ERROR_BODY_S,
    MAX_ERROR_BODY,
    TAIL_S,
    StreamState,
    fail,
    fail_http,
)
from abtui.client.target import Target, build_body
from abtui.client.tls import describe, find_cert_error

__all__ = ["Target", "build_body", "make_client", "stream_request"]

_now = time.perf_counter_ns
# httpcore's trace events of opening a connection (``….started`` / ``.complete`` / ``.failed``)
_CONNECT_EVENTS = ("connection.connect_tcp.", "connection.start_tls.")


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


async def stream_request(
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
    st = StreamState(rec, store_text)
    err_body = bytearray()  # an error status's body, as it comes
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
                timeout=_timeouts(target),
                extensions={"trace": trace},
            ) as resp:
                rec.http_status = resp.status_code
                if not 200 <= resp.status_code < 300:
                    await _read_error_body(resp, rec, target, err_body)
                    fail_http(rec, resp.status_code, bytes(err_body))
                    return rec
                # the hot loop, inline: each read is timestamped on arrival
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
                            fail(rec, records.E_MALFORMED, err)
                            return rec
                        if st.done:
                            break
                    if st.done:
                        break
                if st.done:  # [DONE] (or an error event): complete when it came
                    rec.done_ns = t
                    deadline.reschedule(None)
                    await _drain_tail(pieces, target)
                else:
                    t = _now()
                    err = st.on_end(parser, t)
                    if err:
                        fail(rec, *err)
                        return rec
                    rec.done_ns = t
        st.check_end()
    except TimeoutError:
        if _error_status(rec):  # the whole request's time ran out while reading an error body
            fail_http(rec, rec.http_status, bytes(err_body))
        else:
            fail(rec, records.E_TIMEOUT, f"no complete response within {target.timeout_s:g} s")
    except httpx.HTTPError as e:
        _fail_transport(rec, target, e)
    except asyncio.CancelledError:
        if st.done:  # cancelled while reading past [DONE]: the response was complete
            st.check_end()
        else:
            fail(rec, records.E_CANCELLED, "cancelled by abtui", status=records.CANCELLED)
        raise
    finally:
        st.finish(item)
    return rec


def _timeouts(target: Target) -> httpx.Timeout:
    return httpx.Timeout(
        connect=target.connect_timeout_s,
        read=target.read_timeout_s,
        write=target.connect_timeout_s,
        pool=target.connect_timeout_s,
    )


def _error_status(rec: RequestRecord) -> bool:
    return rec.http_status is not None and not 200 <= rec.http_status < 300


async def _read_error_body(
    resp: httpx.Response, rec: RequestRecord, target: Target, err_body: bytearray
) -> None:
    """An error status's body into ``err_body``, up to :data:`MAX_ERROR_BODY` bytes or
    :data:`ERROR_BODY_S`. A body cut off, stalled or broken is still the status's error (rule 9);
    leaving it unread makes httpx close the connection."""
    with contextlib.suppress(TimeoutError, httpx.HTTPError):
        async with asyncio.timeout(min(ERROR_BODY_S, target.read_timeout_s)):
            async for piece in resp.aiter_raw():
                if rec.first_byte_ns is None:
                    rec.first_byte_ns = _now()
                err_body += piece
                if len(err_body) >= MAX_ERROR_BODY:
                    break


async def _drain_tail(pieces, target: Target) -> None:
    """After [DONE]: the body's end is read for a moment more, only so that httpx can reuse
    the connection."""
    with contextlib.suppress(TimeoutError, httpx.HTTPError):
        async with asyncio.timeout(min(TAIL_S, target.read_timeout_s)):
            async for _ in pieces:
                pass


def _fail_transport(rec: RequestRecord, target: Target, e: httpx.HTTPError) -> None:
    """What an httpx error says about the request: a timeout, a refused or failed connect,
    a connection lost mid-way, or something else."""
    if isinstance(e, httpx.ConnectTimeout):
        fail(rec, records.E_TIMEOUT, f"connect timed out after {target.connect_timeout_s:g} s")
    elif isinstance(e, httpx.ReadTimeout):
        fail(rec, records.E_TIMEOUT, f"no data for {target.read_timeout_s:g} s")
    elif isinstance(e, httpx.TimeoutException):
        fail(rec, records.E_TIMEOUT, f"{type(e).__name__}: {e}")
    elif isinstance(e, httpx.ConnectError):
        tls = find_cert_error(e)
        why = f"TLS failed: {describe(tls)}" if tls else str(e)
        fail(rec, records.E_CONNECT, f"cannot connect to {target.url}: {why}")
    elif isinstance(e, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        unsent = rec.http_status is None and rec.first_byte_ns is None
        cls = (
            records.E_CONNECT
            if unsent and isinstance(e, httpx.WriteError)
            else records.E_DISCONNECTED
        )
        fail(rec, cls, f"connection lost ({type(e).__name__}: {e or 'closed'})")
    else:
        fail(rec, records.E_OTHER, f"{type(e).__name__}: {e}")
