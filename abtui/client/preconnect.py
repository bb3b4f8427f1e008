"""Connections opened before a run's ``t0``, so that the first wave of measured requests goes out
on open connections instead of opening them all in one burst at ``t0``.

:func:`fill` makes ``n`` connections of a target's pool open and idle on the fast client
(:mod:`abtui.client.fast`). The load generator (:mod:`abtui.runner.generator`) calls it after
its warm-up, between segments, and while it waits for a ``t0``; :mod:`abtui.runner.pool` says
how many each segment needs.

Not on the httpx path (``request.http = "httpx"``): httpcore's pool, on every request added or
removed, checks each idle connection by counting all the others (``connection_pool.py``,
``_assign_requests_to_connections``), so ``N`` idle connections at ``t0`` make the first wave of
``N`` requests cost about ``N³/2`` checks. Measured here (simulator on loopback, 4-token answers,
load average ~10): the first wave's client CPU 0.24 s cold → 1.0 s on a filled pool at 64
streams (first byte P50 184 → 822 ms), 0.66 → 4.7 s at 128. There the first wave still opens its
connections; each records its connect phase (httpcore's connect events), kept out of TTFT.

Verified, not only connected: each new connection carries one ``HEAD <base_url>/models`` and is
kept only if the server answered it (any status: a 404 or 405 still shows the connection is
served) without closing the connection. A handshake alone proves little: a server that serves
one connection per thread (llama-server, through cpp-httplib, holds a worker thread for every
idle keep-alive connection until its 5 s idle timeout) completes the TCP handshake of
connections beyond its threads in the kernel and leaves them queued, and a request sent on one
waits until a thread frees, seconds later. Such a connection does not answer within
:data:`PROBE_S`; it is closed, not kept, and counted in :attr:`Fill.unanswered` (so the pool
settles at what the server serves at once). HEAD because it has no body, so it costs a server
the least of any request. The probe is a request the server sees (and may log); it is sent
once per connection opened before ``t0``, never during a measured segment.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from abtui.client import fast
from abtui.client.fast import FastClient, pool_key
from abtui.client.http1 import Malformed, parse_head
from abtui.client.target import Target
from abtui.client.tls import describe

PARALLEL = 64  # connections being opened at once
PROBE_S = (
    2.0  # how long a new connection's HEAD may wait for its answer (at most the connect timeout)
)
OK, UNANSWERED, CLOSED, LATE = "ok", "unanswered", "closed", "late"
_BACKGROUND: set[asyncio.Task] = set()  # opens still under way when a deadline came


def _now() -> int:
    return fast._now()  # the fast client's clock (a Ray actor shifts it into the driver's)


@dataclass
class Fill:
    """What one :func:`fill` did."""

    wanted: int  # connections asked for
    had: int = 0  # already open and idle
    opened: int = 0  # opened and verified now
    failed: int = 0  # could not connect (the first error in ``error``)
    unanswered: int = 0  # connected, but not answered within PROBE_S: closed, not kept
    closed: int = 0  # answered, but the server closes the connection after a response
    late: int = 0  # not open when the deadline came (any still under way joins the pool later)
    seconds: float = 0.0
    error: str | None = None

    @property
    def ready(self) -> int:
        """Open and idle when :func:`fill` returned."""
        return self.had + self.opened

    def add(self, outcome: str) -> None:
        if outcome == OK:
            self.opened += 1
        elif outcome == UNANSWERED:
            self.unanswered += 1
        elif outcome == CLOSED:
            self.closed += 1
        elif outcome == LATE:
            self.late += 1
        else:
            self.failed += 1
            self.error = self.error or outcome

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def probe_bytes(target: Target) -> bytes:
    """The ``HEAD <base path>/models`` request a new connection carries."""
    u = urlsplit(target.base_url)
    lines = [
        f"HEAD {u.path.rstrip('/')}/models HTTP/1.1",
        f"Host: {u.netloc}",
        "Accept-Encoding: identity",
    ]
    lines += [f"{k}: {v}" for k, v in target.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _keeps(head: bytes, rest: bytes, keep_alive: bool, mode: str) -> bool:
    """Whether the connection stays usable after this answer to a HEAD (whose response has no
    body whatever its framing headers say: a head without them is not close-delimited here)."""
    if rest:  # bytes after the head: not a clean HEAD answer
        return False
    if mode != "close":
        return keep_alive
    final = head[: len(head) - len(rest)].rstrip(b"\r\n").rsplit(b"\r\n\r\n", 1)[-1]
    lines = final.split(b"\r\n")
    conn = b""
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"connection":
            conn = v.strip().lower()
    return conn == b"keep-alive" or (lines[0].startswith(b"HTTP/1.1") and conn != b"close")


class _Probe:
    """The HEAD's exchange on a new connection: complete at the response head."""

    __slots__ = ("fut", "head", "extra")

    def __init__(self) -> None:
        self.fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self.head = b""
        self.extra = False  # bytes came after the answer: the connection is not reused

    def on_data(self, data: bytes, t: int) -> None:  # noqa: ARG002
        if self.fut.done():
            self.extra = True
            return
        self.head += data
        try:
            h = parse_head(self.head)
        except Malformed:
            self.fut.set_result(False)
            return
        if h is not None:
            self.fut.set_result(_keeps(self.head, h.rest, h.keep_alive, h.mode))

    def on_eof(self, t: int) -> None:  # noqa: ARG002
        if not self.fut.done():
            self.fut.set_result(False)

    def on_lost(self, exc, t: int) -> None:  # noqa: ARG002
        self.on_eof(t)


