"""The simulator's profiler over loopback: ``/start_profile``, load, ``/stop_profile``, then
``abtui profile show`` on the trace it wrote.

The expected shares are the roofline's arithmetic (:func:`abtui.hardware.roofline.step_cost`)
of the steps the trace's own vLLM-style annotations count, not the engine's: each step's
weights time (the streamed weight bytes over the effective bandwidth when memory-bound, the
linear layers' FLOPs over the effective FLOP rate when compute-bound) against its whole time.
"""

from __future__ import annotations

import asyncio
import gzip
import json

import httpx
import pytest

from abtui.cli import main
from abtui.errors import UsageError
from abtui.hardware import roofline
from abtui.profile.phases import vllm_counts, vllm_phase
from abtui.sim.cli_args import config_to_argv
from abtui.sim.engine import SimConfig
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.presets import parse_preset
from abtui.sim.profiler import ProfilerConfig, parse_profiler_config
from abtui.sim.server import start_server

BF16, FP8 = "h100:llama-3-8b:bf16", "h100:llama-3-8b:fp8"
BODY = {"prompt": " ".join(["word"] * 400), "max_tokens": 40, "ignore_eos": True}


async def _profiled(preset: str, folder, n: int = 8, time_scale: float = 4.0) -> str:
    """Serve ``n`` requests at once between /start_profile and /stop_profile; the trace."""
    cfg = SimConfig(
        port=0,
        preset=PresetOptions(preset, time_scale=time_scale),
        profiler=ProfilerConfig(str(folder), detailed=True),
    )
    sim = await start_server(cfg)
    base = sim.url.removesuffix("/v1")
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=60) as c:
            assert (await c.post(base + "/stop_profile")).status_code == 400  # not running
            assert (await c.post(base + "/start_profile")).status_code == 200
            assert (await c.post(base + "/start_profile")).status_code == 400  # running
            got = await asyncio.gather(
                *[c.post(sim.url + "/completions", json=BODY) for _ in range(n)]
            )
            assert all(r.status_code == 200 for r in got)
            r = await c.post(base + "/stop_profile")
            assert r.status_code == 200
            return r.json()["trace"]
    finally:
        await sim.close()


def _expected(trace: str, preset: str) -> dict[str, dict[str, float]]:
    """Per phase, from the roofline of each annotated step: time per step, the weights'
    (GEMM/GEMV) share of the phase's time and the fixed overhead's (idle) share."""
    p = parse_preset(preset)
    eff = roofline.Efficiency()
    doc = json.loads(gzip.decompress(open(trace, "rb").read()))
    sums: dict[str, list[float]] = {}
    for ev in doc["traceEvents"]:
        if ev.get("cat") != "user_annotation" or not (phase := vllm_phase(ev["name"])):
            continue
        c = vllm_counts(ev["name"])
        tokens = c.context_tokens + c.generation_tokens
        shape = roofline.StepShape(
            tokens=tokens,
            sampled=c.generation_reqs + c.context_reqs,
            kv_read=c.context_seq_len - c.context_tokens + c.generation_seq_len - tokens,
            kv_written=tokens,
            pairs=c.context_pairs + c.generation_pairs,
            seqs=c.context_reqs + c.generation_reqs,
        )
        cost = roofline.step_cost(p.gpu, p.model, p.weight_dtype, p.kv_dtype, shape, p.tp, eff)
        if cost.bound == "memory":
            weights = roofline.streamed_weight_bytes(p.model, p.weight_dtype) / (
                p.gpu.mem_bw * eff.bw
            )
        else:
            peak = p.gpu.flops_for(roofline.matmul_dtype(p.gpu, p.weight_dtype)) * eff.flops
            linear = 2 * p.model.linear_params() * tokens
            weights = (linear + 2 * p.model.lm_head_params() * shape.sampled) / peak
        s = sums.setdefault(phase, [0, 0.0, 0.0, 0.0])
        s[0] += 1
        s[1] += cost.time
        s[2] += weights
        s[3] += eff.step_overhead_s
    return {
        ph: {"per_step_us": t / n * 1e6, "gemm": w / t, "idle": o / t}
        for ph, (n, t, w, o) in sums.items()
    }


