"""The measured hot path: streaming HTTP/1.1 on a bare ``asyncio.Protocol``.

Why not httpx here: profiled on the 2-core dev machine, httpx (httpcore + h11 + anyio) costs
about 100 µs of CPU per streamed read, so one process saturates near 5k tokens/s at 64 streams
of one token per read, and a saturated loop inflates every measured latency. This module reads
the socket in ``data_received``, timestamps each read *in the callback* (no task wake-up between
the bytes arriving and the clock being read), decodes chunked transfer encoding and SSE there,
and wakes the request's coroutine once, at the end. httpx remains abtui's HTTP client for
everything else (endpoint checks, model lists, scraping) and is kept as an alternative streaming
path (``abtui.client.stream.stream_request``); tests check that both paths record the same facts.

Scope, deliberately small: HTTP/1.1 (and 1.0) over TCP or TLS, keep-alive pooling per host,
``Content-Length``, chunked and close-delimited bodies (the framing: :mod:`abtui.client.http1`).
No proxies, no redirects, no HTTP/2. A response is complete at ``[DONE]``; its connection is
reused only once the body's end follows (docs/compatibility.md, rules 5-10).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from urllib.parse import urlsplit

from abtui.client import records
from abtui.client.http1 import ChunkedDecoder, Malformed, parse_head, request_bytes
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
from abtui.client.target import Target
from abtui.client.tls import describe

_now = time.perf_counter_ns


class _Conn(asyncio.Protocol):
    """One keep-alive connection; hands every read to the current exchange."""

    __slots__ = ("transport", "exchange", "closed", "used")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.closed = False
        self.used = 0

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        t = _now()
        ex = self.exchange
        if ex is not None:
            ex.on_data(data, t)
        # bytes with no exchange (after a response ended) make the connection unusable
        elif data:
            self.close()

    def eof_received(self):
        ex = self.exchange
        if ex is not None:
            ex.on_eof(_now())
        self.closed = True
        return False  # close the transport

    def connection_lost(self, exc) -> None:
        self.closed = True
        ex = self.exchange
        if ex is not None:
            ex.on_lost(exc, _now())

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _Exchange:
    """One request/response on a connection: HTTP framing → SSE → the record."""

    __slots__ = (
        "conn",
        "state",
        "rec",
        "fut",
        "head",
        "status",
        "mode",
        "remaining",
        "keep_alive",
        "parser",
        "err_body",
        "err_wait",
        "last_rx",
        "got_bytes",
        "chunks",
        "tail",
        "release",
        "timer",
    )

    def __init__(self, conn: _Conn, state: StreamState, err_wait: float = ERROR_BODY_S) -> None:
        self.conn = conn
        self.state = state
        self.rec = state.rec
        self.fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self.head = b""
        self.status = 0
        self.mode = ""  # "chunked" | "length" | "close"
        self.remaining = 0
        self.keep_alive = True
        self.parser = state.parser  # the request's (bounded), shared with its state
        self.err_body: bytearray | None = None  # an error status's body (the message)
        self.err_wait = err_wait  # how long after the head that body is waited for
        self.last_rx = _now()
        self.got_bytes = False
        self.chunks = ChunkedDecoder()
        self.tail = False  # complete at [DONE], the body's end not yet read
        self.release = None  # FastClient._release of this connection, once parked
        self.timer: asyncio.TimerHandle | None = None  # the tail's, or the error body's

    # -- completion ---------------------------------------------------------------------
    def _finish(self, t: int, error: tuple[str, str] | None = None) -> None:
        if self.fut.done():
            if self.tail:  # the body ended (or broke) after [DONE]
                self._end_tail(error is None)
            return
        rec = self.rec
        if error is not None:
            self.keep_alive = False
        if self.err_body is not None:  # the status said it failed, whatever the body did after
            if self.timer is not None:
                self.timer.cancel()
            fail_http(rec, self.status, bytes(self.err_body))
        elif error is not None and rec.status == records.OK:
            fail(rec, error[0], error[1])
        rec.done_ns = rec.done_ns or t
        if not self.tail:
            self.conn.exchange = None
        self.fut.set_result(None)

    def _done_early(self, t: int) -> None:
        """[DONE] (or an error event) before the body's end: the response is complete now; the
        connection is reused only if the body's end follows (else it is closed)."""
        self.tail = True
        self._finish(t)

    def park(self, release, grace: float) -> None:
        """Hand the connection to ``release(reusable)`` when the body's end comes, or close it
        after ``grace`` seconds."""
        self.release = release
        self.timer = asyncio.get_running_loop().call_later(grace, self._end_tail, False)

    def _end_tail(self, reusable: bool) -> None:
        if not self.tail:
            return
        self.tail = False
        self.conn.exchange = None
        self.keep_alive = self.keep_alive and reusable
        if self.timer is not None:
            self.timer.cancel()
        if self.release is not None:
            self.release(self.keep_alive)

    # -- protocol events ----------------------------------------------------------------
    def on_data(self, data: bytes, t: int) -> None:
        self.last_rx = t
        if self.fut.done() and not self.tail:
            return
        if not self.got_bytes:
            self.got_bytes = True
        try:
            if self.status == 0:
                data = self._on_head(data, t)
                if self.status == 0 or self.fut.done():
                    return
            if self.mode == "chunked":
                pieces: list[bytes] = []
                try:
                    after = self.chunks.feed(data, pieces)
                finally:  # on a fault too: what came before it is still the stream's
                    if pieces:
                        self._body(pieces[0] if len(pieces) == 1 else b"".join(pieces), t)
                if after is not None:
                    if after:  # bytes after the body's end: the connection is not reused
                        self.keep_alive = False
                    self._end_of_body(t)
            elif self.mode == "length":
                n = len(data)
                if n >= self.remaining:
                    piece, extra = data[: self.remaining], data[self.remaining :]
                    self.remaining = 0
                    self._body(piece, t)
                    if extra:
                        self.keep_alive = False
                    self._end_of_body(t)
                else:
                    self.remaining -= n
                    self._body(data, t)
            else:
                self._body(data, t)
        except Malformed as e:  # after [DONE] (the exchange's tail), it costs the connection only
            self._finish(t, (records.E_MALFORMED, str(e)))

    def _on_head(self, data: bytes, t: int) -> bytes:
        self.head += data
        h = parse_head(self.head)
        if h is None:
            return b""
        self.status, self.keep_alive, self.mode, self.remaining = h[:4]
        rec = self.rec
        rec.http_status = h.status
        rec.first_byte_ns = t
        if not 200 <= h.status < 300:
            self.err_body = bytearray()
            self.timer = asyncio.get_running_loop().call_later(self.err_wait, self._error_body_late)
        if h.mode == "length" and h.length == 0:
            self._end_of_body(t)
            return b""
        return h.rest

    def _error_body_late(self) -> None:
        """The error body has not ended ``err_wait`` after the head: the status is the outcome;
        the connection, its body unfinished, is not reused."""
        self.timer = None
        self._finish(_now(), (records.E_HTTP, "error body unfinished"))

    def _body(self, piece: bytes, t: int) -> None:
        eb = self.err_body
        if eb is not None:
            if not self.fut.done():
                eb += piece
                if len(eb) >= MAX_ERROR_BODY:  # enough for the message: not read further
                    self._finish(t, (records.E_HTTP, "error body capped"))
            return
        st = self.state
        if st.done:
            return
        on_event = st.on_event
        for ev, data in self.parser.feed(piece):
            err = on_event(ev, data, t)
            if err:
                raise Malformed(err)
            if st.done:  # [DONE] or an error event: complete now, whatever the framing says
                self._done_early(t)
                break

    def _end_of_body(self, t: int) -> None:
        err = self.state.on_end(self.parser, t) if self.err_body is None else None
        self._finish(t, err)

    def on_eof(self, t: int) -> None:
        self.keep_alive = False
        if self.fut.done() and not self.tail:
            return
        if self.status and self.mode == "close":
            try:
                self._end_of_body(t)
            except Malformed as e:
                self._finish(t, (records.E_MALFORMED, str(e)))
        else:
            self._lost(t, None)

    def on_lost(self, exc, t: int) -> None:
        self.keep_alive = False
        if not self.fut.done() or self.tail:
            self.on_eof(t) if exc is None else self._lost(t, exc)

    def _lost(self, t: int, exc) -> None:
        why = f" ({exc})" if exc else ""
        if not self.status:
            msg = f"the server closed the connection without a response{why}"
        else:
            msg = f"connection lost mid-stream after {len(self.rec.chunk_ns)} token chunks{why}"
        self._finish(t, (records.E_DISCONNECTED, msg))


