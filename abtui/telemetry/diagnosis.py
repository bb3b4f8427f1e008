"""Where the time went, per arm, from a stored session: phases, queue, KV cache, GPU.

:func:`diagnose` reads a session file (never live state, so a re-opened session shows the same)
and returns one :class:`ArmDiagnosis` per arm; :func:`diagnosis_lines` prints it as a short block.
The window is each arm's **measured windows** (:mod:`abtui.metrics.windows`): for every segment
(run, sweep level, ``alternate`` block) the arm played, first dispatch to last completion of its
non-warm-up requests, plus the sampler's interval after the end (a counter delta stamped just
after it covers the run's last second). Every telemetry figure below — phases, KV, running /
waiting, spec decode, power, energy (so J/token), DRAM, SM — is over the arm's rows in them
only: not the warm-up, not the quality suites sent after the load test, not the idle time before
the file closed, not the other arm's turns under ``alternate``. An arm with no stored measured
request keeps the older rule: rows at or after the ``start`` event's ``t0``.

Phase split of request time (shares of queue + prefill + decode), labelled by where it comes from:

- **server** (vLLM): the per-request histograms ``queue_s``, ``prefill_s``, ``decode_s`` (sums of
  their per-interval deltas); SGLang, which has no prefill/decode histograms: queue from
  ``queue_s``, prefill = TTFT − queue, decode = E2E − TTFT (server means);
- **server, TGI**: queue from ``queue_s``; the request's inference time split between prefill
  and decode in the ratio of the server's prefill / decode *batch* forward time;
- **server, llama.cpp**: no queue figure; prefill and decode from the streams' own ``timings``
  (mean ``prompt_ms`` / ``predicted_ms`` per request: :mod:`~abtui.telemetry.server_timings`,
  which also sets them against the client's TTFT / TPOT on the same requests);
- **client**: no server figures — TTFT (queueing, prefill and the network together) vs decode
  (first to last token) of the measured requests. Queueing cannot be separated here.

The connect phase: how many connections each arm's generators opened before the
``t0`` of its segments (``meta.connections``) and how many measured requests still had to open
one during the run, with their mean and largest connect time (``requests.connect_ns``: kept out
of TTFT, E2E and the split above, inside TTFT (user)). Not shown for a session written before
abtui recorded it.

Also: KV-cache usage, running / waiting requests (mean, max), preemptions and spec-decode
acceptance (accepted / drafted tokens) in the window; llama.cpp's mean batch (busy slots per
decode call); the prefix cache's hit rate from the responses (per turn, with TTFT split by the
cached share) and from the server's counters, and reasoning vs answer TPOT
(:mod:`~abtui.telemetry.prefix_cache`); the GPU (local NVML or a DCGM exporter):
power, energy and J per output token, memory, DRAM bandwidth and SM activity, busy time, clocks,
temperature, throttling. Anything not measured is ``None`` (shown as n/a), never 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from abtui.metrics.windows import MeasuredWindows
from abtui.store.reader import reading
from abtui.telemetry.engines import ENGINES
from abtui.telemetry.prefix_cache import (
    ArmCache,
    ArmReasoning,
    cache_line,
    prefix_cache_figures,
    reasoning_figures,
    reasoning_line,
)
from abtui.telemetry.server_timings import TimingCheck, timing_checks, timing_lines


@dataclass
class PhaseSplit:
    view: str  # "server (vllm)", "server (tgi: ...)", "client"
    queue: float | None  # share of request time, 0..1 (None: not separable in this view)
    prefill: float
    decode: float
    mean_s: dict[str, float] = field(default_factory=dict)  # mean seconds per request, by phase


@dataclass
class GpuSummary:
    source: str  # "nvml" | "dcgm"
    power_w: float | None = None
    energy_j: float | None = None
    j_per_token: float | None = None
    mem_used_gib: float | None = None  # max
    dram_active: float | None = None  # mean share of peak bandwidth
    sm_active: float | None = None
    tensor_active: float | None = None
    busy: float | None = None  # mean share of time a kernel ran
    sm_clock_mhz: float | None = None
    temp_c: float | None = None  # max
    throttled: bool | None = None  # any sample with a slowdown reason
    throttled_share: float | None = None


@dataclass(frozen=True, slots=True)
class ConnectPhase:
    """An arm's connect phase: measured requests, those that opened a connection during the
    run, their mean and largest connect time, and its share of all measured requests' time
    (dispatch to done; None without a finished request)."""

    measured: int
    connected: int
    mean_s: float | None
    max_s: float | None
    share: float | None


@dataclass
class ArmDiagnosis:
    arm: int
    name: str
    engines: list[str] = field(default_factory=list)
    server: PhaseSplit | None = None
    client: PhaseSplit | None = None
    kv_usage: tuple[float, float] | None = None  # (mean, max)
    running: tuple[float, float] | None = None
    waiting: tuple[float, float] | None = None
    preemptions: float | None = None
    spec_acceptance: float | None = None  # accepted / draft tokens
    spec_accept_length: float | None = None  # SGLang's gauge
    spec_k: float | None = None  # draft tokens per draft (vLLM counters)
    spec_tokens_per_step: float | None = None  # 1 + accepted tokens per draft
    gpu: GpuSummary | None = None
    scrapes_ok: int = 0
    counter_resets: int = 0  # counters that went down: the server restarted mid-run
    scrapes_failed: int = 0
    output_tokens: int = 0
    prompt_tokens_mean: float | None = None
    output_tokens_mean: float | None = None
    tpot_mean_s: float | None = None
    decode_concurrency: float | None = None  # client: mean requests decoding at once
    server_generated: float | None = None  # generation tokens counted by the server
    server_e2e_s: float | None = None  # the server's mean request latency (its histogram)
    client_e2e_s: float | None = None  # the client's mean, dispatch to last token
    roofline: list = field(default_factory=list)  # abtui.telemetry.bottleneck.PhaseBound
    timings: TimingCheck | None = None  # the server's per-request timings vs the client's
    batch_mean: float | None = None  # llama.cpp: busy slots per decode call in the window
    slots_total: int | None = None  # llama.cpp: its --parallel, from /props
    prompt_cached_share: float | None = None  # prompt tokens reused from the engine's cache
    prompt_cached_source: str | None = None  # the counters it came from
    # the prefix cache as the responses said (abtui.telemetry.prefix_cache), per turn
    prefix_cache: ArmCache | None = None
    reasoning: ArmReasoning | None = None  # reasoning and answer TPOT, where there was reasoning
    # the connect phase: None for a session written before it was recorded
    connect: ConnectPhase | None = None
    preconnected: dict | None = None  # meta.connections of this arm (abtui.runner.pool)

    @property
    def phases(self) -> PhaseSplit | None:
        """The best view there is: the server's when it has one, the client's otherwise."""
        return self.server or self.client


class _Series:
    """Telemetry of one arm in its measured windows: sums of deltas and gauges by metric."""

    def __init__(self, tel: dict[str, np.ndarray], arm: int, windows: MeasuredWindows) -> None:
        mask = tel["arm"] == arm
        mask[mask] = windows.contains(arm, tel["t_ns"][mask])
        self.metric = tel["metric"][mask]
        self.source = tel["source"][mask]
        self.value = tel["value"][mask]

    def values(self, metric: str, source: str | None = None) -> np.ndarray:
        m = self.metric == metric
        if source is not None:
            m &= self.source == source
        v = self.value[m].astype(float)
        return v[np.isfinite(v)]

    def total(self, metric: str, source: str | None = None) -> float | None:
        v = self.values(metric + ".delta", source)
        return float(v.sum()) if v.size else None

    def gauge(self, metric: str, source: str | None = None) -> tuple[float, float] | None:
        v = self.values(metric, source)
        return (float(v.mean()), float(v.max())) if v.size else None

    def mean_of(self, hist: str) -> float | None:
        s, c = self.total(hist + ".sum"), self.total(hist + ".count")
        return s / c if s is not None and c else None

    def sources(self) -> set[str]:
        return set(self.source.tolist())


def _split(view: str, queue: float | None, prefill: float, decode: float) -> PhaseSplit | None:
    parts = [max(0.0, x) for x in (queue or 0.0, prefill, decode)]
    total = sum(parts)
    if not total > 0:
        return None
    q = parts[0] / total if queue is not None else None
    means = {"prefill": prefill, "decode": decode} | ({"queue": queue} if queue is not None else {})
    return PhaseSplit(view, q, parts[1] / total, parts[2] / total, means)


def _server_split(s: _Series, engines: list[str]) -> PhaseSplit | None:
    q, p, d = s.mean_of("queue_s"), s.mean_of("prefill_s"), s.mean_of("decode_s")
    eng = next((e for e in engines if e != "dcgm"), "server")
    if p is not None and d is not None:
        return _split(f"server ({eng})", q, p, d)
    ttft, e2e = s.mean_of("ttft_s"), s.mean_of("e2e_s")
    if ttft is not None and e2e is not None:
        return _split(
            f"server ({eng}: prefill = TTFT - queue, decode = E2E - TTFT)",
            q,
            ttft - (q or 0.0),
            e2e - ttft,
        )
    inf = s.mean_of("inference_s")
    pb, db = s.total("prefill_batch_s.sum"), s.total("decode_batch_s.sum")
    if inf is not None and pb is not None and db is not None and pb + db > 0:
        return _split(
            f"server ({eng}: prefill/decode in the ratio of batch forward time)",
            q,
            inf * pb / (pb + db),
            inf * db / (pb + db),
        )
    return None


def _gpu(s: _Series, out_tokens: int) -> GpuSummary | None:
    src = "nvml" if "nvml" in s.sources() else "dcgm" if "dcgm" in s.sources() else None
    if src is None:
        return None

    def mean(metric: str) -> float | None:
        g = s.gauge(metric, src)
        return g[0] if g else None

    def peak(metric: str) -> float | None:
        g = s.gauge(metric, src)
        return g[1] if g else None

    energy = s.total("gpu.energy_j", src)
    thr = s.values("gpu.throttled", src)
    mem = peak("gpu.mem_used_bytes")
    return GpuSummary(
        source=src,
        power_w=mean("gpu.power_w"),
        energy_j=energy,
        j_per_token=energy / out_tokens if energy is not None and out_tokens > 0 else None,
        mem_used_gib=mem / 2**30 if mem is not None else None,
        dram_active=mean("gpu.dram_active"),
        sm_active=mean("gpu.sm_active"),
        tensor_active=mean("gpu.tensor_active"),
        busy=mean("gpu.busy"),
        sm_clock_mhz=mean("gpu.sm_clock_mhz"),
        temp_c=peak("gpu.temp_c"),
        throttled=bool(thr.max() > 0) if thr.size else None,
        throttled_share=float((thr > 0).mean()) if thr.size else None,
    )


def diagnose(path) -> list[ArmDiagnosis]:
    """One :class:`ArmDiagnosis` per arm of the session file at ``path`` (or an open reader of
    it: :func:`~abtui.store.reader.reading`)."""
    with reading(path) as rd:
        meta = rd.meta()
        arms = rd.arms()
        tel = rd.telemetry()
        windows = MeasuredWindows.read(rd)
        client = {
            r[0]: r[1:]
            for r in rd.query(
                f"SELECT arm, avg(first_token_ns - dispatched_ns - {rd.connect_sql()}) / 1e9, "
                "avg(last_token_ns - first_token_ns) / 1e9, "
                "avg((last_token_ns - first_token_ns) / 1e9 / (n_output - 1)) "
                "FILTER (WHERE n_output > 1), avg(n_input), avg(n_output), "
                "sum(last_token_ns - first_token_ns) "
                "/ nullif(max(last_token_ns) - min(first_token_ns), 0) "
                "FROM requests WHERE status = 'ok' AND NOT warmup "
                "AND first_token_ns IS NOT NULL GROUP BY arm"
            )
        }
        connects = _connects(rd)
        checks = timing_checks(rd)
        caches = prefix_cache_figures(rd, [a["arm"] for a in arms])
        reasoning = reasoning_figures(rd, [a["arm"] for a in arms])
        tokens = dict(
            rd.query(
                "SELECT arm, coalesce(sum(n_output), 0) FROM requests WHERE NOT warmup GROUP BY arm"
            )
        )
    engines_meta = (meta.get("telemetry") or {}).get("engines") or {}
    resets_meta = (meta.get("telemetry") or {}).get("counter_resets") or {}
    spec_arms = (meta.get("spec") or {}).get("arms") or []
    out = []
    for a in arms:
        i = a["arm"]
        s = _Series(tel, i, windows)
        engines = list(engines_meta.get(str(i), [])) or sorted(
            x for x in s.sources() if x in ENGINES
        )
        d = ArmDiagnosis(arm=i, name=a["name"], engines=engines)
        d.output_tokens = int(tokens.get(i, 0) or 0)
        d.counter_resets = int(resets_meta.get(str(i), 0) or 0)
        ok = s.values("scrape.ok")
        d.scrapes_ok, d.scrapes_failed = int((ok > 0).sum()), int((ok == 0).sum())
        d.server = _server_split(s, engines)
        d.timings = checks.get(i)
        c = d.timings
        if d.server is None and c is not None and c.server_predicted_ms is not None:
            d.server = _split(
                "server (llamacpp timings; its slot queue is not reported)",
                None,
                c.server_prompt_ms / 1e3,
                c.server_predicted_ms / 1e3,
            )
        if i in client:
            ttft, dec, tpot, n_in, n_out, conc = client[i]
            d.decode_concurrency = conc
            if ttft is not None and dec is not None:
                d.client = _split(
                    "client (TTFT: queue + prefill + network, vs decode)", None, ttft, dec
                )
            d.tpot_mean_s, d.prompt_tokens_mean, d.output_tokens_mean = tpot, n_in, n_out
            if ttft is not None and dec is not None:
                d.client_e2e_s = ttft + dec
        d.connect = connects.get(i)
        pre = meta.get("connections")
        d.preconnected = pre.get(a["name"]) if isinstance(pre, dict) else None
        d.server_e2e_s = s.mean_of("e2e_s")
        d.kv_usage = s.gauge("kv_usage")
        d.running, d.waiting = s.gauge("running"), s.gauge("waiting")
        d.preemptions = s.total("preemptions")
        drafted, accepted = s.total("spec_draft_tokens"), s.total("spec_accepted_tokens")
        drafts = s.total("spec_drafts")
        if drafted and accepted is not None:
            d.spec_acceptance = accepted / drafted
            if drafts:
                d.spec_k, d.spec_tokens_per_step = drafted / drafts, 1 + accepted / drafts
        g = s.gauge("spec_accept_length")
        d.spec_accept_length = g[0] if g else None
        d.server_generated = s.total("generation_tokens")
        busy, decodes = s.total("busy_slot_decodes"), s.total("decodes")
        d.batch_mean = busy / decodes if busy is not None and decodes else None
        slots = s.gauge("slots_total")
        d.slots_total = int(slots[1]) if slots else None
        d.prompt_cached_share, d.prompt_cached_source = _cached_share(s)
        d.prefix_cache, d.reasoning = caches.get(i), reasoning.get(i)
        d.gpu = _gpu(s, d.output_tokens)
        if i < len(spec_arms):
            from abtui.telemetry.bottleneck import arm_bounds

            d.roofline = arm_bounds(spec_arms[i], d)
        out.append(d)
    return out


def _cached_share(s: _Series) -> tuple[float | None, str | None]:
    """The share of prompt tokens served from the engine's prefix cache, and the counters it
    came from: llama.cpp counts the computed tokens apart from the cached ones, vLLM counts
    every prompt token (and, before ``prompt_tokens_cached``, only its cache's queries and
    hits)."""
    cached = s.total("prompt_cached_tokens", "llamacpp")
    computed = s.total("prompt_tokens", "llamacpp")
    if cached is not None and computed is not None and cached + computed > 0:
        return cached / (cached + computed), "llamacpp prompt_tokens_cached"
    for eng in ("vllm", "sglang"):
        cached, prompt = s.total("prompt_cached_tokens", eng), s.total("prompt_tokens", eng)
        if cached is not None and prompt:
            return (
                cached / prompt,
                f"{eng} {'cached_tokens' if eng == 'sglang' else 'prompt_tokens_cached'}",
            )
    hits, queries = s.total("prefix_cache_hits", "vllm"), s.total("prefix_cache_queries", "vllm")
    if hits is not None and queries:
        return hits / queries, "vllm prefix_cache_hits/queries"
    rate = s.gauge("cache_hit_rate", "sglang")
    if rate is not None:
        return rate[0], "sglang cache_hit_rate gauge, mean"
    return None, None


def _connects(rd) -> dict[int, ConnectPhase]:
    """Per arm: measured requests, those that opened a connection during the run, their mean and
    largest connect phase, and its share of all measured requests' time (dispatch to done)."""
    if "connect_ns" not in rd.columns("requests"):
        return {}
    rows = rd.query(
        "SELECT arm, count(*), count(*) FILTER (WHERE connect_ns > 0), "
        "avg(connect_ns) FILTER (WHERE connect_ns > 0) / 1e9, max(connect_ns) / 1e9, "
        "sum(connect_ns) / nullif(sum(done_ns - dispatched_ns), 0) "
        "FROM requests WHERE NOT warmup AND status <> 'cancelled' GROUP BY arm"
    )
    return {int(r[0]): ConnectPhase(int(r[1]), int(r[2]), r[3], r[4], r[5]) for r in rows}


