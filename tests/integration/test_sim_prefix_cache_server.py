"""The simulator's prefix cache over loopback: a batching-engine endpoint answers a repeated
prefix from its cache (``usage.prompt_tokens_details.cached_tokens`` and vLLM's
``vllm:prefix_cache_*`` counters), evicts the least recently used blocks when its KV cache is
small, and the client stores the figure; the diagnosis reads it back from the session file."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from abtui.client.fast import FastClient, fast_stream_request
from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.client.stream import Target, build_body, make_client, stream_request
from abtui.metrics.live import LiveArm
from abtui.sim.cli_args import config_to_argv
from abtui.sim.engine import SimConfig
from abtui.sim.prefix_cache import BLOCK_SIZE
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.server import start_server
from abtui.store.reader import SessionReader
from abtui.store.writer import SessionWriter
from abtui.telemetry.diagnosis import diagnose, diagnosis_lines
from abtui.tui.widgets.pane import engine_line

PRESET = "h100:llama-3-8b:bf16"


def prompt(tag: str, n: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def config(**preset) -> SimConfig:
    return SimConfig(port=0, preset=PresetOptions(PRESET, time_scale=4.0, **preset))


async def _post(url: str, text: str, client: httpx.AsyncClient) -> int:
    """The cached tokens the response says (the skipped prefill's effect on time is checked
    without wall clocks: tests/unit/test_sim_prefix_cache.py)."""
    r = await client.post(url + "/completions", json={"prompt": text, "max_tokens": 2})
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_repeated_prefix_hits_and_counters():
    async def run():
        sim = await start_server(config())
        try:
            system = prompt("sys", 1500)
            async with httpx.AsyncClient() as c:
                got = [await _post(sim.url, f"{system} q{i}", c) for i in range(3)]
                other = await _post(sim.url, prompt("x", 1500), c)
                metrics = (await c.get(sim.url.removesuffix("/v1") + "/metrics")).text
            return got, other, metrics
        finally:
            await sim.close()

    got, other, metrics = asyncio.run(run())
    assert got == [0, 1488, 1488]  # 93 whole blocks of the 1,501 tokens
    assert other == 0  # nothing shared
    counters = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("vllm:prefix_cache")
    }
    assert counters == {
        "vllm:prefix_cache_queries_total": 3 * 1501.0 + 1500,
        "vllm:prefix_cache_hits_total": 2 * 1488.0,
    }


def test_small_kv_cache_evicts_the_least_recently_used_prompt():
    """A KV cache of ~7,000 tokens holds two 3,000-token prompts and the request running: a
    third prompt evicts the least recently used blocks, the first prompt's later ones."""

    async def run():
        sim = await start_server(config(gpu_mem_util=0.211, max_batched_tokens=512, max_num_seqs=8))
        try:
            async with httpx.AsyncClient() as c:
                cap = (await c.get(sim.url + "/models")).json()["data"][0]["metadata"]
                a, b, d = (prompt(t, 3000) for t in "abd")
                seq = [a, a, b, d, d, a]
                return cap["kv_capacity_tokens"], [await _post(sim.url, p, c) for p in seq]
        finally:
            await sim.close()

    capacity, cached = asyncio.run(run())
    assert 2 * 3000 < capacity < 3 * 3000
    full = 2999 // BLOCK_SIZE * BLOCK_SIZE
    # while d runs (3,002 tokens reserved), the free space keeps `room` blocks: b's 187 and
    # what is left of a, the least recently used (its start: a prompt's tail goes first)
    room = (capacity - 3002) // BLOCK_SIZE
    kept = (room - 3000 // BLOCK_SIZE) * BLOCK_SIZE
    assert 0 < kept < full
    assert cached == [0, full, 0, 0, full, kept]


def test_cache_off_computes_every_prompt():
    async def run():
        sim = await start_server(config(prefix_caching=False))
        try:
            async with httpx.AsyncClient() as c:
                got = [await _post(sim.url, prompt("s", 600), c) for _ in range(2)]
                metrics = (await c.get(sim.url.removesuffix("/v1") + "/metrics")).text
                meta = (await c.get(sim.url + "/models")).json()["data"][0]["metadata"]
            return got, metrics, meta
        finally:
            await sim.close()

    got, metrics, meta = asyncio.run(run())
    assert got == [0, 0] and "vllm:prefix_cache" not in metrics
    assert meta["prefix_caching"] is False
    argv = config_to_argv(config(prefix_caching=False))
    assert "--no-prefix-caching" in argv and "--no-prefix-caching" not in config_to_argv(config())


ITEM = Item(index=0, id="i0", prompt=prompt("sys", 800) + " why", max_tokens=4, n_input=801)


async def _records(path: str, api: str, n: int) -> list[RequestRecord]:
    sim = await start_server(config())
    try:
        tgt = Target(base_url=sim.url, model=sim.config.model, api=api)
        body = build_body(tgt, ITEM)
        send = fast_stream_request if path == "fast" else stream_request
        out = []
        async with FastClient() if path == "fast" else make_client(4) as client:
            for i in range(n):
                rec = RequestRecord(arm=i % 2, item=i // 2, scheduled_ns=time.perf_counter_ns())
                out.append(await send(client, tgt, ITEM, body, rec))
        return out
    finally:
        await sim.close()


@pytest.mark.parametrize(("path", "api"), [("fast", "chat"), ("httpx", "completions")])
def test_client_reads_cached_tokens(path, api):
    first, second = asyncio.run(_records(path, api, 2))
    assert first.status == second.status == "ok"
    assert (first.cached_tokens, second.cached_tokens) == (0, 800 // BLOCK_SIZE * BLOCK_SIZE)


def test_stored_and_diagnosed(tmp_path):
    recs = asyncio.run(_records("fast", "chat", 6))
    path = tmp_path / "s.duckdb"
    with SessionWriter(path) as w:
        w.write_arms(
            [
                {"arm": 0, "name": "a", "role": "baseline", "url": "u", "model": "m"},
                {"arm": 1, "name": "b", "role": "candidate", "url": "u", "model": "m"},
            ]
        )
        w.add_records(recs)
    with SessionReader(path) as r:
        stored = [row[0] for row in r.query("SELECT cached_tokens FROM requests ORDER BY req")]
        table = r.request_table()
    assert stored == [0] + [800] * 5 and list(table.cached_tokens) == stored
    diags = {d.name: d for d in diagnose(path)}
    a, b = diags["a"].prefix_cache, diags["b"].prefix_cache
    assert a.source == "usage.prompt_tokens_details.cached_tokens" and a.requests == 3
    assert a.cached_tokens == 1600 and a.prompt_tokens == 3 * 801
    assert b.hit_rate == pytest.approx(800 / 801) and [t.turn for t in b.turns] == [0]
    assert (a.n_cached, a.n_uncached, b.n_cached) == (2, 1, 3)
    text = "\n".join(diagnosis_lines(list(diags.values())))
    assert "prefix cache: hit 66.6% of 2,403 prompt tokens in 3 responses" in text


def test_live_pane_shows_the_responses_hit_rate():
    recs = asyncio.run(_records("fast", "chat", 4))
    live = LiveArm()
    assert live.view().cache_hit is None
    for r in recs:
        live.add(r)
    hit = live.view().cache_hit
    assert hit == pytest.approx(3 * 800 / (4 * 801))
    line = engine_line({"vllm:running": 3.0, "vllm:kv_usage": 0.4}, 38, hit).plain
    assert line == "vllm run 3 · KV 40% · cache 75%"
    assert engine_line({}, 38, hit).plain == "prefix cache 75%"
    assert "cache" not in engine_line({"vllm:running": 3.0}, 38).plain
    assert "cache" not in engine_line({"vllm:running": 3.0}, 38, 0.0).plain  # none hit
