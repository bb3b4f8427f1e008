"""Rate effects: throughput, goodput, SLO attainment and cost, resampled over paired units.

A rate's duration is the arm's own active time (:func:`abtui.metrics.summary.run_duration_s`:
Σ over the segments it played of first dispatch → last completion). Resampling units:

- **Arms in parallel** (one alternation block): each arm's active time is cut into ``K`` equal
  windows by completion time (``K = clamp(sent / 10, 10, MAX_UNITS)``; with several runs or
  levels the segments are laid end to end on the arm's active clock); window ``k`` of A is
  paired with window ``k`` of B.
- **Arms taking turns** (``schedule = "alternate"``: more than one block): the units are the
  alternation blocks (segments), each with the arm's counts in it and its own active duration
  there (first dispatch → last completion of that arm in that block), resampled whole (block
  length 1, the interval widened for few blocks) with the same weights for both arms. A window
  by completion time would mix one arm's turn with the other's idle time.

Units are resampled jointly for both arms with the circular block bootstrap. A rate is
``Σ w·count / Σ w·duration``; SLO attainment is ``Σ w·good / Σ w·sent``. Each row's block
length (windows only) is Politis–White on that row's own paired contrast per unit (the
influence series of ``log(rate_B / rate_A)``, ``(num_B/N̄_B − den_B/D̄_B) − (num_A/N̄_A −
den_A/D̄_A)``, ``N̄``, ``D̄`` the means per unit), so an attainment that drifts gets blocks that
span its dependence even when the request counts per window are flat; and at least the length
on each arm's per-window ok counts (the contrast alone measured shorter blocks and more A/A
false positives under drift: 8.5% against 7.5%). Prices are USD/hour over
a rate, so cost replicates are ``(usd_B / usd_A) / (1 + r_rate) − 1``, with the rate's block
length.

The SLO rows (goodput, attainment, the cost of good output) also carry ``n_eff``: the
effectively independent units of their per-item paired contrast, good_B − good_A as the
influence of ``log(attainment_B / attainment_A)`` over items in schedule order
(:func:`abtui.stats.effects._good_contrast`), for the rule that refuses a call on a too
dependent series (:func:`abtui.stats.decide.too_dependent`). The windows cannot show that
dependence: 20 windows of a 200-request run look independent when each arm's latency is an
AR(1) ρ = 0.98 around the SLO, and their interval was far too narrow there (A/A attainment
false calls 21 % at 200 requests per arm, 10 % at 1,000). Throughput keeps no such rule: its
counts per window follow the arrival schedule, which both arms share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from abtui.metrics import catalogue as cat
from abtui.metrics import request as request_metrics
from abtui.metrics.keys import unique_ints
from abtui.metrics.summary import segment_ids, slo_met
from abtui.metrics.table import NA, RequestTable
from abtui.metrics.windows import completion_ns
from abtui.stats import bootstrap, decide
from abtui.stats.rows import Effect, ratio_effect

RATE_ROWS = (  # key, ArmSummary field, needs SLOs
    ("throughput.requests", "requests_per_s", False),
    ("throughput.output_tokens", "output_tokens_per_s", False),
    ("goodput.requests", "goodput_requests_per_s", True),
    ("goodput.output_tokens", "goodput_output_tokens_per_s", True),
    ("slo.attainment", "slo_attainment", True),
)
COST_ROWS = (  # key, the rate it divides, ArmCost field
    ("cost.per_mtok_output", "throughput.output_tokens", "usd_per_mtok_output"),
    ("cost.per_mtok_good", "goodput.output_tokens", "usd_per_mtok_good"),
    ("cost.per_1k_good_requests", "goodput.requests", "usd_per_1k_good_requests"),
)
_COUNTS = {  # ArmSummary field → (numerator, denominator) per unit
    "requests_per_s": ("ok", "duration"),
    "output_tokens_per_s": ("tokens", "duration"),
    "goodput_requests_per_s": ("good", "duration"),
    "goodput_output_tokens_per_s": ("good_tokens", "duration"),
    "slo_attainment": ("good", "sent"),
}


@dataclass(frozen=True, slots=True)
class ArmWindows:
    """One arm's rows for the rate units (:func:`windows_of`): the segments it played with its
    span in each (first dispatch → last completion), and each sent and ok request's segment and
    completion time, with the ok requests' output tokens and SLO verdicts."""

    segments: np.ndarray  # ascending segment ids
    first_ns: np.ndarray  # per segment
    last_ns: np.ndarray  # per segment
    span_s: np.ndarray  # per segment
    duration: float  # Σ span_s: the arm's active time
    sent_seg: np.ndarray
    sent_done: np.ndarray
    ok_seg: np.ndarray
    ok_done: np.ndarray
    ok_tokens: np.ndarray
    good: np.ndarray  # per ok request: met every SLO


