"""The simulator's HTTP face: a small asyncio HTTP/1.1 server speaking OpenAI's API.

One :class:`_Connection` (an :class:`asyncio.Protocol`) per client connection; requests on it
are served one after another (keep-alive; pipelined requests wait their turn). Streamed chunks
are sent from ``loop.call_at`` timers at the engine's absolute deadlines — no coroutine per
stream — each with one ``transport.write``; chunks already due together are coalesced into one
write. Writing pauses while the transport's buffer is full (``pause_writing``), so a slow
client cannot make memory grow; the chunks that fell due meanwhile go out in one write on
``resume_writing``.

Chunk log (``SimConfig.chunk_log``), JSONL, buffered and flushed every 0.5 s and at close:
``{"req", "key", "event": "recv", "t_ns"}`` when a request's body is in;
``{"req", "key", "seq", "t_ns", "n"}`` per token chunk written (``t_ns`` taken right before the
``transport.write``; the prelude is not logged); ``{"req", "key", "event": "response", "t_ns",
"n"}`` for a non-streamed response; ``{"req", "key", "event": "cancel", "t_ns"}`` when the
client went away before the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from collections.abc import Iterator

from abtui.errors import UsageError
from abtui.sim.api import BadRequest, Formatter, error_body, models_body, parse_request
from abtui.sim.engine import Engine, FixedDelayEngine, SimConfig, SimRequest
from abtui.sim.faults import make_faults
from abtui.sim.logprobs import LogprobFace
from abtui.sim.prefix_cache import block_hashes
from abtui.sim.profiler import PREFIX, StepProfiler
from abtui.sim.prom import CONTENT_TYPE as PROM_CONTENT_TYPE
from abtui.sim.prom import metrics_text
from abtui.sim.quality_face import QualityFace, variant_of

MAX_HEAD = 64 * 1024  # bytes of request line + headers
MAX_BODY = 64 * 1024 * 1024
MAX_WRITE = 64 * 1024  # coalesce due chunks up to about this many bytes per write
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_REASONS |= {411: "Length Required", 413: "Payload Too Large", 431: "Headers Too Large"}
_REASONS |= {500: "Internal Server Error"}
_perf_ns = time.perf_counter_ns
_DEFAULT_MODEL = SimConfig().model


class ChunkLog:
    """JSONL lines kept in memory and written every ``interval`` seconds and at close."""

    def __init__(self, path: str, loop: asyncio.AbstractEventLoop, interval: float = 0.5):
        try:
            self._file = open(path, "w", encoding="utf-8", buffering=1 << 20)  # noqa: SIM115
        except OSError as exc:
            raise UsageError(
                f"cannot write the chunk log {path!r}: {exc.strerror}",
                "give --chunk-log a path in a writable folder",
            ) from None
        self._lines: list[str] = []
        self.add = self._lines.append
        self._loop, self._interval = loop, interval
        self._timer = loop.call_later(interval, self._tick)

    def _tick(self) -> None:
        self.flush()
        self._timer = self._loop.call_later(self._interval, self._tick)

    def flush(self) -> None:
        if self._lines:
            self._file.write("".join(self._lines))
            self._lines.clear()
            self._file.flush()

    def close(self) -> None:
        self._timer.cancel()
        self.flush()
        self._file.close()


class SimServer:
    """A running simulated endpoint (from :func:`start_server`)."""

    def __init__(self, config: SimConfig, engine: Engine, loop: asyncio.AbstractEventLoop):
        self.config = config
        self.engine = engine
        self.loop = loop
        self.port = 0
        self.log: ChunkLog | None = None
        self.created = int(time.time())
        self.tag = os.urandom(4).hex()
        self.requests = 0  # requests accepted so far (the last request id)
        self.connections: set[_Connection] = set()
        self.faults = make_faults(config.faults, config.seed)  # None: no fault injected
        # answers the built-in quality prompts (simulated), and gives each response its text
        self.quality = QualityFace(config.seed, variant_of(getattr(engine, "preset", None)))
        self.logprobs = LogprobFace(config.seed, self.quality.variant, config.logprobs)
        self._server: asyncio.AbstractServer | None = None
        self.profiler: StepProfiler | None = None  # with --profiler-config: /start_profile
        # loop.time() at perf_counter_ns() == 0, to turn deadlines into call_at times
        self._offset = loop.time() - _perf_ns() / 1e9

    @property
    def url(self) -> str:
        host = self.config.host
        host = "127.0.0.1" if host in ("0.0.0.0", "") else f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/v1"

    def when(self, deadline_ns: int) -> float:
        return self._offset + deadline_ns / 1e9

    async def close(self) -> None:
        """Stop listening, drop open connections (their streams stop), flush the chunk log."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.abort()
        await asyncio.sleep(0)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self.log is not None:
            self.log.close()
            self.log = None


