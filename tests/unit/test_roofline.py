"""`abtui roofline`: floors checked against hand-computed cases (docs/methods.md §5)."""

import pytest

from abtui.cli import main
from abtui.hardware import roofline
from abtui.hardware.gpus import get_gpu
from abtui.hardware.models import get_model
from abtui.hardware.table import roofline_rows

H100 = get_gpu("h100-sxm")
LLAMA = get_model("llama-3-8b")
BW = 3.35e12

# Llama-3-8B by hand: 32 layers, d 4096, 32 query / 8 KV heads of 128, MLP 14336, vocab 128256
LAYER = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
LINEAR = 32 * LAYER + 4096
EMBED = 128256 * 4096


def test_hand_computed_llama3_8b_bf16_on_h100():
    assert LINEAR + 2 * EMBED == 8_030_261_248  # the published parameter count
    kv = 2 * 32 * 8 * 128 * 2
    assert kv == 128 * 1024 == roofline.kv_bytes_per_token(LLAMA, "bf16")
    # W = N * 2 bytes = 16.06 GB; read once at 3.35 TB/s: ≈ 4.8 ms per token
    assert roofline.weight_bytes(LLAMA, "bf16") / BW == pytest.approx(4.79e-3, abs=0.01e-3)
    # the table's floor at batch 1, context 2048: the streamed weights (layers + LM head, the
    # embedding table is only indexed) and the KV of 2048 cached tokens + the new one
    (row,) = roofline_rows(H100, LLAMA, "bf16", "bf16", [1], 2048)
    by_hand = (2 * (LINEAR + EMBED) + kv * 2049) / BW
    assert by_hand == pytest.approx(4.561e-3, abs=0.001e-3)
    assert row.tpot_floor_s == pytest.approx(by_hand, rel=1e-9)
    assert row.bound == "memory" and row.kv_fits
    # prefill of 2048 tokens: compute-bound; 2 * linear * P + LM head for one token
    # + 4 * L * d_q * P(P+1)/2 causal pairs, at 989 TFLOP/s
    flops = 2 * LINEAR * 2048 + 2 * EMBED + 4 * 32 * 4096 * 2048 * 2049 / 2
    assert row.ttft_floor_s == pytest.approx(flops / 989e12, rel=1e-9)
    assert row.ttft_floor_s == pytest.approx(30.0e-3, abs=0.05e-3)


def test_fp8_weights_halve_the_layers_bytes_and_use_fp8_peak():
    (row,) = roofline_rows(H100, LLAMA, "fp8", "bf16", [1], 2048)
    by_hand = (LINEAR * 1 + EMBED * 2 + 128 * 1024 * 2049) / BW  # LM head stays BF16
    assert row.tpot_floor_s == pytest.approx(by_hand, rel=1e-9)
    flops = 2 * LINEAR * 2048 + 2 * EMBED + 4 * 32 * 4096 * 2048 * 2049 / 2
    assert row.ttft_floor_s == pytest.approx(flops / 1979e12, rel=1e-9)


def test_large_batches_become_compute_bound_on_prefill_not_on_decode():
    rows = roofline_rows(H100, LLAMA, "bf16", "bf16", [1, 64, 4096], 2048)
    assert [r.bound for r in rows[:2]] == ["memory", "memory"]
    assert rows[1].intensity == pytest.approx(rows[1].flops / rows[1].bytes)
    assert not rows[2].kv_fits  # 4096 x 2048 tokens of KV do not fit in 80 GB


def test_cli_prints_the_table_and_rejects_bad_input(capsys):
    argv = [
        "roofline",
        "--gpu",
        "h100-sxm",
        "--model",
        "llama-3-8b",
        "--dtype",
        "fp8",
        "--batch",
        "1,8,64",
        "--context",
        "2048",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "KV cache 128 KiB per token" in out and "ridge point 591 FLOP/byte" in out
    lines = [ln.split() for ln in out.splitlines() if ln.strip().startswith(("1 ", "8 ", "64 "))]
    assert [ln[0] for ln in lines] == ["1", "8", "64"]
    assert lines[0][5:7] == ["2.48", "ms"]
    for bad, msg in (
        (["--dtype", "fp4"], "unknown dtype 'fp4'"),
        (["--gpu", "h1000"], "unknown GPU 'h1000'"),
        (["--batch", "0"], "--batch '0' is invalid"),
        (["--context", "0"], "--context 0 is invalid"),
    ):
        args = list(argv)
        k = args.index(bad[0])
        args[k + 1] = bad[1]
        assert main(args) == 2
        assert msg in capsys.readouterr().err
    assert main(["roofline", "--gpu", "h100"]) == 2
    assert "give --model NAME or --model-config FILE" in capsys.readouterr().err


def test_a_hugging_face_config_gives_the_presets_figures(tmp_path, capsys):
    import json

    cfg = {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    common = ["roofline", "--gpu", "h100-sxm", "--batch", "1,64", "--context", "2048"]
    assert main([*common, "--model", "llama-3-8b"]) == 0
    preset = capsys.readouterr().out.splitlines()
    assert main([*common, "--model-config", str(path)]) == 0
    custom = capsys.readouterr().out.splitlines()
    assert preset[1:] == custom[1:]  # only the title names the model differently
    assert main([*common, "--model-config", str(tmp_path / "missing.json")]) == 2
    assert "cannot read the model config" in capsys.readouterr().err
