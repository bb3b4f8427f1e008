"""The diagnosis's server views for each engine's naming, from a real session file written with
rows the scraper produced from recorded-style Prometheus text."""

import pytest
from window_fixtures import alternating_session, quality_phase_session

from abtui.store.writer import SessionWriter
from abtui.telemetry.diagnosis import diagnose, diagnosis_lines
from abtui.telemetry.scraper import PromScraper


def _sglang(n, ttft_sum, e2e_sum, queue_sum):
    m = 'model_name="m"'
    return "\n".join(
        [
            f"sglang:num_running_reqs{{{m}}} 8",
            f"sglang:num_queue_reqs{{{m}}} 2",
            f"sglang:token_usage{{{m}}} 0.5",
            f"sglang:spec_accept_length{{{m}}} 2.5",
            f"sglang:queue_time_seconds_sum{{{m}}} {queue_sum}",
            f"sglang:queue_time_seconds_count{{{m}}} {n}",
            f"sglang:time_to_first_token_seconds_sum{{{m}}} {ttft_sum}",
            f"sglang:time_to_first_token_seconds_count{{{m}}} {n}",
            f"sglang:e2e_request_latency_seconds_sum{{{m}}} {e2e_sum}",
            f"sglang:e2e_request_latency_seconds_count{{{m}}} {n}",
            f"sglang:generation_tokens_total{{{m}}} {n * 100}",
        ]
    )


def _tgi(n, queue_sum, inf_sum, prefill_sum, decode_sum):
    return "\n".join(
        [
            "tgi_queue_size 3",
            "tgi_batch_current_size 12",
            f"tgi_request_queue_duration_sum {queue_sum}",
            f"tgi_request_queue_duration_count {n}",
            f"tgi_request_inference_duration_sum {inf_sum}",
            f"tgi_request_inference_duration_count {n}",
            f'tgi_batch_forward_duration_sum{{method="prefill"}} {prefill_sum}',
            f'tgi_batch_forward_duration_count{{method="prefill"}} {n}',
            f'tgi_batch_forward_duration_sum{{method="decode"}} {decode_sum}',
            f'tgi_batch_forward_duration_count{{method="decode"}} {n * 50}',
        ]
    )


def _session(tmp_path, texts_per_arm, t0=1500):
    path = tmp_path / "s.duckdb"
    w = SessionWriter(path)
    w.write_arms(
        [
            {"arm": i, "name": f"arm{i}", "role": "baseline" if i == 0 else "candidate"}
            for i in range(len(texts_per_arm))
        ]
    )
    w.event("start", f"t0={t0}")
    for arm, texts in enumerate(texts_per_arm):
        sc = PromScraper(arm, "http://127.0.0.1:1/metrics")
        for k, text in enumerate(texts):
            w.add_telemetry(sc.rows_from_text(text, 1000 * (k + 1)))
        if sc.restarts:
            w.write_meta(telemetry={"counter_resets": {str(arm): sc.restarts}})
    w.close()
    return path


def test_sglang_tgi_views_and_a_restart(tmp_path):
    path = _session(
        tmp_path,
        [
            # SGLang: 10 requests in the window, mean queue 0.1 s, TTFT 0.3 s, E2E 2.3 s
            [_sglang(5, 1.0, 10.0, 0.2), _sglang(15, 4.0, 33.0, 1.2)],
            # TGI: 10 requests, mean queue 0.5 s, inference 2 s split 1:3 by batch forward time
            [_tgi(0, 0, 0, 0, 0), _tgi(10, 5.0, 20.0, 2.0, 6.0)],
            # a server restart: the second scrape's counters are below the first's
            [_sglang(50, 15.0, 115.0, 5.0), _sglang(4, 1.2, 9.2, 0.4)],
        ],
    )
    sg, tgi, restarted = diagnose(path)
    assert sg.server.view.startswith("server (sglang: prefill = TTFT - queue")
    assert sg.server.mean_s == pytest.approx({"queue": 0.1, "prefill": 0.2, "decode": 2.0})
    assert sg.server.queue == pytest.approx(0.1 / 2.3)
    assert sg.running == (8.0, 8.0) and sg.waiting == (2.0, 2.0) and sg.kv_usage == (0.5, 0.5)
    assert sg.spec_accept_length == 2.5 and sg.server_generated == 1000
    assert sg.client is None and sg.gpu is None  # no requests, no GPU rows: n/a, not 0

    assert tgi.server.view.startswith("server (tgi: prefill/decode in the ratio of batch")
    assert tgi.server.mean_s == pytest.approx({"queue": 0.5, "prefill": 0.5, "decode": 1.5})
    assert tgi.running == (12.0, 12.0) and tgi.waiting == (3.0, 3.0)

    # after the restart the deltas count from zero: 4 requests, means of the new counters
    assert restarted.counter_resets == 1
    assert restarted.server.mean_s["decode"] == pytest.approx((9.2 - 1.2) / 4)
    text = "\n".join(diagnosis_lines([sg, tgi, restarted]))
    assert "spec accept length 2.50" in text
    assert text.count("went back to zero 1 time(s)") == 1


