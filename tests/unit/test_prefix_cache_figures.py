"""Prefix-cache figures from real session files (abtui.telemetry.prefix_cache): the responses'
usage figure or llama.cpp's timings.cache_n, per turn of a conversation (the ``turn`` the run
stored) and turn 0 in a session of single requests, the TTFT split by cached share, and SGLang's
counters in the diagnosis."""

from __future__ import annotations

import pytest

from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.store.reader import SessionReader
from abtui.store.writer import SessionWriter
from abtui.telemetry.diagnosis import diagnose
from abtui.telemetry.prefix_cache import LLAMACPP, USAGE, prefix_cache_figures
from abtui.telemetry.scraper import PromScraper

MS = 1_000_000


def _record(arm: int, k: int, ttft_ms: float, **kw) -> RequestRecord:
    d = 1000 * MS + k * 100 * MS
    first = d + int(ttft_ms * MS)
    return RequestRecord(
        arm=arm,
        item=k,
        scheduled_ns=d,
        dispatched_ns=d,
        first_byte_ns=first,
        done_ns=first + 10 * MS,
        chunk_ns=[first, first + 10 * MS],
        chunk_tokens=[1, 1],
        n_output=2,
        finish_reason="length",
        **kw,
    )


def _session(tmp_path, telemetry: str | None = None, turns: bool = True):
    """Arm 0 (llama.cpp: timings only): turn k % 2, 40 prompt tokens, cache_n 0 on turn 0 and
    30 on turn 1; arm 1 (usage): 100 prompt tokens, cached 0 / 90 likewise, TTFT 40 / 10 ms."""
    path = tmp_path / "s.duckdb"
    w = SessionWriter(path)
    w.write_arms([{"arm": 0, "name": "llama", "role": "baseline"}, {"arm": 1, "name": "vllm"}])
    w.write_items([Item(index=k, id=f"i{k}", prompt="p", n_input=100) for k in range(6)])
    recs = []
    for k in range(6):
        hot = k % 2 == 1
        timings = {"cache_n": 30 if hot else 0, "prompt_n": 10 if hot else 40}
        conv = {"turn": k % 2, "conversation_id": f"c{k // 2}"} if turns else {}
        recs.append(_record(0, k, 20, n_input=40, timings=timings, **conv))
        recs.append(
            _record(1, k, 10 if hot else 40, n_input=100, cached_tokens=90 if hot else 0, **conv)
        )
    w.add_records(recs)
    if telemetry:
        sc = PromScraper(1, "http://127.0.0.1:1/metrics")
        for t, text in ((900, telemetry.format(p=0, c=0)), (1600, telemetry.format(p=600, c=270))):
            w.add_telemetry(sc.rows_from_text(text, t * MS))
    w.close()
    return path


@pytest.mark.parametrize("turns", [False, True])
def test_hit_rates_by_source_and_turn(tmp_path, turns):
    path = _session(tmp_path, turns=turns)
    with SessionReader(path) as rd:
        figs = prefix_cache_figures(rd, [0, 1])
    llama, vllm = figs[0], figs[1]
    assert (llama.source, vllm.source) == (LLAMACPP, USAGE)
    # llama.cpp: the prompt is cache_n + prompt_n; 3 of 6 requests had 30 of 40 cached
    assert (llama.prompt_tokens, llama.cached_tokens) == (240, 90)
    assert vllm.hit_rate == pytest.approx(270 / 600)
    # TTFT split at half the prompt cached: 10 ms for the three hits, 40 ms for the rest
    assert (vllm.n_cached, vllm.n_uncached) == (3, 3)
    assert (vllm.ttft_cached_p50_s, vllm.ttft_uncached_p50_s) == pytest.approx((0.01, 0.04))
    if not turns:  # single requests: all turn 0
        assert [(t.turn, t.requests, t.hit_rate) for t in vllm.turns] == [(0, 6, 0.45)]
    else:
        assert [(t.turn, t.requests, t.hit_rate) for t in vllm.turns] == [
            (0, 3, 0.0),
            (1, 3, 0.9),
        ]
        assert [t.hit_rate for t in llama.turns] == [0.0, 0.75]


SGLANG = 'sglang:prompt_tokens_total{{model_name="m"}} {p}\nsglang:cached_tokens_total{{model_name="m",cache_source="device"}} {c}\n'


def test_diagnosis_takes_sglang_counters(tmp_path):
    diags = diagnose(_session(tmp_path, SGLANG))
    assert diags[1].prompt_cached_share == pytest.approx(0.45)
    assert diags[1].prompt_cached_source == "sglang cached_tokens"
    assert diags[0].prompt_cached_share is None and diags[0].prefix_cache.hit_rate == 0.375


def test_no_figure_when_no_response_said(tmp_path):
    path = tmp_path / "s.duckdb"
    with SessionWriter(path) as w:
        w.write_arms([{"arm": 0, "name": "a", "role": "baseline"}])
        w.add_records([_record(0, 0, 20, n_input=10)])
    with SessionReader(path) as rd:
        a = prefix_cache_figures(rd, [0])[0]
    assert (a.source, a.hit_rate, a.measured, a.turns) == (None, None, 1, [])
