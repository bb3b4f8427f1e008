"""Reasoning streams end to end: the simulator's ``--reasoning-tokens`` over loopback, both
client paths, the session file (new columns and a file without them), TTFO in the summary, the
console table and the comparison."""

from __future__ import annotations

import asyncio
import io
import time

import duckdb
import numpy as np
import pytest
from rich.console import Console

from abtui.client.fast import FastClient, fast_stream_request
from abtui.client.items import Item
from abtui.client.records import TOKENS_USAGE, RequestRecord
from abtui.client.stream import Target, build_body, make_client, stream_request
from abtui.metrics import catalogue as cat
from abtui.metrics import request as rm
from abtui.metrics.summary import summarize
from abtui.metrics.table import NA, RequestTable
from abtui.report.console import summary_table
from abtui.sim.cli_args import config_to_argv
from abtui.sim.engine import SimConfig
from abtui.sim.server import start_server
from abtui.stats.effects import compare
from abtui.store.reader import SessionReader
from abtui.store.writer import SessionWriter

# serial: the simulator's 6 ms token gaps are asserted as a lower bound on the median TTFO − TTFT
pytestmark = pytest.mark.serial

ITEM = Item(index=0, id="i0", prompt="why is the sky blue", max_tokens=8, n_input=5)


async def _send(reasoning: int, path: str, api: str = "chat", n: int = 1) -> list[RequestRecord]:
    """``n`` requests to a sim that reasons for ``reasoning`` tokens, one after the other."""
    config = SimConfig(port=0, ttft_ms=5.0, itl_ms=6.0, reasoning_tokens=reasoning)
    sim = await start_server(config)
    try:
        tgt = Target(base_url=sim.url, model="sim-model", api=api)
        body = build_body(tgt, ITEM)
        send = fast_stream_request if path == "fast" else stream_request
        out = []
        async with FastClient() if path == "fast" else make_client(4) as client:
            for i in range(n):
                rec = RequestRecord(arm=i % 2, item=i // 2, scheduled_ns=time.perf_counter_ns())
                out.append(await send(client, tgt, ITEM, body, rec))
        return out
    finally:
        await sim.close()


@pytest.mark.parametrize("path", ["httpx", "fast"])
def test_sim_reasoning_stream_first_output_after_thinking(path):
    (rec,) = asyncio.run(_send(3, path))
    assert rec.status == "ok" and len(rec.chunk_ns) == 8
    assert rec.first_output_ns == rec.chunk_ns[3]  # three thinking chunks first
    assert rec.first_output_ns >= rec.chunk_ns[0]  # (one read, on a loaded machine: equal)
    assert rec.reasoning_tokens == 3 and rec.reasoning_chunk_tokens == 3
    assert (rec.n_output, rec.token_source) == (8, TOKENS_USAGE)
    assert len(rec.text.split()) == 5  # only the answer is stored as text


@pytest.mark.parametrize("path", ["httpx", "fast"])
def test_sim_without_reasoning_and_completions(path):
    (plain,) = asyncio.run(_send(0, path))
    assert plain.first_output_ns == plain.chunk_ns[0] and plain.reasoning_tokens is None
    (comp,) = asyncio.run(_send(3, path, api="completions"))  # text has no reasoning field
    assert comp.first_output_ns == comp.chunk_ns[0] and comp.reasoning_tokens is None


def test_sim_option_round_trips():
    argv = config_to_argv(SimConfig(reasoning_tokens=7))
    assert argv[argv.index("--reasoning-tokens") + 1] == "7"
    with pytest.raises(Exception, match="--reasoning-tokens"):
        SimConfig(reasoning_tokens=-1).validate()


def _session(tmp_path, records: list[RequestRecord]):
    path = tmp_path / "s.duckdb"
    with SessionWriter(path) as w:
        w.write_arms(
            [
                {"arm": 0, "name": "a", "role": "baseline", "url": "u", "model": "m"},
                {"arm": 1, "name": "b", "role": "candidate", "url": "u", "model": "m"},
            ]
        )
        w.add_records(records)
    return path


def test_stored_and_summarised(tmp_path):
    recs = asyncio.run(_send(3, "fast", n=8))
    path = _session(tmp_path, recs)
    with SessionReader(path) as r:
        t = r.request_table()
        stored = r.query("SELECT first_output_ns, reasoning_tokens FROM requests ORDER BY req")
    assert [row[0] for row in stored] == [x.first_output_ns for x in recs]
    assert [row[1] for row in stored] == [3] * 8
    live = RequestTable.from_records(recs)
    np.testing.assert_array_equal(rm.ttfo_s(t), rm.ttfo_s(live))
    ttft, ttfo = rm.ttft_s(t), rm.ttfo_s(t)
    # three 6 ms gaps; a request whose events a late read took together has them at once
    assert (ttfo >= ttft).all() and np.median(ttfo - ttft) >= 0.015
    s = summarize(t, 0)
    assert s.ttfo.n == 4 and s.ttfo.p50 > s.ttft.p50 and s.reasoning_tokens == 12
    out = io.StringIO()
    Console(file=out, width=160).print(summary_table(["a", "b"], [s, summarize(t, 1)], {}))
    assert "TTFO (ms)" in out.getvalue() and "reasoning" in out.getvalue()
    assert cat.latency_keys(t) == cat.LATENCY_KEYS and cat.has_reasoning(t)
    comp = compare(t, 0, 1, resamples=200)
    assert {"ttfo.p50", "ttfo.p99"} <= {e.key for e in comp.effects}


def test_without_reasoning_no_ttfo_rows(tmp_path):
    recs = asyncio.run(_send(0, "fast", n=4))
    with SessionReader(_session(tmp_path, recs)) as r:
        t = r.request_table()
    np.testing.assert_array_equal(rm.ttfo_s(t), rm.ttft_s(t))
    assert "ttfo" not in cat.latency_keys(t) and "ttfo" in cat.latency_keys(t, ("ttfo.p99",))
    assert not any(e.key.startswith("ttfo") for e in compare(t, 0, 1, resamples=200).effects)
    s = [summarize(t, 0), summarize(t, 1)]
    out = io.StringIO()
    Console(file=out, width=160).print(summary_table(["a", "b"], s, {}))
    assert "TTFO" not in out.getvalue()


def test_file_without_the_columns_reads_first_token_as_first_output(tmp_path):
    recs = asyncio.run(_send(3, "httpx", n=2))
    path = _session(tmp_path, recs)
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE requests DROP COLUMN first_output_ns")
    con.execute("ALTER TABLE requests DROP COLUMN reasoning_tokens")
    con.close()
    with SessionReader(path) as r:
        t = r.request_table()
    np.testing.assert_array_equal(t.first_output_ns, t.first_token_ns)
    assert (t.reasoning_tokens == NA).all()


def test_verdict_shows_ttfo_and_takes_it_as_primary(tmp_path):
    from abtui.report.verdict_text import effect_table
    from abtui.verdict.policy import evaluate

    arms = [{"name": "a"}, {"name": "b"}]
    think = RequestTable.from_records(asyncio.run(_send(3, "fast", n=8)))
    v = evaluate(think, arms, {"policy": {"resamples": 200}})
    out = io.StringIO()
    Console(file=out, width=200).print(effect_table(v.pairs[0], v.policy))
    assert "P50 TTFO" in out.getvalue() and "P99 TTFO" in out.getvalue()
    plain = RequestTable.from_records(asyncio.run(_send(0, "fast", n=8)))
    v = evaluate(plain, arms, {"policy": {"resamples": 200}})
    assert v.pairs[0].comparison.get("ttfo.p50") is None  # the same as TTFT: not repeated
    v = evaluate(plain, arms, {"policy": {"resamples": 200, "primary": "ttfo.p50"}})
    prim = v.pairs[0].comparison.get("ttfo.p50")
    assert prim is not None and prim.a == v.pairs[0].comparison.get("ttft.p50").a


def test_diagnosis_splits_reasoning_and_answer_tpot(tmp_path):
    from abtui.telemetry.diagnosis import diagnose, diagnosis_lines

    recs = asyncio.run(_send(3, "fast", n=8))
    diags = diagnose(_session(tmp_path, recs))
    r = diags[0].reasoning
    assert r.requests == 4 and (r.reasoning_tokens_mean, r.answer_tokens_mean) == (3, 5)
    # 6 ms between tokens: the three reasoning tokens span three gaps to the first answer
    # chunk, the answer four gaps over its five tokens (a late read can only shorten a gap)
    assert 0 < r.tpot_reasoning_p50_s <= 0.012 and 0 < r.tpot_answer_p50_s <= 0.012
    assert r.thinking_p50_s == pytest.approx(3 * r.tpot_reasoning_p50_s)
    text = "\n".join(diagnosis_lines(diags))
    assert "reasoning: 4 responses, 3 reasoning + 5 answer tokens (means); TPOT P50" in text
    assert diags[0].prefix_cache.source is None  # the fixed-delay sim says nothing cached


def test_reasoning_and_answer_tpot_from_the_timestamps(tmp_path):
    """Per request: the thinking's pace over its reasoning tokens up to the first answer
    chunk, the answer's over its own tokens after its first; rows in the comparison and the
    console table, a summary that keeps them."""
    recs = asyncio.run(_send(3, "fast", n=8))
    with SessionReader(_session(tmp_path, recs)) as r:
        t = r.request_table()
    first, out, last = (
        getattr(t, c) / 1e9 for c in ("first_token_ns", "first_output_ns", "last_token_ns")
    )
    np.testing.assert_allclose(rm.tpot_reasoning_s(t), (out - first) / 3)
    np.testing.assert_allclose(rm.tpot_answer_s(t), (last - out) / 4)  # 8 tokens, 3 thought
    # 6 ms a token; a read that took several events at once can only shorten a span
    assert 0 < np.median(rm.tpot_reasoning_s(t)) <= 0.012
    assert 0 < np.median(rm.tpot_answer_s(t)) <= 0.012
    comp = compare(t, 0, 1, resamples=200)
    keys = {e.key for e in comp.effects}
    assert {"tpot_reasoning.p50", "tpot_answer.p99", "ttfo.mean"} <= keys
    s = comp.summaries[0]
    assert s.tpot_reasoning.n == s.tpot_answer.n == 4
    assert type(s).from_dict(s.to_dict()).tpot_answer.p50 == s.tpot_answer.p50
    text = io.StringIO()
    Console(file=text, width=160).print(summary_table(["a", "b"], list(comp.summaries), {}))
    assert "TPOT reasoning (ms)" in text.getvalue() and "TPOT answer (ms)" in text.getvalue()


def test_no_reasoning_no_reasoning_rows(tmp_path):
    """A plain stream: no reasoning TPOT (no value), answer TPOT is TPOT and is not repeated;
    the summary's document does not gain the two."""
    recs = asyncio.run(_send(0, "fast", n=6))
    with SessionReader(_session(tmp_path, recs)) as r:
        t = r.request_table()
    assert np.isnan(rm.tpot_reasoning_s(t)).all()
    np.testing.assert_allclose(rm.tpot_answer_s(t), rm.tpot_s(t))
    comp = compare(t, 0, 1, resamples=200)
    assert not any(e.metric.startswith("tpot_") for e in comp.effects)
    assert "tpot_reasoning" not in comp.summaries[0].to_dict()
    assert "tpot_answer" not in comp.summaries[0].to_dict()
    # named: the answer's row is TPOT's; the reasoning's has no value in either arm: left out
    comp = compare(t, 0, 1, resamples=200, metrics=cat.latency_keys(t, ("tpot_answer.p50",)))
    assert comp.get("tpot_answer.p50").a == comp.get("tpot.p50").a
    comp = compare(t, 0, 1, resamples=200, metrics=cat.latency_keys(t, ("tpot_reasoning.p50",)))
    assert comp.get("tpot_reasoning.p50") is None


def test_reasoning_tpot_as_primary_and_slo():
    from abtui.metrics.summary import slo_met
    from abtui.verdict.policy import evaluate

    arms = [{"name": "a"}, {"name": "b"}]
    think = RequestTable.from_records(asyncio.run(_send(3, "fast", n=8)))
    pol = {"resamples": 200, "primary": "tpot_answer.p50", "guardrails": ["tpot_reasoning.p99"]}
    v = evaluate(think, arms, {"policy": pol})
    comp = v.pairs[0].comparison
    assert comp.get("tpot_answer.p50").family == "primary"
    assert not any(g.state == "missing" for g in v.pairs[0].guardrails)
    plain = RequestTable.from_records(asyncio.run(_send(0, "fast", n=8)))
    v = evaluate(plain, arms, {"policy": dict(pol, primary="tpot_reasoning.p50")})
    assert v.pairs[0].result == "INCONCLUSIVE"
    assert any("was not measured" in r for r in v.pairs[0].reasons)
    # an SLO on them: no reasoning (or one answer token) is not applicable, so it passes
    assert slo_met(plain, {"tpot_reasoning": 1e-9}).all()
    assert not slo_met(think, {"tpot_reasoning": 1e-9}).any()


@pytest.fixture(scope="module")
def thinking_sims():
    from abtui.sim.process import SimProcess

    with (
        SimProcess(SimConfig(ttft_ms=10.0, itl_ms=5.0, reasoning_tokens=6, seed=1)) as a,
        SimProcess(SimConfig(ttft_ms=10.0, itl_ms=4.0, reasoning_tokens=6, seed=2)) as b,
    ):
        yield a, b


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_headless_run_has_reasoning_rows_only_after_reasoning(thinking_sims, tmp_path, api):
    """``abtui run`` against two reasoning sims: over chat the verdict and the stored verdict
    have reasoning and answer TPOT rows (and the printed table); over completions the same
    sims stream no reasoning, and no such row appears."""
    import contextlib

    from abtui.cli import main
    from abtui.verdict.saved import session_verdict

    a, b = thinking_sims
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(
            ["run", "--baseline", a.url, "--candidate", b.url, "--api", api]
            + ["--requests", "16", "--rate", "40", "--input-tokens", "16"]
            + ["--output-tokens", "16", "--warmup", "1", "--headless", "--name", api]
            + ["--sessions-dir", str(tmp_path)]
        )
    doc = session_verdict(tmp_path / f"{api}.duckdb").to_dict()  # as stored
    keys = {e["key"] for e in doc["pairs"][0]["comparison"]["effects"]}
    reasoned = {"tpot_reasoning.p50", "tpot_answer.p50", "ttfo.p50"}
    if api == "chat":
        assert reasoned <= keys
        assert "TPOT reasoning (ms)" in out.getvalue() and "P50 TPOT (answer)" in out.getvalue()
    else:
        assert not reasoned & keys and "TPOT" in out.getvalue()
        assert "reasoning" not in out.getvalue().lower()
