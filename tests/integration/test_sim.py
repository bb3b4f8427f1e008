"""The simulated endpoint over real HTTP on 127.0.0.1 (httpx and raw sockets)."""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

import httpx
import pytest

from abtui.errors import UsageError
from abtui.sim.cli_args import add_arguments, config_from_args, config_to_argv
from abtui.sim.engine import FixedDelayEngine, SimConfig, SimRequest
from abtui.sim.process import SimProcess, SimStartError
from abtui.sim.server import start_server

CHAT = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]


class ThreadSim:
    """An in-process sim on its own event loop in a thread (cheap to start)."""

    def __init__(self, **fields):
        self.config = SimConfig(**{"port": 0, "ttft_ms": 1.0, "itl_ms": 0.5, **fields})

    def __enter__(self):
        self.loop = asyncio.new_event_loop()
        ready = concurrent.futures.Future()

        def run():
            asyncio.set_event_loop(self.loop)
            try:
                self.sim = self.loop.run_until_complete(start_server(self.config))
            except BaseException as exc:
                ready.set_exception(exc)
                return
            ready.set_result(None)
            self.loop.run_forever()
            self.loop.run_until_complete(self.sim.close())
            self.loop.close()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.result(5)
        self.url = self.sim.url
        return self

    def call(self, fn):
        """Run ``fn()`` on the server's loop and return its result."""
        fut = concurrent.futures.Future()
        self.loop.call_soon_threadsafe(lambda: fut.set_result(fn()))
        return fut.result(5)

    def __exit__(self, *exc):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def sim():
    with ThreadSim() as s:
        yield s


def stream_events(client, url, body):
    """POST a streaming request; return (parsed events, raw data lines, headers)."""
    events, lines = [], []
    with client.stream("POST", url, json=body) as r:
        assert r.status_code == 200
        headers = r.headers
        for line in r.iter_lines():
            if line.startswith("data: "):
                data = line[6:]
                lines.append(data)
                events.append(None if data == "[DONE]" else json.loads(data))
    return events, lines, headers


def token_text(event, chat):
    if chat:
        return event["choices"][0]["delta"].get("content", "") if event["choices"] else ""
    return event["choices"][0]["text"] if event["choices"] else ""


def test_models_and_health(sim):
    r = httpx.get(sim.url + "/models")
    assert r.status_code == 200
    assert r.json()["object"] == "list"
    assert [m["id"] for m in r.json()["data"]] == ["sim-model"]
    assert httpx.get(sim.url.removesuffix("/v1") + "/health").status_code == 200


