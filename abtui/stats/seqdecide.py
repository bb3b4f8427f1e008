"""The anytime-valid decision: GO / NO-GO / NO-GAIN / UNDECIDED from the data so far, valid
whenever it is asked (docs/verdict.md §11). The run loop calls :func:`evaluate_sequential`
after each block of completed pairs and stops when :attr:`SeqVerdict.stop` is true.

Rows are latency statistics (``e2e.p50``, ``ttft.p99``, ``tpot.mean`` …), lower is better; each
gets a confidence sequence of ``stat_B / stat_A`` (:mod:`abtui.stats.sequential`). With ``m``
rows (the primary and the guardrails) and ``α`` the error rate of the whole decision:

- the **upper** bound of every row is at ``α/2``. GO needs the primary's upper bound below
  ``−δ`` *and* every guardrail's below ``+δ``: an intersection–union test, wrong only if every
  one of its parts is, so its parts need no correction and a false GO has probability
  ``≤ α/2``;
- the **lower** bound of every row is at ``α/(2m)`` (Bonferroni). NO-GO needs any row's lower
  bound above ``+δ``: a union, wrong if any part is, so ``m`` parts share ``α/2``. Holm would
  decide the same: the pair is NO-GO as soon as one row is rejected, and Holm's first step
  rejects exactly when Bonferroni does; its later, laxer steps never change the pair's
  decision, and Bonferroni keeps an interval per row;
- so a false GO or NO-GO, at any look and under any stopping rule, has probability ``≤ α``.

**NO-GAIN**: the primary's lower bound is above ``−δ``, so an improvement of ``δ`` or more is
ruled out (at ``α/(2m)``); the candidate cannot become GO. It is a decision to stop, not a
NO-GO: the fixed verdict calls it INCONCLUSIVE (or EQUIVALENT); a run that must also rule out
a regression keeps going with ``stop_on_no_gain = False``.

No row is called from fewer than :data:`MIN_SEQ_PAIRS` pairs or fewer than
:data:`abtui.stats.decide.MIN_EFFECTIVE` effectively independent ones (the fixed verdict's
rule: below it ``τ̂`` is not estimated well enough for the asymptotics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from abtui.metrics.tails import tail_min_n
from abtui.stats import sequential as sq
from abtui.stats.decide import MIN_EFFECTIVE, default_delta

GO, NO_GO, NO_GAIN, UNDECIDED = "GO", "NO-GO", "NO-GAIN", "UNDECIDED"
IMPROVED, REGRESSED, SHOWN = "IMPROVED", "REGRESSED", "SHOWN"  # row states (+ NO_GAIN, UNDECIDED)
QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}
# No call before this many pairs: over fewer, a persistent dependence looks like a level and its
# τ̂ is far too small (AR(1) 0.98 over 50 pairs: 2.2 for a true 99); 8 of 1,000 A/As (AR 0.9 and
# 0.98, 500 each) were a false NO-GO at a first look at 50 pairs.
MIN_SEQ_PAIRS = 100
DEFAULT_PRIMARY = "e2e.p50"
DEFAULT_GUARDRAILS = ("ttft.p50", "ttft.p99", "tpot.p50", "tpot.p99", "e2e.p99")


@dataclass
class Design:
    """What the sequential verdict tests, and at what error rate."""

    primary: str = DEFAULT_PRIMARY
    guardrails: tuple[str, ...] = DEFAULT_GUARDRAILS
    alpha: float = 0.05
    deltas: dict[str, float] = field(default_factory=dict)  # per row key; else default_delta
    v_opt: float = sq.T_OPT  # pairs where the normal-mixture boundary is tightest
    stop_on_no_gain: bool = True
    # tail quantiles (P90…P99): "paired", the paired asymptotic interval once MIN_TAIL values lie
    # beyond the quantile in each arm (the exact one before); "exact", the per-arm stitched one
    tails: str = "paired"

    def rows(self) -> list[tuple[str, str]]:
        keys = [(self.primary, "primary")]
        keys += [(g, "guardrail") for g in dict.fromkeys(self.guardrails) if g != self.primary]
        return keys

    def delta(self, key: str) -> float:
        return self.deltas.get(key, default_delta(key.partition(".")[2]))


def _finite_or_none(v: float) -> float | None:
    return None if not math.isfinite(v) else round(float(v), 6)


def _float(v) -> float:
    """A stored figure: ``null`` (not finite when stored) reads back as NaN."""
    return math.nan if v is None else float(v)


@dataclass(frozen=True, slots=True)
class SeqRow:
    """One row of the anytime-valid verdict. A stored row (:meth:`from_dict`) has NaN where
    the run had a non-finite figure (its JSON holds ``null``)."""

    key: str
    role: str  # primary / guardrail
    effect: float  # ratio − 1
    lo: float  # anytime-valid bounds, ratio − 1 (lower at α/(2m), upper at α/2)
    hi: float
    delta: float
    state: str  # IMPROVED / REGRESSED / SHOWN / NO-GAIN / UNDECIDED
    n: int
    n_eff: float
    tau: float
    more: int | None  # further pairs at which the row would decide at the current effect
    note: str = ""

    callable: bool = False  # enough pairs, not too dependent: the interval may decide

    @property
    def decided(self) -> bool:
        return self.state != UNDECIDED

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in _ROW_FIELDS}
        for k in ("effect", "lo", "hi", "n_eff", "tau"):
            out[k] = _finite_or_none(out[k])
        out["decided"] = self.decided
        return out

    @classmethod
    def from_dict(cls, d: dict) -> SeqRow:
        """A stored row; a field an older or partial document lacks takes a neutral value
        (no figure: NaN, no state: UNDECIDED)."""
        return cls(
            key=str(d.get("key")),
            role=str(d.get("role")),
            effect=_float(d.get("effect")),
            lo=_float(d.get("lo")),
            hi=_float(d.get("hi")),
            delta=float(d.get("delta") or 0.0),
            state=str(d.get("state") or UNDECIDED),
            n=int(d.get("n") or 0),
            n_eff=_float(d.get("n_eff")),
            tau=_float(d.get("tau")),
            more=d.get("more"),
            note=str(d.get("note") or ""),
            callable=bool(d.get("callable")),
        )


_ROW_FIELDS = tuple(f for f in SeqRow.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class SeqVerdict:
    decision: str  # GO / NO-GO / NO-GAIN / UNDECIDED
    stop: bool  # decided: the run may stop now
    reason: str
    rows: tuple[SeqRow, ...]
    pairs: int  # paired items seen
    more: int | None  # further pairs that would decide at the current effects (None: unknown)
    alpha: float

    def to_dict(self) -> dict:
        return {
            "decision": self.decision,
            "stop": self.stop,
            "reason": self.reason,
            "pairs": self.pairs,
            "more": self.more,
            "alpha": self.alpha,
            "rows": [r.to_dict() for r in self.rows],
        }

    @classmethod
    def from_dict(cls, d: dict) -> SeqVerdict:
        return cls(
            decision=str(d.get("decision")),
            stop=bool(d.get("stop")),
            reason=str(d.get("reason") or ""),
            rows=tuple(SeqRow.from_dict(r) for r in d.get("rows") or [] if isinstance(r, dict)),
            pairs=int(d.get("pairs") or 0),
            more=d.get("more"),
            alpha=float(d.get("alpha") or 0.0),
        )


def _interval(key: str, series: dict, alpha_lo: float, alpha_hi: float, design: Design, taus):
    metric, _, stat = key.partition(".")
    if metric not in series:
        return None
    a, b = series[metric]
    if stat == "mean":
        return sq.mean_ratio_cs(a, b, alpha_lo, alpha_hi, design.v_opt)
    if stat in QUANTILES:
        p = QUANTILES[stat]
        n = min(int(np.isfinite(a).sum()), int(np.isfinite(b).sum()))
        central = 1.0 - sq.CENTRAL < p < sq.CENTRAL
        if central or (design.tails == "paired" and n >= tail_min_n(stat)):
            return sq.paired_quantile_cs(a, b, p, alpha_lo, alpha_hi, design.v_opt)
        ca, cb = taus.setdefault(metric, ({}, {}))  # per-arm estimates shared by its rows
        arm_taus = (sq.quantile_tau(a, p, ca), sq.quantile_tau(b, p, cb))
        return sq.quantile_ratio_cs(a, b, p, alpha_lo, alpha_hi, arm_taus)
    return None


def _state(role: str, iv: sq.Interval, delta: float) -> str:
    up, down = math.log1p(delta), math.log1p(-delta)
    if iv.lo > up:
        return REGRESSED
    if role == "primary":
        if iv.hi < down:
            return IMPROVED
        if iv.lo > down:
            return NO_GAIN
        return UNDECIDED
    return SHOWN if iv.hi < up else UNDECIDED


def _target(role: str, iv: sq.Interval, delta: float) -> tuple[str, float, float]:
    """The decision the row heads for at its current estimate: (state, half-width to shrink,
    room it has), on the log scale."""
    up, down = math.log1p(delta), math.log1p(-delta)
    if iv.est > up:
        return REGRESSED, iv.est - iv.lo, iv.est - up
    if role == "primary":
        if iv.est < down:
            return IMPROVED, iv.hi - iv.est, down - iv.est
        return NO_GAIN, iv.est - iv.lo, iv.est - down
    return SHOWN, iv.hi - iv.est, up - iv.est


def _row(key: str, role: str, series: dict, design: Design, m: int, taus: dict) -> SeqRow:
    alpha_lo, alpha_hi = design.alpha / (2 * m), design.alpha / 2
    delta = design.delta(key)
    iv = _interval(key, series, alpha_lo, alpha_hi, design, taus)
    if iv is None:
        nan = math.nan
        return SeqRow(key, role, nan, nan, nan, delta, UNDECIDED, 0, 0.0, nan, None, "not measured")
    effect, lo, hi = iv.ratio
    row = SeqRow(key, role, effect, lo, hi, delta, UNDECIDED, iv.n, iv.n_eff, iv.tau, None)
    if iv.n < MIN_SEQ_PAIRS:
        return replace(
            row, more=MIN_SEQ_PAIRS - iv.n, note=f"too few pairs: {iv.n} (need ≥ {MIN_SEQ_PAIRS})"
        )
    if iv.n_eff < MIN_EFFECTIVE and iv.n_eff < iv.n / 2:
        return replace(
            row,
            more=math.ceil(iv.n * MIN_EFFECTIVE / max(iv.n_eff, 1.0)) - iv.n,
            note=(
                f"strongly autocorrelated: about {iv.n_eff:.0f} effectively independent pairs "
                f"(need ≥ {MIN_EFFECTIVE})"
            ),
        )
    if not math.isfinite(iv.est):
        return replace(row, note="no estimate")
    row = replace(row, callable=True, state=_state(role, iv, delta))
    if row.state != UNDECIDED:
        return row
    goal, half, room = _target(role, iv, delta)
    alpha = alpha_hi if goal in (IMPROVED, SHOWN) else alpha_lo
    total = sq.units_to_clear(iv.n, half, room, alpha)
    more = None if total is None else max(total - iv.n, 1)
    stat = key.partition(".")[2]
    if not math.isfinite(half) and stat in QUANTILES:
        first = sq.finite_from(QUANTILES[stat], alpha / 2, iv.tau, iv.n)
        if design.tails == "paired":  # the paired interval takes over there
            first = min(first, max(tail_min_n(stat), iv.n + 1))
        more = max(first - iv.n, 1)
        note = (
            f"{stat.upper()} has no anytime-valid bound on this side before about {first:,} pairs"
        )
    elif total is None:
        note = f"the effect sits at δ {delta:.0%}: more pairs will not settle it"
    else:
        note = f"heading for {goal}: about {more:,} more pairs would decide"
    return replace(row, more=more, note=note)


def _pair(rows: list[SeqRow], design: Design) -> tuple[str, str]:
    prim = rows[0]
    regressed = [r for r in rows if r.state == REGRESSED]
    if regressed:
        r = regressed[0]
        return NO_GO, f"{r.key} regressed: {_pct(r.effect)} [{_pct(r.lo)}, {_pct(r.hi)}] > δ"
    guards = rows[1:]
    if prim.state == IMPROVED and all(g.state == SHOWN for g in guards):
        return GO, (
            f"{prim.key} improved: {_pct(prim.effect)} [{_pct(prim.lo)}, {_pct(prim.hi)}], "
            f"beyond −δ {prim.delta:.0%}; every guardrail shown within δ"
        )
    if prim.state == NO_GAIN:
        return NO_GAIN, (
            f"{prim.key} cannot improve by δ {prim.delta:.0%}: {_pct(prim.effect)} "
            f"[{_pct(prim.lo)}, {_pct(prim.hi)}]"
        )
    open_rows = [r.key for r in rows if not r.decided or (r is prim and r.state != IMPROVED)]
    return UNDECIDED, "undecided: " + ", ".join(open_rows)


def _more(rows: list[SeqRow], stop_on_no_gain: bool = True) -> int | None:
    """Further pairs to a decision that stops at the current effects: every row's to GO when
    each heads there (the slowest), else the first row's to NO-GO (or to NO-GAIN where that
    stops); None when no row heads for a stop (an A/A that may not stop on NO-GAIN runs to
    its budget)."""
    prim = rows[0]
    heads_go = prim.state in (IMPROVED, UNDECIDED) and (prim.effect < -prim.delta)
    heads_go = heads_go and all(g.state == SHOWN or g.effect < g.delta for g in rows[1:])
    if heads_go:
        need = [r.more for r in rows if not r.decided or (r is prim and r.state != IMPROVED)]
        return None if any(x is None for x in need) else max(need, default=0)
    need = [
        r.more
        for r in rows
        if r.more is not None
        and not r.decided
        and (stop_on_no_gain or not r.callable or r.effect > r.delta)
    ]
    return min(need) if need else None


def evaluate_sequential(series: dict[str, tuple[np.ndarray, np.ndarray]], design: Design):
    """The anytime-valid verdict on ``series`` (per metric: baseline and candidate values per
    paired item, aligned, in the order measured; NaN where a request failed), under
    ``design``. Valid at every call: the run loop may call it after every block of pairs and
    stop on the first :attr:`SeqVerdict.stop`."""
    keys = design.rows()
    m = len(keys)
    taus: dict = {}
    rows = [_row(k, role, series, design, m, taus) for k, role in keys]
    decision, reason = _pair(rows, design)
    stop = decision in (GO, NO_GO) or (decision == NO_GAIN and design.stop_on_no_gain)
    pairs = max((r.n for r in rows), default=0)
    more = None if stop else _more(rows, design.stop_on_no_gain)
    return SeqVerdict(decision, stop, reason, tuple(rows), pairs, more, design.alpha)


SEQ_METRICS = ("ttft", "ttft_user", "ttfo", "tpot", "e2e")


def supported(key: str) -> bool:
    """Whether ``key`` (``metric.stat``) has an anytime-valid row: a per-request latency's
    mean or P50…P99."""
    metric, _, stat = key.partition(".")
    return metric in SEQ_METRICS and (stat == "mean" or stat in QUANTILES)


def remaining_seconds(more: int | None, pairs_per_second: float) -> float | None:
    """The wall time ``more`` pairs take at the run's current pace (None when unknown)."""
    if more is None or not pairs_per_second > 0:
        return None
    return more / pairs_per_second


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%" if math.isfinite(x) else ("+inf" if x > 0 else "−inf")


