"""Connections opened before t0: the load generator's loop, the fast and httpx
clients and the simulator, in one process over loopback; the server counts the connections it
accepts, and when."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import numpy as np
import pytest

from abtui.client import preconnect
from abtui.client.fast import FastClient, fast_stream_request, pool_key
from abtui.client.items import Item, synthetic_items
from abtui.client.records import OK, TOKENS_USAGE, RequestRecord
from abtui.client.stream import Target, build_body, make_client, stream_request
from abtui.metrics import request as request_metrics
from abtui.metrics.table import RequestTable
from abtui.runner.generator import ArmPlan, _Generator
from abtui.runner.messages import Batch, Ready, SegmentDone
from abtui.runner.pool import (
    DEFAULT_PACE,
    MARGIN,
    OPEN_LOOP_MAX,
    OPEN_LOOP_MIN,
    Pace,
    connections_needed,
    peak_in_flight,
)
from abtui.sim import server as sim_server
from abtui.sim.engine import SimConfig
from abtui.workload.segments import Segment, shard

MS = 1_000_000


class Accepts:
    """Counts the connections the simulator accepts (patched into its protocol)."""

    def __init__(self, monkeypatch) -> None:
        self.n = 0
        made = sim_server._Connection.connection_made

        def counted(conn, transport):
            self.n += 1
            made(conn, transport)

        monkeypatch.setattr(sim_server._Connection, "connection_made", counted)


class _Results:
    """The generator's result queue, in process: starts the next segment when it is asked to,
    noting how many connections the server had accepted by then."""

    def __init__(self, start: _Start, accepts: Accepts) -> None:
        self.msgs: list = []
        self.start, self.accepts = start, accepts
        self.accepted_at_start: list[int] = []

    def put(self, msg) -> None:
        self.msgs.append(msg)
        if isinstance(msg, Ready | SegmentDone):
            self.accepted_at_start.append(self.accepts.n)
            self.start.send(time.perf_counter_ns() + 20 * MS)

    def records(self) -> list[RequestRecord]:
        return [r for m in self.msgs if isinstance(m, Batch) for r in m.records]


class _Start:
    def __init__(self) -> None:
        self.t0s: list[int] = []

    def send(self, t0: int) -> None:
        self.t0s.append(t0)

    def poll(self) -> bool:
        return bool(self.t0s)

    def recv(self) -> int:
        return self.t0s.pop(0)


class _Stop:
    def is_set(self) -> bool:
        return False


def _items(n: int, arrivals=None, out_tokens: int = 4) -> list[Item]:
    return synthetic_items(n, 8, out_tokens, 0, arrivals if arrivals is not None else [0.0] * n)


def run_generator(
    monkeypatch, plan_kw: dict, *, http: str = "fast", sim: dict | None = None, between=None
):
    """Run one generator process's loop against an in-process simulator; returns (results,
    accepts). ``between(sim)``: called (async) once the server is up, before the generator."""
    accepts = Accepts(monkeypatch)
    start = _Start()
    results = _Results(start, accepts)

    async def main():
        srv = await sim_server.start_server(SimConfig(port=0, ttft_ms=5, itl_ms=1, **(sim or {})))
        try:
            target = Target(base_url=srv.url, model="sim-model", connect_timeout_s=5.0)
            warm = [
                Item(index=900 + k, id=f"w{k}", prompt="warm up", max_tokens=4, n_input=2)
                for k in range(2)
            ]
            plan = ArmPlan(
                arm=0,
                target=target,
                items=[],
                warmup_items=warm,
                mode="closed",
                concurrency=None,
                store_text=False,
                http=http,
                **plan_kw,
            )
            await _Generator(plan, results, start, _Stop()).run()
        finally:
            await srv.close()

    asyncio.run(main())
    return results, accepts


def measured(results: _Results) -> list[RequestRecord]:
    return [r for r in results.records() if not r.warmup]


def test_closed_loop_opens_its_connections_before_t0(monkeypatch):
    """At concurrency 16 the pool holds 16 open connections before t0 (the warm-up opened 2);
    the segment opens none, and no measured request has a connect phase. Without it the server
    would have 2 connections at t0 and open 14 in the first wave."""
    seg = Segment(_items(48), "closed", 16)
    results, accepts = run_generator(monkeypatch, {"segments": [seg]})
    recs = measured(results)
    assert len(recs) == 48 and all(r.status == OK for r in recs), recs[0].error_message
    assert results.accepted_at_start[0] == 16  # open and verified when the generator said ready
    assert accepts.n == 16  # the measured requests opened none
    assert all(r.connect_ns == 0 for r in recs)
    stats = results.msgs[-1].stats.connections
    assert stats.wanted == 16 and stats.opened == 14 and stats.unanswered == 0


def test_on_the_httpx_path_the_first_wave_connects_and_records_it(monkeypatch):
    """The httpx path opens nothing ahead (an idle pool slows httpcore's own: see
    abtui.client.preconnect); the first wave's requests that open a connection record it as their
    connect phase, one per connection the server accepted beyond the warm-up's."""
    seg = Segment(_items(48), "closed", 16)
    results, accepts = run_generator(monkeypatch, {"segments": [seg]}, http="httpx")
    recs = measured(results)
    assert len(recs) == 48 and all(r.status == OK for r in recs), recs[0].error_message
    assert results.accepted_at_start[0] == 2
    connected = [r for r in recs if r.connect_ns > 0]
    assert len(connected) == accepts.n - 2 >= 14
    assert all(r.connect_ns < r.chunk_ns[0] - r.dispatched_ns for r in connected)