def test_rows_before_t0_are_left_out(tmp_path):
    # scrapes at t = 1000 .. 4000 with 0, 10, 20, 30 requests done; the run starts at 2500:
    # the intervals ending at 3000 and 4000 count, the one ending at 2000 (warm-up) does not
    texts = [_sglang(n, 0.3 * n, 2.3 * n, 0.1 * n) for n in (0, 10, 20, 30)]
    (d,) = diagnose(_session(tmp_path, [texts], t0=2500))
    assert d.server_generated == 2000


# ------------------------------------------------------------------ the measured windows


def test_means_and_j_per_token_are_over_the_measured_window_only(tmp_path):
    # 400 W while the 10 measured requests run (10..21 s, the last interval's delta included),
    # 60 W before (warm-up at 5-7 s, all after t0 = 0) and after (the quality phase, idle)
    (d,) = diagnose(quality_phase_session(tmp_path / "q.duckdb"))
    g = d.gpu
    assert d.output_tokens == 1000  # the measured requests', not the warm-up's
    assert g.power_w == pytest.approx(400.0)  # all 41 samples: 159.5 W
    assert g.energy_j == pytest.approx(4800.0)  # 12 samples × 400 J (all: 6540 J)
    assert g.j_per_token == pytest.approx(4.8)  # all: 6.54
    assert g.dram_active == pytest.approx(0.8) and g.sm_active == pytest.approx(0.7)
    assert d.kv_usage == (0.5, 0.5) and d.running == (8.0, 8.0)
    assert d.scrapes_ok == 12
    assert "power 400 W, 4.800 J/token" in "\n".join(diagnosis_lines([d]))


def test_the_slack_after_the_last_completion_is_the_stored_interval(tmp_path):
    # interval 0.2 s: the window ends at 20.7 s and the sample at 21 s is out
    (d,) = diagnose(quality_phase_session(tmp_path / "fast.duckdb", interval_s=0.2))
    assert d.gpu.energy_j == pytest.approx(4400.0) and d.scrapes_ok == 11
    # no interval stored (a killed run): the sampler's default, 1 s
    (d,) = diagnose(quality_phase_session(tmp_path / "none.duckdb", interval_s=None))
    assert d.gpu.energy_j == pytest.approx(4800.0)


def test_alternate_each_arm_is_measured_in_its_own_turns_only(tmp_path):
    # one GPU, both arms sampling it: A's turns read 400 W, B's 250 W, idle 60 W between
    a, b = diagnose(alternating_session(tmp_path / "alt.duckdb"))
    assert (a.output_tokens, b.output_tokens) == (2000, 2000)
    assert a.gpu.power_w == pytest.approx(400.0) and b.gpu.power_w == pytest.approx(250.0)
    assert a.gpu.j_per_token == pytest.approx(4.8) and b.gpu.j_per_token == pytest.approx(3.0)
    assert a.scrapes_ok == b.scrapes_ok == 24


def _llamacpp(decodes, busy_per_decode, drafted, accepted, cached=0, prompt=100):
    """llama-server's /metrics as its to_metrics() writes it (server-task.cpp)."""
    return "\n".join(
        [
            "# TYPE llamacpp:prompt_tokens_total counter",
            f"llamacpp:prompt_tokens_total {prompt}",
            f"llamacpp:prompt_tokens_cached_total {cached}",
            "llamacpp:prompt_seconds_total 0.5",
            "llamacpp:tokens_predicted_total 50",
            "llamacpp:tokens_predicted_seconds_total 1",
            f"llamacpp:n_decode_total {decodes}",
            "llamacpp:n_tokens_max 40",
            f"llamacpp:spec_decode_num_draft_tokens_total {drafted}",
            f"llamacpp:spec_decode_num_accepted_tokens_total {accepted}",
            "llamacpp:spec_decode_num_drafts_total 10",
            "llamacpp:requests_processing 2",
            "llamacpp:requests_deferred 1",
            f"llamacpp:n_busy_slots_per_decode {busy_per_decode}",
        ]
    )


