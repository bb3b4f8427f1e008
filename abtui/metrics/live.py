"""Running figures for the live panes: log-binned histograms, a throughput series, B-vs-A deltas.

Bounded memory (fixed bins, a fixed-length per-second series), fed by the runner in the main
process as records arrive, read by the UI a few times a second through :meth:`LiveArm.view`.
These are provisional running estimates for watching a run; the verdict is computed from the
session file (abtui.stats), never from these.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from abtui.client.records import CANCELLED, OK, RequestRecord
from abtui.metrics.catalogue import per_request_values
from abtui.metrics.table import NA as NA_NS
from abtui.metrics.tails import tail_min_n

LO_S = 1e-4  # lowest bin edge: 0.1 ms
DECADES = 6  # up to 100 s
PER_DECADE = 40  # fine bins (≈ 6 % wide): quantiles from bins are within a few %
EDGES = LO_S * 10.0 ** (np.arange(DECADES * PER_DECADE + 1) / PER_DECADE)
SERIES_S = 120  # seconds of throughput history kept


class LogHistogram:
    """Counts on fixed log-spaced bins (values below/above the range go to the end bins)."""

    def __init__(self) -> None:
        self.counts = np.zeros(len(EDGES) - 1, dtype=np.int64)
        self.n = 0

    def add(self, v: float) -> None:
        if not (v > 0 and math.isfinite(v)):
            return
        k = int(math.floor(math.log10(v / LO_S) * PER_DECADE))
        self.counts[min(max(k, 0), len(self.counts) - 1)] += 1
        self.n += 1

    def quantile(self, q: float) -> float:
        """The q-quantile, log-interpolated inside its bin; NaN when empty."""
        if self.n == 0:
            return float("nan")
        cum = np.cumsum(self.counts)
        target = q * self.n
        k = int(np.searchsorted(cum, target, side="left"))
        k = min(k, len(self.counts) - 1)
        before = cum[k - 1] if k else 0
        frac = (target - before) / self.counts[k] if self.counts[k] else 0.0
        lo, hi = math.log10(float(EDGES[k])), math.log10(float(EDGES[k + 1]))
        return 10 ** (lo + min(max(frac, 0.0), 1.0) * (hi - lo))

    def mean(self) -> float:
        if self.n == 0:
            return float("nan")
        mids = np.sqrt(EDGES[:-1] * EDGES[1:])
        return float((self.counts * mids).sum() / self.n)


GAUGE_HISTORY = 120  # readings kept per gauge for the live panes' history (2 min at 1 Hz)


class GaugeHistory:
    """The last :data:`GAUGE_HISTORY` readings of each telemetry gauge of one arm
    (``"source:metric"`` → values, oldest first), for the panes' small histories (nvitop and
    btop draw one per gauge). Bounded: a fixed-length deque per gauge; the session file keeps
    every reading."""

    def __init__(self, series: dict[str, list[float]] | None = None) -> None:
        self._s: dict[str, deque] = {}
        for key, vals in (series or {}).items():
            self._s[key] = deque(vals, maxlen=GAUGE_HISTORY)

    def add(self, key: str, value: float) -> None:
        d = self._s.get(key)
        if d is None:
            d = self._s[key] = deque(maxlen=GAUGE_HISTORY)
        d.append(float(value))

    def series(self) -> dict[str, list[float]]:
        """A copy for the UI (the runner keeps adding to its own)."""
        return {k: list(d) for k, d in self._s.items()}


@dataclass
class HistView:
    """A frozen copy for the UI: counts on the fine bins, P50 and P99."""

    counts: np.ndarray
    n: int
    p50: float
    p99: float

    def nonzero_range(self) -> tuple[int, int] | None:
        nz = np.flatnonzero(self.counts)
        return (int(nz[0]), int(nz[-1])) if len(nz) else None


def shared_range(views: list[HistView]) -> tuple[int, int] | None:
    """The fine-bin index range covering every arm's samples (one axis for all arms)."""
    rs = [r for v in views if (r := v.nonzero_range()) is not None]
    if not rs:
        return None
    return min(r[0] for r in rs), max(r[1] for r in rs)