def test_several_generators_per_arm_and_a_sweep(monkeypatch):
    """A generator that is one of three serving an arm opens its share (6 of 16 → 6, 5, 5);
    before a sweep's next, larger level it opens what that level needs, before saying the
    previous one is done."""
    levels = [Segment(_items(12), "closed", 4, level=0), Segment(_items(40), "closed", 16, level=1)]
    mine = shard(levels, 0, 3)  # generator 0 of 3: concurrency 2, then 6
    assert [s.concurrency for s in mine] == [2, 6]
    results, accepts = run_generator(monkeypatch, {"segments": mine})
    recs = measured(results)
    assert all(r.status == OK for r in recs) and len(recs) == 4 + 14
    # ready: the warm-up's 2 (≥ 2 needed); after level 0, topped up to level 1's 6
    assert results.accepted_at_start[:2] == [2, 6]
    assert accepts.n == 6 and all(r.connect_ns == 0 for r in recs)


def test_open_loop_opens_what_the_schedule_implies(monkeypatch):
    """Open loop: the schedule's peak in flight at the warm-up's pace, times the margin, capped
    by the concurrency cap: 12 requests sent at once under a cap of 10 → 10."""
    seg = Segment(_items(12), "open", 10)
    results, accepts = run_generator(monkeypatch, {"segments": [seg]})
    recs = measured(results)
    assert all(r.status == OK for r in recs) and len(recs) == 12
    assert results.accepted_at_start[0] == 10 and accepts.n == 10
    assert all(r.connect_ns == 0 for r in recs)


def test_connections_needed_and_its_bounds():
    fast_pace = Pace(ttft_s=0.01, per_token_s=0.001)
    burst = _items(100, [0.0] * 100)
    spread = _items(100, [i * 1.0 for i in range(100)])  # one a second, each ~14 ms
    assert peak_in_flight(burst, fast_pace) == 100
    assert peak_in_flight(spread, fast_pace) == 1
    touching = _items(2, [0.0, fast_pace.duration_s(4)])  # one ends as the next starts
    assert peak_in_flight(touching, fast_pace) == 1
    assert connections_needed(Segment(burst, "open", None), 0, fast_pace) == 100  # ≤ items
    assert connections_needed(Segment(spread, "open", None), 0, fast_pace) == OPEN_LOOP_MIN
    assert connections_needed(Segment(burst[:20], "open", None), 0, fast_pace) == 20  # ≤ items
    spread_fast = _items(100, [i * 0.005 for i in range(100)])  # 5 ms apart, ~14 ms each: 3
    assert peak_in_flight(spread_fast, fast_pace) == 3
    assert connections_needed(Segment(spread_fast, "open", None), 0, fast_pace) == 3 * MARGIN
    assert connections_needed(Segment(burst, "open", 7), 0, fast_pace) == 7  # the cap
    many = _items(3000, [0.0] * 3000)
    assert connections_needed(Segment(many, "open", None), 0, fast_pace) == OPEN_LOOP_MAX
    assert connections_needed(Segment(burst, "closed", 64), 0, None) == 64
    assert connections_needed(Segment(burst[:5], "closed", 64), 0, None) == 5  # fewer items
    assert connections_needed(Segment(burst, "closed", 64), 0, None, fd_limit=40) == 20
    assert connections_needed(Segment(burst, "closed", 64, arms=(1,)), 0, None) == 0  # not ours
    # no warm-up to go by: the slow default pace (0.5 s + 50 ms/token)
    slow = _items(100, [i * 0.1 for i in range(100)])  # 100 ms apart, each 0.65 s: 7 at once
    assert peak_in_flight(slow, DEFAULT_PACE) == 7
    assert connections_needed(Segment(slow, "open", None), 0, None) == 7 * MARGIN
    assert DEFAULT_PACE.duration_s(4) == pytest.approx(0.65)


