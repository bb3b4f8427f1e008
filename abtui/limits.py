"""The bounds of every number a user gives abtui, in one table, each with its reason.

Every numeric field of the spec (``[workload]``, ``[load]``, ``[request]`` …), of a workload
line (``item.*``) and of a trace row an importer reads (``trace.*``) has one row in
:data:`LIMITS`: its range, whether it is a whole number, and why the range is what it is. The
spec's parser and validation (:mod:`abtui.spec`), the command line's flags
(:mod:`abtui.cli.types`), the workload reader (:mod:`abtui.workload.jsonl`) and the trace
importers (:mod:`abtui.workload.importers`) all check through :func:`check`, so a value out of
range is refused before anything runs, with a message naming the field and the range; each
caller adds where (the file and line, the flag). docs/reliability.md lists the table.

The bounds are generous: a real run never meets them (10⁶ requests per arm and concurrencies
of a few thousand are in use); a value past them is a typo or a hostile file, and would
otherwise end in an allocation that cannot be made, an integer that overflows a column, a
float that is not JSON, or a machine brought to its knees.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

MAX_REQUESTS = 10_000_000
MAX_CONCURRENCY = 16_384
MAX_TOKENS = 10_000_000
MAX_RATE = 1_000_000.0
MAX_SPAN_S = 366 * 86_400.0  # a year (and a day)
MAX_WAIT_S = 86_400.0  # a day
MAX_EPOCH_S = 253_402_300_799.0  # 9999-12-31T23:59:59Z
MAX_RESAMPLES = 100_000
MAX_SEED = 2**63 - 1
MAX_GENERATORS_RAY = 256
GENERATORS_PER_CPU = 2

_WHY_REQUESTS = "ten times the largest run measured; the main process keeps arrays of them"
_WHY_TOKENS = "about the longest context window served today"
_WHY_SPAN = "a year: longer than any public trace"
_WHY_WAIT = "a day: longer is a hang"
_WHY_SEED = "a 64-bit seed"


@dataclass(frozen=True, slots=True)
class Limit:
    """The range of one field: ``low ≤ v ≤ high`` (``low < v`` when ``low_open``)."""

    low: float
    high: float
    integer: bool
    why: str
    low_open: bool = False
    unit: str = ""


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def max_generators() -> int:
    """Load-generator processes one machine can use: :data:`GENERATORS_PER_CPU` per usable CPU,
    for all arms together (a process beyond the cores adds no sending rate, only contention)."""
    return GENERATORS_PER_CPU * usable_cpus()


def _int(low, high, why, unit=""):
    return Limit(low, high, True, why, unit=unit)


def _num(low, high, why, unit="", low_open=False):
    return Limit(low, high, False, why, low_open=low_open, unit=unit)


LIMITS: dict[str, Limit] = {
    # [workload]
    "workload.requests": _int(1, MAX_REQUESTS, _WHY_REQUESTS),
    "workload.input_tokens": _int(1, MAX_TOKENS, _WHY_TOKENS),
    "workload.output_tokens": _int(1, MAX_TOKENS, _WHY_TOKENS),
    "workload.seed": _int(0, MAX_SEED, _WHY_SEED),
    "workload.prefix_groups": _int(0, MAX_REQUESTS, "no more groups than requests"),
    "workload.prefix_tokens": _int(0, MAX_TOKENS, _WHY_TOKENS),
    "workload.images_per_request": _int(0, 64, "more images than a vision model takes at once"),
    # an --input-dist / --output-dist: a length (fixed, uniform's ends, a mean, a median) and
    # a spread; the lengths drawn are rounded and clipped into 1..MAX_TOKENS
    "workload.length": _num(1, MAX_TOKENS, _WHY_TOKENS),
    "workload.length_sd": _num(0, MAX_TOKENS, "a normal length's standard deviation, tokens"),
    "workload.length_sigma": _num(0, 10, "a lognormal σ of 10 puts one σ at 22,000× the median"),
    # [load]
    "load.rate": _num(
        0, MAX_RATE, "a thousand times what one generator keeps", "req/s", low_open=True
    ),
    "load.concurrency": _int(
        1,
        MAX_CONCURRENCY,
        "each request in flight holds a connection, a file descriptor and a local port",
    ),
    # locally further capped by the machine: abtui.spec.bounds, max_generators()
    "load.generators": _int(
        1,
        MAX_GENERATORS_RAY,
        "per arm, with --ray; a local run has at "
        f"most {GENERATORS_PER_CPU} per usable CPU for all arms together",
    ),
    "load.burstiness": _num(
        0, 100, "past 100 nearly every request lands in one burst", low_open=True
    ),
    "load.speedup": _num(
        0, 1e6, "a million times faster is every request at once", "×", low_open=True
    ),
    "load.runs": _int(1, 1_000, "each run repeats the whole schedule"),
    "load.blocks": _int(1, 10_000, "alternation blocks per level and run"),
    "load.duration_s": _num(0, MAX_SPAN_S, _WHY_SPAN, "s", low_open=True),
    "load.warmup": _int(0, 100_000, "warm-up requests are sent before the measured schedule"),
    "load.sweep_levels": _int(1, 100, "each sweep level is its own segment of the session"),
    # [request]
    "request.temperature": _num(0, 2, "the OpenAI API's range"),
    "request.seed": _int(0, MAX_SEED, _WHY_SEED),
    "request.timeout_s": _num(0, MAX_WAIT_S, _WHY_WAIT, "s", low_open=True),
    "request.read_timeout_s": _num(0, MAX_WAIT_S, _WHY_WAIT, "s", low_open=True),
    "request.connect_timeout_s": _num(0, MAX_WAIT_S, _WHY_WAIT, "s", low_open=True),
    # [slo]: every key (ttft, tpot, itl, e2e, ttft_user, ttfo, tpot_reasoning, tpot_answer)
    "slo": _num(
        0, MAX_WAIT_S, "a per-request target of more than a day is no target", "s", low_open=True
    ),
    # [telemetry]
    "telemetry.interval_s": _num(
        0.05,
        3_600,
        "sampling faster than 20 Hz costs the run CPU; slower than hourly sees nothing",
        "s",
    ),
    # [cost] and the arms' own
    "cost.gpu_price": _num(0, 1e6, "USD per GPU-hour", "USD"),
    "cost.gpus": _int(1, 1_000_000, "GPUs per arm"),
    # [policy]
    "policy.alpha": _num(0, 0.5, "a significance level", low_open=True),
    "policy.delta": _num(0, 0.99, "a fraction of the baseline's value"),
    "policy.delta_tail": _num(0, 0.99, "a fraction of the baseline's value"),
    "policy.resamples": _int(
        100,
        MAX_RESAMPLES,
        "a weight matrix of resamples × 500 units is held (20 MB at the default 10,000)",
    ),
    "policy.seed": _int(0, MAX_SEED, _WHY_SEED),
    # [quality]
    "quality.max_tokens": _int(1, MAX_TOKENS, _WHY_TOKENS),
    "quality.seed": _int(0, MAX_SEED, _WHY_SEED),
    "quality.per_cell": _int(1, 10_000, "haystacks per context length"),
    "quality.max_length": _int(1024, MAX_TOKENS, _WHY_TOKENS),
    "quality.concurrency": _int(1, MAX_CONCURRENCY, "quality requests in flight per arm"),
    "quality.margin": _num(0, 0.99, "a fraction of accuracy (0.01 = 1 percentage point)"),
    "quality.budget_s": _num(
        0, MAX_WAIT_S, "the quality items' time budget; a day is a hang", "s", low_open=True
    ),
    # [ray]
    "ray.cpus_per_generator": _num(
        0, 1_024, "Ray CPUs one generator actor reserves", low_open=True
    ),
    "ray.clock_warn_ms": _num(
        0, 60_000, "a node clock known to ± a minute says nothing", "ms", low_open=True
    ),
    # [profile]
    "profile.after_s": _num(0, MAX_WAIT_S, "the window's opening into the measured phase", "s"),
    "profile.duration_s": _num(
        0, MAX_WAIT_S, "the profiling window; a profile of a day is gigabytes", "s", low_open=True
    ),
    "profile.steps": _int(1, 1_000_000, "engine steps one profile records"),
    "profile.factor": _num(
        1, 1e6, "how many times faster the targeted classes get (1: no change)", low_open=True
    ),
    "profile.wait_s": _num(0, MAX_WAIT_S, "the wait for a trace file to appear", "s"),
    # a workload line (abtui JSONL) and what the importers write into one
    "item.arrival_s": _num(0, MAX_SPAN_S, _WHY_SPAN, "s"),
    "item.input_tokens": _int(1, MAX_TOKENS, _WHY_TOKENS),
    "item.max_tokens": _int(1, MAX_TOKENS, _WHY_TOKENS),
    "item.block_tokens": _int(1, MAX_TOKENS, _WHY_TOKENS),
    "item.prefix_id": _int(0, MAX_SEED, "a 64-bit block id"),
    # a conversation line (abtui.workload.conversations)
    "conversation.turns": _int(1, 10_000, "turns of one conversation; an agent's run of tools"),
    "conversation.think_s": _num(0, MAX_WAIT_S, _WHY_WAIT, "s"),
    # a trace row, before it is a workload line
    "trace.timestamp_s": _num(0, MAX_EPOCH_S, "seconds since 1970 up to the year 9999", "s"),
    "trace.timestamp_ms": _num(
        0, MAX_EPOCH_S * 1000, "milliseconds since 1970 up to the year 9999", "ms"
    ),
    "trace.tokens": _int(0, MAX_TOKENS, _WHY_TOKENS),
}


class OutOfRange(ValueError):
    """A value outside its field's :class:`Limit`; ``str()`` names the field, the value, the
    range and why. A ``ValueError``, so the readers' bad-line handling takes it as it is."""

    def __init__(self, name: str, value: object, limit: Limit) -> None:
        self.name, self.value, self.limit = name, value, limit
        super().__init__(
            f"{name} = {_show(value)} is out of range: {describe(limit)} ({limit.why})"
        )