async def start_server(config: SimConfig, engine: Engine | None = None) -> SimServer:
    """Start the sim in the running loop; ``engine`` defaults to :class:`FixedDelayEngine`."""
    config.validate()
    loop = asyncio.get_running_loop()
    if engine is None:  # --preset: the batching engine; else the scripted fixed delays
        engine = config.preset.build(config.seed) if config.preset else FixedDelayEngine(config)
    if hasattr(engine, "attach"):  # a push engine runs its step timer on this loop
        engine.attach(loop)
        if config.model == _DEFAULT_MODEL:
            config.model = engine.preset.name
    sim = SimServer(config, engine, loop)
    if config.chunk_log:
        sim.log = ChunkLog(config.chunk_log, loop)
    try:
        server = await loop.create_server(
            lambda: _Connection(sim), config.host, config.port, backlog=1024, reuse_address=True
        )
    except OSError as exc:
        if sim.log is not None:
            sim.log.close()
        raise UsageError(
            f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}",
            "choose another --port (0 picks a free one)",
        ) from None
    sim._server = server
    sim.port = server.sockets[0].getsockname()[1]
    if config.profiler is not None:
        sim.profiler = StepProfiler(config.profiler, engine, f"sim-{sim.port}")
    return sim


def serve(config: SimConfig) -> None:
    """Run the sim until SIGINT/SIGTERM; first prints ``abtui sim: listening on URL``."""

    async def main() -> None:
        sim = await start_server(config)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - not Unix
                signal.signal(sig, lambda *_: loop.call_soon_threadsafe(stop.set))
        print(f"abtui sim: listening on {sim.url}", flush=True)
        try:
            await stop.wait()
        finally:
            await sim.close()

    asyncio.run(main())