def test_llamacpp_server_timings_next_to_the_client_view(tmp_path):
    from abtui.client.records import RequestRecord

    path = tmp_path / "s.duckdb"
    ms = 1_000_000
    w = SessionWriter(path)
    w.write_arms(
        [
            {"arm": 0, "name": "llama", "role": "baseline"},
            {"arm": 1, "name": "vllm", "role": "candidate"},
        ]
    )
    recs = []
    for k in range(4):  # client: TTFT 20 ms, TPOT 5 ms; server: prompt 12 ms, 16 ms / 4 steps
        d = 1000 * ms + k * 300 * ms
        chunks = [d + 20 * ms + 5 * ms * j for j in range(5)]
        timings = {
            "prompt_n": 10,
            "prompt_ms": 12.0,
            "predicted_n": 5,
            "predicted_ms": 16.0,
            "draft_n": 8,
            "draft_n_accepted": 6,
        }
        for arm in (0, 1):
            recs.append(
                RequestRecord(
                    arm=arm,
                    item=k,
                    scheduled_ns=d,
                    dispatched_ns=d,
                    first_byte_ns=d + ms,
                    done_ns=chunks[-1],
                    chunk_ns=chunks,
                    chunk_tokens=[1] * 5,
                    n_input=10,
                    n_output=5,
                    finish_reason="length",
                    timings=timings if arm == 0 else None,
                    timings_note="timings: prompt_n is not a number"
                    if (arm, k) == (0, 3)
                    else None,
                )
            )
    w.add_records(recs)
    sc = PromScraper(0, "http://127.0.0.1:1/metrics")
    for t, text in (
        (900, _llamacpp(100, 1.0, 0, 0)),
        (1500, _llamacpp(200, 1.5, 40, 28, cached=100, prompt=200)),
    ):
        w.add_telemetry(sc.rows_from_text(text, t * ms))
    w.close()
    llama, other = diagnose(path)
    assert llama.engines == ["llamacpp"]
    c = llama.timings
    assert (c.n, c.server_prompt_ms, c.client_ttft_ms) == (4, 12.0, pytest.approx(20.0))
    assert c.ttft_gap_ms == pytest.approx(8.0) and c.noted == 1
    assert c.server_decode_ms == 4.0 and c.client_tpot_ms == pytest.approx(5.0)
    assert c.tpot_gap_ms == pytest.approx(1.0)
    assert c.stream_acceptance == 0.75 and (c.draft_accepted, c.draft_n) == (24, 32)
    assert llama.spec_acceptance == pytest.approx(0.7)  # the counters: 28 of 40 in the window
    # 100 decodes with 1.0 slot each, then 200 with a mean of 1.5: the window's 100 had 2.0
    assert llama.batch_mean == pytest.approx(2.0)
    assert llama.prompt_cached_share == pytest.approx(0.5)  # 100 cached, 100 computed
    assert llama.running == (2.0, 2.0) and llama.waiting == (1.0, 1.0) and llama.kv_usage is None
    assert llama.server.view.startswith("server (llamacpp timings")
    assert llama.server.mean_s == pytest.approx({"prefill": 0.012, "decode": 0.016})
    text = "\n".join(diagnosis_lines([llama, other]))
    assert "TTFT 20.0 ms at the client, 12.0 ms prompt in the server (60%): +8.0 ms" in text
    assert (
        "decode 4.00 ms/token in the server" in text and "(client - server +1.00 ms/token)" in text
    )
    assert (
        "acceptance: 70.0% from the server's counters, 75.0% (24/32 draft tokens) from the "
        "streams' timings, 5.0 points apart"
    ) in text
    assert "batch 2.00 busy slots/decode" in text and "prompt cache 50%" in text
    assert "1 request(s) sent a malformed field" in text
    assert other.timings is None and "server timings" not in "\n".join(diagnosis_lines([other]))