def connect_line(d: ArmDiagnosis) -> str | None:
    """The diagnosis line of the connect phase (None when the session did not record it)."""
    c, pre = d.connect, d.preconnected
    if c is None and not pre:
        return None
    parts = []
    if pre:
        opened = int(pre.get("opened") or 0)
        words = f"{opened} opened before t0 ({pre.get('seconds') or 0.0:.2f} s)"
        extra = [
            f"{int(pre[k])} {w}"
            for k, w in (
                ("unanswered", "not answered in time (the server serves no more at once)"),
                ("closed", "closed by the server after one response"),
                ("failed", "failed"),
                ("late", "still opening at t0"),
            )
            if pre.get(k)
        ]
        parts.append(words + (f" ({'; '.join(extra)})" if extra else ""))
    if c is not None:
        n, k = c.measured, c.connected
        if k:
            parts.append(
                f"{k} of {n} requests opened one during the run (mean "
                f"{c.mean_s * 1e3:.1f} ms, max {c.max_s * 1e3:.1f} ms, "
                f"{(c.share or 0.0):.2%} of request time; out of TTFT and E2E, "
                "in TTFT (user))"
            )
        else:
            parts.append(f"none of {n} requests waited for one")
    return "    connections: " + "; ".join(parts)


# ------------------------------------------------------------------------------ text


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.0%}"