async def _open_one(
    client: FastClient, key: tuple, target: Target, probe: bytes, probe_s: float
) -> str:
    tls = target.tls if key[0] == "https" else None
    try:
        conn = await client._connect(key, target.connect_timeout_s, tls)
    except TimeoutError:
        return f"connect to {target.url} timed out after {target.connect_timeout_s:g} s"
    except ssl.SSLError as e:
        return f"cannot connect to {target.url}: TLS failed: {describe(e)}"
    except OSError as e:
        return f"cannot connect to {target.url}: {e.strerror or e}"
    p = _Probe()
    conn.exchange = p  # type: ignore[assignment]  (the connection's reads go to the probe)
    conn.transport.write(probe)
    try:
        async with asyncio.timeout(min(probe_s, target.connect_timeout_s)):
            keeps = await p.fut
    except TimeoutError:
        client._release(key, conn, False)
        return UNANSWERED
    client._release(key, conn, bool(keeps) and not p.extra)
    return OK if keeps and not p.extra and not conn.closed else CLOSED


async def fill(
    client: FastClient,
    target: Target,
    n: int,
    *,
    until_ns: int | None = None,
    parallel: int = PARALLEL,
    probe_s: float = PROBE_S,
) -> Fill:
    """Open (and verify) connections of ``target``'s pool until ``n`` are open and idle.

    ``until_ns`` (the fast client's clock): no new connection is started after it, and the call
    returns by then; opens still under way finish aside and join the pool. The first new
    connection is opened alone: a server that refuses connections, does not answer or does not
    keep them alive is known after one, and no more are tried. Never raises for endpoint
    trouble: the :class:`Fill` says what happened."""
    t = _now()
    key = pool_key(target)
    f = Fill(wanted=n, had=min(n, client.idle_open(key)))
    want = n - f.had
    if want <= 0:
        return f
    probe = probe_bytes(target)
    sem = asyncio.Semaphore(max(1, parallel))

    async def one() -> str:
        async with sem:
            if until_ns is not None and _now() >= until_ns:
                return LATE
            return await _open_one(client, key, target, probe, probe_s)

    first = await one()
    f.add(first)
    if first == OK and want > 1:
        tasks = [asyncio.ensure_future(one()) for _ in range(want - 1)]
        wait = None if until_ns is None else max(0.0, (until_ns - _now()) / 1e9)
        done, pending = await asyncio.wait(tasks, timeout=wait)
        for task in tasks:
            if task in done:
                f.add(task.result())
            else:
                f.late += 1
                _BACKGROUND.add(task)
                task.add_done_callback(_BACKGROUND.discard)
    f.seconds = (_now() - t) / 1e9
    return f
