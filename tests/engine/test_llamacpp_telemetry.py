"""abtui's llama.cpp face against the real ``llama-server`` (built by ``abtui engine build``, or
``ABTUI_LLAMA_SERVER``): its ``/metrics`` mapped into abtui's families, the ``timings`` of its
streams kept per request, and the diagnosis that sets one against the other.

Marked ``engine``: without a llama-server binary the tests skip with the reason, unless
``ABTUI_REQUIRE_ENGINE=1`` (``.ci/run``), where a missing binary fails.
"""

from __future__ import annotations

import asyncio

import pytest
from engine_fixtures import require_engine

from abtui.client import records
from abtui.client.fast import FastClient, fast_stream_request
from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.client.stream import Target, build_body, make_client, stream_request
from abtui.telemetry.engines import extract
from abtui.telemetry.promtext import parse
from abtui.telemetry.scraper import PromScraper

pytestmark = pytest.mark.engine

# every llamacpp:* family abtui maps (engines.RULES), by abtui's name
MAPPED = {
    "running",
    "waiting",
    "seq_tokens_max",
    "busy_slots_per_decode",
    "prompt_tokens",
    "prompt_cached_tokens",
    "prefill_busy_s",
    "generation_tokens",
    "decode_request_s",
    "decodes",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
    "busy_slot_decodes",
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    require_engine()
    from abtui.engine.tinymodel import write_fp32

    return write_fp32(tmp_path_factory.mktemp("llamacpp") / "tiny-f32.gguf")


@pytest.fixture(scope="module")
def plain(model):
    from abtui.engine.server import LlamaCppServer

    with LlamaCppServer(model, name="tiny", parallel=2) as srv:
        yield srv


@pytest.fixture(scope="module")
def spec(model):
    """Speculative decoding with the target itself as the draft: the vocabularies match and
    greedy drafts are mostly accepted, so the acceptance counters have something to count.

    The draft flags go as extra_args: this llama.cpp removed ``--draft-max`` / ``--draft-min``
    (``common/arg.cpp``: "use --spec-draft-n-max"), which ``LlamaCppServer(draft=...)`` passes,
    and a plain draft model drafts nothing unless ``--spec-type draft-simple`` says so (the
    default type is ``none``; only MTP / DFlash drafts are inferred from the GGUF)."""
    from abtui.engine.server import LlamaCppServer

    draft = (
        "-md",
        str(model),
        "--spec-type",
        "draft-simple",
        "--spec-draft-n-max",
        "4",
        "--spec-draft-n-min",
        "0",
        "-td",
        "1",
    )
    with LlamaCppServer(model, name="tiny", parallel=2, extra_args=draft) as srv:
        yield srv


def _items(n: int, out: int = 12) -> list[Item]:
    words = "the quick brown fox jumps over the lazy dog and then".split()
    return [
        Item(
            index=k,
            id=str(k),
            arrival_s=0.0,
            prompt=" ".join(words[(k + j) % len(words)] for j in range(8 + k)),
            max_tokens=out,
        )
        for k in range(n)
    ]


def _stream(srv, items: list[Item], *, api="completions", fast=False) -> list[RequestRecord]:
    target = Target(srv.url, "tiny", api=api, params={"temperature": 0.0, "seed": 0})

    async def go():
        client = FastClient() if fast else make_client(4)
        send = fast_stream_request if fast else stream_request
        try:
            recs = [RequestRecord(arm=0, item=it.index) for it in items]
            await asyncio.gather(
                *(
                    send(client, target, it, build_body(target, it), r)
                    for it, r in zip(items, recs, strict=True)
                )
            )
            return recs
        finally:
            await client.aclose()

    return asyncio.run(go())


def _deltas(scraper: PromScraper, text: str) -> dict[str, float]:
    rows = scraper.rows_from_text(text, 10**18)
    return {
        m.removesuffix(".delta"): v
        for _, src, _, m, v in rows
        if src == "llamacpp" and m.endswith(".delta")
    }


@pytest.mark.parametrize(("api", "fast"), [("completions", False), ("chat", True)])
def test_stream_timings_are_the_servers_and_agree_with_its_counters(plain, api, fast):
    sc = PromScraper(0, plain.base + "/metrics")
    sc.rows_from_text(plain.metrics_text(), 0)
    recs = _stream(plain, _items(4), api=api, fast=fast)
    after = plain.metrics_text()
    for r in recs:
        assert r.status == records.OK, r.error_message
        t = r.timings
        assert r.timings_note is None and t is not None
        assert {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "cache_n"} <= set(t)
        assert "draft_n" not in t  # no draft model, no draft fields
        assert t["predicted_n"] == r.n_output == 12  # the tiny model never stops early
        assert t["prompt_ms"] > 0 and t["predicted_ms"] > 0
        # the server's clocks run inside abtui's: slot start → first token ⊂ dispatch → first
        # token, and its generation inside first → last token (µs rounding: 1 µs slack)
        ttft_ms = (r.chunk_ns[0] - r.dispatched_ns) / 1e6
        e2e_ms = (r.chunk_ns[-1] - r.dispatched_ns) / 1e6
        assert t["prompt_ms"] < ttft_ms
        assert t["prompt_ms"] + t["predicted_ms"] <= e2e_ms + 1e-3
    d = _deltas(sc, after)
    # the counters moved by exactly what the streams' timings say (the same slot stats)
    assert d["generation_tokens"] == sum(r.timings["predicted_n"] for r in recs)
    assert d["prompt_tokens"] == sum(r.timings["prompt_n"] for r in recs)
    assert d["decode_request_s"] == pytest.approx(
        sum(r.timings["predicted_ms"] for r in recs) / 1e3, rel=1e-4, abs=1e-5
    )
    assert d["decodes"] >= 11  # at least one decode call per generated token after the first


def test_props_give_the_slot_count_and_context(plain):
    sc = PromScraper(0, plain.base + "/metrics")
    rows = {m: v for _, src, _, m, v in sc.poll() if src == "llamacpp"}
    assert rows["slots_total"] == 2 and rows["slot_ctx"] == plain.ctx
    assert sc.engines == {"llamacpp"}
    sc.close()


def test_real_metrics_map_into_abtuis_families(plain):
    text = plain.metrics_text()
    scrape = parse(text)
    assert scrape.skipped == 0
    names = {s.name for s in scrape.samples}
    assert {n for n in names if n.startswith("llamacpp:")} >= {
        "llamacpp:prompt_tokens_total",
        "llamacpp:tokens_predicted_total",
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
        "llamacpp:spec_decode_num_accepted_tokens_total",
    }
    ex = extract(scrape)
    assert ex.engines == {"llamacpp"}
    got = set(ex.gauges) | set(ex.cumulative)
    assert got == MAPPED  # every rule found its name in the real output; nothing else came
    assert "kv_usage" not in got  # llama-server exports no KV-cache gauge


def test_spec_decode_acceptance_counters_match_the_streams(spec):
    sc = PromScraper(0, spec.base + "/metrics")
    sc.rows_from_text(spec.metrics_text(), 0)
    recs = _stream(spec, _items(3, out=24))
    d = _deltas(sc, spec.metrics_text())
    assert all(r.status == records.OK and r.timings_note is None for r in recs)
    drafted = sum(r.timings.get("draft_n", 0) for r in recs)
    accepted = sum(r.timings.get("draft_n_accepted", 0) for r in recs)
    assert drafted > 0 and accepted > 0
    assert (d["spec_draft_tokens"], d["spec_accepted_tokens"]) == (drafted, accepted)
    assert d["spec_drafts"] > 0 and d["spec_accepted_tokens"] <= d["spec_draft_tokens"]


def test_abtui_run_stores_timings_and_diagnoses_both_arms(plain, spec, tmp_path, capsys):
    """``abtui run`` against two real servers (no draft vs the draft): every measured request
    has its server timings stored, the llamacpp families are in the telemetry, and the
    diagnosis shows the server's split next to the client's with the acceptance cross-check."""
    from abtui.cli import main
    from abtui.store.reader import SessionReader
    from abtui.telemetry.diagnosis import diagnose, diagnosis_lines

    toml = tmp_path / "s.toml"
    toml.write_text(f"""\
name = "llamacpp-tel"

[[arms]]
name = "plain"
role = "baseline"
url = "{plain.url}"

[[arms]]
name = "draft"
url = "{spec.url}"

[workload]
requests = 12
input_tokens = 24
output_tokens = 16
seed = 0

[load]
concurrency = 2
warmup = 1

[request]
api = "completions"
temperature = 0.0
seed = 0

[telemetry]
interval_s = 0.25

[store]
dir = "{tmp_path}"
""")
    rc = main(["run", str(toml), "--headless"])
    out = capsys.readouterr().out
    assert rc in (0, 3, 4), out
    path = tmp_path / "llamacpp-tel.duckdb"
    with SessionReader(path) as rd:
        t = rd.server_timings()
        n_ok = rd.query(
            "SELECT arm, count(*) FROM requests WHERE status = 'ok' AND NOT warmup "
            "GROUP BY arm ORDER BY arm"
        )
        fams = {
            m
            for (m,) in rd.query("SELECT DISTINCT metric FROM telemetry WHERE source = 'llamacpp'")
        }
        engines = rd.meta()["telemetry"]["engines"]
    assert n_ok == [(0, 12), (1, 12)]
    assert len(t["req"]) == 24 and all(n is None for n in t["note"])
    assert (t["predicted_n"] == 16).all() and (t["prompt_ms"] > 0).all()
    assert engines == {"0": ["llamacpp"], "1": ["llamacpp"]}
    assert {
        "running",
        "waiting",
        "generation_tokens.delta",
        "prompt_tokens.rate",
        "decodes.delta",
        "busy_slot_decodes.delta",
        "spec_accepted_tokens.delta",
        "slots_total",
        "slot_ctx",
    } <= fams  # the last two from /props
    plain_d, draft_d = diagnose(path)
    for d in (plain_d, draft_d):
        c = d.timings
        assert c is not None and c.n == 12 and c.n_decode == 12
        assert 0 < c.server_prompt_ms < c.client_ttft_ms and c.ttft_gap_ms > 0
        assert c.server_decode_ms > 0 and c.client_tpot_ms > 0
        assert d.server.view.startswith("server (llamacpp timings")
        assert d.batch_mean is not None and 0 < d.batch_mean <= 2 and d.slots_total == 2
    assert plain_d.timings.stream_acceptance is None and not plain_d.spec_acceptance
    assert draft_d.timings.stream_acceptance > 0 and draft_d.spec_acceptance > 0
    text = "\n".join(diagnosis_lines([plain_d, draft_d]))
    assert "outside its compute (slot queue + network + client)" in text
    assert "from the streams' timings" in text
    print(text)  # the figures, for the report (pytest -s)