# ------------------------------------------------------------------ the client, directly


def _sse(n: int) -> bytes:
    events = [b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'] * (n - 1)
    events.append(b'data: {"choices":[{"index":0,"text":"b","finish_reason":"length"}]}\n\n')
    events.append(b"data: [DONE]\n\n")
    body = b"".join(events)
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"content-length: %d\r\n\r\n" % len(body)
    ) + body


class IdleClosingServer:
    """Answers HEAD and streamed POSTs, and drops a connection idle for ``idle_s`` — either by
    closing it then (``mode="close"``, as llama-server after 5 s) or, ``mode="race"``, only
    when the next request arrives on it (the close crossing the request on the wire)."""

    def __init__(self, idle_s: float, mode: str) -> None:
        self.idle_s, self.mode = idle_s, mode
        self.accepted = 0
        self.dropped = 0

    async def handle(self, reader, writer) -> None:
        self.accepted += 1
        last = time.monotonic()
        try:
            while True:
                wait = (
                    None if self.mode == "race" else max(0.0, last + self.idle_s - time.monotonic())
                )
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), wait)
                except TimeoutError:
                    self.dropped += 1
                    return  # idle too long: closed
                if self.mode == "race" and time.monotonic() - last > self.idle_s:
                    self.dropped += 1
                    writer.transport.abort()  # gone without a byte
                    return
                n = 0
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        n = int(v)
                await reader.readexactly(n)
                if head.startswith(b"HEAD"):
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"content-length: 20\r\n\r\n"
                    )
                else:
                    await asyncio.sleep(0.005)
                    writer.write(_sse(3))
                await writer.drain()
                last = time.monotonic()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.transport.abort()


ITEM = Item(index=0, id="i0", prompt="hello", max_tokens=3, n_input=1)


def _client(http: str):
    return FastClient() if http == "fast" else make_client(64)


def _send(http: str):
    return fast_stream_request if http == "fast" else stream_request


async def _wave(http: str, client, target: Target, n: int, body: bytes) -> list[RequestRecord]:
    """``n`` requests sent at once on ``client``; their records."""
    recs = [RequestRecord(arm=0, item=i, scheduled_ns=time.perf_counter_ns()) for i in range(n)]
    await asyncio.gather(*(_send(http)(client, target, ITEM, body, r) for r in recs))
    return recs


async def _fill(http: str, client, target: Target, n: int, body: bytes):
    """Fast: :func:`preconnect.fill`. httpx (which abtui does not fill ahead): ``n`` requests
    at once, so its pool opens ``n`` connections."""
    if http == "fast":
        return (await preconnect.fill(client, target, n)).opened
    recs = await _wave(http, client, target, n, body)
    assert all(r.status == OK for r in recs)
    return sum(r.connect_ns > 0 for r in recs)


@pytest.mark.parametrize("http", ["fast", "httpx"])
def test_warm_pool_means_no_connect_phase_and_a_cold_one_records_it(http):
    """After a fill, requests go out with connect 0 and open nothing; without one, each
    request's connect phase is its TCP connect, and the service view leaves it out."""
    srv = IdleClosingServer(idle_s=30, mode="close")

    async def go():
        server = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        target = Target(base_url=f"http://127.0.0.1:{port}/v1", model="m")
        body = build_body(target, ITEM)
        try:
            async with _client(http) as warm_client:
                assert await _fill(http, warm_client, target, 8, body) == 8
                assert srv.accepted == 8
                warm = await _wave(http, warm_client, target, 8, body)
                assert srv.accepted == 8
            async with _client(http) as cold_client:
                cold = await _wave(http, cold_client, target, 4, body)
                assert srv.accepted == 12
            return warm, cold
        finally:
            server.close()

    warm, cold = asyncio.run(go())
    assert all(r.status == OK for r in warm + cold), [r.error_message for r in warm + cold]
    assert all(r.connect_ns == 0 for r in warm)
    assert all(0 < r.connect_ns < r.chunk_ns[0] - r.dispatched_ns for r in cold)
    t = RequestTable.from_records(cold)
    ttft, user = request_metrics.ttft_s(t), request_metrics.ttft_user_s(t)
    whole = (t.first_token_ns - t.dispatched_ns) / 1e9
    np.testing.assert_allclose(ttft, whole - t.connect_ns / 1e9)  # out of TTFT
    np.testing.assert_allclose(
        request_metrics.e2e_s(t), (t.last_token_ns - t.dispatched_ns - t.connect_ns) / 1e9
    )
    np.testing.assert_allclose(user, (t.first_token_ns - t.scheduled_ns) / 1e9)  # in TTFT (user)
    assert (user >= ttft + t.connect_ns / 1e9 - 1e-9).all()
    np.testing.assert_allclose(
        request_metrics.tpot_s(t), (t.last_token_ns - t.first_token_ns) / 1e9 / 2
    )