def rebin(counts: np.ndarray, lo: int, hi: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts of fine bins ``lo..hi`` merged into ``width`` columns; returns (counts, edges)."""
    width = max(1, width)
    idx = np.linspace(lo, hi + 1, width + 1)
    cuts = np.round(idx).astype(int)
    out = np.array([counts[cuts[i] : max(cuts[i + 1], cuts[i] + 1)].sum() for i in range(width)])
    edges = LO_S * 10.0 ** (idx / PER_DECADE)
    return out, edges


def column_of(value: float, edges: np.ndarray) -> int | None:
    """The display column whose bin holds ``value`` (None outside the axis)."""
    if not (value > 0 and math.isfinite(value)) or value < edges[0] or value > edges[-1]:
        return None
    return min(int(np.searchsorted(edges, value, side="right")) - 1, len(edges) - 2)


@dataclass
class ArmView:
    """What the live pane of one arm shows, copied out of the runner's state."""

    ttft: HistView
    tpot: HistView
    throughput: list[float]  # output tok/s per second, oldest first
    goodput: list[float] | None  # output tok/s of requests within the SLO (None: no SLO)
    out_tok_s: float  # over the last ten seconds
    good_tok_s: float | None
    ttft_mean_s: float
    decode_mean_s: float
    lag_mean_s: float  # the client's wait before the service: schedule lag + connect phase
    # prompt tokens served from the server's prefix cache / prompt tokens, over the responses
    # that said (usage.prompt_tokens_details.cached_tokens); None while none did
    cache_hit: float | None = None
    # TTFO, to the answer's first token: None until some response reasoned before its answer
    # (until then TTFO is TTFT and is not shown twice)
    ttfo: HistView | None = None
    # TPOT while thinking and while answering (the catalogue's tpot_reasoning / tpot_answer):
    # None as TTFO is (without reasoning the answer's TPOT is TPOT and there is no thinking)
    tpot_reasoning: HistView | None = None
    tpot_answer: HistView | None = None


def service_times(r: RequestRecord) -> tuple[float, float, float] | None:
    """(TTFT, E2E, TPOT) in seconds of a successful record with token chunks, on the service's
    view: from the dispatch plus its connect phase (docs/methods.md); TPOT is NaN for one
    output token. None for any other record."""
    if r.status != OK or not r.chunk_ns:
        return None
    sent = r.dispatched_ns + r.connect_ns  # the service view starts after the connect phase
    ttft = (r.chunk_ns[0] - sent) / 1e9
    e2e = (r.chunk_ns[-1] - sent) / 1e9
    n = r.n_output or 0
    return ttft, e2e, (e2e - ttft) / (n - 1) if n > 1 else float("nan")


def ttfo_time(r: RequestRecord) -> float | None:
    """TTFO in seconds of a successful record on the service's view (as :func:`service_times`):
    to its answer's first chunk; None when no answer chunk came."""
    if r.status != OK or r.first_output_ns is None:
        return None
    return (r.first_output_ns - r.dispatched_ns - r.connect_ns) / 1e9


SPLIT_BATCH = 256  # records whose reasoning and answer TPOT are computed at once


class _RecordRows:
    """Records as the columns the catalogue's formulas read (:mod:`abtui.metrics.request`), so
    that the live panes compute reasoning and answer TPOT by those formulas rather than by a
    copy of them. A batch at a time (:data:`SPLIT_BATCH`, and whatever waits when the view is
    read): one row at a time, numpy's overhead costs ~35 µs a record, a batch ~2 µs."""

    COLUMNS = ("first_token_ns", "last_token_ns", "first_output_ns", "reasoning_tokens", "n_output")

    def __init__(self, rows: list[tuple[int, ...]]) -> None:
        cols = np.array(rows, dtype=np.int64).reshape(-1, len(self.COLUMNS)).T
        for name, col in zip(self.COLUMNS, cols, strict=True):
            setattr(self, name, col)

    @staticmethod
    def row(r: RequestRecord) -> tuple[int, ...]:
        def na(v: int | None) -> int:
            return NA_NS if v is None else int(v)

        first, last = (r.chunk_ns[0], r.chunk_ns[-1]) if r.chunk_ns else (None, None)
        return na(first), na(last), na(r.first_output_ns), na(r.reasoning_tokens), na(r.n_output)


def reasoned(r: RequestRecord) -> bool:
    """Whether ``r`` streamed reasoning before its answer (its TTFO is then not its TTFT):
    it counted reasoning tokens, or its answer came after its first token."""
    first = r.first_output_ns
    return bool(r.reasoning_tokens) or (
        first is not None and bool(r.chunk_ns) and first != r.chunk_ns[0]
    )


@dataclass
class LiveArm:
    """Running figures of one arm (measured requests only; warm-up is left out)."""

    slo: dict[str, float] = field(default_factory=dict)
    ttft: LogHistogram = field(default_factory=LogHistogram)
    tpot: LogHistogram = field(default_factory=LogHistogram)
    ttfo: LogHistogram = field(default_factory=LogHistogram)
    tpot_reasoning: LogHistogram = field(default_factory=LogHistogram)
    tpot_answer: LogHistogram = field(default_factory=LogHistogram)
    thinking: bool = False  # some response reasoned before its answer: TTFO is shown
    _tok: deque = field(default_factory=lambda: deque(maxlen=SERIES_S))  # [second, tok, good]
    _sum_ttft: float = 0.0
    _sum_decode: float = 0.0
    _sum_lag: float = 0.0
    _n_ok: int = 0
    _t0_ns: int | None = None
    _cached: int = 0  # prompt tokens the responses said came from the prefix cache
    _cache_prompt: int = 0  # prompt tokens of those responses
    _split: list = field(default_factory=list)  # rows waiting for their reasoning/answer TPOT

    def add(self, r: RequestRecord) -> tuple[float, float, float] | None:
        """Count a finished record; returns its :func:`service_times` when it counted them."""
        if r.warmup or r.status == CANCELLED:
            return None
        if self._t0_ns is None:
            self._t0_ns = r.dispatched_ns
        times = service_times(r)
        if times is None:
            return None
        ttft, e2e, tpot = times
        n = r.n_output or 0
        self.ttft.add(ttft)
        self.tpot.add(tpot)
        ttfo = ttfo_time(r)
        if ttfo is not None:
            self.ttfo.add(ttfo)
        self._split.append(_RecordRows.row(r))
        if len(self._split) >= SPLIT_BATCH:
            self._add_split()
        self.thinking = self.thinking or reasoned(r)
        self._n_ok += 1
        if r.cached_tokens is not None and r.n_input:
            self._cached += r.cached_tokens
            self._cache_prompt += r.n_input
        self._sum_ttft += ttft
        self._sum_decode += e2e - ttft
        # wait + TTFT = TTFT (user): the connect phase is the client's wait, not the service's
        self._sum_lag += max(0.0, (r.dispatched_ns - r.scheduled_ns) / 1e9) + r.connect_ns / 1e9
        good = self._within_slo(ttft, tpot, e2e)
        sec = int(((r.done_ns or r.chunk_ns[-1]) - self._t0_ns) // 1_000_000_000)
        self._bump(sec, n, n if good else 0)
        return times

    def _add_split(self) -> None:
        """The waiting records' reasoning and answer TPOT into their histograms."""
        if not self._split:
            return
        rows, self._split = _RecordRows(self._split), []
        for h, key in ((self.tpot_reasoning, "tpot_reasoning"), (self.tpot_answer, "tpot_answer")):
            for v in per_request_values(rows, key).tolist():
                h.add(v)

    def _within_slo(self, ttft: float, tpot: float, e2e: float) -> bool:
        got = {"ttft": ttft, "tpot": tpot, "e2e": e2e}
        return all(k not in got or not (got[k] > lim) for k, lim in self.slo.items())

    def _bump(self, sec: int, tok: int, good: int) -> None:
        if self._tok and sec < self._tok[-1][0]:  # a late arrival: into its own second if kept
            for row in self._tok:
                if row[0] == sec:
                    row[1] += tok
                    row[2] += good
                    return
            return
        while not self._tok or self._tok[-1][0] < sec:
            nxt = self._tok[-1][0] + 1 if self._tok else sec
            self._tok.append([nxt, 0, 0])
        self._tok[-1][1] += tok
        self._tok[-1][2] += good

    def view(self) -> ArmView:
        self._add_split()
        tok = [float(r[1]) for r in self._tok]
        good = [float(r[2]) for r in self._tok]
        recent = self._tok and list(self._tok)[-10:]
        span = len(recent) if recent else 0
        n = self._n_ok or float("nan")
        return ArmView(
            ttft=_hv(self.ttft),
            tpot=_hv(self.tpot),
            throughput=tok,
            goodput=good if self.slo else None,
            out_tok_s=sum(r[1] for r in recent) / span if span else float("nan"),
            good_tok_s=(sum(r[2] for r in recent) / span if span else float("nan"))
            if self.slo
            else None,
            ttft_mean_s=self._sum_ttft / n,
            decode_mean_s=self._sum_decode / n,
            lag_mean_s=self._sum_lag / n,
            cache_hit=self._cached / self._cache_prompt if self._cache_prompt else None,
            ttfo=_hv(self.ttfo) if self.thinking else None,
            tpot_reasoning=_hv(self.tpot_reasoning) if self.thinking else None,
            tpot_answer=_hv(self.tpot_answer) if self.thinking else None,
        )


def _hv(h: LogHistogram) -> HistView:
    return HistView(h.counts.copy(), h.n, h.quantile(0.5), h.quantile(0.99))


LIVE_MIN_N = 30  # ok requests per arm before a running median or rate delta is shown

DELTA_ROWS = (  # (label, value, better direction, the verdict's row key, its statistic)
    ("TTFT P50", lambda v: v.ttft.p50, "lower", "ttft.p50", "p50"),
    ("TTFT P99", lambda v: v.ttft.p99, "lower", "ttft.p99", "p99"),
    ("TPOT P50", lambda v: v.tpot.p50, "lower", "tpot.p50", "p50"),
    ("TPOT P99", lambda v: v.tpot.p99, "lower", "tpot.p99", "p99"),
    ("throughput", lambda v: v.out_tok_s, "higher", "throughput.output_tokens", "rate"),
    (
        "goodput",
        lambda v: v.good_tok_s if v.good_tok_s is not None else float("nan"),
        "higher",
        "goodput.output_tokens",
        "rate",
    ),
)

BETTER, WORSE, SAME, UNDECIDED, FEW, NA = "better", "worse", "same", "undecided", "few", "n/a"


@dataclass
class Delta:
    label: str
    a: float
    b: float
    ratio: float  # b / a - 1 (NaN when either is missing)
    state: str = NA
    """``better`` / ``worse`` (beyond ±δ), ``same`` (within ±δ), ``few`` (fewer than
    ``need`` samples in an arm: no figure is shown), ``n/a``; from the verdict, ``undecided``
    (INCONCLUSIVE) too."""
    need: int = 0  # the per-arm sample count a ``few`` row waits for

    @property
    def better(self) -> bool | None:
        """True / False beyond ±δ; None otherwise."""
        return {BETTER: True, WORSE: False}.get(self.state)


def deltas(
    a: ArmView, b: ArmView, delta: float = 0.02, delta_tail: float = 0.05, min_n: int = LIVE_MIN_N
) -> list[Delta]:
    """B vs A for the delta strip: running estimates (binned quantiles, rates over the last ten
    seconds), provisional, not the verdict. A row is shown once both arms have its minimum
    sample: ``min_n`` ok requests, and for a P99 the verdict's own small-sample rule
    (:func:`abtui.metrics.tails.tail_min_n`: 1000); it is ``same`` when it lies within ±δ (the
    verdict's noise thresholds, ``delta`` for medians and rates, ``delta_tail`` for P99), so a
    −0.1 % change is not marked worse."""
    out = []
    for label, get, good_dir, _key, stat in DELTA_ROWS:
        va, vb = float(get(a)), float(get(b))
        hist = a.tpot if label.startswith("TPOT") else a.ttft
        hist_b = b.tpot if label.startswith("TPOT") else b.ttft
        n, need = min(hist.n, hist_b.n), max(min_n, tail_min_n(stat))
        ok = math.isfinite(va) and math.isfinite(vb) and va > 0
        ratio = vb / va - 1 if ok else float("nan")
        band = delta_tail if stat == "p99" else delta
        if not ok:
            state = NA
        elif n < need:
            state = FEW
        elif abs(ratio) <= band:
            state = SAME
        else:
            state = BETTER if (ratio < 0) == (good_dir == "lower") else WORSE
        out.append(Delta(label, va, vb, ratio, state, need if state == FEW else 0))
    return out
