"""The diagnosis's server views for each engine's naming, from a real session file written with
rows the scraper produced from recorded-style Prometheus text."""

import pytest
from window_fixtures import alternating_session, quality_phase_session

from abtui.store.writer import SessionWriter
from abtui.telemetry.diagnosis import diagnose, diagnosis_lines
from abtui.telemetry.scraper import PromScraper


def _sglang(n, ttft_sum, e2e_sum, queue_sum):
    m = 'model_name="m"'
    return "\n".join([
        f"sglang:num_running_reqs{{{m}}} 8", f"sglang:num_queue_reqs{{{m}}} 2",
        f"sglang:token_usage{{{m}}} 0.5", f"sglang:spec_accept_length{{{m}}} 2.5",
        f"sglang:queue_time_seconds_sum{{{m}}} {queue_sum}",
        f"sglang:queue_time_seconds_count{{{m}}} {n}",
        f"sglang:time_to_first_token_seconds_sum{{{m}}} {ttft_sum}",
        f"sglang:time_to_first_token_seconds_count{{{m}}} {n}",
        f"sglang:e2e_request_latency_seconds_sum{{{m}}} {e2e_sum}",
        f"sglang:e2e_request_latency_seconds_count{{{m}}} {n}",
        f"sglang:generation_tokens_total{{{m}}} {n * 100}",
    ])  # fmt: skip


def _tgi(n, queue_sum, inf_sum, prefill_sum, decode_sum):
    return "\n".join([
        "tgi_queue_size 3", "tgi_batch_current_size 12",
        f"tgi_request_queue_duration_sum {queue_sum}", f"tgi_request_queue_duration_count {n}",
        f"tgi_request_inference_duration_sum {inf_sum}",
        f"tgi_request_inference_duration_count {n}",
        f'tgi_batch_forward_duration_sum{{method="prefill"}} {prefill_sum}',
        f'tgi_batch_forward_duration_count{{method="prefill"}} {n}',
        f'tgi_batch_forward_duration_sum{{method="decode"}} {decode_sum}',
        f'tgi_batch_forward_duration_count{{method="decode"}} {n * 50}',
    ])  # fmt: skip


def _session(tmp_path, texts_per_arm, t0=1500):
    path = tmp_path / "s.duckdb"
    w = SessionWriter(path)
    w.write_arms([{"arm": i, "name": f"arm{i}", "role": "baseline" if i == 0 else "candidate"}
                  for i in range(len(texts_per_arm))])  # fmt: skip
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
    path = _session(tmp_path, [
        # SGLang: 10 requests in the window, mean queue 0.1 s, TTFT 0.3 s, E2E 2.3 s
        [_sglang(5, 1.0, 10.0, 0.2), _sglang(15, 4.0, 33.0, 1.2)],
        # TGI: 10 requests, mean queue 0.5 s, inference 2 s split 1:3 by batch forward time
        [_tgi(0, 0, 0, 0, 0), _tgi(10, 5.0, 20.0, 2.0, 6.0)],
        # a server restart: the second scrape's counters are below the first's
        [_sglang(50, 15.0, 115.0, 5.0), _sglang(4, 1.2, 9.2, 0.4)],
    ])  # fmt: skip
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
