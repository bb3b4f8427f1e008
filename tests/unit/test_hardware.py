"""GPU table, model configs and the roofline formulas of docs/methods.md §5."""

from __future__ import annotations

import json
import sys

import pytest

from abtui.errors import UsageError
from abtui.hardware import roofline
from abtui.hardware.gpus import GPUS, get_gpu
from abtui.hardware.models import MODELS, ModelConfigError, get_model, load_hf_config


def test_gpu_table_has_the_methods_peaks_and_aliases():
    h100 = get_gpu("h100")
    assert get_gpu("H100-SXM") is h100 and get_gpu("h100_sxm") is h100
    assert h100.bf16_flops == 989e12 and h100.fp8_flops == 1979e12 and h100.mem_bw == 3.35e12
    assert get_gpu("h200").mem_bw == 4.8e12 and get_gpu("h200").bf16_flops == h100.bf16_flops
    assert get_gpu("a100").fp8_flops is None and get_gpu("a100").flops_for("fp8") == 312e12
    assert get_gpu("l40s").mem_bw == 0.864e12 and get_gpu("l4").mem_bw == 0.3e12
    assert get_gpu("b200").fp8_flops == 4500e12
    assert {g.name for g in GPUS} >= {"h100-sxm", "h200", "a100-80gb", "l40s", "l4", "b200"}
    with pytest.raises(UsageError) as err:
        get_gpu("h800")
    assert "h100-sxm" in err.value.hint


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_param_count_derived_from_the_config_matches_the_published_total(model):
    assert model.known_params is not None
    assert abs(model.param_count() - model.known_params) / model.known_params < 0.005


def test_kv_bytes_per_token_and_decode_time_of_llama3_8b_on_h100():
    m, g = get_model("llama-3-8b"), get_gpu("h100")
    assert roofline.kv_bytes_per_token(m, "bf16") == 128 * 1024
    assert roofline.kv_bytes_per_token(m, "fp8") == 64 * 1024
    assert roofline.kv_bytes_per_token_per_gpu(m, "bf16", tp=2) == 64 * 1024
    # docs/methods.md §5: W = N · 2 bytes ≈ 16 GB; at peak bandwidth ≈ 4.8 ms per token
    assert roofline.weight_bytes(m, "bf16") == m.param_count() * 2
    assert roofline.weight_bytes(m, "bf16") / g.mem_bw == pytest.approx(4.8e-3, rel=0.01)
    peak = roofline.Efficiency(bw=1.0, flops=1.0, step_overhead_s=0, per_seq_overhead_s=0)
    c = roofline.step_cost(g, m, "bf16", "bf16", roofline.decode_shape(1, 1), eff=peak)
    assert c.bound == "memory"
    # the embedding is not streamed per step, so a little under the 4.8 ms of all weights
    assert c.time == pytest.approx(roofline.streamed_weight_bytes(m, "bf16") / g.mem_bw, rel=1e-3)
    assert 4.3e-3 < c.time < 4.8e-3


def test_weight_dtypes_shrink_the_layer_weights_only():
    m = get_model("llama-3-8b")
    bf16, fp8, int4 = (roofline.weight_bytes(m, d) for d in ("bf16", "fp8", "int4"))
    embed_and_head = 2 * m.embedding_params() * 2
    assert fp8 == pytest.approx(m.linear_params() + embed_and_head)
    assert bf16 > fp8 > int4 > embed_and_head
    assert roofline.matmul_dtype(get_gpu("h100"), "fp8") == "fp8"
    assert roofline.matmul_dtype(get_gpu("a100"), "fp8") == "bf16"  # no FP8 tensor cores
    assert roofline.matmul_dtype(get_gpu("h100"), "int4") == "bf16"  # weight-only