def windows_of(
    t: RequestTable,
    sent: np.ndarray,
    ok_mask: np.ndarray,
    slo,
    *,
    seg: np.ndarray | None = None,
    done: np.ndarray | None = None,
    values: dict[str, np.ndarray] | None = None,
) -> ArmWindows | None:
    """One arm's rows for the rate units: the segment and completion time of each sent request
    (``sent`` mask over ``t``) and of each ok request (``ok_mask`` over ``t``), with tokens and
    SLO, and the arm's span in every segment it played. ``seg``, ``done``: ``segment_ids(t)``
    and ``completion_ns(t)`` when the caller has them (each is a column of every row);
    ``values``: per-request metrics of the ok rows it has (:func:`slo_met`)."""
    if not sent.any():
        return None
    seg = segment_ids(t) if seg is None else seg
    done = completion_ns(t) if done is None else done
    sent_seg, sent_done = seg[sent], done[sent]
    ids, inverse = unique_ints(sent_seg, return_inverse=True)
    ok_seg = seg[ok_mask] if len(ids) > 1 else None
    first = np.full(len(ids), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, inverse, np.asarray(t.dispatched_ns[sent], dtype=np.int64))
    last = np.full(len(ids), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, inverse, sent_done)
    del inverse
    if ok_seg is None:  # one segment (most runs): a view of its id, no array per request
        sent_seg = np.broadcast_to(ids[:1], sent_seg.shape)
        ok_seg = np.broadcast_to(ids[:1], (int(np.count_nonzero(ok_mask)),))
    n_output = t.n_output[ok_mask]
    n_out = np.where(n_output != NA, n_output, 0).astype(np.float64)
    good = slo_met(t, slo, ok_mask, values)
    span = (last - first).astype(np.float64) / request_metrics.NS_PER_S
    return ArmWindows(
        segments=ids,
        first_ns=first,
        last_ns=last,
        span_s=span,
        duration=float(span.sum()),
        sent_seg=sent_seg,
        sent_done=sent_done,
        ok_seg=ok_seg,
        ok_done=done[ok_mask],
        ok_tokens=n_out,
        good=good,
    )


def _per_unit(w: ArmWindows, unit_of, n: int) -> dict[str, np.ndarray]:
    """Counts per unit; ``unit_of(segments, done)`` gives the unit of each row."""
    us, uo = unit_of(w.sent_seg, w.sent_done), unit_of(w.ok_seg, w.ok_done)

    def per(idx, weights=None):
        return np.bincount(idx, weights=weights, minlength=n).astype(np.float64)

    good = w.good.astype(np.float64)
    return {
        "sent": per(us),
        "ok": per(uo),
        "tokens": per(uo, w.ok_tokens),
        "good": per(uo, good),
        "good_tokens": per(uo, np.where(w.good, w.ok_tokens, 0.0)),
    }


def _windows(w: ArmWindows, k: int) -> dict[str, np.ndarray]:
    """``k`` equal windows of the arm's active clock (its segments laid end to end)."""
    offset = np.concatenate([[0.0], np.cumsum(w.span_s)[:-1]])

    def unit_of(seg, done):
        j = np.searchsorted(w.segments, seg)
        pos = (offset[j] + (done - w.first_ns[j]) / request_metrics.NS_PER_S) / w.duration
        return np.clip(np.floor(pos * k), 0, k - 1).astype(np.int64)

    out = _per_unit(w, unit_of, k)
    out["duration"] = np.full(k, w.duration / k)
    return out


def _blocks(w: ArmWindows, segments: np.ndarray) -> dict[str, np.ndarray]:
    """One unit per alternation block (``segments``, ascending): counts and the arm's own
    active duration in it (0 where the arm did not play it)."""

    def unit_of(seg, _done):
        return np.searchsorted(segments, seg)

    out = _per_unit(w, unit_of, len(segments))
    dur = np.zeros(len(segments))
    dur[np.searchsorted(segments, w.segments)] = w.span_s
    out["duration"] = dur
    return out


