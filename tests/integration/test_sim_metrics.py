"""The simulator's Prometheus ``/metrics``: valid text exposition format, vLLM's names and
meanings, DCGM-style simulated GPU gauges, and only what the engine knows."""

from __future__ import annotations

import asyncio
import math
import re

import httpx
import pytest

from abtui.sim.engine import SimConfig
from abtui.sim.engine_stats import REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS, EngineStats
from abtui.sim.faults import FaultConfig
from abtui.sim.prom import CONTENT_TYPE, MiB, render
from abtui.sim.server import start_server

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{((?:{_LABEL})(?:,{_LABEL})*)?\}})? (\S+)$")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
_TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_prometheus(text: str) -> dict[str, dict]:
    """A strict reader of the text exposition format (0.0.4): every family declared once with
    HELP then TYPE, its samples contiguous after it, each line well-formed. Returns
    ``{family: {"type", "help", "samples": [(name, labels, value)]}}``."""
    assert text.endswith("\n"), "the exposition must end with a newline"
    families: dict[str, dict] = {}
    current = None
    for n, line in enumerate(text[:-1].split("\n"), 1):
        if line.startswith("# HELP "):
            name, _, help_ = line[7:].partition(" ")
            assert re.fullmatch(_NAME, name) and name not in families, f"line {n}: {line}"
            current = families[name] = {"type": None, "help": help_, "samples": []}
            continue
        if line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert current is families.get(name) and current["type"] is None, f"line {n}"
            assert kind in _TYPES, f"line {n}: type {kind!r}"
            current["type"] = kind
            continue
        assert not line.startswith("#") and line.strip(), f"line {n}: {line!r}"
        m = _SAMPLE.match(line)
        assert m, f"line {n} is not a sample: {line!r}"
        name, labels, raw = m.group(1), m.group(2) or "", m.group(3)
        assert current is not None and current["type"] is not None, f"line {n}: no TYPE"
        family = [k for k, v in families.items() if v is current][0]
        allowed = {family}
        if current["type"] == "histogram":
            allowed = {family + s for s in ("_bucket", "_sum", "_count")}
        assert name in allowed, f"line {n}: sample {name} outside its family {family}"
        v = float(raw.replace("Inf", "inf"))  # +Inf, NaN and decimals
        current["samples"].append((name, dict(_LABEL_RE.findall(labels)), v))
    for name, fam in families.items():
        assert fam["samples"], f"{name} has no samples"
        if fam["type"] == "counter":
            assert all(s[2] >= 0 for s in fam["samples"]), name
        if fam["type"] == "histogram":
            buckets = [s for s in fam["samples"] if s[0] == name + "_bucket"]
            les = [float(s[1]["le"].replace("Inf", "inf")) for s in buckets]
            counts = [s[2] for s in buckets]
            assert les == sorted(les) and les[-1] == math.inf, name
            assert counts == sorted(counts), f"{name}: buckets must be cumulative"
            (count,) = [s[2] for s in fam["samples"] if s[0] == name + "_count"]
            assert counts[-1] == count, f"{name}: +Inf bucket != _count"
    return families


def value(families: dict, name: str, **labels) -> float:
    """The one sample ``name`` (a histogram's ``_bucket``/``_sum``/``_count`` too) whose labels
    include ``labels``."""
    family = name if name in families else re.sub(r"_(bucket|sum|count)$", "", name)
    fam = families[family]
    got = [v for n, lab, v in fam["samples"] if n == name and labels.items() <= lab.items()]
    assert len(got) == 1, (name, labels, got)
    return got[0]


def fake_stats() -> EngineStats:
    """Hand-made figures of a busy 2-GPU replica."""
    s = EngineStats(
        running=12,
        waiting=5,
        kv_usage=0.75,
        kv_capacity_tokens=400_000,
        prompt_tokens_total=123_456,
        generation_tokens_total=7_890,
        requests_finished_total=42,
        preemptions_total=0,
        spec_drafts_total=30,
        spec_draft_tokens_total=120,
        spec_accepted_tokens_total=84,
        gpu_count=2,
        gpu_memory_used_bytes=70 * 1024 * MiB,
        gpu_memory_total_bytes=80 * 1024 * MiB,
        dram_active=0.82,
        sm_active=0.9,
        power_w=612.5,
        energy_j_total=1234.5678,
    )
    for x in (0.2, 0.4, 3.0, 1e5):
        s.queue_s.observe(x)
        s.e2e_s.observe(x)
    for x in (0.003, 0.05):
        s.ttft_s.observe(x)
    return s