def paired_series(table, a: int, b: int, metrics: tuple[str, ...] = ("ttft", "tpot", "e2e")):
    """Per metric, the values of arms ``a`` and ``b`` on the items both arms sent (warm-up
    left out), aligned and in schedule order (run, level, block, item); NaN where a request
    did not succeed. ``table`` is a :class:`abtui.metrics.table.RequestTable`."""
    from abtui.metrics import request as request_metrics

    fn = {m: request_metrics.PER_REQUEST[m] for m in SEQ_METRICS}
    sent = ~table.warmup & (table.ok | (table.status == "error"))
    key = np.zeros(len(table), dtype=np.int64)
    for col in (table.run, table.level, table.block, table.item):
        col = np.zeros(len(table), np.int64) if col is None else np.asarray(col, np.int64)
        key = key * (int(col.max(initial=0)) + 1) + col
    rows = {x: np.flatnonzero(sent & (table.arm == x)) for x in (a, b)}
    _, ia, ib = np.intersect1d(key[rows[a]], key[rows[b]], return_indices=True)
    ra, rb = rows[a][ia], rows[b][ib]  # intersect1d sorts: schedule order
    out = {}
    for mtr in metrics:
        va, vb = fn[mtr](table, ra), fn[mtr](table, rb)
        va[~table.ok[ra]] = np.nan
        vb[~table.ok[rb]] = np.nan
        out[mtr] = (va, vb)
    return out