def test_prefill_flops_and_bound():
    m, g = get_model("llama-3-8b"), get_gpu("h100")
    p = 4096
    _, flops = roofline.step_bytes_flops(m, "bf16", "bf16", roofline.prefill_shape(p))
    # the step's FLOPs ≈ the whole-prompt 2NP + 2·L·d·P² (the LM head runs once, not P times)
    head = 2 * m.lm_head_params() * (p - 1)
    assert flops == pytest.approx(roofline.prefill_flops(m, p) - head, rel=0.01)
    assert roofline.step_cost(g, m, "bf16", "bf16", roofline.prefill_shape(p)).bound == "compute"
    assert (
        roofline.step_cost(g, m, "bf16", "bf16", roofline.decode_shape(8, 2048)).bound == "memory"
    )


def test_decode_at_large_batch_turns_compute_bound_and_mbu_mfu_are_fractions():
    m, g = get_model("llama-3-8b"), get_gpu("h100")
    small = roofline.step_cost(g, m, "fp8", "fp8", roofline.decode_shape(1, 128))
    big = roofline.step_cost(g, m, "fp8", "fp8", roofline.decode_shape(4096, 128))
    assert small.bound == "memory" and big.bound == "compute"
    assert 0 < roofline.mbu(small.bytes, small.time, g) < 1
    assert 0 < roofline.mfu(big.flops, big.time, g, "fp8") < 1


def test_tensor_parallel_splits_bytes_and_adds_allreduce():
    m, g = get_model("llama-3-70b"), get_gpu("h200")
    one = roofline.step_cost(g, m, "bf16", "bf16", roofline.decode_shape(1, 1024), tp=1)
    four = roofline.step_cost(g, m, "bf16", "bf16", roofline.decode_shape(1, 1024), tp=4)
    assert four.bytes == pytest.approx(one.bytes / 4, rel=1e-6)
    assert one.t_comm == 0 and four.t_comm > 2 * m.layers * 5e-6
    assert four.time < one.time
    # 8 KV heads over tp=8: one each; over tp=16 they would be replicated
    assert (
        roofline.kv_bytes_per_token_per_gpu(m, "bf16", 8)
        == roofline.kv_bytes_per_token(m, "bf16") / 8
    )


def test_kv_capacity_follows_memory_minus_weights():
    m, g = get_model("llama-3-8b"), get_gpu("h100")
    cap = roofline.kv_capacity_tokens(g, m, "bf16", "bf16")
    assert 400_000 < cap < 500_000  # (80 GiB x 0.9 - 16 GB - reserve) / 128 KiB
    assert roofline.kv_capacity_tokens(g, m, "bf16", "fp8") == pytest.approx(2 * cap, rel=0.01)
    assert roofline.kv_capacity_tokens(g, m, "fp8", "bf16") > cap
    assert roofline.kv_capacity_tokens(get_gpu("l4"), get_model("llama-3-70b"), "bf16", "bf16") < 0