def test_render_is_valid_and_uses_vllm_names_and_meanings():
    text = render(fake_stats(), 'org/m "8b"', gpu_label="NVIDIA H100 SXM 80GB")
    f = parse_prometheus(text)
    model = {"model_name": 'org/m \\"8b\\"'}  # the label value escaped as the format says
    assert value(f, "vllm:num_requests_running", **model) == 12
    assert value(f, "vllm:num_requests_waiting", **model) == 5
    assert f["vllm:num_requests_running"]["type"] == "gauge"
    assert value(f, "vllm:kv_cache_usage_perc", **model) == 0.75  # a fraction, not percent
    for name, v in (
        ("vllm:prompt_tokens_total", 123_456),
        ("vllm:generation_tokens_total", 7_890),
        ("vllm:request_success_total", 42),
        ("vllm:num_preemptions_total", 0),
        ("vllm:spec_decode_num_drafts_total", 30),
        ("vllm:spec_decode_num_draft_tokens_total", 120),
        ("vllm:spec_decode_num_accepted_tokens_total", 84),
    ):
        assert f[name]["type"] == "counter" and value(f, name, **model) == v
        assert name.endswith("_total")  # as vLLM's prometheus_client exposes counters
    queue = f["vllm:request_queue_time_seconds"]
    assert queue["type"] == "histogram"
    buckets = {s[1]["le"]: s[2] for s in queue["samples"] if s[0].endswith("_bucket")}
    assert len(buckets) == len(REQUEST_LATENCY_BUCKETS) + 1
    assert (buckets["0.3"], buckets["0.5"], buckets["5.0"], buckets["+Inf"]) == (1, 2, 3, 4)
    assert value(f, "vllm:request_queue_time_seconds_sum") == pytest.approx(100003.6)
    ttft = f["vllm:time_to_first_token_seconds"]
    assert sum(s[0].endswith("_bucket") for s in ttft["samples"]) == len(TTFT_BUCKETS) + 1
    assert value(f, "vllm:time_to_first_token_seconds_bucket", le="0.005") == 1
    for name in (
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:e2e_request_latency_seconds",
    ):
        assert f[name]["type"] == "histogram"
    # DCGM: one sample per simulated GPU, MiB / ratio / W / mJ, help says simulated
    for g in ("0", "1"):
        assert value(f, "DCGM_FI_DEV_FB_USED", gpu=g) == 70 * 1024
        assert value(f, "DCGM_FI_DEV_FB_FREE", gpu=g) == 10 * 1024
        assert value(f, "DCGM_FI_PROF_DRAM_ACTIVE", gpu=g) == 0.82
        assert value(f, "DCGM_FI_PROF_SM_ACTIVE", gpu=g) == 0.9
        assert value(f, "DCGM_FI_DEV_POWER_USAGE", gpu=g) == 612.5
        assert value(f, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu=g) == 1_234_568
    assert value(f, "DCGM_FI_DEV_POWER_USAGE", gpu="0", modelName="NVIDIA H100 SXM 80GB")
    assert f["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]["type"] == "counter"
    for name, fam in f.items():
        assert "simulated" in fam["help"], name
        if name.startswith("vllm:"):
            assert all(s[1].get("model_name") for s in fam["samples"]), name


def test_parser_rejects_broken_expositions():
    good = render(fake_stats(), "m")
    for broken in (
        good.replace("# TYPE vllm:num_requests_waiting gauge\n", ""),  # no TYPE
        good.replace('le="+Inf"', 'le="+Inf"x', 1),  # bad label syntax
        good + 'vllm:num_requests_running{model_name="m"} 1\n',  # family not contiguous
        good.replace(" 123456\n", " 12 3456\n"),  # bad value
        good[:-1],  # no final newline
    ):
        with pytest.raises(AssertionError):
            parse_prometheus(broken)


# The stream scraped mid-way: at the fixed-delay sims' 1 ms a token it would last 10 s, so it is
# still running when the scrape lands even on a loaded box (with 50 tokens it lasted 50 ms, and
# under CPU load the scrape, on the same event loop, came after its end: 'running' was 0).
STREAM_TOKENS = 10_000


async def _serve_and_scrape(config: SimConfig, requests: list[dict]):
    sim = await start_server(config)
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=10) as c:
            for body in requests:
                r = await c.post(sim.url + "/completions", json=body)
                assert r.status_code in (200, 429)
            mid = None
            async with c.stream(
                "POST",
                sim.url + "/completions",
                json={"prompt": "a b", "max_tokens": STREAM_TOKENS, "stream": True},
            ) as r:
                async for _ in r.aiter_lines():
                    mid = await c.get(sim.url.removesuffix("/v1") + "/metrics")
                    break
            after = await c.get(sim.url.removesuffix("/v1") + "/metrics")
    finally:
        await sim.close()
    return mid, after