class _Connection(asyncio.Protocol):
    """One client connection: parses requests, runs one response at a time."""

    def __init__(self, sim: SimServer) -> None:
        self.sim = sim
        self.t: asyncio.Transport | None = None
        self.buf = bytearray()
        self.head: tuple[str, str, bool, int] | None = None  # method, path, keep-alive, length
        self.busy = False  # a response is in progress
        self.keep_alive = True
        self.paused = False  # the transport asked us to stop writing
        self.due = False  # a tick came while paused
        # the response in progress
        self.req: SimRequest | None = None
        self.fmt: Formatter | None = None
        self.it: Iterator[tuple[int, int]] | None = None
        self.next: tuple[int, int] | None = None
        self.timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self.text = None  # the response's text source: text(start, n) -> str (quality face)
        self.tokens = 0
        self.seq = 0
        self.texts: list[str] = []
        self.key = "null"
        self.fault = None  # the response's StreamFault (abtui.sim.faults), None when healthy
        self.handle = None  # the push engine's request (see _push), None for pull engines
        self.pending: list[int] = []  # token counts pushed and not yet written
        self.pending_last = False  # the last pushed count ends the answer

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.t = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.sim.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.sim.connections.discard(self)
        if self.busy and self.req is not None and self.sim.log is not None:
            self.sim.log.add(self._log_event("cancel", _perf_ns()))
        self._end_response()
        self.t = None

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.due:
            self.due = False
            self._tick()

    def data_received(self, data: bytes) -> None:
        now = _perf_ns()
        self.buf += data
        if not self.busy:
            self._process(now)
        elif len(self.buf) > MAX_HEAD + MAX_BODY and self.t is not None:
            self.t.pause_reading()  # pipelining client far ahead of us: wait

    def abort(self) -> None:
        if self.t is not None:
            self.t.abort()

    # -- requests --------------------------------------------------------------------------

    def _process(self, now: int | None = None) -> None:
        while not self.busy and self.t is not None and not self.t.is_closing():
            if self.head is None:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.buf) > MAX_HEAD:
                        self._fail(431, "request headers are too large", close=True)
                    return
                head = bytes(self.buf[:end])
                del self.buf[: end + 4]
                if not self._parse_head(head):
                    return
            method, path, _, length = self.head  # type: ignore[misc]
            if len(self.buf) < length:
                return
            body = bytes(self.buf[:length])
            del self.buf[:length]
            self.head = None
            self._route(method, path, body, now if now is not None else _perf_ns())
            now = None
        if self.t is not None and not self.busy:
            self.t.resume_reading()

    def _parse_head(self, head: bytes) -> bool:
        try:
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ")
            if not version.startswith("HTTP/1."):
                raise ValueError(version)
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        except ValueError:
            self._fail(400, "malformed HTTP request line or headers", close=True)
            return False
        conn = headers.get("connection", "").lower()
        self.keep_alive = "close" not in conn and (version != "HTTP/1.0" or "keep-alive" in conn)
        if "transfer-encoding" in headers:
            self._fail(411, "chunked request bodies are not supported; send Content-Length", True)
            return False
        try:
            length = int(headers.get("content-length", "0"))
            if length < 0:
                raise ValueError
        except ValueError:
            self._fail(400, "invalid Content-Length header", close=True)
            return False
        if length > MAX_BODY:
            self._fail(413, f"request body over {MAX_BODY} bytes", close=True)
            return False
        if headers.get("expect", "").lower() == "100-continue" and length > len(self.buf):
            self.t.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # type: ignore[union-attr]
        self.head = (method, target.split("?", 1)[0], self.keep_alive, length)
        return True

    def _route(self, method: str, path: str, body: bytes, now: int) -> None:
        path = path.rstrip("/") or "/"
        if path in ("/v1/completions", "/v1/chat/completions"):
            if method != "POST":
                return self._fail(405, f"use POST for {path}")
            sim = self.sim
            sim.requests += 1
            try:
                req = parse_request(
                    body,
                    chat=path == "/v1/chat/completions",
                    req_id=sim.requests,
                    arrival_ns=now,
                    default_max_tokens=sim.config.default_max_tokens,
                )
            except BadRequest as exc:
                return self._fail(exc.status, exc.message)
            if not sim.config.usage:
                req.include_usage = False
            sim.quality.prepare(req)  # a quality-suite prompt gets its simulated answer
            if sim.faults is not None and sim.faults.intercept(self, req):
                return None  # an injected fault answered, or holds, the request
            return self._start(req)
        if path in ("/v1/models", "/models", "/health"):
            if method not in ("GET", "HEAD"):
                return self._fail(405, f"use GET for {path}")
            if path == "/health":
                return self._send(200, b'{"status":"ok"}', head_only=method == "HEAD")
            engine = self.sim.engine
            meta = engine.models_meta() if hasattr(engine, "models_meta") else {}
            meta["quality_face"] = self.sim.quality.describe()
            body = models_body(self.sim.config.model, self.sim.created, meta)
            return self._send(200, body, head_only=method == "HEAD")
        if path in ("/start_profile", "/stop_profile") and self.sim.profiler is not None:
            if method != "POST":
                return self._fail(405, f"use POST for {path}")
            return self._profile(path == "/start_profile", body)
        if path == "/metrics":
            if method not in ("GET", "HEAD"):
                return self._fail(405, f"use GET for {path}")
            text = metrics_text(self.sim)
            if text is None:
                return self._fail(404, "this simulated engine keeps no statistics")
            return self._send(
                200, text.encode(), ctype=PROM_CONTENT_TYPE, head_only=method == "HEAD"
            )
        self._fail(
            404,
            f"no route for {method} {path}; the sim serves /v1/completions, "
            "/v1/chat/completions, /v1/models, /metrics and /health (and /start_profile, "
            "/stop_profile with --profiler-config)",
        )

    def _profile(self, start: bool, body: bytes) -> None:
        """``/start_profile`` (optionally ``{"max_iterations": N}``, as vLLM takes it, or SGLang's
        ``{"num_steps": N}``) or
        ``/stop_profile``, which writes the trace and answers its path."""
        prof = self.sim.profiler
        assert prof is not None
        if start:
            if prof.active:
                return self._fail(400, "the profiler is already running; POST /stop_profile")
            try:
                doc = json.loads(body) if body.strip() else {}
            except ValueError:
                doc = None
            # vLLM's key, else SGLang's
            limit = (
                (doc.get("max_iterations", doc.get("num_steps"))) if isinstance(doc, dict) else -1
            )
            if limit is not None and (
                isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
            ):
                return self._fail(
                    400, 'the body must be {}, {"max_iterations": N >= 0} or {"num_steps": N}'
                )
            prefix = doc.get("profile_prefix") if isinstance(doc, dict) else None
            if prefix is not None and not (isinstance(prefix, str) and PREFIX.fullmatch(prefix)):
                return self._fail(400, "profile_prefix: 1-128 letters, digits, '.', '_', '-'")
            prof.max_steps, prof.prefix = limit, prefix
            prof.start(self.sim.engine.now)
            return self._send(200, b"{}")
        if not prof.active:
            return self._fail(400, "the profiler is not running; POST /start_profile first")
        try:
            path = prof.stop()
        except OSError as exc:
            return self._fail(500, f"cannot write the trace: {exc.strerror or exc}")
        return self._send(200, json.dumps({"trace": str(path)}).encode())

    def _send(
        self,
        status: int,
        body: bytes,
        close: bool = False,
        ctype: str = "application/json",
        head_only: bool = False,  # a HEAD request: the headers (with the body's length) only
    ) -> None:
        if self.t is None or self.t.is_closing():
            return
        close = close or not self.keep_alive
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"content-type: {ctype}\r\ncontent-length: {len(body)}\r\n"
            f"server: abtui-sim\r\nconnection: {'close' if close else 'keep-alive'}\r\n\r\n"
        )
        self.t.write(head.encode() + (b"" if head_only else body))
        if close:
            self.t.close()

    def _fail(self, status: int, message: str, close: bool = False) -> None:
        self._send(status, error_body(message, status), close)

    # -- one response ------------------------------------------------------------------------

    def _start(self, req: SimRequest) -> None:
        sim = self.sim
        check = getattr(sim.engine, "check", None)
        if check is not None and (why := check(req.prompt_tokens, req.max_tokens)):
            self.busy = False  # (a slow-first-byte fault holds the connection busy)
            self._fail(400, why)
            if self.buf:
                sim.loop.call_soon(self._process)
            return
        prefix = "chatcmpl" if req.chat else "cmpl"
        self.fmt = Formatter(
            req,
            model=sim.config.model,
            resp_id=f"{prefix}-{sim.tag}{req.req_id}",
            created=int(time.time()),
            reasoning=sim.config.reasoning_tokens,
        )
        self.req, self.busy = req, True
        self.text = sim.logprobs.text_source(req, sim.quality.text_source(req))
        self.tokens = self.seq = 0
        self.texts = []
        if sim.log is not None:
            self.key = json.dumps(req.key, separators=(",", ":"))
            sim.log.add(self._log_event("recv", req.arrival_ns))
        if req.stream:
            head = (
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
                f"transfer-encoding: chunked\r\nserver: abtui-sim\r\n"
                f"connection: {'keep-alive' if self.keep_alive else 'close'}\r\n\r\n"
            ).encode()
            prelude = self.fmt.prelude().encode()
            self.t.write(head + _frame(prelude) if prelude else head)  # type: ignore[union-attr]
        if hasattr(sim.engine, "submit"):  # a push engine: tokens come at its step ends
            self.pending, self.pending_last = [], False
            cache = getattr(sim.engine, "prefix_cache", None)
            blocks = None if cache is None else block_hashes(req.prompt.split(), cache.block_size)
            self.handle = sim.engine.submit(
                req.prompt_tokens, req.max_tokens, self._push, sim.when(req.arrival_ns), blocks
            )
            return
        self.it = sim.engine.schedule(req)
        self.next = next(self.it, None)
        if self.next is None:  # an engine with nothing to send: answer at once
            self.next = (req.arrival_ns, 0)
        self._arm(self.next[0])

    def _arm(self, deadline: int) -> None:
        loop = self.sim.loop
        if deadline <= _perf_ns():
            self.timer = loop.call_soon(self._tick)
        else:
            self.timer = loop.call_at(self.sim.when(deadline), self._tick)

    def _push(self, n: int, last: bool) -> None:
        """A push engine's step end gave this response ``n`` more tokens (``last``: done)."""
        self.pending.append(n)
        self.pending_last = last
        if self.timer is None:  # write once the engine's callback is over: the tokens of
            # steps run back to back go out in one write (a stall fault's timer holds them)
            self.timer = self.sim.loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.timer = None
        t, req, fmt = self.t, self.req, self.fmt
        push = self.handle is not None
        if t is None or req is None or fmt is None or t.is_closing():
            return
        if not (self.pending if push else self.next is not None):
            return
        if self.paused:
            self.due = True
            return
        now = _perf_ns()
        if not push and self.next[0] > now:  # type: ignore[index]  # the timer fired early
            return self._arm(self.next[0])  # type: ignore[index]
        if self.fault is not None and self.fault.stall(self):
            return None  # an injected stall: its timer ticks again
        if push:
            parts, counts, last = self._take_pushed(req, fmt)
        else:
            parts, counts, last = self._take_due(req, fmt, now)
        sent = self._write(t, req, fmt, parts, last)
        if sent is None:
            return None  # an injected disconnect closed the connection
        self._log_sent(req, counts, sent, last)
        if last:
            self._end_response()
            if not self.keep_alive and t is not None and not t.is_closing():
                t.close()
            elif self.buf:
                self.sim.loop.call_soon(self._process)
        elif not push:
            self._arm(self.next[0])  # type: ignore[index]

    def _take_pushed(self, req: SimRequest, fmt: Formatter) -> tuple[list[str], list[int], bool]:
        """A push engine's every count since the last write, for one write: the stream's
        events and their token counts (or the text kept for a whole response), and whether
        the response is done."""
        parts: list[str] = []
        counts: list[int] = []
        last = False
        pushed, self.pending = self.pending, []
        for i, n in enumerate(pushed):
            text = self.text(self.tokens, n)
            at, self.tokens = self.tokens, self.tokens + n
            last = self.pending_last and i == len(pushed) - 1
            if req.stream:
                parts.append(fmt.token_event(text, last, at, n))
                counts.append(n)
            else:
                self.texts.append(text)
        return parts, counts, last

    def _take_due(
        self, req: SimRequest, fmt: Formatter, now: int
    ) -> tuple[list[str], list[int], bool]:
        """A scheduling engine's sends due by ``now`` (up to :data:`MAX_WRITE` characters), as
        :meth:`_take_pushed`; ``self.next`` is left on the first send not yet due."""
        parts: list[str] = []
        counts: list[int] = []
        size = 0
        while True:
            n = max(0, min(self.next[1], req.max_tokens - self.tokens))  # type: ignore[index]
            text = self.text(self.tokens, n)
            at, self.tokens = self.tokens, self.tokens + n
            nxt = None if self.tokens >= req.max_tokens else next(self.it, None)  # type: ignore[arg-type]
            last = nxt is None
            if req.stream:
                event = fmt.token_event(text, last, at, n)
                parts.append(event)
                counts.append(n)
                size += len(event)
            else:
                self.texts.append(text)
            if last:
                return parts, counts, True
            self.next = nxt
            if nxt[0] > now or size >= MAX_WRITE:  # type: ignore[index]
                return parts, counts, False

    def _write(
        self, t: asyncio.Transport, req: SimRequest, fmt: Formatter, parts: list[str], last: bool
    ) -> int | None:
        """Send the taken events (or, ``last``, a whole response); the send time, or None when
        an injected disconnect closed the connection instead.

        The send time is taken just before the bytes go to the kernel: a client's receive time
        can then never precede it (taken after write(), it could, when the client on the other
        core reads the bytes before write() returns here)."""
        if req.stream:
            sse = "".join(parts)
            if self.fault is not None and (sse := self.fault.on_write(self, sse)) is None:
                return None
            data = _frame(sse.encode())
            if last:
                tail = fmt.tail(req.usage_claim or self.tokens, self._cached())
                data += _frame(tail.encode()) + b"0\r\n\r\n"
            sent = _perf_ns()
            t.write(data)
        else:
            sent = _perf_ns()
            if last:
                self._send(200, fmt.full("".join(self.texts), self.tokens, self._cached()))
        return sent

    def _cached(self) -> int | None:
        """The prompt tokens the batching engine found in its prefix cache (0 with the cache
        off: it computed them all); None from an engine that models no KV cache."""
        handle = self.handle
        if handle is None or not hasattr(handle, "cached"):
            return None
        return max(0, handle.cached)

    def _log_sent(self, req: SimRequest, counts: list[int], sent: int, last: bool) -> None:
        """The chunk log's lines of one write: a line per event, or one for a whole response."""
        log = self.sim.log
        if log is None:
            return
        if req.stream:
            pre = f'{{"req":{req.req_id},"key":{self.key},"seq":'
            for n in counts:
                log.add(f'{pre}{self.seq},"t_ns":{sent},"n":{n}}}\n')
                self.seq += 1
        elif last:
            log.add(self._log_event("response", sent)[:-2] + f',"n":{self.tokens}}}\n')

    def _log_event(self, event: str, t_ns: int) -> str:
        req = self.req
        return f'{{"req":{req.req_id},"key":{self.key},"event":"{event}","t_ns":{t_ns}}}\n'  # type: ignore[union-attr]

    def _end_response(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        it, self.it = self.it, None
        if it is not None and hasattr(it, "close"):
            it.close()
        handle, self.handle = self.handle, None
        if handle is not None:
            self.sim.engine.cancel(handle)  # a no-op when it has finished
        self.pending = []
        self.busy = False
        self.req = self.fmt = self.next = None
        self.texts = []
        self.due = False


def _frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk of ``payload`` (chunked transfer encoding)."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)
