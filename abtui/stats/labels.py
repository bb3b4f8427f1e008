"""How an effect row is named and shown: ``ttft.p99`` → ``P99 TTFT``, ratios as signed percents,
a row as one sentence (``P99 TTFT regressed +12.0% [+7.0%, +18.0%]``)."""

from __future__ import annotations

import math

from abtui.metrics import catalogue as cat
from abtui.stats import decide
from abtui.stats.rows import Effect


def label(key: str) -> str:
    """``ttft.p99`` → ``P99 TTFT``; ``goodput.requests`` → ``goodput (requests/s)``;
    ``e2e.p50@in16-255`` → ``P50 E2E (input 16–255 tokens)``."""
    key, _, group = key.partition("@")
    if group.startswith("in"):
        return f"{label(key)} (input {group[2:].replace('-', '–')} tokens)"
    if group.startswith("level"):
        return f"{label(key)} (sweep level {group[5:]})"
    if key in cat.ROWS:
        return cat.ROWS[key].label
    metric, _, stat = key.partition(".")
    m = cat.METRICS.get(metric)
    return f"{cat.STAT_LABEL.get(stat, stat)} {m.label if m else metric}"


def short_label(key: str) -> str:
    """``throughput.output_tokens`` → ``out tok/s``; ``ttft_user.p99`` → ``P99 TTFT(u)``;
    ``e2e.p50@in16-255`` → ``P50 E2E in16-255``: a name that fits a narrow table."""
    key, _, group = key.partition("@")
    if key in cat.ROWS:
        name = cat.ROWS[key].short
    else:
        metric, _, stat = key.partition(".")
        m = cat.METRICS.get(metric)
        name = f"{cat.STAT_LABEL.get(stat, stat)} {m.short if m else metric}"
    return f"{name} {group}" if group else name


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
