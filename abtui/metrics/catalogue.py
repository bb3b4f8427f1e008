"""Every metric and statistic a comparison can name, each said once: its key, how it is labelled
(in full and in a narrow table), its unit, which way is better and how it is computed.

An effect row's key is ``metric.stat`` for a latency (``ttft.p99``) and the row's own key for a
rate or cost (``goodput.requests``). The statistics, the rules and the reports take the names
from here rather than writing the lists out again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from abtui.metrics import request as request_metrics
from abtui.metrics.table import RequestTable


@dataclass(frozen=True, slots=True)
class Metric:
    """A latency, one value per ok request (or, for ITL, per gap between chunks)."""

    key: str
    label: str  # ``P99 TTFT (user)`` takes it after the statistic's label
    short: str  # the same in a narrow table
    unit: str
    lower_is_better: bool
    # the values over a table's rows (positions; None: every row), one per request; None for
    # ITL, whose values are per chunk gap (rm.chunk_gaps)
    per_request: Callable[[RequestTable, np.ndarray | None], np.ndarray] | None


@dataclass(frozen=True, slots=True)
class Stat:
    """A statistic of a latency's values: the mean or a percentile."""

    key: str
    label: str
    q: float | None  # the quantile (None: the mean)
    tail: bool  # P90 and beyond: their own δ and the small-sample rule (metrics.tails)


@dataclass(frozen=True, slots=True)
class Row:
    """A rate or cost row: one figure per arm, not a distribution."""

    key: str
    label: str
    short: str
    unit: str
    lower_is_better: bool


LATENCY = (
    Metric("ttft", "TTFT", "TTFT", "s", True, request_metrics.ttft_s),
    Metric("ttft_user", "TTFT (user)", "TTFT(u)", "s", True, request_metrics.ttft_user_s),
    Metric("ttfo", "TTFO", "TTFO", "s", True, request_metrics.ttfo_s),
    Metric("tpot", "TPOT", "TPOT", "s", True, request_metrics.tpot_s),
    Metric(
        "tpot_reasoning",
        "TPOT (reasoning)",
        "TPOT(r)",
        "s",
        True,
        request_metrics.tpot_reasoning_s,
    ),
    Metric("tpot_answer", "TPOT (answer)", "TPOT(a)", "s", True, request_metrics.tpot_answer_s),
    Metric("itl", "ITL", "ITL", "s", True, None),
    Metric("e2e", "E2E", "E2E", "s", True, request_metrics.e2e_s),
)
STATS = (
    Stat("mean", "mean", None, False),
    Stat("p50", "P50", 0.50, False),
    Stat("p90", "P90", 0.90, True),
    Stat("p95", "P95", 0.95, True),
    Stat("p99", "P99", 0.99, True),
)
RATES = (
    Row("throughput.requests", "throughput (requests/s)", "req/s", "req/s", False),
    Row("throughput.output_tokens", "throughput (output tok/s)", "out tok/s", "tok/s", False),
    Row("goodput.requests", "goodput (requests/s)", "good req/s", "req/s", False),
    Row("goodput.output_tokens", "goodput (output tok/s)", "good tok/s", "tok/s", False),
    Row("slo.attainment", "SLO attainment", "SLO met", "share", False),
)
COSTS = (
    Row("cost.per_mtok_output", "$/Mtok output", "$/Mtok out", "USD", True),
    Row("cost.per_mtok_good", "$/Mtok good", "$/Mtok good", "USD", True),
    Row("cost.per_1k_good_requests", "$ per 1k good requests", "$/1k good", "USD", True),
)

METRICS = {m.key: m for m in LATENCY}
LATENCY_KEYS = tuple(METRICS)  # ttft, ttft_user, ttfo, tpot, tpot_reasoning/answer, itl, e2e
PER_REQUEST_KEYS = tuple(m.key for m in LATENCY if m.per_request is not None)  # not ITL
STAT_KEYS = tuple(s.key for s in STATS)  # mean, p50, p90, p95, p99
QUANTILES = {s.key: s.q for s in STATS if s.q is not None}  # p50 … p99 → 0.50 … 0.99
TAIL_Q = {s.key: s.q for s in STATS if s.tail}  # p90, p95, p99
STAT_LABEL = {s.key: s.label for s in STATS}
ROWS = {r.key: r for r in RATES + COSTS}
RATE_KEYS = tuple(r.key for r in RATES)
COST_KEYS = tuple(r.key for r in COSTS)
LATENCY_ROW_KEYS = tuple(f"{m}.{s}" for m in LATENCY_KEYS for s in STAT_KEYS)
ROW_KEYS = LATENCY_ROW_KEYS + RATE_KEYS + COST_KEYS
"""Every effect row a verdict can have (a policy's primary and guardrails name one of these)."""


def is_latency(metric: str) -> bool:
    """Whether ``metric`` (a row's metric, ``ttft``; or its key, ``ttft.p99@in16-255``) is a
    latency, shown in seconds."""
    return metric.partition(".")[0] in METRICS


def per_request_values(t: RequestTable, metric: str, rows: np.ndarray | None = None) -> np.ndarray:
    """A per-request latency's values over ``rows`` of ``t`` (positions; None: every row)."""
    fn = METRICS[metric].per_request
    if fn is None:
        raise ValueError(f"{metric} is not one value per request")
    return fn(t, rows)


# Shown only where reasoning made them differ from another metric: TTFO is TTFT and answer TPOT
# is TPOT unless some answer came after reasoning (the first token of any kind is then not the
# first of the answer); reasoning TPOT has no value without reasoning.
ANSWER_KEYS = ("ttfo", "tpot_reasoning", "tpot_answer")


def has_reasoning(t: RequestTable) -> bool:
    """Whether an ok request of ``t`` started its answer after another token (reasoning): only
    then is TTFO not TTFT, row for row."""
    ok = t.ok
    return bool((t.first_output_ns[ok] != t.first_token_ns[ok]).any())


def latency_keys(t: RequestTable, named: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The latency metrics a comparison of ``t`` shows: every one, but TTFO and the reasoning
    and answer TPOT only when some answer came after reasoning (:func:`has_reasoning`) or a row
    of one is ``named`` (a policy's primary or guardrail, ``ttfo.p99``). A comparison leaves
    out those of them that have no value in an arm (:func:`abtui.stats.effects.compare`)."""
    asked = {k.partition(".")[0] for k in named}
    if has_reasoning(t):
        return LATENCY_KEYS
    return tuple(k for k in LATENCY_KEYS if k not in ANSWER_KEYS or k in asked)