def _num_words(x: float) -> str:
    if x == MAX_SEED:
        return "2⁶³ − 1"
    if float(x).is_integer() and abs(x) < 1e16:
        return f"{int(x):,}"
    return f"{x:g}"


def describe(limit: Limit) -> str:
    """``a whole number from 1 to 16,384``, ``a finite number > 0 and ≤ 86,400 s``."""
    unit = f" {limit.unit}" if limit.unit else ""
    kind = "a whole number" if limit.integer else "a finite number"
    lo, hi = _num_words(limit.low), _num_words(limit.high)
    if limit.low_open:
        return f"{kind} > {lo} and ≤ {hi}{unit}"
    return f"{kind} from {lo} to {hi}{unit}"


def _show(value: object) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1e16:
        return f"{value:g}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def check(field: str, value, name: str | None = None):
    """``value`` if it is inside ``LIMITS[field]``, else :class:`OutOfRange` naming ``name``
    (default ``field``). A whole-number field takes an ``int`` or an integral float (CSV
    traces write ``12.0``) and returns an ``int``; booleans are not numbers."""
    limit = LIMITS[field]
    shown = name or field
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OutOfRange(shown, value, limit)
    if isinstance(value, float):
        if not math.isfinite(value) or (limit.integer and not value.is_integer()):
            raise OutOfRange(shown, value, limit)
    low_ok = value > limit.low if limit.low_open else value >= limit.low
    if not (low_ok and value <= limit.high):
        raise OutOfRange(shown, value, limit)
    return int(value) if limit.integer else value


def finite_json(obj, where: str) -> None:
    """Raise :class:`ValueError` naming the key path when a float anywhere in ``obj`` (a dict
    or list from a file) is NaN or infinite: it would be sent or stored as non-standard JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"{where} = {obj!r}: not a finite number (JSON has no NaN or Infinity)")
    if isinstance(obj, dict):
        for k, v in obj.items():
            finite_json(v, f"{where}.{k}")
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            finite_json(v, f"{where}[{i}]")
