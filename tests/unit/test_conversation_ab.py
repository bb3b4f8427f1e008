"""abtui.engine.conversation_ab without an engine: the counters it reads from real ``/metrics``
scrapes (vLLM 0.32 CPU and llama-server, kept in tests/fixtures/prom), the server's hit rate
per engine (llama.cpp counts the cached prompt tokens apart, vLLM among them), and the
conversation file the A/Bs replay."""

from __future__ import annotations

from pathlib import Path

from abtui.engine.conversation_ab import (
    LLAMACPP_WORKLOAD,
    VLLM_WORKLOAD,
    ConversationResult,
    counters,
)
from abtui.workload.conversations import read_conversations

PROM = Path(__file__).parent.parent / "fixtures" / "prom"


def _result(before: dict, after: dict, engines: dict) -> ConversationResult:
    return ConversationResult(Path("x"), 0, {}, before, after, {}, engines, 0.0)


def test_counters_of_a_real_vllm_scrape():
    got, engine = counters((PROM / "vllm-0.32-cpu.txt").read_text())
    assert engine == "vllm"
    assert got == {
        "prompt_tokens": 2088.0,
        "prompt_cached_tokens": 1536.0,
        "prefix_cache_hits": 1536.0,
        "prefix_cache_queries": 2088.0,
    }
    res = _result({"a": {}}, {"a": got}, {"a": engine})
    assert res.server_hit_rate("a") == 1536 / 2088  # vLLM's prompt counter holds the cached


def test_counters_of_a_llamacpp_scrape():
    got, engine = counters((PROM / "llamacpp.txt").read_text())
    assert engine == "llamacpp"
    assert got["prompt_cached_tokens"] == 512 and "prefix_cache_hits" not in got
    before = {"prompt_tokens": got["prompt_tokens"] - 300, "prompt_cached_tokens": 412}
    res = _result({"a": before}, {"a": got}, {"a": engine})
    assert res.delta("a", "prompt_cached_tokens") == 100
    assert res.delta("a", "prefix_cache_hits") is None  # llama.cpp has no such counter
    assert res.server_hit_rate("a") == 100 / (100 + 300)  # cached apart from the computed


def test_the_workloads_have_the_shape_the_tests_rely_on(tmp_path):
    for w in (LLAMACPP_WORKLOAD, VLLM_WORKLOAD):
        convs, *_ = read_conversations(w.write(tmp_path / "c.jsonl"))
        assert len(convs) == w.conversations
        assert all(len(c.turns) == w.turns for c in convs)
        system = {c.turns[0].messages[0]["content"] for c in convs}
        assert len(system) == 1 and len(next(iter(system)).split()) == w.system_tokens
        assert all(t.max_tokens == w.answer_tokens for c in convs for t in c.turns)
        assert [c.arrival_s for c in convs] == sorted(c.arrival_s for c in convs)
