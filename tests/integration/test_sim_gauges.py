"""The simulated DCGM gauges obey the roofline, as a scraper of /metrics sees them.

Each regime runs the batching engine behind a real server on loopback and reads
``DCGM_FI_PROF_*`` from ``/metrics``; the expected values are the roofline arithmetic
(:func:`abtui.hardware.roofline.step_cost` of the steps the workload implies), not the engine.
A gauge is the average over the last second of the endpoint's clock (``GAUGE_WINDOW_S``), as
DCGM averages over its sampling interval, so each scrape is taken once the window holds only
the regime under test.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from abtui.hardware import roofline
from abtui.sim.engine import SimConfig
from abtui.sim.gpu_model import GAUGE_WINDOW_S, SimulatedGpu
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.presets import parse_preset
from abtui.sim.server import start_server
from tests.integration.test_sim_metrics import parse_prometheus, value

PRESET = "h100:llama-3-8b:bf16"
P = parse_preset(PRESET)
PEAK_FLOPS = P.gpu.flops_for(roofline.matmul_dtype(P.gpu, P.weight_dtype))


def expected(shape: roofline.StepShape) -> dict[str, float]:
    """What DCGM would read during steady steps of ``shape``: MBU, MFU, kernel share."""
    c = roofline.step_cost(P.gpu, P.model, P.weight_dtype, P.kv_dtype, shape, P.tp)
    return {
        "dram": roofline.mbu(c.bytes, c.time, P.gpu),
        "tensor": c.flops / (PEAK_FLOPS * c.time),
        "sm": max(c.t_memory, c.t_compute) / c.time,
        "time": c.time,
    }


def gauges(text: str) -> dict[str, float]:
    f = parse_prometheus(text)
    gpu = {"gpu": "0", "modelName": P.gpu.label}
    return {
        "dram": value(f, "DCGM_FI_PROF_DRAM_ACTIVE", **gpu),
        "tensor": value(f, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", **gpu),
        "sm": value(f, "DCGM_FI_PROF_SM_ACTIVE", **gpu),
        "power": value(f, "DCGM_FI_DEV_POWER_USAGE", **gpu),
        "running": value(f, "vllm:num_requests_running"),
        "prompt": value(f, "vllm:prompt_tokens_total"),
        "generated": value(f, "vllm:generation_tokens_total"),
    }


async def _run(time_scale: float, bodies: list[dict], ready, late: list[dict] | None = None):
    """Serve ``bodies`` at once (and ``late`` ones once ``ready(g) == "late"``); return the
    gauges of the first scrape for which ``ready(g)`` is True."""
    po = PresetOptions(PRESET, time_scale=time_scale)
    sim = await start_server(SimConfig(port=0, preset=po))
    base = sim.url.removesuffix("/v1")
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=60, limits=limits) as c:
            tasks = [
                asyncio.ensure_future(c.post(sim.url + "/completions", json=b)) for b in bodies
            ]
            got = None
            while got is None:
                assert not all(t.done() for t in tasks), "the workload ended before the scrape"
                g = gauges((await c.get(base + "/metrics")).text)
                state = ready(g)
                if state == "late" and late:
                    tasks += [
                        asyncio.ensure_future(c.post(sim.url + "/completions", json=b))
                        for b in late
                    ]
                    late = None
                elif state is True:
                    got = g
                await asyncio.sleep(0.005)
            done = await asyncio.gather(*tasks)
    finally:
        await sim.close()
    assert all(r.status_code == 200 for r in done)
    return got


def test_decode_heavy_reads_memory_bound_at_the_steps_mbu():
    """16 streams decoding (time scale 4, so the window holds 4 simulated seconds): DRAM at the
    decode step's MBU (tens of percent), tensor activity at its MFU (a few percent)."""
    batch, prompt, out = 16, 32, 1200
    bodies = [{"prompt": f"{i} " + "w " * (prompt - 1), "max_tokens": out} for i in range(batch)]
    step_s = (
        expected(roofline.decode_shape(batch, prompt + out // 2))["time"] / 4
    )  # endpoint seconds
    after = int(1.3 * GAUGE_WINDOW_S / step_s)  # decode steps before the scrape: window full
    assert after < out - 100
    g = asyncio.run(_run(4.0, bodies, lambda g: g["generated"] >= batch * after))
    # the window holds the decode steps of the last second: contexts from about here back
    ctx = prompt + int(g["generated"] // batch)
    want = expected(roofline.decode_shape(batch, ctx - int(GAUGE_WINDOW_S / step_s) // 2))
    assert 0.55 < want["dram"] < 0.7 and want["tensor"] < 0.05  # memory-bound
    assert g["dram"] == pytest.approx(want["dram"], abs=0.015)
    assert g["tensor"] == pytest.approx(want["tensor"], abs=0.005)
    assert g["sm"] == pytest.approx(want["sm"], abs=0.015)
    gpu = P.gpu
    assert g["power"] == pytest.approx(
        gpu.idle_w + (gpu.tdp_w - gpu.idle_w) * want["dram"], rel=0.03
    )


def test_prefill_heavy_reads_compute_bound_at_the_steps_mfu():
    """24 queued 4,096-token prompts (time scale 1): every step is two whole prompts under the
    8,192-token budget: tensor activity at that step's MFU, DRAM a few percent."""
    n, prompt = 24, 4096
    bodies = [{"prompt": f"{i} " + "w " * (prompt - 1), "max_tokens": 1} for i in range(n)]
    shape = roofline.StepShape(
        tokens=2 * prompt,
        sampled=2,
        kv_read=0,
        kv_written=2 * prompt,
        pairs=2 * prompt * (prompt + 1) / 2,
        seqs=2,
    )
    want = expected(shape)
    steps_in = int(1.3 * GAUGE_WINDOW_S / want["time"]) + 1
    assert steps_in < n // 2 - 1
    g = asyncio.run(
        _run(1.0, bodies, lambda g: g["prompt"] >= 2 * prompt * steps_in and g["running"] > 0)
    )
    assert 0.5 < want["tensor"] < 0.65 and want["dram"] < 0.05  # compute-bound
    assert g["tensor"] == pytest.approx(want["tensor"], abs=0.01)
    assert g["dram"] == pytest.approx(want["dram"], abs=0.003)
    assert g["sm"] == pytest.approx(want["sm"], abs=0.01)


def test_a_scrape_inside_a_long_prefill_chunk_reads_the_window_not_the_chunk():
    """The demo's case: a decode-dominated run, scraped while one long prompt's prefill step is
    in flight. The step alone is compute-bound (DRAM a few percent, SM ~100 %); the gauge is
    the last second's average, so it stays near the decode MBU (the prefill is < 1/5 of it)."""
    batch, prompt, long_prompt = 8, 32, 7000
    bodies = [{"prompt": f"{i} " + "w " * (prompt - 1), "max_tokens": 600} for i in range(batch)]
    late = [{"prompt": "long " + "w " * (long_prompt - 1), "max_tokens": 1}]
    dec = expected(roofline.decode_shape(batch, prompt + 200))
    mixed = roofline.StepShape(
        tokens=long_prompt + batch,
        sampled=batch + 1,
        kv_read=batch * 200,
        kv_written=long_prompt + batch,
        pairs=batch * 200 + long_prompt * (long_prompt + 1) / 2,
        seqs=batch + 1,
    )
    chunk = expected(mixed)
    assert chunk["dram"] < 0.1 and chunk["time"] < 0.25 * GAUGE_WINDOW_S
    start = int(1.2 * GAUGE_WINDOW_S / dec["time"])  # decode steps before the long prompt

    def ready(g):
        if g["running"] == batch + 1:
            return True  # the long prompt is admitted: its prefill step is in flight
        return "late" if g["generated"] >= batch * start else False

    g = asyncio.run(_run(1.0, bodies, ready, late))
    assert g["prompt"] == batch * prompt  # the long prompt's step has not ended
    f = chunk["time"] / GAUGE_WINDOW_S  # the most of the window the chunk can hold
    low = (1 - f) * dec["dram"] + f * chunk["dram"]
    assert low - 0.02 <= g["dram"] <= dec["dram"] + 0.02  # was the chunk's own, ~3 %
    assert g["tensor"] <= (1 - f) * dec["tensor"] + f * chunk["tensor"] + 0.02


def test_the_window_averages_busy_and_idle_time():
    """Half a window of steps at a known activity, then half idle: half the activity, power
    halfway between the steps' and idle (DCGM's ratio of cycles over its interval)."""
    gpu = SimulatedGpu(P, time_scale=2.0, fixed_bytes=0.0, window_s=1.0)
    t_sim = 0.01  # simulated seconds per step: 0.005 s of the endpoint's clock at scale 2
    nbytes = 0.5 * P.gpu.mem_bw * t_sim
    flops = 0.1 * PEAK_FLOPS * t_sim
    now = 0.0
    for _ in range(100):  # 0.5 s of steps
        gpu.plan(now, t_sim / 2.0, (nbytes, flops, t_sim, 0.9 * t_sim))
        now += t_sim / 2.0
        gpu.step_done(t_sim)
    busy = gpu.gauges(False, now, 0.0)
    assert (busy["dram_active"], busy["tensor_active"], busy["sm_active"]) == pytest.approx(
        (0.5, 0.1, 0.9)
    )  # the window so far: since the start (t0), all busy
    half = gpu.gauges(False, now + 0.5, 0.0)
    assert (half["dram_active"], half["tensor_active"], half["sm_active"]) == pytest.approx(
        (0.25, 0.05, 0.45)
    )
    g = P.gpu
    p_busy = g.idle_w + (g.tdp_w - g.idle_w) * 0.5
    assert half["power_w"] == pytest.approx((p_busy + g.idle_w) / 2)
    assert busy["power_w"] == pytest.approx(p_busy)
    idle = gpu.gauges(False, now + 1.5, 0.0)
    assert idle["dram_active"] == idle["sm_active"] == 0 and idle["power_w"] == g.idle_w
    # the engine has due steps it has not run (its clock lags): the gap is not idle time
    assert gpu.gauges(True, now + 0.5, 0.0)["dram_active"] == pytest.approx(0.5)
    # a step in flight counts for the part of it already run
    gpu.plan(now + 0.5, 0.5, (P.gpu.mem_bw * 1.0, 0.0, 1.0, 1.0))
    mid = gpu.gauges(True, now + 0.75, 0.0)
    assert mid["dram_active"] == pytest.approx((0.25 * 0.5 + 0.25 * 1.0) / 1.0)