@pytest.mark.parametrize(
    ("http", "mode"), [("fast", "close"), ("fast", "race"), ("httpx", "close")]
)
def test_a_server_that_drops_idle_connections_costs_a_connect_phase_not_an_error(http, mode):
    """Pre-opened connections the server dropped while idle: closed ones (it sent its FIN) are
    left out of the pool and a new one opened; one whose close crosses the request is retried on
    a new one (the fast client's stale-connection retry; httpx does not retry, so that case is
    the fast client's). Either way the request succeeds and records the re-open as its connect
    phase."""
    srv = IdleClosingServer(idle_s=0.15, mode=mode)

    async def go():
        server = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        target = Target(base_url=f"http://127.0.0.1:{port}/v1", model="m")
        body = build_body(target, ITEM)
        try:
            async with _client(http) as c:
                assert await _fill(http, c, target, 4, body) == 4
                await asyncio.sleep(0.3)  # idle past the server's limit
                if http == "fast" and mode == "close":
                    assert c.idle_open(pool_key(target)) == 0  # their FINs came: seen closed
                recs = await _wave(http, c, target, 4, body)
                # and a refill puts back what the server closed, ready for the next wave
                await asyncio.sleep(0.3)
                again = await _fill(http, c, target, 4, body)
            return recs, again
        finally:
            server.close()

    recs, again = asyncio.run(go())
    assert all(r.status == OK for r in recs), [r.error_message for r in recs]
    assert all(r.connect_ns > 0 for r in recs)
    assert srv.dropped >= 4 and srv.accepted >= 8
    # close: all four had been closed again, four new; race: the server's closes are not seen
    # until a request crosses one (the retry's case), so the pool looks full
    assert again == (4 if mode == "close" else 0)


def test_connections_the_server_does_not_serve_are_not_kept():
    """A server that serves 3 connections at once and queues the rest (one thread per
    connection, as llama-server): the HEADs of the others go unanswered, those connections are
    closed, and the pool keeps the 3 that are served."""
    served = {"now": 0}

    async def handle(reader, writer):
        if served["now"] >= 3:  # no thread free: accepted by the kernel, never read
            try:
                await reader.read()
            finally:
                writer.transport.abort()
            return
        served["now"] += 1
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.transport.abort()

    async def go():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        target = Target(base_url=f"http://127.0.0.1:{port}/v1", model="m")
        try:
            async with FastClient() as c:
                f = await preconnect.fill(c, target, 6, probe_s=0.3)
                return f, c.idle_open(pool_key(target))
        finally:
            server.close()

    f, idle = asyncio.run(go())
    assert (f.opened, f.unanswered, f.ready, idle) == (3, 3, 3, 3), f


def test_a_server_without_keep_alive_stops_the_fill_after_one():
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def go():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        target = Target(base_url=f"http://127.0.0.1:{port}/v1", model="m")
        try:
            async with FastClient() as c:
                return await preconnect.fill(c, target, 50), c.opened
        finally:
            server.close()

    f, opened = asyncio.run(go())
    assert (f.closed, f.ready, opened) == (1, 0, 1), f


def test_unreachable_endpoint_fill_reports_and_does_not_raise():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    target = Target(base_url=f"http://127.0.0.1:{port}/v1", model="m")

    async def go():
        async with FastClient() as c:
            return await preconnect.fill(c, target, 10)

    f = asyncio.run(go())
    assert f.failed == 1 and f.ready == 0 and "cannot connect" in f.error


