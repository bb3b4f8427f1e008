"""Prefix caching off vs on for multi-turn conversations on llama.cpp's llama-server, through
``abtui run --conversations`` (:mod:`abtui.engine.conversation_ab`): SmolLM2-135M-Instruct,
5 conversations of 4 turns sharing a system prompt, ``--no-cache-prompt`` against prompt
caching with its slots taken by LRU (so a conversation's history comes back from the
host-memory prompt cache). The hit rates come from both sides: each response's
``usage.prompt_tokens_details.cached_tokens`` and ``timings.cache_n``, and the servers'
``llamacpp:prompt_tokens_cached_total``; figures and the script in docs/engine.md.

Marked ``engine``: skips without llama-server unless ``ABTUI_REQUIRE_ENGINE=1`` (``.ci/run``).
"""

from __future__ import annotations

import pytest
from engine_fixtures import real_model, require_engine

from abtui.engine.conversation_ab import (
    LLAMACPP,
    LLAMACPP_WORKLOAD,
    llamacpp_servers,
    run_conversation_ab,
)
from abtui.store.reader import SessionReader
from abtui.telemetry.prefix_cache import USAGE

pytestmark = pytest.mark.engine

BASE, CAND = (a.name for a in LLAMACPP)
TURNS = LLAMACPP_WORKLOAD.turns


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    require_engine()
    model = real_model("smollm2")
    folder = tmp_path_factory.mktemp("prefix-conv")
    with llamacpp_servers(model, folder) as arms:
        yield run_conversation_ab(arms, LLAMACPP_WORKLOAD, folder)


def test_every_turn_answered_and_paired(result):
    assert result.problems == [], result.problems
    n = LLAMACPP_WORKLOAD.conversations * TURNS
    for arm in (BASE, CAND):
        s = result.report["summaries"][arm]
        assert s["ok"] == s["sent"] == n, s
    ttft = result.effect("ttft.p50")
    assert ttft is not None and ttft["paired"] == n, ttft


def test_hit_rates_from_the_responses_rise_with_the_turn_on_the_caching_arm(result):
    """Per turn, from the responses: nothing cached without the prompt cache; with it, turn 0
    reuses the shared system prompt (but the first conversation's), and each later turn the
    whole earlier history, so the share rises with the turn."""
    base, cand = result.responses(BASE), result.responses(CAND)
    # llama-server's usage says cached_tokens (abtui reads it before timings.cache_n)
    assert base["source"] == cand["source"] == USAGE
    assert base["cached_tokens"] == 0 and base["prompt_tokens"] > 0
    assert [t["turn"] for t in base["turns"]] == list(range(TURNS))
    assert all(t["cached_tokens"] == 0 for t in base["turns"])
    rates = [t["hit_rate"] for t in cand["turns"]]
    assert [t["turn"] for t in cand["turns"]] == list(range(TURNS))
    assert 0.2 < rates[0] < rates[1], rates
    assert all(r > 0.6 for r in rates[1:]), rates
    assert rates[-1] > rates[1], rates  # the history is a larger share of a longer prompt
    assert cand["prompt_tokens"] == base["prompt_tokens"]  # the same bytes on both arms


def test_usage_and_timings_agree_request_by_request(result):
    """Both response fields llama-server fills: ``usage.prompt_tokens_details.cached_tokens``
    and ``timings.cache_n`` (with ``prompt_n`` the tokens it computed) say the same."""
    with SessionReader(result.session) as rd:
        rows = rd.query(
            "SELECT r.arm, r.cached_tokens, t.cache_n, t.prompt_n, r.n_input FROM requests r "
            "JOIN server_timings t ON t.req = r.req WHERE NOT r.warmup AND r.status = 'ok'"
        )
    assert len(rows) == 2 * LLAMACPP_WORKLOAD.conversations * TURNS
    for arm, cached, cache_n, prompt_n, n_input in rows:
        assert cached == cache_n, (arm, cached, cache_n)
        assert cache_n + prompt_n == n_input  # the usage's prompt_tokens
    assert {c for a, c, *_ in rows if a == 0} == {0}


def test_server_counters_say_what_the_responses_say(result):
    """The servers' own ``llamacpp:prompt_tokens_cached_total`` over the run (the warm-up
    included, which found nothing to reuse): exactly the responses' cached tokens; and
    abtui's scrape, in the report's ``prefix_cache`` key and the diagnosis, agrees."""
    assert result.delta(BASE, "prompt_cached_tokens") == 0
    assert result.delta(CAND, "prompt_cached_tokens") == result.responses(CAND)["cached_tokens"]
    assert result.server_hit_rate(BASE) == 0
    assert abs(result.server_hit_rate(CAND) - result.responses(CAND)["hit_rate"]) < 0.05
    pc = result.report["prefix_cache"]["arms"]
    assert pc[BASE]["server"]["hit_rate"] == 0
    assert pc[CAND]["server"]["hit_rate"] > 0.5, pc[CAND]["server"]
    assert pc[CAND]["server"]["source"] == "llamacpp prompt_tokens_cached"
    lines = {d["name"]: " ".join(d["lines"]) for d in result.report["diagnosis"]}
    assert "prefix cache: hit 0.0%" in lines[BASE]
    assert "prefix cache: hit" in lines[CAND] and "by turn 0:" in lines[CAND]


def test_ttft_falls_on_the_later_turns(result):
    """The verdict's paired TTFT P50 falls with the cache, and so does each later turn's
    median; the report splits the caching arm's TTFT by cached share."""
    ttft = result.effect("ttft.p50")
    assert ttft["hi"] < -0.3, ttft
    by = {arm: {t.turn: t.ttft_p50_s for t in result.turns[arm]} for arm in (BASE, CAND)}
    for k in range(1, TURNS):
        assert by[CAND][k] < by[BASE][k], (k, by)
    split = result.responses(CAND)["ttft_p50_s"]
    assert split["n_cached"] >= LLAMACPP_WORKLOAD.conversations * (TURNS - 1)
    base_split = result.responses(BASE)["ttft_p50_s"]
    assert base_split["n_cached"] == 0
    assert split["cached"] < base_split["uncached"]
