"""The built-in quality suites on real models served by llama-server (``engine``): SmolLM2-135M-
Instruct answers the suites at their shortest length, through its chat template, with no item
left out by a timeout; Gemma 3 270M (no chat template) is sent plain completions. The full
per-length tables are scripts/quality_calibration.py's (docs/methods.md §4)."""

from __future__ import annotations

import pytest

from abtui.client.stream import Target
from abtui.engine.quality_calibration import calibrate
from abtui.engine.server import LlamaCppServer
from abtui.quality import sizing

pytestmark = pytest.mark.engine

FLOOR = 0.8  # baseline accuracy every suite an A/B on SmolLM2 uses must reach at 1k


@pytest.fixture(autouse=True)
def _engine():
    from engine_fixtures import require_engine

    require_engine()


def test_smollm2_answers_every_suite_at_the_shortest_length(smollm2_gguf):
    cal = calibrate(
        smollm2_gguf,
        name="smollm2",
        lengths=[1024],
        suites=["niah", "keys", "exact"],
        per_cell=2,
        ctx=8192,
    )
    prof = cal.profile
    assert prof.api == "chat" and "has a chat template" in prof.api_why
    assert prof.context == 8192 and 1.0 < prof.tokens_per_word < 1.4  # ~1.14 measured
    assert prof.cost is not None and prof.cost.b > 0
    assert all(c.failed == 0 for c in cal.cells), cal.cells  # nothing lost to a timeout
    for suite in ("niah", "keys", "exact"):
        acc = cal.accuracy(suite)
        assert acc >= FLOOR, (suite, acc, cal.wrong)
    assert {c.task for c in cal.cells} == {"niah", "keys", "copy", "capital"}
    assert {c.bucket for c in cal.cells} == {"1k", "short"}


def test_a_base_model_is_sent_completions_and_an_instruct_model_chat(
    smollm2_gguf, gemma3_270m_gguf
):
    for path, name, api in (
        (gemma3_270m_gguf, "gemma", "completions"),
        (smollm2_gguf, "smollm2", "chat"),
    ):
        with LlamaCppServer(path, name=name, ctx=2048) as srv:
            prof = sizing.probe([Target(base_url=srv.url, model=name)], [name], "auto", timed=False)
        assert prof.api == api, prof.api_why
        assert prof.context == 2048  # llama.cpp's context per slot
