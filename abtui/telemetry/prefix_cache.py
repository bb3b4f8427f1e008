"""Prefix-cache and reasoning figures per arm, from a stored session's responses.

**Prefix cache.** Each response may say how many of its prompt tokens the server served from
its prefix cache: ``usage.prompt_tokens_details.cached_tokens`` (OpenAI, vLLM, SGLang, the
simulator: ``requests.cached_tokens``) or, from llama.cpp, ``timings.cache_n``
(``server_timings.cache_n``, with ``prompt_n`` the tokens it computed). One figure per request;
the usage's where there is one, else llama.cpp's, and the arm's ``source`` says which (``mixed``
when both were used). The hit rate is cached / prompt tokens over the measured (ok, not warm-up)
requests that said, overall and per turn of a conversation (the session's ``requests.turn``;
a request on its own is turn 0). TTFT (service view:
dispatch to first token, less the connect phase) is split by each request's cached share: the
median of the requests with at least :data:`CACHED_SHARE` of their prompt cached against the
median of the rest, and by turn index (every ok measured request of the turn, whether or not
its response said what was cached). The server's own counters (vLLM ``prefix_cache_hits`` / ``queries``,
llama.cpp ``prompt_tokens_cached``) are read by :mod:`abtui.telemetry.diagnosis` and shown next
to these.

**Reasoning.** Where responses said (or streamed) reasoning tokens: per request, reasoning TPOT =
(first answer chunk − first chunk) / reasoning tokens (the thinking's pace), answer TPOT = (last
chunk − first answer chunk) / (answer tokens − 1); their medians, the mean reasoning and answer
tokens, and the TTFO − TTFT median (how long the thinking held the answer back).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

CACHED_SHARE = 0.5  # a request with at least this share of its prompt cached counts as cached
USAGE = "usage.prompt_tokens_details.cached_tokens"
LLAMACPP = "timings.cache_n"


@dataclass
class TurnCache:
    turn: int
    requests: int  # ok measured requests whose response gave a cached figure
    prompt_tokens: int
    cached_tokens: int

    @property
    def hit_rate(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens > 0 else None


@dataclass
class TurnLatency:
    """One turn index's ok measured requests on an arm and their median TTFT (service view),
    whether or not the responses said what was cached."""

    turn: int
    requests: int
    ttft_p50_s: float | None


@dataclass
class ArmCache:
    """One arm's prefix-cache figures from its responses (see the module docstring)."""

    source: str | None = None  # USAGE, LLAMACPP, "mixed", or None: no response said
    requests: int = 0  # ok measured requests with a cached figure
    measured: int = 0  # ok measured requests
    prompt_tokens: int = 0
    cached_tokens: int = 0
    hit_rate: float | None = None  # cached / prompt tokens
    turns: list[TurnCache] = field(default_factory=list)
    ttft_cached_p50_s: float | None = None  # median TTFT, requests with >= CACHED_SHARE cached
    ttft_uncached_p50_s: float | None = None  # the rest
    n_cached: int = 0
    n_uncached: int = 0
    latency_turns: list[TurnLatency] = field(default_factory=list)  # by turn index


@dataclass
class ArmReasoning:
    requests: int = 0  # ok measured requests with reasoning tokens > 0
    reasoning_tokens_mean: float | None = None
    answer_tokens_mean: float | None = None
    tpot_reasoning_p50_s: float | None = None
    tpot_answer_p50_s: float | None = None
    thinking_p50_s: float | None = None  # median TTFO - TTFT


def _turn_sql(rd) -> tuple[str, str]:
    """(expression, join) giving each request's turn: ``requests.turn``, else 0 (a request on
    its own, or a file written before conversations were replayed)."""
    if "turn" in rd.columns("requests"):
        return "COALESCE(r.turn, 0)", ""
    return "0", ""


def _median(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.median(x)) if x.size else None


def _rows(rd) -> dict[str, np.ndarray]:
    """Per ok measured request: arm, turn, prompt tokens, cached tokens and where from, TTFT."""
    turn, join = _turn_sql(rd)
    has_timings = "cache_n" in rd.columns("server_timings")
    cache_n = "t.cache_n" if has_timings else "NULL"
    prompt_n = "t.prompt_n" if has_timings else "NULL"
    if has_timings:
        join += " LEFT JOIN server_timings t ON t.req = r.req"
    cached = "r.cached_tokens" if "cached_tokens" in rd.columns("requests") else "NULL"
    sql = (
        f"SELECT r.arm, {turn} AS turn, r.n_input, {cached} AS usage_cached, "
        f"{cache_n} AS cache_n, {prompt_n} AS prompt_n, "
        f"(r.first_token_ns - r.dispatched_ns - {rd.connect_sql('r.')}) / 1e9 AS ttft "
        f"FROM requests r{join} WHERE r.status = 'ok' AND NOT r.warmup"
    )
    got = rd.query(sql)
    names = ("arm", "turn", "n_input", "usage_cached", "cache_n", "prompt_n", "ttft")
    return {
        c: np.array([np.nan if row[k] is None else row[k] for row in got], dtype=float)
        for k, c in enumerate(names)
    }


