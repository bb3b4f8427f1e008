"""Suite-wide collection rules.

The suite is in five folders: ``unit/`` (functions and files, no server), ``integration/`` (real
processes and servers over loopback: the client, the simulator, whole runs, Ray), ``tui/`` (the
Textual app through ``run_test()``), ``engine/`` (llama.cpp's llama-server and vLLM on real and
tiny models), ``calibration/`` (the statistics against known truth, Monte-Carlo).

Markers say how a test must run. ``serial``: it asserts on wall-clock gaps of a few milliseconds
(client timestamps against a scripted server's sleeps, the generator's schedule lag, TTFT
against a configured delay, the writer's commit interval under SIGKILL), a module's
``pytestmark`` or a single test's mark says so. ``.ci/run`` runs the rest on two pytest-xdist
workers (``-m "not serial"``), then the ``serial`` ones alone (``-m serial``), so that a second
worker's CPU load never lands in those measurements. ``slow``: a Monte-Carlo calibration of
20 s or more; ``pytest -m "not slow"`` is the quick set (README). A plain ``pytest`` runs
everything, in one process.

Tests marked ``vllm`` need vLLM (the ``vllm`` extra): they skip without it, unless
``ABTUI_REQUIRE_VLLM=1`` (``.ci/run``) makes that a failure (:func:`pytest_runtest_setup`).

``smollm2_gguf`` and ``gemma3_270m_gguf`` are the real models' GGUF paths
(``abtui engine fetch``), fetched once per session: see ``engine_fixtures.real_model``.
"""

from __future__ import annotations

import pytest


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A ``vllm`` test skips where this interpreter cannot run vLLM (the ``vllm`` extra), and
    fails instead under ``ABTUI_REQUIRE_VLLM=1`` (``.ci/run``)."""
    if item.get_closest_marker("vllm") is not None:
        from engine_fixtures import require_vllm

        require_vllm()


@pytest.fixture(scope="session")
def smollm2_gguf():
    """SmolLM2-135M-Instruct Q4_1 (98 MB, chat template, 8k context): its cached GGUF's path."""
    from engine_fixtures import real_model

    return real_model("smollm2")


@pytest.fixture(scope="session")
def gemma3_270m_gguf():
    """Gemma 3 270M Q4_K_M (253 MB, base model: no chat template, 32k context)."""
    from engine_fixtures import real_model

    return real_model("gemma3-270m")
