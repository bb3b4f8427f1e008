"""Perplexity on llama.cpp through its own ``llama-perplexity`` (abtui.engine.perplexity), on the
real SmolLM2: llama-server scores no prompt, so this is the engine-side PPL the A/Bs report.

Marked ``engine``: skips without the binaries or the model unless ``ABTUI_REQUIRE_ENGINE=1``.
A short slice of the fixed text and 128-token chunks keep each run to a few seconds."""

from __future__ import annotations

import pytest
from engine_fixtures import require_engine

from abtui.engine.perplexity import compare, perplexity
from abtui.engine.ppl_text import PPL_TEXT
from abtui.engine.tinymodel import EngineError

pytestmark = pytest.mark.engine

SLICE = " ".join(PPL_TEXT.split()[:300])  # ~380 SmolLM2 tokens: two 128-token chunks and more
FA = ("-fa", "on")


@pytest.fixture(scope="module")
def model(smollm2_gguf):
    require_engine()
    return smollm2_gguf


def test_the_paired_mode_sees_nothing_between_equal_arms_and_kv_q4_damage(model):
    same = compare(
        model,
        model,
        base_args=FA,
        cand_args=FA + ("-ctk", "f16", "-ctv", "f16"),
        ctx=128,
        text=SLICE,
    )
    assert same.base.chunks == same.cand.chunks == 2 and same.base.tokens == 2 * 63
    assert same.cand.ppl == pytest.approx(same.base.ppl, rel=1e-6)
    # (the saved distributions are stored as 16-bit values: equal to ~1e-5, not exactly)
    assert same.ratio == pytest.approx(1.0, abs=1e-4) and same.kld < 1e-4
    assert same.same_top == 1.0
    q4 = compare(
        model,
        model,
        base_args=FA,
        cand_args=FA + ("-ctk", "q4_0", "-ctv", "q4_0"),
        ctx=128,
        text=SLICE,
    )
    assert q4.base.ppl == same.base.ppl  # the baseline is deterministic
    assert q4.kld > 1e-3 and q4.same_top < 0.99 and q4.ratio_err > 0
    assert q4.cand.ppl == pytest.approx(q4.ratio * q4.base.ppl, rel=1e-3)
    assert "llama-perplexity" in q4.cand.argv[0] and "--kl-divergence" in q4.cand.argv


def test_a_text_too_short_for_the_context_is_named(model):
    with pytest.raises(
        EngineError,
        match=r"the text is \d+ tokens for .*: a 512-token context "
        r"needs at least 1024",
    ):
        perplexity(model, ctx=512, text=SLICE)