def test_probe_keep_alive_reading():
    keeps = preconnect._keeps
    assert keeps(b"HTTP/1.1 200 OK\r\n\r\n", b"", False, "close")  # HEAD: no framing needed
    assert not keeps(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", b"", False, "close")
    assert not keeps(b"HTTP/1.0 200 OK\r\n\r\n", b"", False, "close")
    assert keeps(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n", b"", False, "close")
    assert not keeps(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc", b"abc", True, "length")
    assert preconnect.probe_bytes(
        Target(base_url="http://h:1/v1", model="m", headers={"Authorization": "Bearer k"})
    ).startswith(b"HEAD /v1/models HTTP/1.1\r\nHost: h:1\r\n")


def test_records_without_a_connect_phase_keep_their_old_metrics():
    """A table built without connect_ns (older sessions, synthetic tables) reads 0 for it: the
    service view is then what it always was."""
    rec = RequestRecord(
        arm=0,
        item=0,
        scheduled_ns=100,
        dispatched_ns=200,
        chunk_ns=[900, 1900],
        chunk_tokens=[1, 1],
        n_output=2,
    )
    t = RequestTable.from_records([rec])
    cols = {f.name: getattr(t, f.name) for f in dataclasses.fields(t)}
    cols["connect_ns"] = None
    old = RequestTable(**cols)
    assert old.connect_ns.tolist() == [0]
    assert request_metrics.ttft_s(old)[0] == pytest.approx(700e-9) and request_metrics.e2e_s(old)[
        0
    ] == pytest.approx(1700e-9)
    rec.connect_ns = 300
    t = RequestTable.from_records([rec])
    assert request_metrics.ttft_s(t)[0] == pytest.approx(400e-9) and request_metrics.ttft_user_s(t)[
        0
    ] == pytest.approx(800e-9)
    assert request_metrics.connect_s(t)[0] == pytest.approx(300e-9)


# ------------------------------------------------------------------ the session file


def _records() -> list[RequestRecord]:
    out = []
    for i, c in enumerate((0, 0, 2_500_000)):  # the third opened a connection: 2.5 ms
        d = 1_000_000_000 + i * 10_000_000
        out.append(
            RequestRecord(
                arm=0,
                item=i,
                scheduled_ns=d,
                dispatched_ns=d,
                connect_ns=c,
                first_byte_ns=d + c + 4_000_000,
                chunk_ns=[d + c + 5_000_000, d + c + 7_000_000],
                chunk_tokens=[1, 1],
                n_output=2,
                done_ns=d + c + 8_000_000,
                token_source=TOKENS_USAGE,
            )
        )
    return out


def test_connect_phase_is_stored_and_an_older_file_without_it_still_opens(tmp_path):
    """The column round-trips; a session file written before it existed (the column dropped
    here) opens, reads 0 for it (its TTFT held any connect time, as abtui then measured), and
    its diagnosis and replay work without a connection line."""
    import duckdb

    from abtui.runner.live_replay import Replay
    from abtui.store.writer import SessionWriter
    from abtui.telemetry.diagnosis import diagnose, diagnosis_lines

    new, old = tmp_path / "new.duckdb", tmp_path / "old.duckdb"
    for path in (new, old):
        with SessionWriter(path) as w:
            w.write_meta(
                connections={"a": {"processes": 1, "wanted": 2, "opened": 1, "seconds": 0.01}}
            )
            w.write_arms([{"arm": 0, "name": "a", "role": "baseline", "url": "http://x/v1"}])
            w.write_items(_items(3))
            w.add_records(_records())
    con = duckdb.connect(str(old))
    con.execute("ALTER TABLE requests DROP COLUMN connect_ns")
    con.execute("DELETE FROM meta WHERE key = 'connections'")
    con.close()
    from abtui.store.reader import SessionReader

    with SessionReader(new) as rd:
        t = rd.request_table()
    assert t.connect_ns.tolist() == [0, 0, 2_500_000]
    assert request_metrics.ttft_s(t) == pytest.approx([0.005, 0.005, 0.005])  # connect out of TTFT
    assert request_metrics.ttft_user_s(t) == pytest.approx(
        [0.005, 0.005, 0.0075]
    )  # and in TTFT (user)
    line = next(x for x in diagnosis_lines(diagnose(new)) if "connections:" in x)
    assert "1 opened before t0" in line and "1 of 3 requests opened one during the run" in line
    assert "max 2.5 ms" in line

    with SessionReader(old) as rd:
        t = rd.request_table()
    assert t.connect_ns.tolist() == [0, 0, 0]
    assert request_metrics.ttft_s(t) == pytest.approx([0.005, 0.005, 0.0075])  # as measured then
    assert not any("connections:" in x for x in diagnosis_lines(diagnose(old)))
    assert Replay(old).at(1e9)[0].ok == 3  # the replay's query copes without the column
    view = Replay(new).at(1e9)[0].live.view()  # the live split: the connect phase is wait
    assert view.ttft_mean_s == pytest.approx(0.005)
    assert view.lag_mean_s == pytest.approx(0.0025 / 3)


def test_abtui_run_closed_loop_starts_on_warm_connections(tmp_path):
    """`abtui run` (real generator processes) at concurrency 12 per arm: every arm's pool
    holds 12 connections before t0 (meta.connections), no measured request opens one, and the
    diagnosis says so."""
    from abtui.cli import main
    from abtui.sim.process import SimProcess
    from abtui.store.reader import SessionReader
    from abtui.telemetry.diagnosis import diagnose, diagnosis_lines

    with (
        SimProcess(SimConfig(ttft_ms=5, itl_ms=1, model="a")) as a,
        SimProcess(SimConfig(ttft_ms=5, itl_ms=1, model="b")) as b,
    ):
        rc = main(
            [
                "run",
                "--baseline",
                a.url,
                "--candidate",
                b.url,
                "--requests",
                "36",
                "--concurrency",
                "12",
                "--output-tokens",
                "4",
                "--input-tokens",
                "8",
                "--sessions-dir",
                str(tmp_path),
                "--name",
                "warm",
                "--headless",
            ]
        )
    assert rc in (0, 3, 4)
    path = tmp_path / "warm.duckdb"
    with SessionReader(path) as rd:
        conns = rd.meta()["connections"]
        t = rd.request_table()
    assert set(conns) == {"baseline", "candidate"}
    for c in conns.values():  # the warm-up's two, then ten more, all answered
        assert (c["wanted"], c["opened"], c["unanswered"], c["failed"]) == (12, 10, 0, 0), c
    assert len(t) == 72 and set(t.status) == {"ok"} and (t.connect_ns == 0).all()
    lines = [x for x in diagnosis_lines(diagnose(path)) if "connections:" in x]
    assert len(lines) == 2 and all("none of 36 requests waited for one" in x for x in lines)


def test_waiting_for_a_turn_the_pool_is_kept_open_against_idle_closes(monkeypatch):
    """`alternate`: the arm waits out the other arm's turn while the server closes idle
    connections (after 0.3 s here, llama-server after 5 s). The generator reopens them as it
    waits (checking every 0.25 s), and tops them up at t0: no request fails, and the server saw
    the refills: 3 before the first t0, 4 at each later t0's top-up (11 without the refills
    while waiting), and 4 more each time the server closed them during a 1 s wait."""
    srv = IdleClosingServer(idle_s=0.3, mode="close")
    start = _Start()
    sent: list[int] = []

    class Results(_Results):
        def put(self, msg) -> None:
            self.msgs.append(msg)
            if isinstance(msg, Ready | SegmentDone):
                sent.append(srv.accepted)
                hold = 0.0 if isinstance(msg, Ready) else 1.0  # the other arm's turn
                start.hold_until = time.monotonic() + hold
                start.send(time.perf_counter_ns() + int((hold + 0.1) * 1e9))

    class HeldStart(_Start):
        hold_until = 0.0

        def poll(self) -> bool:
            return bool(self.t0s) and time.monotonic() >= self.hold_until

    start = HeldStart()
    results = Results(start, Accepts(monkeypatch))
    segs = [
        Segment(_items(8), "closed", 4),
        Segment(_items(8), "closed", 4, arms=(1,), block=0),
        Segment(_items(8), "closed", 4, block=1),
    ]

    async def main():
        server = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            target = Target(base_url=f"http://127.0.0.1:{port}/v1", model="m")
            warm = [Item(index=900, id="w0", prompt="warm up", max_tokens=3, n_input=2)]
            plan = ArmPlan(
                arm=0,
                target=target,
                items=[],
                warmup_items=warm,
                mode="closed",
                concurrency=None,
                store_text=False,
                segments=segs,
            )
            await _Generator(plan, results, start, _Stop()).run()
        finally:
            server.close()

    asyncio.run(main())
    recs = measured(results)
    assert len(recs) == 16 and all(r.status == OK for r in recs), [r.error_message for r in recs]
    assert srv.dropped >= 4  # the server did close idle ones
    stats = results.msgs[-1].stats.connections
    assert stats.opened > 3 + 4 + 4 and stats.failed == 0  # refilled while waiting
    assert all(r.connect_ns == 0 for r in recs[:8])  # the first segment: opened before its t0