def test_fixed_delay_endpoint_serves_what_it_knows():
    cfg = SimConfig(port=0, ttft_ms=1, itl_ms=1, model="sim-m")
    reqs = [{"prompt": "one two three", "max_tokens": 4}, {"prompt": "x y", "max_tokens": 6}]
    mid, after = asyncio.run(_serve_and_scrape(cfg, reqs))
    assert after.status_code == 200 and after.headers["content-type"] == CONTENT_TYPE
    f_mid, f = parse_prometheus(mid.text), parse_prometheus(after.text)
    assert value(f_mid, "vllm:num_requests_running", model_name="sim-m") == 1  # the stream
    assert value(f, "vllm:num_requests_running") == 0
    assert value(f, "vllm:num_requests_waiting") == 0
    assert value(f, "vllm:prompt_tokens_total") == 3 + 2 + 2
    # the stream was abandoned after its first line: some of its tokens, not all
    assert 4 + 6 + 1 <= value(f, "vllm:generation_tokens_total") < 4 + 6 + STREAM_TOKENS
    assert value(f, "vllm:request_success_total") == 2
    # no KV cache, no phases, no GPU are modelled: none is shown
    assert not any(n.startswith("DCGM_") for n in f)
    assert "vllm:kv_cache_usage_perc" not in f and "vllm:e2e_request_latency_seconds" not in f
    assert "abtui_sim_faults_injected_total" not in f


def test_metrics_count_injected_faults():
    cfg = SimConfig(port=0, ttft_ms=1, itl_ms=1, faults=FaultConfig(fail={429: 1.0}))
    _, after = asyncio.run(_serve_and_scrape(cfg, [{"prompt": "a", "max_tokens": 2}] * 3))
    f = parse_prometheus(after.text)
    assert value(f, "abtui_sim_faults_injected_total", kind="http_429") == 4
    assert value(f, "vllm:prompt_tokens_total") == 0  # refused requests never reached it


def test_engine_without_stats_and_wrong_method():
    class Bare:
        def schedule(self, req):
            yield req.arrival_ns, req.max_tokens

    async def go():
        sim = await start_server(SimConfig(port=0), Bare())
        try:
            async with httpx.AsyncClient(trust_env=False) as c:
                base = sim.url.removesuffix("/v1")
                return await c.get(base + "/metrics"), await c.post(base + "/metrics")
        finally:
            await sim.close()

    r, p = asyncio.run(go())
    assert r.status_code == 404 and "no statistics" in r.json()["error"]["message"]
    assert p.status_code == 405