def test_load_hf_config(tmp_path):
    cfg = {
        "model_type": "qwen2",
        "num_hidden_layers": 28,
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "max_position_embeddings": 32768,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_hf_config(path, name="my-qwen")
    assert m.name == "my-qwen" and m.head_dim == 128 and m.qkv_bias
    assert m.param_count() == get_model("qwen2.5-7b").known_params
    del cfg["intermediate_size"]
    path.write_text(json.dumps(cfg))
    with pytest.raises(ModelConfigError) as err:
        load_hf_config(path)
    assert "intermediate_size" in err.value.message and str(path) in err.value.message
    path.write_text(json.dumps({**cfg, "intermediate_size": "big"}))
    with pytest.raises(ModelConfigError, match="positive integer"):
        load_hf_config(path)
    path.write_text("{not json")
    with pytest.raises(ModelConfigError, match="not valid JSON"):
        load_hf_config(path)
    with pytest.raises(ModelConfigError, match="cannot read"):
        load_hf_config(tmp_path / "missing.json")


def test_cpu_model_is_the_model_name_the_kernel_reports():
    from pathlib import Path

    from abtui.hardware.host import cpu_model

    name = cpu_model()
    assert name and name.strip() == name
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists() and "model name" in cpuinfo.read_text():
        assert (
            f"model name\t: {name}" in cpuinfo.read_text() or f": {name}\n" in cpuinfo.read_text()
        )


def _fresh_python(code: str, env: dict | None = None) -> str:
    """``code`` run by a new interpreter (allocators in their start state, no
    ``DUCKDB_JE_MALLOC_CONF`` unless ``env`` sets it); its stdout."""
    import os
    import subprocess
    import sys
    import textwrap

    full = {k: v for k, v in os.environ.items() if k != "DUCKDB_JE_MALLOC_CONF"}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**full, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip()


def test_a_run_quiets_duckdbs_allocator_before_duckdb_loads_and_a_report_does_not():
    got = _fresh_python("""
        import os, sys
        from abtui import cli
        assert "duckdb" not in sys.modules  # importing the CLI does not load DuckDB
        cli.main(["report", "/nonexistent/session.duckdb"])  # fails: the report's own error
        print(os.environ.get("DUCKDB_JE_MALLOC_CONF"))
        cli.main(["run", "--headless"])  # no arms: a usage error, after the command is known
        import duckdb  # what DuckDB's jemalloc reads when it loads
        print(os.environ.get("DUCKDB_JE_MALLOC_CONF"))
    """)
    assert got.splitlines()[-2:] == ["None", "dirty_decay_ms:0,muzzy_decay_ms:0"]
    # a user's own setting is kept; once DuckDB is loaded the call says it is too late
    kept = _fresh_python(
        """
        import os
        from abtui.hardware.memory import quiet_duckdb_allocator
        first = quiet_duckdb_allocator()
        import duckdb
        print(first, quiet_duckdb_allocator(), os.environ["DUCKDB_JE_MALLOC_CONF"])
    """,
        env={"DUCKDB_JE_MALLOC_CONF": "dirty_decay_ms:500"},
    )
    assert kept == "True False dirty_decay_ms:500"


_MAPPED = """
    import ctypes
    import numpy as np
    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                    "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    if not hasattr(libc, "mallinfo2"):
        print("no-mallinfo2")
    else:
        libc.mallinfo2.restype = Info
        SETUP
        big = np.ones(4 << 20, dtype=np.uint8)
        del big  # freed: glibc's dynamic threshold rises to 4 MB
        before = libc.mallinfo2().hblkhd
        a = np.ones(1 << 20, dtype=np.uint8)
        print(libc.mallinfo2().hblkhd - before >= (1 << 20))  # mapped on its own
"""
_FIX = "from abtui.hardware.memory import big_arrays_to_the_os; assert big_arrays_to_the_os()"
# what `abtui run` and `abtui demo` go through, the run itself stubbed out
_RUN = (  # a run whose load is no load: no generators, the headless run returns at once
    "import abtui.headless as h; h.run_headless = lambda *a, **k: 0; "
    "import abtui.runner.prestart as p; p.local_generators = lambda spec: False; "
    "from abtui.cli.run import run_and_report; run_and_report(None, '', overwrite=False)"
)


def _mapped(setup: str) -> str:
    import textwrap

    return _fresh_python(textwrap.dedent(_MAPPED).replace("SETUP", setup))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_big_arrays_go_back_to_the_os_after_a_bigger_one_was_freed():
    """By default, once a 4 MB array was freed a 1 MB one comes from the heap (its pages stay
    with the process when it is freed); with the threshold fixed it is mapped on its own, and
    unmapped when freed, and a run's process has it fixed. mallinfo2's ``hblkhd``: the bytes in
    such mappings."""
    runs = [_mapped(setup) for setup in ("pass", _FIX, _RUN)]
    if "no-mallinfo2" in runs:
        pytest.skip("a glibc without mallinfo2")
    assert runs == ["False", "True", "True"]
