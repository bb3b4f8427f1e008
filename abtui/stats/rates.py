"""Rate effects: throughput, goodput, SLO attainment and cost, resampled over time windows.

Each arm's run is cut into ``K`` equal windows by completion time (``K = clamp(sent / 10, 10,
MAX_UNITS)``); window ``k`` of A is paired with window ``k`` of B and resampled jointly with the
circular block bootstrap (block length by Politis–White on the per-window counts). A rate is
``Σ w·count / Σ w·duration``; SLO attainment is ``Σ w·good / Σ w·sent``. Prices are USD/hour over
a rate, so cost replicates are ``(usd_B / usd_A) / (1 + r_rate) − 1``.
"""

from __future__ import annotations

import math

import numpy as np

from abtui.metrics import request as rm
from abtui.metrics.summary import slo_met
from abtui.metrics.table import NA, RequestTable
from abtui.stats import bootstrap as bs
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


def _done_ns(t: RequestTable, mask: np.ndarray | None = None) -> np.ndarray:
    """When each request completed: ``done``, else its last token, else its dispatch."""
    pick = (lambda c: c) if mask is None else (lambda c: c[mask])
    done = np.where(pick(t.done_ns) != NA, pick(t.done_ns), pick(t.last_token_ns))
    return np.where(done != NA, done, pick(t.dispatched_ns))


def windows_of(t: RequestTable, sent: np.ndarray, ok: RequestTable, slo):
    """Per completion-time window (``k`` later): the completion time of each sent request of
    the arm (``sent`` mask over ``t``) and of each of its ok requests, with tokens and SLO."""
    if not sent.any():
        return None
    n_out = np.where(ok.n_output != NA, ok.n_output, 0).astype(np.float64)
    good = slo_met(ok, slo)
    return {
        "t0": int(t.dispatched_ns[sent].min()),
        "sent_done": _done_ns(t, sent),
        "ok_done": _done_ns(ok),
        "ok_tokens": n_out,
        "good": good,
    }


def _per_window(w: dict, k: int) -> dict[str, np.ndarray]:
    def win(done):
        pos = (done - w["t0"]) / (w["duration"] * rm.NS_PER_S)
        return np.clip(np.floor(pos * k), 0, k - 1).astype(np.int64)

    ws, wo = win(w["sent_done"]), win(w["ok_done"])

    def per(idx, weights=None):
        return np.bincount(idx, weights=weights, minlength=k).astype(np.float64)

    return {
        "sent": per(ws),
        "requests_per_s": per(wo),
        "output_tokens_per_s": per(wo, w["ok_tokens"]),
        "goodput_requests_per_s": per(wo, w["good"].astype(np.float64)),
        "goodput_output_tokens_per_s": per(wo, np.where(w["good"], w["ok_tokens"], 0.0)),
    }


def rate_effects(win_a, win_b, sums, slo, weights, level: float, prices) -> list[Effect]:
    sa, sb = sums
    out: list[Effect] = []
    if win_a is None or win_b is None or not (win_a["duration"] > 0 and win_b["duration"] > 0):
        return out
    k = int(min(bs.MAX_UNITS, max(10, min(sa.sent, sb.sent) // 10)))
    wa, wb = _per_window(win_a, k), _per_window(win_b, k)
    da, db = win_a["duration"], win_b["duration"]
    ell = bs.block_length([wa["requests_per_s"], wb["requests_per_s"]], 1.0, 1)
    w = weights.get(k, ell, "rates")
    widen = bs.expansion(math.ceil(k / ell), level)
    tot_a, tot_b = w @ wa["sent"], w @ wb["sent"]
    replicates = {}
    for key, fld, needs_slo in RATE_ROWS:
        if needs_slo and not slo:
            continue
        if fld == "slo_attainment":
            num_a, num_b = w @ wa["goodput_requests_per_s"], w @ wb["goodput_requests_per_s"]
            with np.errstate(invalid="ignore", divide="ignore"):
                reps = (num_b / tot_b) / (num_a / tot_a) - 1.0
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                reps = (w @ wb[fld]) / (w @ wa[fld]) * (da / db) - 1.0
        a_val, b_val = float(getattr(sa, fld)), float(getattr(sb, fld))
        reps = replicates[key] = bs.expand(reps, ratio_effect(b_val, a_val), widen)
        out.append(_rate_row(key, False, a_val, b_val, sa, sb, reps, ell, level))
    if prices:
        from abtui.cost import arm_cost

        ca, cb = arm_cost(sa, prices[0]), arm_cost(sb, prices[1])
        for key, rate_key, fld in COST_ROWS:
            if not slo:  # no SLO: every ok request is good
                rate_key = rate_key.replace("goodput.", "throughput.")
            with np.errstate(invalid="ignore", divide="ignore"):
                reps = (prices[1] / prices[0]) / (1.0 + replicates[rate_key]) - 1.0
            a_val, b_val = getattr(ca, fld), getattr(cb, fld)
            out.append(_rate_row(key, True, a_val, b_val, sa, sb, reps, ell, level))
    return out


def _rate_row(key, lower_is_better, a_val, b_val, sa, sb, reps, ell, level) -> Effect:
    lo, hi = bs.percentile_ci(reps, level)
    metric, stat = key.split(".")
    return Effect(
        key=key,
        metric=metric,
        stat=stat,
        lower_is_better=lower_is_better,
        a=a_val,
        b=b_val,
        n_a=sa.sent,
        n_b=sb.sent,
        ratio=ratio_effect(b_val, a_val),
        lo=lo,
        hi=hi,
        p=bs.bootstrap_p(reps),
        block_len=ell,
    )
