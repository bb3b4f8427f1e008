"""Injected faults of the simulated endpoint, for reliability tests.

Each fault is a flag of ``abtui sim serve`` and a field of :class:`FaultConfig`
(``SimConfig.faults``):

``--fail 429=0.05,500=0.01``
    answer that share of generation requests with that HTTP status at once, in OpenAI's error
    shape (``{"error": {"message", "type", "param", "code"}}``); a 429 carries ``Retry-After``
    (``--retry-after S``). ``--fail-body html`` sends a proxy-style HTML page instead of JSON.
``--hang-rate P``
    read the request and never answer (the client's read timeout ends it).
``--disconnect-rate P``
    close the connection mid-stream, instead of a random write of token chunks: no ``[DONE]``
    and no finish reason reach the client.
``--malformed-rate P``
    truncate a random token chunk's ``data:`` JSON (the stream goes on after it).
``--stall-rate P --stall-ms D``
    stop writing for ``D`` ms before a random token chunk; the tokens due meanwhile go out in
    one burst after the stall (the engine did not stall, the network did).
``--slow-first-byte-ms D``
    every request reaches the engine ``D`` ms late: response headers and tokens are withheld
    (a slow proxy in front of the server).
``--stop-after N``
    every response ends after at most ``N`` tokens with ``finish_reason: "stop"``, whatever
    ``max_tokens`` and ``ignore_eos`` asked (a candidate that stops early).
``--usage-tokens N``
    the ``usage`` of every response claims ``N`` completion tokens, whatever was streamed (a
    server whose count the stream does not bear out).

Determinism: one draw per generation request from a hash of ``(seed, request number)`` picks at
most one of the rate-based faults (the rates are consecutive slices of [0, 1), so they must sum
to at most 1), and a second draw picks the token at which a stream fault strikes. The request
number counts the generation requests the server has accepted (1, 2, ...), so a given
arrival order gives the same faults on every run, and a retried request gets a fresh draw.
Stream faults (disconnect, malformed) apply to streamed responses only; stalls to both.

The server calls three hooks: :meth:`Faults.intercept` when a generation request is parsed,
and, on the connection's per-request :class:`StreamFault` (``None`` for a healthy request, so a
fault-free server pays one ``is None`` test per write), :meth:`StreamFault.stall` before a write
and :meth:`StreamFault.on_write` on a streamed write's SSE text.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from abtui.errors import UsageError

_perf_ns = time.perf_counter_ns
_REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
# OpenAI-style (type, code) of an error body per status
_KINDS = {
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    502: ("server_error", None),
    503: ("server_error", "service_unavailable"),
    504: ("server_error", None),
}
BODIES = ("json", "html")
# Rate-based faults other than --fail, in the order of their slices of [0, 1).
_RATE_FLAGS = (
    ("hang", "--hang-rate"),
    ("disconnect", "--disconnect-rate"),
    ("malformed", "--malformed-rate"),
    ("stall", "--stall-rate"),
)


@dataclass(slots=True)
class FaultConfig:
    """The faults one simulated endpoint injects (all off by default)."""

    fail: dict[int, float] = field(default_factory=dict)  # HTTP status -> share of requests
    fail_body: str = "json"  # error body: "json" (OpenAI's shape) or "html" (a proxy's page)
    retry_after_s: int = 1  # Retry-After header of a 429, seconds
    hang_rate: float = 0.0  # share of requests never answered
    disconnect_rate: float = 0.0  # share of streams closed mid-stream
    malformed_rate: float = 0.0  # share of streams with one truncated data line
    stall_rate: float = 0.0  # share of requests whose writes stop for stall_ms once
    stall_ms: float = 0.0  # length of a stall, ms
    slow_first_byte_ms: float = 0.0  # every request reaches the engine this much later, ms
    stop_after: int = 0  # every response stops after at most this many tokens ("stop"); 0: off
    usage_tokens: int = 0  # every response's usage claims this many completion tokens; 0: off

    @property
    def active(self) -> bool:
        return (
            bool(self.fail)
            or self.slow_first_byte_ms > 0
            or self._rate_total() > 0
            or self.stop_after > 0
            or self.usage_tokens > 0
        )

    def _rate_total(self) -> float:
        return sum(self.fail.values()) + sum(getattr(self, k + "_rate") for k, _ in _RATE_FLAGS)

    def validate(self) -> None:
        """Raise :class:`UsageError` naming the flag with a bad value."""
        if not isinstance(self.fail, dict):
            raise UsageError("--fail must map HTTP statuses to rates", "e.g. --fail 429=0.05")
        for status, rate in self.fail.items():
            if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
                raise UsageError(
                    f"--fail status {status!r} is invalid: an HTTP error status 400..599",
                    "e.g. --fail 429=0.05,500=0.01,503=0.02",
                )
            _check_rate(f"--fail {status}=", rate)
        for name, flag in _RATE_FLAGS:
            _check_rate(flag, getattr(self, name + "_rate"))
        for flag, value in (
            ("--stall-ms", self.stall_ms),
            ("--slow-first-byte-ms", self.slow_first_byte_ms),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise UsageError(f"{flag} {value!r} is invalid", f"give {flag} a number of ms")
            if not math.isfinite(value) or value < 0:
                raise UsageError(f"{flag} {value!r} is invalid", f"give {flag} a number ≥ 0")
        if self.stall_rate > 0 and self.stall_ms <= 0:
            raise UsageError(
                "--stall-rate needs --stall-ms", "e.g. --stall-rate 0.1 --stall-ms 500"
            )
        if self.fail_body not in BODIES:
            raise UsageError(
                f"--fail-body {self.fail_body!r} is invalid", f"use one of {', '.join(BODIES)}"
            )
        r = self.retry_after_s
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise UsageError(f"--retry-after {r!r} is invalid", "give whole seconds ≥ 0")
        for flag, v in (("--stop-after", self.stop_after), ("--usage-tokens", self.usage_tokens)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise UsageError(f"{flag} {v!r} is invalid", f"give {flag} a whole number ≥ 0")
        total = self._rate_total()
        if total > 1.0 + 1e-9:
            raise UsageError(
                f"the fault rates sum to {total:g}, over 1",
                "each request gets at most one of --fail/--hang/--disconnect/--malformed/--stall",
            )

    def to_argv(self) -> list[str]:
        """The flags that reproduce this configuration (for a child process)."""
        argv: list[str] = []
        if self.fail:
            argv += ["--fail", ",".join(f"{s}={r!r}" for s, r in self.fail.items())]
        if self.fail_body != "json":
            argv += ["--fail-body", self.fail_body]
        if self.retry_after_s != 1:
            argv += ["--retry-after", str(self.retry_after_s)]
        for name, flag in _RATE_FLAGS:
            if getattr(self, name + "_rate"):
                argv += [flag, repr(float(getattr(self, name + "_rate")))]
        if self.stall_ms:
            argv += ["--stall-ms", repr(float(self.stall_ms))]
        if self.slow_first_byte_ms:
            argv += ["--slow-first-byte-ms", repr(float(self.slow_first_byte_ms))]
        if self.stop_after:
            argv += ["--stop-after", str(self.stop_after)]
        if self.usage_tokens:
            argv += ["--usage-tokens", str(self.usage_tokens)]
        return argv


def _check_rate(flag: str, rate: Any) -> None:
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise UsageError(f"{flag}{rate!r} is invalid: a share of requests", f"give {flag} 0..1")


def parse_fail(text: str) -> dict[int, float]:
    """``"429=0.05,500=0.01"`` → ``{429: 0.05, 500: 0.01}``; raises :class:`UsageError`."""
    out: dict[int, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        status, eq, rate = part.partition("=")
        try:
            if not eq:
                raise ValueError
            out[int(status)] = float(rate)
        except ValueError:
            raise UsageError(
                f"--fail {text!r}: {part!r} is not STATUS=RATE",
                "e.g. --fail 429=0.05,500=0.01,503=0.02",
            ) from None
    return out


def add_fault_arguments(parser: argparse.ArgumentParser) -> None:
    """The fault flags of ``abtui sim serve`` (all off by default)."""
    g = parser.add_argument_group("injected faults (seeded by --seed; off by default)")
    g.add_argument(
        "--fail",
        metavar="STATUS=RATE,...",
        default="",
        help="answer that share of requests with that HTTP status, e.g. 429=0.05,503=0.02",
    )
    g.add_argument(
        "--fail-body",
        choices=BODIES,
        default="json",
        help="error body: OpenAI-style JSON or a proxy's HTML page (default %(default)s)",
    )
    g.add_argument(
        "--retry-after",
        type=int,
        default=1,
        metavar="S",
        help="Retry-After of a 429, seconds (default %(default)s)",
    )
    g.add_argument(
        "--hang-rate", type=float, default=0.0, metavar="P", help="share of requests never answered"
    )
    g.add_argument(
        "--disconnect-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="share of streams closed mid-stream (no [DONE])",
    )
    g.add_argument(
        "--malformed-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="share of streams with one truncated data: line",
    )
    g.add_argument(
        "--stall-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="share of requests that stall once mid-stream for --stall-ms",
    )
    g.add_argument("--stall-ms", type=float, default=0.0, metavar="D", help="length of a stall, ms")
    g.add_argument(
        "--slow-first-byte-ms",
        type=float,
        default=0.0,
        metavar="D",
        help="withhold every response (headers included) for D ms",
    )
    g.add_argument(
        "--stop-after",
        type=int,
        default=0,
        metavar="N",
        help="end every response after at most N tokens, finish_reason stop",
    )
    g.add_argument(
        "--usage-tokens",
        type=int,
        default=0,
        metavar="N",
        help="claim N completion tokens in every response's usage",
    )


def faults_from_args(args: argparse.Namespace) -> FaultConfig:
    return FaultConfig(
        fail=parse_fail(args.fail or ""),
        fail_body=args.fail_body,
        retry_after_s=args.retry_after,
        hang_rate=args.hang_rate,
        disconnect_rate=args.disconnect_rate,
        malformed_rate=args.malformed_rate,
        stall_rate=args.stall_rate,
        stall_ms=args.stall_ms,
        slow_first_byte_ms=args.slow_first_byte_ms,
        stop_after=args.stop_after,
        usage_tokens=args.usage_tokens,
    )


def _draws(seed: int, req_id: int) -> tuple[float, float]:
    """Two uniform draws in [0, 1) for request ``req_id``."""
    h = hashlib.blake2b(f"{seed}\x00fault\x00{req_id}".encode(), digest_size=16).digest()
    return (
        int.from_bytes(h[:8], "little") / 2.0**64,
        int.from_bytes(h[8:], "little") / 2.0**64,
    )


def error_response(status: int, body_kind: str, retry_after_s: int, keep_alive: bool) -> bytes:
    """A whole HTTP error response, as a failing server or proxy sends it."""
    reason = _REASONS.get(status, "Error")
    if body_kind == "html":
        ctype = "text/html"
        body = (
            f"<html><head><title>{status} {reason}</title></head><body><center>"
            f"<h1>{status} {reason}</h1></center><hr><center>abtui-sim</center></body></html>\n"
        ).encode()
    else:
        ctype = "application/json"
        kind, code = _KINDS.get(status, ("invalid_request_error", None))
        msg = f"simulated fault: {status} {reason}"
        if status == 429:
            msg = f"simulated fault: rate limit reached; retry after {retry_after_s} s"
        err = {"error": {"message": msg, "type": kind, "param": None, "code": code}}
        body = json.dumps(err).encode()
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\n"
    if status == 429:
        head += f"retry-after: {retry_after_s}\r\n"
    head += (
        f"content-length: {len(body)}\r\nserver: abtui-sim\r\n"
        f"connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode() + body


def _incoming(conn: Any) -> int:
    """Tokens the connection's next write carries at least: what a push engine has handed
    over, or a pull engine's next chunk."""
    if getattr(conn, "handle", None) is not None:
        return sum(conn.pending)
    nxt = getattr(conn, "next", None)
    return nxt[1] if nxt else 0