def prefix_cache_figures(rd, arms: list[int]) -> dict[int, ArmCache]:
    """Per arm, its :class:`ArmCache` (an arm whose responses never said has ``source`` None)."""
    r = _rows(rd)
    usage = np.isfinite(r["usage_cached"])
    llama = ~usage & np.isfinite(r["cache_n"])
    cached = np.where(usage, r["usage_cached"], r["cache_n"])
    # llama.cpp: the prompt is what it took from the cache plus what it computed
    prompt = np.where(
        llama & np.isfinite(r["prompt_n"]), r["cache_n"] + r["prompt_n"], r["n_input"]
    )
    said = (usage | llama) & np.isfinite(prompt) & (prompt > 0)
    out = {}
    for arm in arms:
        mine = r["arm"] == arm
        a = ArmCache(measured=int(mine.sum()), latency_turns=_turn_latency(r, mine))
        m = mine & said
        a.requests = int(m.sum())
        if a.requests:
            kinds = [s for s, k in ((USAGE, usage), (LLAMACPP, llama)) if (m & k).any()]
            a.source = kinds[0] if len(kinds) == 1 else "mixed"
            a.prompt_tokens, a.cached_tokens = int(prompt[m].sum()), int(cached[m].sum())
            a.hit_rate = a.cached_tokens / a.prompt_tokens
            for t in np.unique(r["turn"][m]).astype(int).tolist():
                mt = m & (r["turn"] == t)
                a.turns.append(
                    TurnCache(t, int(mt.sum()), int(prompt[mt].sum()), int(cached[mt].sum()))
                )
            share = cached / np.where(said, prompt, 1)
            hot, cold = m & (share >= CACHED_SHARE), m & (share < CACHED_SHARE)
            a.n_cached, a.n_uncached = int(hot.sum()), int(cold.sum())
            a.ttft_cached_p50_s = _median(r["ttft"][hot])
            a.ttft_uncached_p50_s = _median(r["ttft"][cold])
        out[arm] = a
    return out


def _turn_latency(r: dict[str, np.ndarray], mine: np.ndarray) -> list[TurnLatency]:
    """Per turn index of an arm's ok measured requests, their count and median TTFT."""
    turns = r["turn"][mine]
    ttft = r["ttft"][mine]
    return [
        TurnLatency(t, int((turns == t).sum()), _median(ttft[turns == t]))
        for t in np.unique(turns).astype(int).tolist()
    ]


def reasoning_figures(rd, arms: list[int]) -> dict[int, ArmReasoning]:
    """Per arm with reasoning requests, its :class:`ArmReasoning` (others are left out)."""
    cols = rd.columns("requests")
    if not {"first_output_ns", "reasoning_tokens"} <= cols:
        return {}
    got = rd.query(
        "SELECT arm, reasoning_tokens, n_output, "
        "(first_output_ns - first_token_ns) / 1e9, (last_token_ns - first_output_ns) / 1e9 "
        "FROM requests WHERE status = 'ok' AND NOT warmup AND reasoning_tokens > 0 "
        "AND first_output_ns IS NOT NULL AND first_token_ns IS NOT NULL"
    )
    if not got:
        return {}
    x = np.array([[np.nan if v is None else v for v in row] for row in got], dtype=float)
    arm, think, n_out, gap, answer_s = x.T
    answer = n_out - think
    out = {}
    for a in arms:
        m = arm == a
        if not m.any():
            continue
        ans = m & (answer > 1)
        out[a] = ArmReasoning(
            requests=int(m.sum()),
            reasoning_tokens_mean=float(think[m].mean()),
            answer_tokens_mean=_mean(answer[m]),
            tpot_reasoning_p50_s=_median(gap[m] / think[m]),
            tpot_answer_p50_s=_median(answer_s[ans] / (answer[ans] - 1)),
            thinking_p50_s=_median(gap[m]),
        )
    return out


def _mean(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else None


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.1f} ms"


def cache_line(a: ArmCache, server: float | None, server_source: str | None) -> str | None:
    """The diagnosis line of an arm's prefix cache (None when neither its responses nor its
    server's counters said anything)."""
    parts = []
    if a.source is not None and a.hit_rate is not None:
        parts.append(
            f"hit {a.hit_rate:.1%} of {a.prompt_tokens:,} prompt tokens in {a.requests} "
            f"responses ({a.source})"
        )
        if len(a.turns) > 1:
            turns = ", ".join(
                f"{t.turn}: {t.hit_rate:.0%}" for t in a.turns[:8] if t.hit_rate is not None
            )
            more = f" (+{len(a.turns) - 8} more)" if len(a.turns) > 8 else ""
            parts.append(f"by turn {turns}{more}")
        parts.append(
            f"TTFT P50 {_ms(a.ttft_cached_p50_s)} with >= {CACHED_SHARE:.0%} cached "
            f"({a.n_cached}) vs {_ms(a.ttft_uncached_p50_s)} ({a.n_uncached})"
        )
    if server is not None:
        parts.append(f"prompt cache {server:.0%} by the server's counters ({server_source})")
    return "    prefix cache: " + "; ".join(parts) if parts else None


def reasoning_line(r: ArmReasoning | None) -> str | None:
    if r is None:
        return None
    return (
        f"    reasoning: {r.requests} responses, {r.reasoning_tokens_mean:.0f} reasoning + "
        f"{r.answer_tokens_mean or 0:.0f} answer tokens (means); TPOT P50 reasoning "
        f"{_ms(r.tpot_reasoning_p50_s)}, answer {_ms(r.tpot_answer_p50_s)}; the thinking "
        f"held the answer back {_ms(r.thinking_p50_s)} (P50 of TTFO - TTFT)"
    )
