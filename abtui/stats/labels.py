"""How an effect row is named and shown: ``ttft.p99`` → ``P99 TTFT``, ratios as signed percents,
a row as one sentence (``P99 TTFT regressed +12.0% [+7.0%, +18.0%]``)."""

from __future__ import annotations

import math

from abtui.stats import decide
from abtui.stats.rows import Effect

_METRIC_LABEL = {
    "ttft": "TTFT",
    "ttft_user": "TTFT (user)",
    "tpot": "TPOT",
    "itl": "ITL",
    "e2e": "E2E",
}
_STAT_LABEL = {"mean": "mean", "p50": "P50", "p90": "P90", "p95": "P95", "p99": "P99"}
_RATE_LABEL = {
    "throughput.requests": "throughput (requests/s)",
    "throughput.output_tokens": "throughput (output tok/s)",
    "goodput.requests": "goodput (requests/s)",
    "goodput.output_tokens": "goodput (output tok/s)",
    "slo.attainment": "SLO attainment",
    "cost.per_mtok_output": "$/Mtok output",
    "cost.per_mtok_good": "$/Mtok good",
    "cost.per_1k_good_requests": "$ per 1k good requests",
}


def label(key: str) -> str:
    """``ttft.p99`` → ``P99 TTFT``; ``goodput.requests`` → ``goodput (requests/s)``;
    ``e2e.p50@in16-255`` → ``P50 E2E (input 16–255 tokens)``."""
    key, _, group = key.partition("@")
    if group.startswith("in"):
        return f"{label(key)} (input {group[2:].replace('-', '–')} tokens)"
    if group.startswith("level"):
        return f"{label(key)} (sweep level {group[5:]})"
    if key in _RATE_LABEL:
        return _RATE_LABEL[key]
    metric, _, stat = key.partition(".")
    return f"{_STAT_LABEL.get(stat, stat)} {_METRIC_LABEL.get(metric, metric)}"


def pct(x: float) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x * 100:+.1f}%"


def describe(e: Effect) -> str:
    """``P99 TTFT regressed +12.0% [+7.0%, +18.0%]``."""
    verb = {
        decide.IMPROVED: "improved",
        decide.REGRESSED: "regressed",
        decide.EQUIVALENT: "unchanged",
        decide.INCONCLUSIVE: "inconclusive",
    }[e.outcome]
    return f"{label(e.key)} {verb} {pct(e.ratio)} [{pct(e.lo)}, {pct(e.hi)}]"