class StreamFault:
    """The fault that strikes one response mid-way: ``kind`` at token ``at``."""

    __slots__ = ("kind", "at", "stall_ns", "until", "faults")

    def __init__(self, kind: str, at: int, stall_ns: int, faults: Faults) -> None:
        self.kind = kind  # "disconnect" | "malformed" | "stall"
        self.at = at  # strikes on the write that takes the stream's tokens to >= at
        self.stall_ns = stall_ns
        self.until = 0  # end of the stall once it has begun
        self.faults = faults

    def stall(self, conn: Any) -> bool:
        """Before a write: True = hold it. The stall strikes before the write that would take
        the tokens sent past ``at`` (however many the write carries); a timer calls
        ``conn._tick`` again when it is over (early wake-ups, such as a ``resume_writing``,
        re-arm it)."""
        if self.kind != "stall":
            return False
        now = _perf_ns()
        if not self.until:
            if conn.tokens + _incoming(conn) <= self.at:
                return False
            self.until = now + self.stall_ns
            self.faults.count("stall")
        if now >= self.until:
            return False
        conn.timer = conn.sim.loop.call_later((self.until - now) / 1e9, conn._tick)
        return True

    def on_write(self, conn: Any, sse: str) -> str | None:
        """The SSE text of a streamed write (``conn.tokens`` includes it): maybe corrupted; or
        ``None`` when the connection was closed instead (the caller stops)."""
        if self.kind == "stall" or conn.tokens < self.at:
            return sse
        kind, self.kind = self.kind, "done"
        if kind == "disconnect":
            self.faults.count("disconnect")
            if conn.t is not None:
                conn.t.close()  # FIN after what was written: a clean close, mid-body
            return None
        if kind == "malformed":
            self.faults.count("malformed")
            end = sse.find("\n\n")
            end = len(sse) if end < 0 else end
            return sse[: max(7, end // 2)] + sse[end:]  # the first event cut mid-JSON
        return sse


class Faults:
    """A server's fault injector (built when its :class:`FaultConfig` is active)."""

    def __init__(self, config: FaultConfig, seed: int) -> None:
        self.config = config
        self.seed = seed
        self.injected: dict[str, int] = {}  # kind -> count, for /metrics and tests
        slices: list[tuple[float, str, int]] = []
        edge = 0.0
        for status, rate in config.fail.items():
            edge += rate
            slices.append((edge, "http", status))
        for name, _ in _RATE_FLAGS:
            edge += getattr(config, name + "_rate")
            slices.append((edge, name, 0))
        self._slices = [s for s in slices if s[0] > 0]
        self._stall_ns = round(config.stall_ms * 1e6)
        self._slow_s = config.slow_first_byte_ms / 1e3

    def count(self, kind: str) -> None:
        self.injected[kind] = self.injected.get(kind, 0) + 1

    def _pick(self, req_id: int) -> tuple[str | None, int, float]:
        u, v = _draws(self.seed, req_id)
        prev = 0.0
        for edge, kind, status in self._slices:
            if prev <= u < edge:
                return kind, status, v
            prev = edge
        return None, 0, v

    def intercept(self, conn: Any, req: Any) -> bool:
        """On a parsed generation request: True when the fault took the request over (an
        error answer, a hang, a delayed start); else the caller starts it normally. Sets
        ``conn.fault`` to the request's :class:`StreamFault` or ``None``."""
        c = self.config
        if c.stop_after and req.max_tokens > c.stop_after:
            req.max_tokens, req.finish_reason = c.stop_after, "stop"
            self.count("stop_after")
        if c.usage_tokens:
            req.usage_claim = c.usage_tokens
        kind, status, v = self._pick(req.req_id)
        conn.fault = None
        if kind == "http":
            self.count(f"http_{status}")
            conn.t.write(error_response(status, c.fail_body, c.retry_after_s, conn.keep_alive))
            if not conn.keep_alive:
                conn.t.close()
            return True
        if kind == "hang":
            self.count("hang")
            conn.busy = True  # nothing more is read or answered on this connection
            return True
        if kind is not None and (req.stream or kind == "stall"):
            n = req.max_tokens
            # disconnect/malformed: strike on the write reaching token 1..n; a stall: before
            # the write that goes past token 1..n-1 (0 for a one-token answer: after headers)
            at = 1 + int(v * n) if kind != "stall" else (1 + int(v * (n - 1)) if n > 1 else 0)
            conn.fault = StreamFault(kind, at, self._stall_ns, self)
        if self._slow_s > 0:
            self.count("slow_first_byte")
            conn.busy = True

            def start() -> None:
                conn.timer = None
                req.arrival_ns = _perf_ns()
                conn._start(req)

            conn.timer = conn.sim.loop.call_later(self._slow_s, start)
            return True
        return False


def make_faults(config: FaultConfig | None, seed: int) -> Faults | None:
    """The injector of a server, or ``None`` when no fault is configured."""
    return Faults(config, seed) if config is not None and config.active else None
