"""The preset grammar: GPU:MODEL:WEIGHTS[:kv=..][:tp=..][:spec=kKaA]."""

from __future__ import annotations

import json

import pytest

from abtui.cli import main
from abtui.errors import UsageError
from abtui.sim.batching import BatchEngine
from abtui.sim.offline import simulate
from abtui.sim.presets import parse_preset


@pytest.mark.parametrize(
    "text,name",
    [
        ("h100:llama-3-8b:fp8", "h100-sxm:llama-3-8b:fp8"),
        ("H200:Llama-3-70B:BF16:tp=4", "h200:llama-3-70b:bf16:tp=4"),
        ("h100:llama3-8b:bf16:spec=k4a0.7", "h100-sxm:llama-3-8b:bf16:spec=k4a0.7"),
        ("l40s:mistral-7b:int4:kv=fp8", "l40s:mistral-7b:int4:kv=fp8"),
        (
            "a100:qwen2.5-7b:bf16:spec=k2a.5:kv=fp8:tp=2",
            "a100-80gb:qwen2.5-7b:bf16:kv=fp8:tp=2:spec=k2a0.5",
        ),
    ],
)
def test_presets_parse_to_a_canonical_name_that_parses_back(text, name):
    p = parse_preset(text)
    assert p.name == name and parse_preset(p.name) == p


def test_fields_of_a_preset():
    p = parse_preset("h200:llama-3-70b:fp8:kv=fp8:tp=2:spec=k3a0.6")
    assert (p.gpu.name, p.model.name, p.weight_dtype, p.kv_dtype) == (
        "h200",
        "llama-3-70b",
        "fp8",
        "fp8",
    )
    assert (p.tp, p.spec_k, p.spec_alpha) == (2, 3, 0.6)


@pytest.mark.parametrize(
    "text,needle,hint",
    [
        ("h999:llama-3-8b:bf16", "unknown GPU 'h999'", "h100-sxm"),
        ("h100:llama-9:bf16", "unknown model 'llama-9'", "llama-3-8b"),
        ("h100:llama-3-8b:fp4", "unknown weight dtype 'fp4'", "bf16/fp8/int4"),
        ("h100:llama-3-8b:bf16:kv=int8", "unknown KV dtype", "bf16/fp8"),
        ("h100:llama-3-8b:bf16:tp=3", "tp='3' is invalid", "tp=1, 2, 4 or 8"),
        ("h100:llama-3-8b:bf16:spec=k4", "spec='k4' is invalid", "spec=kKaA"),
        ("h100:llama-3-8b:bf16:spec=k4a1.5", "spec='k4a1.5' is invalid", "0..1"),
        ("h100:llama-3-8b:bf16:tp=2:tp=4", "repeated option 'tp'", "at most once"),
        ("h100:llama-3-8b:bf16:foo=1", "unknown option 'foo'", "kv=, tp= and spec="),
        ("h100:llama-3-8b", "needs at least GPU:MODEL:WEIGHTS", "h100:llama-3-8b:bf16"),
        ("h100:qwen2.5-7b:bf16:tp=8", "does not divide the model's 28", "smaller tp"),
    ],
)
def test_bad_presets_say_what_is_wrong_and_list_the_choices(text, needle, hint):
    with pytest.raises(UsageError) as err:
        parse_preset(text)
    assert needle in err.value.message and text in err.value.message
    assert hint in err.value.hint


def test_a_custom_model_from_a_config_file(tmp_path, capsys):
    cfg = {
        "num_hidden_layers": 16,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 8192,
        "vocab_size": 128256,
        "tie_word_embeddings": True,
        "max_position_embeddings": 131072,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    p = parse_preset("l4:my-1b:bf16", model_config=str(path))
    assert p.name == "l4:my-1b:bf16" and p.model.head_dim == 64
    assert p.model.param_count() == parse_preset("l4:llama-3.2-1b:bf16").model.param_count()
    res = simulate(BatchEngine(p), [(0.0, 100, 10)])
    assert res[0].tokens == 10
    assert main(["sim", "predict", "--preset", "l4:my-1b:bf16", "--model-config", str(path)]) == 0
    assert "l4:my-1b:bf16" in capsys.readouterr().out
    with pytest.raises(UsageError, match="missing.json"):
        parse_preset("l4:my-1b:bf16", model_config=str(tmp_path / "missing.json"))