@pytest.mark.parametrize("chat", [False, True])
def test_non_streaming(sim, chat):
    body = {"model": "x", "max_tokens": 7}
    body |= {"messages": CHAT} if chat else {"prompt": "one two three"}
    path = "/chat/completions" if chat else "/completions"
    r = httpx.post(sim.url + path, json=body)
    assert r.status_code == 200
    out = r.json()
    assert out["object"] == ("chat.completion" if chat else "text_completion")
    choice = out["choices"][0]
    text = choice["message"]["content"] if chat else choice["text"]
    assert choice["finish_reason"] == "length"
    assert len(text.split()) == 7 and text.startswith(" ")
    prompt_tokens = 4 if chat else 3  # words of all message contents
    assert out["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 7,
        "total_tokens": prompt_tokens + 7,
    }


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("usage", [False, True])
@pytest.mark.parametrize("per_chunk", [1, 3])
def test_streaming(chat, usage, per_chunk):
    with ThreadSim(tokens_per_chunk=per_chunk) as s, httpx.Client() as c:
        body = {"max_tokens": 10, "stream": True}
        body |= {"messages": CHAT} if chat else {"prompt": ["a b", "ignored"]}
        if usage:
            body["stream_options"] = {"include_usage": True}
        events, lines, headers = stream_events(
            c, s.url + ("/chat/completions" if chat else "/completions"), body
        )
    assert headers["content-type"] == "text/event-stream"
    assert headers["transfer-encoding"] == "chunked"
    assert lines[-1] == "[DONE]" and events[-1] is None
    events = events[:-1]
    if chat:
        prelude = events.pop(0)
        assert prelude["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert prelude["object"] == "chat.completion.chunk"
    if usage:
        last = events.pop()
        assert last["choices"] == []
        assert last["usage"]["completion_tokens"] == 10
        assert last["usage"]["prompt_tokens"] == (4 if chat else 2)
    else:
        assert all("usage" not in e for e in events)
    n_chunks = -(-10 // per_chunk)
    assert len(events) == n_chunks
    sizes = [len(token_text(e, chat).split()) for e in events]
    assert sizes == [per_chunk] * (n_chunks - 1) + [10 - per_chunk * (n_chunks - 1)]
    reasons = [e["choices"][0]["finish_reason"] for e in events]
    assert reasons == [None] * (n_chunks - 1) + ["length"]
    assert all(
        e["object"] == ("chat.completion.chunk" if chat else "text_completion") for e in events
    )


def test_no_usage_option_and_default_max_tokens():
    with ThreadSim(usage=False, default_max_tokens=5) as s, httpx.Client() as c:
        body = {"prompt": "p", "stream": True, "stream_options": {"include_usage": True}}
        events, _, _ = stream_events(c, s.url + "/completions", body)
    assert len(events) == 5 + 1  # five token chunks and [DONE], no usage chunk
    assert all(e is None or e["choices"] for e in events)


def test_keep_alive_one_connection(sim):
    # the module's sim: earlier tests' connections are closed, but the server may not have
    # seen each one go yet on a loaded box; wait for that, so that the count below is ours
    deadline = time.monotonic() + 15
    while sim.call(lambda: len(sim.sim.connections)):
        assert time.monotonic() < deadline, "earlier tests' connections stayed open"
        time.sleep(0.01)
    with httpx.Client() as c:
        for i in range(5):
            assert c.post(sim.url + "/completions", json={"prompt": str(i)}).status_code == 200
            stream_events(c, sim.url + "/chat/completions", {"messages": CHAT, "stream": True})
            assert c.get(sim.url + "/models").status_code == 200
        assert sim.call(lambda: len(sim.sim.connections)) == 1


@pytest.mark.parametrize(
    "path, body, words",
    [
        ("/completions", b"{not json", "not valid JSON"),
        ("/completions", b"[1, 2]", "JSON object"),
        ("/completions", b'{"prompt": 3}', "prompt"),
        ("/completions", b'{"prompt": "x", "max_tokens": 0}', "max_tokens"),
        ("/completions", b'{"prompt": "x", "max_tokens": "9"}', "max_tokens"),
        ("/chat/completions", b'{"messages": "hi"}', "messages"),
        ("/chat/completions", b'{"messages": [], "stream": 1}', "messages"),
    ],
)
def test_malformed_requests(sim, path, body, words):
    with httpx.Client() as c:
        r = c.post(sim.url + path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and words in err["message"]
        assert c.post(sim.url + "/completions", json={"prompt": "ok"}).status_code == 200


def test_unknown_path_and_method(sim):
    r = httpx.get(sim.url + "/nope")
    assert r.status_code == 404 and "error" in r.json()
    assert httpx.get(sim.url + "/completions").status_code == 405


def raw_request(port, data, read_all=True):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
            if not read_all:
                break
        return out


def test_raw_protocol_errors(sim):
    port = sim.sim.port
    out = raw_request(port, b"GARBAGE\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400") and b"invalid_request_error" in out
    chunked = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n"
    )
    assert raw_request(port, chunked).startswith(b"HTTP/1.1 411")
    # two pipelined requests, the last with Connection: close: both answered in order
    req = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    last = b"POST /v1/completions HTTP/1.1\r\nContent-Length: 15\r\nConnection: close\r\n\r\n"
    out = raw_request(port, req + last + b'{"prompt": "x"}')
    assert out.count(b"HTTP/1.1 200") == 2 and out.index(b"sim-model") < out.index(b"text_comp")


def test_disconnect_mid_stream_then_next_request_works():
    with ThreadSim(ttft_ms=0, itl_ms=5) as s:
        body = json.dumps({"prompt": "x", "max_tokens": 1000, "stream": True}).encode()
        head = f"POST /v1/completions HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n"
        for _ in range(3):
            out = raw_request(s.sim.port, head.encode() + body, read_all=False)
            assert out.startswith(b"HTTP/1.1 200")
        deadline = time.monotonic() + 15  # generous: a loaded box
        while s.call(lambda: len(s.sim.connections)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.call(lambda: len(s.sim.connections)) == 0  # streams stopped, nothing leaked
        r = httpx.post(s.url + "/completions", json={"prompt": "x", "max_tokens": 3})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3


def test_slow_reader_is_flow_controlled():
    n = 100_000  # ~15 MB of events if nothing held them back
    with ThreadSim(ttft_ms=0, itl_ms=0) as s:
        body = json.dumps({"prompt": "x", "max_tokens": n, "stream": True}).encode()
        head = f"POST /v1/completions HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        with socket.create_connection(("127.0.0.1", s.sim.port)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sock.sendall(head + body)

            # not reading: the server must stop, not buffer everything. Wait until its transport
            # has paused it (a fixed 0.3 s sleep on a loaded box could look before the server had
            # even accepted the connection), then look at what it holds and has made.
            def state():
                conns = list(s.sim.connections)
                if len(conns) != 1 or not conns[0].paused:
                    return None
                return conns[0].t.get_write_buffer_size(), conns[0].tokens

            deadline = time.monotonic() + 30
            while (got := s.call(state)) is None:
                assert time.monotonic() < deadline, "the server's writing was never paused"
                time.sleep(0.02)
            time.sleep(0.2)  # paused, it stays so: nothing more is made meanwhile
            assert s.call(state) == got
            buffered, tokens = got
            assert buffered < 512 * 1024 and tokens < n
            data = bytearray()
            while not data.endswith(b"0\r\n\r\n"):
                data += sock.recv(1 << 20)
    assert data.count(b'"text":"') == n // 1 and data.count(b"[DONE]") == 1


def test_zero_delay_coalesces_writes(tmp_path):
    log = tmp_path / "chunks.jsonl"
    with ThreadSim(ttft_ms=0, itl_ms=0, chunk_log=str(log)) as s, httpx.Client() as c:
        events, _, _ = stream_events(
            c, s.url + "/completions", {"prompt": "x", "max_tokens": 256, "stream": True}
        )
    assert len(events) == 257
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    sends = [r for r in rows if "seq" in r]
    assert [r["seq"] for r in sends] == list(range(256))
    assert len({r["t_ns"] for r in sends}) <= 3  # one write (a few at most) for 256 chunks


def test_same_seed_same_text():
    def texts(seed):
        with ThreadSim(seed=seed) as s, httpx.Client() as c:
            out = []
            for prompt in ("alpha", "beta"):
                r = c.post(s.url + "/completions", json={"prompt": prompt, "max_tokens": 12})
                out.append(r.json()["choices"][0]["text"])
            events, _, _ = stream_events(
                c, s.url + "/completions", {"prompt": "alpha", "max_tokens": 12, "stream": True}
            )
            out.append("".join(token_text(e, False) for e in events if e))
            return out

    a, b, c = texts(7), texts(7), texts(8)
    assert a == b and a[0] == a[2] and a[0] != a[1] and a != c


@pytest.mark.serial  # TTFT within 15 ms of 50 ms: .ci/run's second pass, alone (tests/conftest.py)
def test_timing_and_chunk_log(tmp_path):
    log = tmp_path / "chunks.jsonl"
    received = {}  # key -> [client receive time per token chunk]
    ttfts, gaps = [], []
    with SimProcess(ttft_ms=50, itl_ms=10, chunk_log=str(log)) as proc:
        assert proc.url == f"http://127.0.0.1:{proc.port}/v1"
        with httpx.Client() as c:
            c.get(proc.url + "/models")  # connect first: TTFT then excludes the handshake
            for i in range(4):
                key = f"k{i}"
                body = {"messages": CHAT, "max_tokens": 12, "stream": True, "abtui_key": key}
                times = []
                t0 = time.perf_counter_ns()
                with c.stream("POST", proc.url + "/chat/completions", json=body) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: {") and '"content":"' in line:
                            if '"content":""' not in line:  # not the prelude
                                times.append(time.perf_counter_ns())
                received[key] = times
                ttfts.append((times[0] - t0) / 1e6)
                gaps.append((times[-1] - times[0]) / 1e6 / (len(times) - 1))
        pid = proc.pid
    assert proc.proc.poll() is not None  # the child is gone
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    # never early (the server's clock starts after our send); a loaded 2-core CI box can delay
    # any single read, so the upper bounds apply to the median of the four requests
    assert all(t >= 50 for t in ttfts) and statistics.median(ttfts) <= 65, ttfts
    assert 8 <= statistics.median(gaps) <= 12, gaps
    rows = [json.loads(line) for line in log.read_text().splitlines()]  # flushed on SIGTERM
    for key, times in received.items():
        sends = [r for r in rows if r["key"] == key and "seq" in r]
        assert [r["seq"] for r in sends] == list(range(12)) == list(range(len(times)))
        assert all(r["n"] == 1 for r in sends)
        assert all(r["t_ns"] <= t for r, t in zip(sends, times, strict=True))
        (recv,) = [r for r in rows if r["key"] == key and r.get("event") == "recv"]
        assert recv["t_ns"] < sends[0]["t_ns"] and len({r["req"] for r in sends}) == 1


def test_sim_process_reports_start_failure(tmp_path):
    with pytest.raises(SimStartError) as info:
        SimProcess(chunk_log=str(tmp_path / "missing" / "log.jsonl")).start()
    assert "chunk log" in info.value.message  # the child's stderr is in the message


def test_python_m_abtui_sim_rejects_bad_option():
    cmd = [sys.executable, "-m", "abtui.sim", "--itl-ms", "-3"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    assert out.returncode == 2 and "--itl-ms" in out.stderr and out.stdout == ""


def test_config_validation_and_args_round_trip():
    for bad in (
        {"ttft_ms": -1},
        {"jitter_ms": float("nan")},
        {"tokens_per_chunk": 0},
        {"port": 70000},
        {"model": " "},
        {"default_max_tokens": 0},
    ):
        with pytest.raises(UsageError):
            SimConfig(**bad).validate()
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config = SimConfig(
        port=0,
        ttft_ms=12.5,
        itl_ms=3,
        jitter_ms=1,
        tokens_per_chunk=2,
        seed=4,
        chunk_log="/tmp/x.jsonl",
        usage=False,
        model="m",
    )
    assert config_from_args(parser.parse_args(config_to_argv(config))) == config
    assert config_from_args(parser.parse_args([])) == SimConfig()


def test_engine_schedule_absolute_deadlines_and_jitter():
    req = SimRequest(
        req_id=1, chat=False, prompt="", prompt_tokens=0, max_tokens=7, arrival_ns=1000
    )
    plan = list(FixedDelayEngine(SimConfig(ttft_ms=2, itl_ms=1, tokens_per_chunk=3)).schedule(req))
    assert plan == [(2_001_000, 3), (3_001_000, 3), (4_001_000, 1)]
    jittery = FixedDelayEngine(SimConfig(ttft_ms=1, itl_ms=1, jitter_ms=5, seed=3))
    plan = list(jittery.schedule(req))
    assert plan == list(jittery.schedule(req))  # seeded
    deadlines = [d for d, _ in plan]
    assert deadlines == sorted(deadlines) and sum(n for _, n in plan) == 7


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity here")
def test_sim_process_cpu_pinning():
    cpu = min(os.sched_getaffinity(0))
    with SimProcess(cpu=cpu) as proc:
        assert os.sched_getaffinity(proc.pid) == {cpu}
        assert httpx.get(proc.url + "/models").status_code == 200


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_sim_child_dies_with_its_parent():
    script = (
        "import sys, time\nfrom abtui.sim.process import SimProcess\n"
        "p = SimProcess().start()\nprint(p.pid, flush=True)\ntime.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        os.kill(child, 0)  # running
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 15  # SIGTERM, then the sim's orderly exit, on a loaded box
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    pytest.fail(f"sim child {child} outlived its parent")