def _influence(ua: dict, ub: dict, num: str, den: str) -> np.ndarray:
    """Per unit: the influence of ``log(Σnum_B/Σden_B) − log(Σnum_A/Σden_A)`` (the contrast a
    rate row's CI is about), for that row's block length."""
    out = np.zeros(len(ua[num]))
    for u, sign in ((ub, 1.0), (ua, -1.0)):
        for col, s in ((num, 1.0), (den, -1.0)):
            m = u[col].mean()
            if m > 0:
                out += sign * s * u[col] / m
    return out


def rate_effects(
    win_a,
    win_b,
    sums,
    slo,
    weights,
    level: float,
    prices,
    alternating: bool = False,
    slo_n_eff: float = math.nan,
) -> list[Effect]:
    """The rate and cost rows (module doc). ``slo_n_eff``: effectively independent paired units
    of the SLO rows' per-item contrast (goodput, attainment and the cost of good output carry
    it, for the n_eff rule :func:`abtui.stats.decide.too_dependent`)."""
    sa, sb = sums
    out: list[Effect] = []
    if win_a is None or win_b is None or not (win_a.duration > 0 and win_b.duration > 0):
        return out
    if alternating:
        segments = np.union1d(win_a.segments, win_b.segments)
        ua, ub = _blocks(win_a, segments), _blocks(win_b, segments)
    else:
        k = int(min(bootstrap.MAX_UNITS, max(10, min(sa.sent, sb.sent) // 10)))
        ua, ub = _windows(win_a, k), _windows(win_b, k)
    n_units = len(ua["sent"])
    replicates, ells = {}, {}
    for key, fld, needs_slo in RATE_ROWS:
        if needs_slo and not slo:
            continue
        num, den = _COUNTS[fld]
        if alternating:
            ell = 1
        else:
            ell = bootstrap.block_length([_influence(ua, ub, num, den), ua["ok"], ub["ok"]], 1.0, 1)
        w = weights.get(n_units, ell, "rates")
        with np.errstate(invalid="ignore", divide="ignore"):
            reps = (bootstrap.wdot(w, ub[num]) / bootstrap.wdot(w, ub[den])) / (
                bootstrap.wdot(w, ua[num]) / bootstrap.wdot(w, ua[den])
            ) - 1.0
        del w  # not held while the next matrix is drawn
        a_val, b_val = float(getattr(sa, fld)), float(getattr(sb, fld))
        widen = bootstrap.expansion(math.ceil(n_units / ell), level)
        reps = replicates[key] = bootstrap.expand(reps, ratio_effect(b_val, a_val), widen)
        ells[key] = ell
        n_eff = slo_n_eff if needs_slo else math.nan
        out.append(_rate_row(key, a_val, b_val, sa, sb, reps, ell, level, n_eff))
    if prices:
        from abtui.cost import arm_cost

        ca, cb = arm_cost(sa, prices[0]), arm_cost(sb, prices[1])
        for key, rate_key, fld in COST_ROWS:
            if not slo:  # no SLO: every ok request is good
                rate_key = rate_key.replace("goodput.", "throughput.")
            with np.errstate(invalid="ignore", divide="ignore"):
                reps = (prices[1] / prices[0]) / (1.0 + replicates[rate_key]) - 1.0
            a_val, b_val = getattr(ca, fld), getattr(cb, fld)
            n_eff = slo_n_eff if rate_key.startswith("goodput.") else math.nan
            out.append(_rate_row(key, a_val, b_val, sa, sb, reps, ells[rate_key], level, n_eff))
    return out


def _rate_row(key, a_val, b_val, sa, sb, reps, ell, level, n_eff) -> Effect:
    lo, hi = bootstrap.percentile_ci(reps, level)
    metric, stat = key.split(".")
    return Effect(
        key=key,
        metric=metric,
        stat=stat,
        lower_is_better=cat.ROWS[key].lower_is_better,
        a=a_val,
        b=b_val,
        n_a=sa.sent,
        n_b=sb.sent,
        ratio=ratio_effect(b_val, a_val),
        lo=lo,
        hi=hi,
        p=bootstrap.bootstrap_p(reps),
        block_len=ell,
        n_eff=n_eff,
        min_eff=decide.MIN_EFFECTIVE_UNWIDENED,  # the windows are not widened for dependence
    )
