"""The simulator's injected faults, over real HTTP on 127.0.0.1, seen by abtui's own client."""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx
import pytest

from abtui.cli import main
from abtui.client import records
from abtui.client import stream as _httpx_path
from abtui.client.fast import FastClient, fast_stream_request
from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.client.stream import Target, build_body
from abtui.errors import UsageError
from abtui.sim.cli_args import add_arguments, config_from_args, config_to_argv
from abtui.sim.engine import SimConfig
from abtui.sim.faults import FaultConfig, Faults, parse_fail
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.process import SimProcess
from abtui.sim.server import start_server
from abtui.store.reader import SessionReader

MS = 1_000_000
ITEM = Item(index=0, id="i0", prompt="one two three four", max_tokens=12, n_input=4)


async def _one(sim, api: str, http: str, read_timeout: float = 5.0) -> RequestRecord:
    tgt = Target(base_url=sim.url, model="m", api=api, read_timeout_s=read_timeout)
    rec = RequestRecord(arm=0, item=0, scheduled_ns=time.perf_counter_ns())
    body = build_body(tgt, ITEM)
    if http == "fast":
        async with FastClient() as c:
            return await fast_stream_request(c, tgt, ITEM, body, rec)
    async with _httpx_path.make_client(4) as c:
        return await _httpx_path.stream_request(c, tgt, ITEM, body, rec)


def request_through_fault(
    faults: FaultConfig,
    api: str = "chat",
    http: str = "fast",
    read_timeout: float = 5.0,
    preset: str | None = None,
) -> tuple[RequestRecord, dict]:
    """One streamed request through abtui's client to a sim injecting ``faults`` (the
    fixed-delay engine, or the batching engine of ``preset``)."""
    po = PresetOptions(preset, time_scale=10) if preset else None

    async def go():
        cfg = SimConfig(port=0, ttft_ms=2, itl_ms=1, faults=faults, preset=po)
        sim = await start_server(cfg)
        try:
            rec = await _one(sim, api, http, read_timeout)
        finally:
            await sim.close()
        return rec, dict(sim.faults.injected)

    return asyncio.run(go())


@pytest.fixture(params=["fast", "httpx"])
def http(request):
    """Both streaming paths of the client must classify every fault the same way."""
    return request.param


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("status", [429, 500, 503])
def test_http_error_faults(http, api, status):
    rec, injected = request_through_fault(FaultConfig(fail={status: 1.0}), api, http)
    assert (rec.status, rec.error_class, rec.http_status) == (records.ERROR, records.E_HTTP, status)
    assert "simulated fault" in rec.error_message
    assert rec.chunk_ns == [] and injected == {f"http_{status}": 1}


def test_error_bodies_retry_after_and_html():
    async def go(faults):
        sim = await start_server(SimConfig(port=0, faults=faults))
        try:
            async with httpx.AsyncClient(trust_env=False) as c:
                return await c.post(sim.url + "/completions", json={"prompt": "hi"})
        finally:
            await sim.close()

    r = asyncio.run(go(FaultConfig(fail={429: 1.0}, retry_after_s=7)))
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == "rate_limit_exceeded" and "simulated" in err["message"]
    r = asyncio.run(go(FaultConfig(fail={503: 1.0}, fail_body="html")))
    assert r.status_code == 503 and r.headers["content-type"] == "text/html"
    assert "retry-after" not in r.headers
    assert r.text.startswith("<html>") and "503 Service Unavailable" in r.text
    # the client records the HTTP status whatever the body is
    rec, _ = request_through_fault(FaultConfig(fail={503: 1.0}, fail_body="html"))
    assert (rec.error_class, rec.http_status) == (records.E_HTTP, 503)


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_disconnect_mid_stream(http, api):
    rec, injected = request_through_fault(FaultConfig(disconnect_rate=1.0), api, http)
    assert (rec.status, rec.error_class, rec.http_status) == (
        records.ERROR,
        records.E_DISCONNECTED,
        200,
    )
    assert len(rec.chunk_ns) < ITEM.max_tokens and rec.finish_reason is None
    assert injected == {"disconnect": 1}


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_malformed_chunk(http, api):
    rec, injected = request_through_fault(FaultConfig(malformed_rate=1.0), api, http)
    assert (rec.status, rec.error_class) == (records.ERROR, records.E_MALFORMED)
    assert injected == {"malformed": 1}