def test_batching_engine_metrics_over_http():
    """The real engine (a preset) behind /metrics: consistent with what was served."""
    from abtui.sim.preset_cli import PresetOptions

    async def go():
        # Real time (time scale 1) and 600 tokens each: the batch runs ~2.2 s, a window the
        # mid-run scrape cannot miss on a loaded box (at scale 5 and 120 tokens it was 0.1 s,
        # and a stalled loop runs the due steps back to back: the scrape could land after)
        po = PresetOptions("h100:llama-3-8b:bf16:spec=k3a0.7", time_scale=1)
        sim = await start_server(SimConfig(port=0, preset=po))
        base = sim.url.removesuffix("/v1")
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=30) as c:
                bodies = [
                    {"prompt": " ".join(["word"] * (200 + 50 * i)), "max_tokens": 600 + i}
                    for i in range(8)
                ]
                posts = [c.post(sim.url + "/completions", json=b) for b in bodies]
                tasks = [asyncio.ensure_future(p) for p in posts]
                while True:  # mid-run: a step has ended and requests still run
                    mid = await c.get(base + "/metrics")
                    f = parse_prometheus(mid.text)
                    if value(f, "vllm:generation_tokens_total") > 0 and value(
                        f, "vllm:num_requests_running"
                    ):
                        break
                    assert not all(t.done() for t in tasks), "no scrape caught the batch running"
                    await asyncio.sleep(0.01)
                done = await asyncio.gather(*tasks)
                after = await c.get(base + "/metrics")
        finally:
            await sim.close()
        return bodies, done, mid, after

    bodies, done, mid, after = asyncio.run(go())
    assert all(r.status_code == 200 for r in done)
    f_mid, f = parse_prometheus(mid.text), parse_prometheus(after.text)
    model = {"model_name": "h100-sxm:llama-3-8b:bf16:spec=k3a0.7"}
    assert value(f_mid, "vllm:num_requests_running", **model) >= 1
    assert 0 < value(f_mid, "vllm:kv_cache_usage_perc") <= 1
    assert value(f, "vllm:num_requests_running") == value(f, "vllm:num_requests_waiting") == 0
    assert value(f, "vllm:kv_cache_usage_perc") == 0
    n_prompt = sum(len(b["prompt"].split()) for b in bodies)
    n_gen = sum(b["max_tokens"] for b in bodies)
    assert value(f, "vllm:prompt_tokens_total") == n_prompt
    assert value(f, "vllm:generation_tokens_total") == n_gen
    assert value(f, "vllm:request_success_total") == 8
    for h in (
        "vllm:e2e_request_latency_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
    ):
        assert value(f, h + "_count") == 8
    # e2e = queue + prefill + decode for every request, so the sums add up
    parts = sum(
        value(f, f"vllm:request_{p}_time_seconds_sum") for p in ("queue", "prefill", "decode")
    )
    assert value(f, "vllm:e2e_request_latency_seconds_sum") == pytest.approx(parts, rel=1e-6)
    # speculative decoding: drafts proposed, some accepted, fewer than proposed
    drafts = value(f, "vllm:spec_decode_num_draft_tokens_total")
    accepted = value(f, "vllm:spec_decode_num_accepted_tokens_total")
    assert drafts == 3 * value(f, "vllm:spec_decode_num_drafts_total") and 0 < accepted < drafts
    # the simulated H100: memory adds up to 80 GiB, power between idle and TDP, energy grows
    gpu = {"gpu": "0", "modelName": "NVIDIA H100 SXM 80GB"}
    used, free = value(f, "DCGM_FI_DEV_FB_USED", **gpu), value(f, "DCGM_FI_DEV_FB_FREE", **gpu)
    assert abs(used + free - 80 * 1024) <= 1 and used > 15 * 1024  # 16 GB of bf16 weights
    assert 70 <= value(f_mid, "DCGM_FI_DEV_POWER_USAGE") <= 700
    assert 0 < value(f_mid, "DCGM_FI_PROF_DRAM_ACTIVE") <= 1
    assert value(f, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") > value(
        f_mid, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    )


def test_head_requests_get_headers_only_and_keep_the_connection_usable():
    async def go():
        sim = await start_server(SimConfig(port=0))
        base = sim.url.removesuffix("/v1")
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=5) as c:  # one connection
                out = []
                for path in ("/metrics", "/v1/models", "/health"):
                    h = await c.head(base + path)
                    g = await c.get(base + path)  # the same keep-alive connection
                    out.append((h, g))
                return out
        finally:
            await sim.close()

    for h, g in asyncio.run(go()):
        assert h.status_code == g.status_code == 200 and h.content == b""
        assert int(h.headers["content-length"]) > 0 and g.content
