"""`abtui sim predict`: the roofline table agrees with the engine it describes."""

from __future__ import annotations

import statistics

import pytest

from abtui.cli import main
from abtui.sim.batching import BatchEngine
from abtui.sim.offline import simulate
from abtui.sim.predict import expected_tokens, predict
from abtui.sim.presets import parse_preset


@pytest.mark.parametrize(
    "name", ["h100:llama-3-8b:bf16", "h200:llama-3-70b:fp8:tp=2", "l40s:qwen2.5-7b:int4:kv=fp8"]
)
def test_predicted_tpot_matches_the_engine_at_the_same_batch_and_context(name):
    preset = parse_preset(name)
    for batch in (1, 16):
        (row,), _, _ = predict(preset, [batch], 1000)
        # steady decode of batch sequences around 1000 tokens of context: the extra time of
        # 40 more tokens each (the prefill steps cancel out)
        a = simulate(BatchEngine(preset), [(0.0, 980, 2)] * batch)
        b = simulate(BatchEngine(preset), [(0.0, 980, 42)] * batch)
        tpot = statistics.median((y.finished - x.finished) / 40 for x, y in zip(a, b, strict=True))
        assert tpot == pytest.approx(row.tpot_s, rel=0.03)


def test_speculative_tpot_floor_uses_the_expected_accepted_tokens():
    assert expected_tokens(0, 0.9) == 1 and expected_tokens(3, 1.0) == 4
    assert expected_tokens(4, 0.7) == pytest.approx(2.7731)
    preset = parse_preset("h100:llama-3-8b:bf16:spec=k4a0.7")
    (row,), _, _ = predict(preset, [1], 500)
    res = simulate(BatchEngine(preset), [(0.0, 480, 401)] * 4)
    (four,), _, _ = predict(preset, [4], 680)  # the mean context over the decode
    assert statistics.median(r.tpot for r in res) == pytest.approx(four.tpot_s, rel=0.1)
    assert row.step_s / row.tpot_s == pytest.approx(2.7731, rel=1e-3)


def test_bound_mbu_mfu_and_kv_fit():
    rows, cap, prefill = predict(parse_preset("h100:llama-3-8b:fp8"), [1, 4096], 16)
    assert rows[0].bound == "memory" and rows[1].bound == "compute"
    assert rows[0].mbu > 0.5 and rows[0].mfu < 0.01 and rows[1].mfu > 0.3
    assert rows[0].fits and rows[1].fits == (4096 * 16 <= cap)
    assert prefill.bound == "memory"  # 16 tokens: the weights dominate


def test_cli_prints_the_table(capsys):
    rc = main(
        [
            "sim",
            "predict",
            "--preset",
            "h100:llama-3-8b:bf16",
            "--batch",
            "1,64",
            "--context",
            "2048",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "TPOT ms" in out and "bound" in out and "MBU" in out and "KV capacity" in out
    lines = [ln.split() for ln in out.splitlines() if ln.split() and ln.split()[0] in ("1", "64")]
    assert [ln[5] for ln in lines] == ["memory", "memory"]
    assert "prefill of one 2048-token prompt" in out and "compute-bound" in out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--batch", "1,x"], "--batch"),
        (["--context", "0"], "--context"),
        (["--gpu-mem-util", "2"], "--gpu-mem-util"),
    ],
)
def test_cli_bad_input_is_exit_2(argv, needle, capsys):
    assert main(["sim", "predict", "--preset", "h100:llama-3-8b:bf16", *argv]) == 2
    assert needle in capsys.readouterr().err