def _show(capsys, *argv: str) -> dict:
    assert main(["profile", "show", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_trace_agrees_with_the_roofline_and_bounds_fp8(tmp_path, capsys):
    a = asyncio.run(_profiled(BF16, tmp_path / "bf16"))
    b = asyncio.run(_profiled(FP8, tmp_path / "fp8"))
    assert a.startswith(str(tmp_path / "bf16")) and a.endswith(".pt.trace.json.gz")
    doc = _show(capsys, f"bf16={a}", f"fp8={b}", "--optimises", "gemm", "--factor", "2")
    expect = _expected(a, BF16)
    phases = doc["profiles"][0]["phases"]
    assert {"prefill", "decode"} <= set(phases) and phases["decode"]["steps"] >= 30
    for name, want in expect.items():
        ph = phases[name]
        wall = sum(ph["busy_us"].values()) + ph["idle_us"]
        assert ph["per_step_us"] == pytest.approx(want["per_step_us"], rel=0.02), name
        assert ph["busy_us"]["gemm"] / wall == pytest.approx(want["gemm"], abs=0.02), name
        assert ph["idle_us"] / wall == pytest.approx(want["idle"], abs=0.02), name
    dec = phases["decode"]
    assert dec["share_of_busy"]["gemm"] > 0.9 and dec["share_of_busy"]["attention"] > 0.01
    # the Amdahl line for the FP8 candidate: GEMV's share of decode, and what FP8 measured
    [line] = [x for x in doc["amdahl"] if x["phase"] == "decode"]
    assert line["share"] == pytest.approx(expect["decode"]["gemm"], abs=0.02)
    assert line["bound_if_free"] == pytest.approx(1 / (1 - line["share"]), rel=1e-4)
    assert 1.3 < line["measured"] < line["bound_if_free"] and not line["exceeds_bound"]
    fp8 = doc["profiles"][1]["phases"]["decode"]
    assert fp8["per_step_us"] == pytest.approx(_expected(b, FP8)["decode"]["per_step_us"], rel=0.02)


async def _unwritable(folder) -> tuple:
    cfg = SimConfig(port=0, preset=PresetOptions(BF16), profiler=ProfilerConfig(str(folder)))
    sim = await start_server(cfg)
    try:
        async with httpx.AsyncClient(trust_env=False, base_url=sim.url[:-3]) as c:
            start = (await c.post("/start_profile")).status_code
            stop = await c.post("/stop_profile")
            bad = (await c.post("/start_profile", content=b'{"max_iterations": -1}')).status_code
            again = (await c.post("/start_profile")).status_code
            return start, stop.status_code, stop.json()["error"]["message"], bad, again
    finally:
        await sim.close()


def test_profiler_routes_and_options(tmp_path):
    async def run() -> tuple[int, int]:
        sim = await start_server(SimConfig(port=0, preset=PresetOptions(BF16)))
        try:
            async with httpx.AsyncClient(trust_env=False) as c:
                base = sim.url.removesuffix("/v1")
                return (
                    (await c.post(base + "/start_profile")).status_code,
                    (await c.post(base + "/stop_profile")).status_code,
                )
        finally:
            await sim.close()

    assert asyncio.run(run()) == (404, 404)  # no --profiler-config: no route, as on vLLM
    (tmp_path / "file").write_text("")
    got = asyncio.run(_unwritable(tmp_path / "file" / "traces"))
    assert got[0] == 200 and got[1] == 500 and "cannot write the trace" in got[2]
    assert got[3:] == (400, 200)  # a bad body; then the failed stop left it stopped
    text = json.dumps({"profiler": "torch", "torch_profiler_dir": str(tmp_path), "x": 1})
    cfg = parse_profiler_config(text)
    assert cfg.torch_profiler_dir == str(tmp_path) and cfg.use_gzip and not cfg.detailed
    argv = config_to_argv(SimConfig(preset=PresetOptions(BF16), profiler=cfg))
    assert parse_profiler_config(argv[argv.index("--profiler-config") + 1]) == cfg
    for bad, word in (
        ("{", "not JSON"),
        ('{"profiler": "cuda", "torch_profiler_dir": "/x"}', "cuda"),
        ('{"profiler": "torch"}', "torch_profiler_dir"),
        ('{"profiler": "torch", "torch_profiler_dir": "/x", "max_iterations": -1}', "max_iter"),
    ):
        with pytest.raises(UsageError, match=word):
            parse_profiler_config(bad)
    with pytest.raises(UsageError, match="needs --preset"):
        SimConfig(profiler=cfg).validate()