def pool_key(target: Target) -> tuple:
    """The pool a request to ``target`` takes its connection from: one per endpoint and TLS
    settings."""
    u = urlsplit(target.url)
    port = u.port or (443 if u.scheme == "https" else 80)
    return (u.scheme, u.hostname, port, target.insecure, target.ca_bundle)


def affinity_key(target: Target) -> tuple:
    """The pool a request's connection goes back to: its conversation's own (so the next turn
    takes the same connection), else the endpoint's."""
    key = pool_key(target)
    return key if target.affinity is None else (*key, target.affinity)


class FastClient:
    """A pool of keep-alive connections per (scheme, host, port); one per event loop.

    :mod:`abtui.client.preconnect` fills it before a run's ``t0``; ``opened`` counts every
    connection it opened, there or for a request."""

    def __init__(self, max_idle_per_host: int = 4096) -> None:
        self._idle: dict[tuple, list[_Conn]] = {}
        self._all: set[_Conn] = set()
        self._ended: set[tuple] = set()  # conversations' pools whose conversation is over
        self.max_idle = max_idle_per_host
        self.opened = 0

    async def __aenter__(self) -> FastClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for c in list(self._all):
            c.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)

    async def _connect(
        self, key: tuple, timeout: float, tls: ssl.SSLContext | None = None
    ) -> _Conn:
        scheme, host, port = key[:3]
        loop = asyncio.get_running_loop()
        kw = {}
        if scheme == "https":  # verified unless the arm says insecure (abtui.client.tls)
            kw = {"ssl": tls or ssl.create_default_context(), "server_hostname": host}
        async with asyncio.timeout(timeout):
            _, conn = await loop.create_connection(_Conn, host, port, **kw)
        self._all.add(conn)
        self.opened += 1
        return conn

    def idle_open(self, key: tuple) -> int:
        """Idle connections of pool ``key`` that are still open (the server has not closed
        them; one it closes while idle is seen at once, by its end of file)."""
        return sum(not c.closed for c in self._idle.get(key, ()))

    def _acquire_idle(self, key: tuple) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            c = idle.pop()
            if not c.closed:
                return c
            self._all.discard(c)
        return None

    def _acquire_for(self, key: tuple, home: tuple) -> _Conn | None:
        """An idle connection for a request of pool ``key``: the one its conversation used last
        (``home``), else any of the pool's."""
        conn = self._acquire_idle(home) if home != key else None
        return conn or self._acquire_idle(key)

    def end_affinity(self, target: Target) -> None:
        """A conversation is over: its kept connection goes back to the endpoint's pool."""
        home = affinity_key(target)
        key = pool_key(target)
        if home == key:
            return
        self._ended.add(home)  # one still finishing its body is released there later
        for conn in self._idle.pop(home, []):
            self._release(key, conn, not conn.closed)

    def _release(self, key: tuple, conn: _Conn, reusable: bool) -> None:
        if key in self._ended:
            key = key[:-1]  # the conversation is over: back to the endpoint's pool
        conn.exchange = None
        if reusable and not conn.closed:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self.max_idle:
                idle.append(conn)
                return
        conn.close()
        self._all.discard(conn)

    # -- one request ----------------------------------------------------------------------
    async def stream(
        self,
        target: Target,
        item: Item,
        body: bytes,
        rec: RequestRecord,
        *,
        store_text: bool = True,
    ) -> RequestRecord:
        """Send ``body`` for ``item`` and fill ``rec`` in place as the stream arrives; the same
        contract as :func:`abtui.client.stream.stream_request` (never raises for endpoint
        trouble; cancellation marks ``rec`` cancelled and propagates)."""
        u = urlsplit(target.url)
        key = pool_key(target)  # connections are pooled per endpoint and TLS settings
        home = affinity_key(target)  # where the connection goes back to after the request
        self._ended.discard(home)  # (the same conversation again: another run)
        path = u.path + (f"?{u.query}" if u.query else "")
        payload = request_bytes(path, u.netloc, target.headers, body)
        st = StreamState(rec, store_text)
        conn: _Conn | None = None
        ex: _Exchange | None = None
        try:
            async with asyncio.timeout(target.timeout_s):
                rec.dispatched_ns = _now()
                for attempt in (0, 1):
                    # the retry goes on a new connection: the pool's other idle ones were idle
                    # as long and are as likely closed (llama-server closes any idle for 5 s;
                    # seen: 1 request in 256 lost when the retry took a second stale one)
                    conn = self._acquire_for(key, home) if attempt == 0 else None
                    reused = conn is not None
                    if conn is None:
                        conn = await self._connect_for(rec, key, target)
                        if conn is None:
                            return rec
                    ex = _Exchange(conn, st, min(ERROR_BODY_S, target.read_timeout_s))
                    await self._exchange(conn, ex, payload, target.read_timeout_s)
                    # a kept-alive connection the server had closed: retry once on a fresh one
                    stale = (
                        reused and not ex.got_bytes and rec.error_class == records.E_DISCONNECTED
                    )
                    if attempt == 0 and stale:
                        self._release(home, conn, False)
                        rec.status, rec.error_class = records.OK, None
                        rec.error_message, rec.done_ns = None, None
                        st = StreamState(rec, store_text)
                        continue
                    break
            st.check_end()
        except TimeoutError:
            if ex is not None:
                ex.keep_alive = False
            if ex is not None and ex.err_body is not None:  # out of time in an error body
                fail_http(rec, ex.status, bytes(ex.err_body))  # (rule 9)
            else:
                fail(rec, records.E_TIMEOUT, f"no complete response within {target.timeout_s:g} s")
        except asyncio.CancelledError:
            if ex is not None:
                ex.keep_alive = False
            fail(rec, records.E_CANCELLED, "cancelled by abtui", status=records.CANCELLED)
            raise
        finally:
            if conn is not None:
                self._hand_back(home, conn, ex, rec, target)
            st.finish(item)
        return rec

    async def _connect_for(self, rec: RequestRecord, key: tuple, target: Target) -> _Conn | None:
        """A new connection for ``rec``, its time recorded as the connect phase (out of TTFT and
        E2E, in TTFT (user)); None when it failed (``rec`` says why)."""
        try:
            tls = target.tls if key[0] == "https" else None
            return await self._connect(key, target.connect_timeout_s, tls)
        except TimeoutError:
            fail(
                rec,
                records.E_TIMEOUT,
                f"connect to {target.url} timed out after {target.connect_timeout_s:g} s",
            )
        except ssl.SSLError as e:
            fail(
                rec, records.E_CONNECT, f"cannot connect to {target.url}: TLS failed: {describe(e)}"
            )
        except OSError as e:
            fail(rec, records.E_CONNECT, f"cannot connect to {target.url}: {e.strerror or e}")
        finally:
            rec.connect_ns = _now() - rec.dispatched_ns
        return None

    @staticmethod
    async def _exchange(conn: _Conn, ex: _Exchange, payload: bytes, read_timeout_s: float) -> None:
        """Send ``payload`` on ``conn`` and wait for ``ex`` to complete; a silence of
        ``read_timeout_s`` between two reads ends it as a timeout."""
        loop = asyncio.get_running_loop()
        conn.exchange = ex
        conn.used += 1
        conn.transport.write(payload)
        watchdog = None

        def check() -> None:
            nonlocal watchdog
            if ex.fut.done():
                return
            idle = (_now() - ex.last_rx) / 1e9
            if idle >= read_timeout_s:
                ex._finish(_now(), (records.E_TIMEOUT, f"no data for {read_timeout_s:g} s"))
            else:
                watchdog = loop.call_later(read_timeout_s - idle, check)

        watchdog = loop.call_later(read_timeout_s, check)
        try:
            await ex.fut
        finally:
            watchdog.cancel()

    def _hand_back(
        self, key: tuple, conn: _Conn, ex: _Exchange | None, rec: RequestRecord, target: Target
    ) -> None:
        """After a request: its connection back to the pool (once the body's end came, when it
        completed at [DONE]) if it can be reused, else closed."""
        ok = ex is not None and ex.fut.done() and ex.keep_alive and rec.status == records.OK
        if ok and ex.tail:  # complete at [DONE]: back to the pool once the body ends
            ex.park(
                lambda reusable: self._release(key, conn, reusable),
                min(TAIL_S, target.read_timeout_s),
            )
            return
        if ex is not None and ex.timer is not None:  # an error body's, if cut short
            ex.timer.cancel()
        self._release(key, conn, ok)


async def fast_stream_request(
    client: FastClient,
    target: Target,
    item: Item,
    body: bytes,
    rec: RequestRecord,
    *,
    store_text: bool = True,
) -> RequestRecord:
    """:meth:`FastClient.stream`, called as :func:`abtui.client.stream.stream_request` is (the
    load generator sends on either path through one signature)."""
    return await client.stream(target, item, body, rec, store_text=store_text)
