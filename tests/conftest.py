"""Suite-wide collection rules.

Some modules assert on wall-clock gaps of a few milliseconds: client timestamps against a
scripted server's sleeps, the generator's schedule lag, TTFT against a configured delay, the
session writer's commit interval under SIGKILL. Those are marked ``serial``: the whole modules
below, and single tests elsewhere with ``@pytest.mark.serial`` (test_sim's TTFT/ITL timing,
test_sim_preset's live decode pace). ``.ci/run`` runs the
rest of the suite on two pytest-xdist workers (``-m "not serial"``), then the ``serial`` ones
alone (``-m serial``), so that a second worker's CPU load never lands in those measurements.
A plain ``pytest`` run still runs everything, in one process.

Tests marked ``vllm`` need vLLM (the ``vllm`` extra): they skip without it, unless
``ABTUI_REQUIRE_VLLM=1`` (``.ci/run``) makes that a failure (:func:`pytest_runtest_setup`).

``smollm2_gguf`` and ``gemma3_270m_gguf`` are the real models' GGUF paths
(``abtui engine fetch``), fetched once per session: see ``engine_fixtures.real_model``.
"""

from __future__ import annotations

import pytest

SERIAL_MODULES = frozenset(
    {
        "test_client_streams.py",  # chunk gaps of 4–35 ms against a scripted server's sleeps
        "test_durability.py",  # what a SIGKILL loses: the 0.5 s commit interval
        "test_generator_health.py",  # schedule lag of healthy and starved generators
        "test_ray.py",  # a 3-node Ray cluster on the 2 cores; the local and Ray runs' effects agree
        "test_run_e2e.py",  # TTFT within 10 ms of the configured delay; lag under 10 ms
        "test_verdict_e2e.py",  # GO needs a generator that kept its schedule
        "test_workload_run.py",  # replay lag; a closed loop's duration cut
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)


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