def _f(x: float | None, fmt: str, unit: str = "") -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:{fmt}}{unit}"


def diagnosis_lines(diags: list[ArmDiagnosis]) -> list[str]:
    """The headless "diagnosis" block: a few lines per arm."""
    lines = ["Diagnosis (where the time went)"]
    for d in diags:
        lines.append(f"  {d.name}:")
        ph = d.phases
        if ph is not None:
            q = f"queue {_pct(ph.queue)}, " if ph.queue is not None else ""
            lines.append(
                f"    phases: {q}prefill {_pct(ph.prefill)}, decode {_pct(ph.decode)}  [{ph.view}]"
            )
        else:
            lines.append("    phases: n/a (no request finished)")
        if d.server_e2e_s is not None and d.client_e2e_s is not None:
            gap = (d.client_e2e_s - d.server_e2e_s) * 1e3
            lines.append(
                f"    check: mean E2E {d.server_e2e_s * 1e3:.1f} ms in the server, "
                f"{d.client_e2e_s * 1e3:.1f} ms at the client ({gap:+.1f} ms outside "
                "the engine: network, HTTP, streaming)"
            )
        conn = connect_line(d)
        if conn:
            lines.append(conn)
        lines += timing_lines(d.timings, d.spec_acceptance)
        cache = cache_line(
            d.prefix_cache or ArmCache(), d.prompt_cached_share, d.prompt_cached_source
        )
        lines += [x for x in (cache, reasoning_line(d.reasoning)) if x]
        if d.server is None and d.scrapes_ok == 0:
            why = f"{d.scrapes_failed} scrapes failed" if d.scrapes_failed else "not scraped"
            lines.append(f"    server metrics: none ({why})")
        srv = []
        if d.running:
            srv.append(f"running {d.running[0]:.1f} (max {d.running[1]:.0f})")
        if d.waiting:
            srv.append(f"waiting {d.waiting[0]:.1f} (max {d.waiting[1]:.0f})")
        if d.kv_usage:
            srv.append(f"KV {d.kv_usage[0]:.1%} (max {d.kv_usage[1]:.1%})")
        if d.preemptions is not None:
            srv.append(f"preemptions {d.preemptions:.0f}")
        if d.batch_mean is not None:
            of = f" of {d.slots_total}" if d.slots_total else ""
            srv.append(f"batch {d.batch_mean:.2f}{of} busy slots/decode")
        if d.spec_acceptance is not None and d.timings is None:  # else in the timings line
            srv.append(f"spec acceptance {d.spec_acceptance:.0%}")
        if d.spec_tokens_per_step is not None:
            srv.append(f"{d.spec_tokens_per_step:.2f} tokens/step")
        if d.spec_accept_length is not None:
            srv.append(f"spec accept length {d.spec_accept_length:.2f}")
        if srv:
            lines.append("    server: " + ", ".join(srv))
        if d.counter_resets:
            lines.append(
                f"    warning: the server's counters went back to zero {d.counter_resets} "
                "time(s) (a restart during the run?): deltas count from zero there"
            )
        g = d.gpu
        if g is not None:
            fields = (
                (g.power_w, f"power {_f(g.power_w, '.0f', ' W')}"),
                (g.j_per_token, f"{_f(g.j_per_token, '.3f', ' J/token')}"),
                (g.mem_used_gib, f"mem {_f(g.mem_used_gib, '.1f', ' GiB')}"),
                (g.dram_active, f"DRAM BW {_pct(g.dram_active)}"),
                (g.sm_active, f"SM active {_pct(g.sm_active)}"),
                (g.tensor_active, f"tensor active {_pct(g.tensor_active)}"),
                (g.busy, f"busy time {_pct(g.busy)}"),
                (g.sm_clock_mhz, f"SM clock {_f(g.sm_clock_mhz, '.0f', ' MHz')}"),
                (g.temp_c, f"max {_f(g.temp_c, '.0f', ' °C')}"),
            )
            parts = [text for value, text in fields if value is not None] or ["no fields"]
            thr = (
                "THROTTLED " + _pct(g.throttled_share) + " of samples"
                if g.throttled
                else "not throttled"
                if g.throttled is False
                else "throttling n/a"
            )
            lines.append(f"    GPU ({g.source}): " + ", ".join(parts) + f", {thr}")
        else:
            lines.append("    GPU: n/a (no gpu_index for NVML and no DCGM metrics)")
        for b in d.roofline:
            lines.append(f"    {b.label()}")
    return lines