METHOD = {
    "means": "normal-mixture confidence sequence (Howard et al. 2021) on the paired influence",
    "central quantiles": "the same on the paired Bahadur linearisation (kernel density)",
    "tails": "paired as above from 10 values beyond; before, per-arm stitched quantile CS "
    "(Howard & Ramdas 2022), which stays infinite until the data can bound it",
    "dependence": "long-run variance sigma^2 tau-hat; no call below 20 effective pairs",
    "alpha": "upper bounds at alpha/2 (GO: intersection-union); lower at alpha/(2m) (NO-GO: "
    "Bonferroni over the m rows)",
}


@dataclass(frozen=True, slots=True)
class Look:
    """One look of a run: the pairs it saw and its decision."""

    pairs: int
    decision: str

    def to_dict(self) -> dict:
        return {"pairs": self.pairs, "decision": self.decision}


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How a run ``--until-decided`` ended (:class:`abtui.runner.until.UntilDecided`)."""

    stop_reason: str | None  # decided / budget / interrupted / failed
    budget_pairs: int | None
    pairs_per_s: float | None  # the pace at the last look (None: not measured)
    remaining_s: float | None  # what ``more`` pairs would take at that pace
    look_s: float | None  # time spent looking, all looks together

    def to_dict(self) -> dict:
        return {
            "stop_reason": self.stop_reason,
            "budget_pairs": self.budget_pairs,
            "pairs_per_s": self.pairs_per_s,
            "remaining_s": self.remaining_s,
            "look_s": self.look_s,
        }


@dataclass(frozen=True, slots=True)
class SequentialRun:
    """The anytime-valid verdict a run stored (the session's ``sequential`` meta key): its
    design, its looks, the last look's verdict (None before any look), how the run ended
    (None for a :class:`Monitor` alone) and, when it sent quality items until decided, that
    gate's document (:mod:`abtui.quality.seqrun`). :meth:`to_dict` is the stored JSON;
    :meth:`from_dict` reads it back, a field it lacks as the verdict's readers took it
    (no looks, no budget, 0 pairs)."""

    method: dict[str, str]  # how each kind of row is bounded, in words
    alpha: float
    primary: str | None
    guardrails: tuple[str, ...]
    v_opt_pairs: float | None
    looks: tuple[Look, ...]
    stopped_at: int | None
    last: SeqVerdict | None = None
    end: RunEnd | None = None
    quality: dict | None = None

    @property
    def decision(self) -> str | None:
        return self.last.decision if self.last else None

    @property
    def reason(self) -> str | None:
        return self.last.reason if self.last else None

    @property
    def pairs(self) -> int:
        return self.last.pairs if self.last else 0

    @property
    def more(self) -> int | None:
        return self.last.more if self.last else None

    @property
    def rows(self) -> tuple[SeqRow, ...]:
        return self.last.rows if self.last else ()

    @property
    def stop_reason(self) -> str | None:
        return self.end.stop_reason if self.end else None

    @property
    def budget_pairs(self) -> int | None:
        return self.end.budget_pairs if self.end else None

    @property
    def remaining_s(self) -> float | None:
        return self.end.remaining_s if self.end else None

    def to_dict(self) -> dict:
        out = {
            "method": self.method,
            "alpha": self.alpha,
            "primary": self.primary,
            "guardrails": list(self.guardrails),
            "v_opt_pairs": self.v_opt_pairs,
            "looks": [x.to_dict() for x in self.looks],
            "stopped_at": self.stopped_at,
        }
        if self.last is not None:
            out.update(self.last.to_dict())
        if self.end is not None:
            out.update(self.end.to_dict())
        if self.quality is not None:
            out["quality"] = self.quality
        return out

    @classmethod
    def from_dict(cls, d: dict) -> SequentialRun:
        looks = [x for x in d.get("looks") or [] if isinstance(x, dict)]
        end = None
        if any(k in d for k in _END_KEYS):
            end = RunEnd(
                d.get("stop_reason"),
                d.get("budget_pairs"),
                d.get("pairs_per_s"),
                d.get("remaining_s"),
                d.get("look_s"),
            )
        q = d.get("quality")
        return cls(
            method=dict(d.get("method") or {}),
            alpha=float(d.get("alpha") or 0.0),
            primary=d.get("primary"),
            guardrails=tuple(d.get("guardrails") or ()),
            v_opt_pairs=d.get("v_opt_pairs"),
            looks=tuple(Look(int(x.get("pairs") or 0), str(x.get("decision"))) for x in looks),
            stopped_at=d.get("stopped_at"),
            last=SeqVerdict.from_dict(d) if "decision" in d else None,
            end=end,
            quality=q if isinstance(q, dict) else None,
        )


_END_KEYS = tuple(RunEnd.__dataclass_fields__)


class Monitor:
    """What a run keeps of its looks: call :meth:`look` after each block of pairs; the
    ``sequential`` key of a report is :meth:`record` (the looks, where it stopped and why,
    the method, the last rows)."""

    def __init__(self, design: Design | None = None) -> None:
        self.design = design or Design()
        self.looks: list[tuple[int, str]] = []  # (pairs, decision) per look
        self.last: SeqVerdict | None = None
        self.stopped_at: int | None = None

    def look(self, series: dict[str, tuple[np.ndarray, np.ndarray]]) -> SeqVerdict:
        v = evaluate_sequential(series, self.design)
        self.looks.append((v.pairs, v.decision))
        self.last = v
        if v.stop and self.stopped_at is None:
            self.stopped_at = v.pairs
        return v

    def record(self) -> SequentialRun:
        """The looks so far as the stored record (how the run ended: the run's to add)."""
        d = self.design
        return SequentialRun(
            method=METHOD,
            alpha=d.alpha,
            primary=d.primary,
            guardrails=tuple(d.guardrails),
            v_opt_pairs=d.v_opt,
            looks=tuple(Look(n, x) for n, x in self.looks),
            stopped_at=self.stopped_at,
            last=self.last,
        )

    def to_dict(self) -> dict:
        return self.record().to_dict()