def test_hang_is_a_timeout(http):
    rec, injected = request_through_fault(FaultConfig(hang_rate=1.0), http=http, read_timeout=0.3)
    assert (rec.status, rec.error_class) == (records.ERROR, records.E_TIMEOUT)
    assert rec.first_byte_ns is None and injected == {"hang": 1}


def test_stall_longer_than_the_read_timeout(http):
    faults = FaultConfig(stall_rate=1.0, stall_ms=1500)
    rec, injected = request_through_fault(faults, http=http, read_timeout=0.3)
    assert (rec.status, rec.error_class) == (records.ERROR, records.E_TIMEOUT)
    assert injected == {"stall": 1}


def test_short_stall_delays_but_completes(http):
    # 400 ms, not 120: server and client share one event loop, and a loaded box that stops the
    # process for the whole stall hands the client every chunk in one read, one timestamp (seen
    # at 120 ms under a load average of 8: all gaps 0)
    rec, _ = request_through_fault(FaultConfig(stall_rate=1.0, stall_ms=400), http=http)
    assert rec.status == records.OK and rec.n_output == ITEM.max_tokens
    gaps = [b - a for a, b in zip(rec.chunk_ns, rec.chunk_ns[1:], strict=False)]
    # the stall sits between two token chunks (mid-stream), not before the first
    assert max(gaps) >= 400 * MS, gaps


def test_slow_first_byte(http):
    rec, injected = request_through_fault(FaultConfig(slow_first_byte_ms=150), http=http)
    assert rec.status == records.OK and rec.n_output == ITEM.max_tokens
    assert rec.first_byte_ns - rec.dispatched_ns >= 150 * MS
    assert injected == {"slow_first_byte": 1}


def test_draws_are_seeded_and_match_the_rates():
    cfg = FaultConfig(fail={429: 0.1, 503: 0.05}, hang_rate=0.05, disconnect_rate=0.1)
    picks = [Faults(cfg, seed=3)._pick(i)[:2] for i in range(1, 4001)]
    assert picks == [Faults(cfg, seed=3)._pick(i)[:2] for i in range(1, 4001)]
    assert picks != [Faults(cfg, seed=4)._pick(i)[:2] for i in range(1, 4001)]
    share = {k: sum(p == k for p in picks) / len(picks) for k in set(picks)}
    assert share[("http", 429)] == pytest.approx(0.10, abs=0.02)
    assert share[("http", 503)] == pytest.approx(0.05, abs=0.015)
    assert share[("hang", 0)] == pytest.approx(0.05, abs=0.015)
    assert share[("disconnect", 0)] == pytest.approx(0.10, abs=0.02)
    assert share[(None, 0)] == pytest.approx(0.70, abs=0.03)


def test_fault_flags_round_trip_and_validation():
    p = argparse.ArgumentParser()
    add_arguments(p)
    argv = [
        "--fail",
        "429=0.05,500=0.01",
        "--fail-body",
        "html",
        "--retry-after",
        "3",
        "--stall-rate",
        "0.1",
        "--stall-ms",
        "250",
        "--disconnect-rate",
        "0.02",
        "--malformed-rate",
        "0.03",
        "--hang-rate",
        "0.01",
        "--slow-first-byte-ms",
        "40",
    ]
    cfg = config_from_args(p.parse_args(argv))
    f = cfg.faults
    assert f.fail == {429: 0.05, 500: 0.01} and f.fail_body == "html" and f.retry_after_s == 3
    assert (f.stall_rate, f.stall_ms, f.disconnect_rate) == (0.1, 250.0, 0.02)
    assert (f.malformed_rate, f.hang_rate, f.slow_first_byte_ms) == (0.03, 0.01, 40.0)
    assert config_from_args(p.parse_args(config_to_argv(cfg))) == cfg
    assert not SimConfig().faults.active and config_to_argv(SimConfig()) == config_to_argv(
        SimConfig(faults=FaultConfig())
    )
    for bad, needle in (
        (["--fail", "429"], "--fail"),
        (["--fail", "200=0.1"], "400..599"),
        (["--fail", "429=x"], "STATUS=RATE"),
        (["--hang-rate", "1.5"], "--hang-rate"),
        (["--stall-rate", "0.1"], "--stall-ms"),
        (["--fail", "429=0.6", "--disconnect-rate", "0.6"], "sum to 1.2"),
        (["--retry-after", "-1"], "--retry-after"),
    ):
        with pytest.raises(UsageError, match=needle):
            config_from_args(p.parse_args(bad))
    assert parse_fail(" 429=0.5 , ") == {429: 0.5}


