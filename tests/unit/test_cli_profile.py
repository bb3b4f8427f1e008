"""``abtui profile show``: text and JSON on fixtures our writer makes, two arms with the Amdahl
line, inert output for hostile kernel names, and bad input as one line with exit code 2."""

from __future__ import annotations

import json

from abtui.cli import main
from abtui.profile.writer import Annotation, Kernel, chrome_trace, write_chrome

DECODE = "execute_context_0(0)_generation_8(8)"


def _trace(path, gemm_us: float, name: str = "gemv_kernel"):
    ks, anns = [], []
    for t0 in (0.0, 100.0):
        anns.append(Annotation(DECODE, t0, 10 + gemm_us))
        ks += [
            Kernel(name, t0 + 2, gemm_us, launch=t0 + 1),
            Kernel("paged_attention_v2_kernel", t0 + 2 + gemm_us, 6, launch=t0 + 1.5),
        ]
    return write_chrome(path, chrome_trace(ks, annotations=anns))


def test_show_two_arms_with_amdahl(tmp_path, capsys):
    a, b = _trace(tmp_path / "a.json.gz", 80), _trace(tmp_path / "b.json.gz", 40)
    rc = main(["profile", "show", f"bf16={a}", f"fp8={b}", "--optimises", "gemm"])
    out = capsys.readouterr().out
    assert rc == 0
    # a: step 90 µs = GEMV 80 + attention 6 + gaps 4; b: 50 = 40 + 6 + 4
    assert "GEMM/GEMV" in out and "93.0 %" in out  # 80 / 86 of busy time
    assert "fp8 against bf16:" in out and "−44.4 %" in out  # 50 / 90 − 1
    assert "decode: 88.9 % of the phase's time → at most ×9.00 if free, ×1.80 if 2× faster" in out
    assert "measured ×1.80 (time / step, fp8 against bf16)" in out


def test_show_json(tmp_path, capsys):
    a = _trace(tmp_path / "a.json", 80)
    rc = main(
        ["profile", "show", str(a), "--optimises", "attention", "--measured", "decode=-5%"]
        + ["--format", "json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    dec = doc["profiles"][0]["phases"]["decode"]
    assert dec["steps"] == 2 and dec["per_step_us"] == 90
    assert dec["busy_us"] == {"gemm": 160, "attention": 12}
    [line] = doc["amdahl"]
    assert line["share"] == round(6 / 90, 6) and line["warning"].startswith("decode: the targeted")
    assert line["measured"] == round(1 / 0.95, 6) and line["measured_from"].startswith("given")


def test_hostile_names_are_shown_inert(tmp_path, capsys):
    a = _trace(tmp_path / "a.json", 80, name="gemm\x1b[2J\x1b]0;pwned\x07\u202e")
    assert main(["profile", "show", str(a)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "gemm\\x1b[2J" in out


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "cut.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1,')
    assert main(["profile", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"abtui: {bad}: line 1, column ") and "Traceback" not in err
    good = _trace(tmp_path / "a.json", 10)
    assert main(["profile", "show", str(good), "--optimises", "gemm,warp_drive"]) == 2
    assert "unknown class warp_drive" in capsys.readouterr().err
    assert main(["profile", "show", str(good), "--measured", "decode=-100%"]) == 2
    assert "cannot fall by 100 %" in capsys.readouterr().err
    assert main(["profile", "show", str(good), "--measured", "tpot=-5%"]) == 2
    assert "expected PHASE=CHANGE%" in capsys.readouterr().err
    assert main(["profile", "show", f"x={good}", f"x={good}"]) == 2
    assert "two profiles named 'x'" in capsys.readouterr().err


def test_a_users_class_table(tmp_path, capsys):
    a = _trace(tmp_path / "a.json", 80, name="my_fp4_kernel")
    table = tmp_path / "classes.toml"
    table.write_text('[profile.classes]\nfp4 = ["fp4"]\n')
    assert main(["profile", "show", str(a), "--classes", str(table), "--optimises", "fp4"]) == 0
    out = capsys.readouterr().out
    assert "fp4" in out and "decode: 88.9 % of the phase's time" in out


def test_the_roofline_cross_check(tmp_path, capsys):
    a = _trace(tmp_path / "a.json", 80)
    rc = main(["profile", "show", str(a), "--gpu", "h100-sxm", "--model", "llama-3-8b"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Roofline (h100-sxm, llama-3-8b, bf16 weights, bf16 KV, tp 1;" in out
    assert "decode (mean of 2 steps: 8 tokens, 16,384 KV entries read): memory-bound" in out
    assert "do not match this trace" in out  # 15 GB of weights in 80 µs
    assert (
        main(
            ["profile", "show", str(a), "--format", "json", "--gpu", "l4", "--model", "qwen2.5-7b"]
        )
        == 0
    )
    [roof] = json.loads(capsys.readouterr().out)["roofline"]
    assert roof["phases"][0]["bound"] == "memory" and roof["phases"][0]["tokens"] == 8
    assert main(["profile", "show", str(a), "--gpu", "h100-sxm"]) == 2
    assert "needs --gpu and one of --model" in capsys.readouterr().err
    assert (
        main(
            [
                "profile",
                "show",
                str(a),
                "--gpu",
                "h100-sxm",
                "--model",
                "llama-3-8b",
                "--dtype",
                "fp3",
            ]
        )
        == 2
    )
    assert "--dtype fp3: not a dtype" in capsys.readouterr().err


def test_one_arm_from_two_ranks_is_their_mean(tmp_path, capsys):
    r0, r1 = _trace(tmp_path / "rank0.json", 80), _trace(tmp_path / "rank1.json", 40)
    assert main(["profile", "show", f"tp2={r0},{r1}", "--format", "json"]) == 0
    [arm] = json.loads(capsys.readouterr().out)["profiles"]
    dec = arm["phases"]["decode"]
    assert arm["name"] == "tp2" and arm["notes"][0] == "the mean of 2 files (ranks)"
    # rank 0: steps of 90 µs (GEMV 80), rank 1: 50 µs (GEMV 40); attention 6 µs on both
    assert dec["steps"] == 2 and dec["per_step_us"] == 70
    assert dec["busy_us"] == {"gemm": 120, "attention": 12}
    assert dec["idle_us"] == 8
    assert dec["top"][0] == {"name": "gemv_kernel", "class": "gemm", "busy_us": 120, "count": 4}