def test_sim_serve_rejects_bad_fault_flag_in_one_line(capsys):
    rc = main(["sim", "serve", "--port", "0", "--fail", "429=2"])
    err = capsys.readouterr().err
    assert rc == 2 and "--fail 429=" in err and "Traceback" not in err


def test_run_against_a_faulty_sim_accounts_for_every_request(tmp_path, capsys):
    faults = FaultConfig(
        fail={429: 0.1, 503: 0.05},
        hang_rate=0.05,
        disconnect_rate=0.1,
        malformed_rate=0.1,
        stall_rate=0.1,
        stall_ms=3000,
    )
    n = 60
    with (
        SimProcess(ttft_ms=5, itl_ms=2, seed=1, faults=faults) as a,
        SimProcess(ttft_ms=5, itl_ms=2, seed=2) as b,
    ):
        rc = main(
            [
                "run",
                "--baseline",
                a.url,
                "--candidate",
                b.url,
                "--requests",
                str(n),
                "--rate",
                "40",
                "--input-tokens",
                "16",
                "--output-tokens",
                "16",
                "--timeout",
                "1s",
                "--name",
                "faulty",
                "--sessions-dir",
                str(tmp_path),
                "--headless",
                "--warmup",
                "0",
            ]
        )
        alive = httpx.get(a.url + "/models").status_code  # the sim still serves
    out = capsys.readouterr().out
    assert rc in (0, 3, 4) and alive == 200  # a verdict's exit code: the run went to its end
    with SessionReader(tmp_path / "faulty.duckdb") as rd:
        assert rd.complete
        t = rd.request_table()
    faulty, healthy = t.select(t.arm == 0), t.select(t.arm == 1)
    assert len(faulty) == len(healthy) == n
    assert set(healthy.status) == {"ok"}
    classes = {}
    for status, cls in zip(faulty.status, faulty.error_class, strict=True):
        key = "ok" if status == "ok" else cls
        classes[key] = classes.get(key, 0) + 1
    assert sum(classes.values()) == n  # ok + each error class = sent
    # every kind of fault showed up, each as its own class (hang and long stall: timeout)
    assert {"ok", "http", "timeout", "disconnected", "malformed"} <= set(classes)
    # and the summary reports them by class
    assert all(f"{cls} {classes[cls]}" in out for cls in ("http", "malformed", "disconnected"))


@pytest.mark.parametrize(
    "faults, cls",
    [
        (FaultConfig(fail={503: 1.0}), records.E_HTTP),
        (FaultConfig(disconnect_rate=1.0), records.E_DISCONNECTED),
        (FaultConfig(malformed_rate=1.0), records.E_MALFORMED),
        (FaultConfig(hang_rate=1.0), records.E_TIMEOUT),
        (FaultConfig(stall_rate=1.0, stall_ms=1500), records.E_TIMEOUT),
        (FaultConfig(stall_rate=1.0, stall_ms=100), None),
        (FaultConfig(slow_first_byte_ms=100), None),
    ],
)
def test_faults_on_the_batching_engine(faults, cls):
    """The same faults when a preset's batching engine pushes the tokens."""
    rec, injected = request_through_fault(
        faults, read_timeout=0.4 if cls == records.E_TIMEOUT else 5.0, preset="h100:llama-3-8b:fp8"
    )
    assert rec.error_class == cls and sum(injected.values()) == 1
    if cls is None:
        assert rec.status == records.OK and rec.n_output == ITEM.max_tokens
        gaps = [
            b - a for a, b in zip([rec.dispatched_ns, *rec.chunk_ns], rec.chunk_ns, strict=False)
        ]
        assert max(gaps) >= 100 * MS  # the stall (between chunks) or the withheld first byte
