"""Could the load generator's lag explain the verdict? (docs/verdict.md §7)

A generator that sends late (schedule lag = dispatched − scheduled) is a client whose event loop
was held up: a busy machine took its CPU. That does two things, and each is judged in proportion
to the run instead of against a fixed number of milliseconds:

1. **The offered load.** A late send moves a request's arrival at the server. The rate over the
   run is unchanged (lag does not accumulate), but arrivals bunch. The arm counts as having had
   the load asked for when its lag P99 is within :data:`LOAD_GAP_FRACTION` of the mean
   inter-arrival gap (99 % of requests arrive less than half a gap from their instant: the
   order and spacing of arrivals is kept) **or** within δ of the arm's median E2E (the requests
   in flight at any instant, ``rate × E2E`` on average, change by at most ``rate × lag``: a
   relative change below δ, the smallest effect the verdict calls). Otherwise no GO.
2. **The measurements.** The same stalls delay the reading of responses, so the *baseline's*
   measured latencies may be inflated (never deflated: ``dispatched`` is stamped before the
   request is written and every read is stamped when the loop gets to it). A stall can only
   make its own arm look slower, so it can fake a gain only through the baseline. The stalls
   are taken to be distributed like the lag the generator measured (the lag samples the same
   loop at the scheduled instants), with no assumption of how they fall on requests: for a
   quantile ``q`` the baseline's true value is at least ``Q_{q−p}(measured) − x_p`` for every
   ``p``, ``x_p`` the lag's ``1 − p`` quantile (at most a share ``p`` of requests met a longer
   stall; they may be the fastest); a mean is at least ``mean − mean lag``; a rate's duration
   shrinks by at most the longest lag. That lower bound gives a factor ``f ≥ 1`` by which the
   pair's ratio may be flattered; the CI is moved by it and the call made again
   (:func:`adjusted`). GO stands only when the primary is still IMPROVED and every guardrail still
   shown non-inferior with the CI so moved: a lag of 11 ms cannot fake a 40 % gain on a 350 ms
   E2E, and it cannot vouch for a 2 % non-inferiority of a 40 ms TTFT either.

Rows it cannot bound (a breakdown key, an unknown metric) fall back to the fixed limits of
:mod:`abtui.metrics.summary` (lag P99 10 ms, max 100 ms).
"""

from __future__ import annotations

import math

import numpy as np

from abtui.metrics import catalogue as cat
from abtui.metrics import gaps
from abtui.metrics.table import NA, RequestTable

LOAD_GAP_FRACTION = 0.5  # lag P99 within half the mean inter-arrival gap: the load is kept
_P = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)  # shares of longer stalls
_QUANTILE = cat.QUANTILES
_LATENCY = {m.key: m.per_request for m in cat.LATENCY}  # ITL: None (per chunk gap)
_RATES_UP = ("throughput.requests", "throughput.output_tokens")  # higher is better, ∝ 1/T
_COST = ("cost.per_mtok_output",)  # lower is better, ∝ T


def mean_gap_s(t: RequestTable, rows: np.ndarray | None = None) -> float:
    """The mean inter-arrival gap of the scheduled instants of ``t`` (one arm's measured rows,
    or the rows where boolean ``rows`` is true), within each segment (run, level, block):
    Σ span / Σ (count − 1). NaN with < 2 requests. No copy of the table is made."""
    m = slice(None) if rows is None else rows
    sched = t.scheduled_ns[m]
    if len(sched) < 2:
        return math.nan
    cols = [t.run[m], t.level[m], t.block[m]]
    if all(c[0] == c[-1] and (c == c[0]).all() for c in cols):  # one segment: no sort needed,
        return float((int(sched.max()) - int(sched.min())) / 1e9 / (len(sched) - 1))  # Σ diffs
    keys = np.stack(cols)
    order = np.lexsort((sched, *keys[::-1]))
    k, s = keys[:, order], sched[order]
    same = (k[:, 1:] == k[:, :-1]).all(axis=0)
    n = int(same.sum())
    return float(np.diff(s)[same].sum() / 1e9 / n) if n else math.nan


def load_kept(lag_p99_s: float, gap_s: float, e2e_p50_s: float, delta: float) -> bool:
    """Rule 1 of the module doc: did the arm get the offered load? True when the lag is unknown."""
    if not math.isfinite(lag_p99_s):
        return True
    in_gap = math.isfinite(gap_s) and lag_p99_s <= LOAD_GAP_FRACTION * gap_s
    in_delta = math.isfinite(e2e_p50_s) and lag_p99_s <= delta * e2e_p50_s
    return in_gap or in_delta


def load_words(lag_p99_s: float, gap_s: float, e2e_p50_s: float, delta: float) -> str:
    """Why the load was not kept, in the terms of rule 1."""
    gap = f"{gap_s * 1e3:.1f} ms" if math.isfinite(gap_s) else "n/a"
    e2e = f"{e2e_p50_s * 1e3:.0f} ms" if math.isfinite(e2e_p50_s) else "n/a"
    return (
        f"lag P99 {lag_p99_s * 1e3:.1f} ms is more than {LOAD_GAP_FRACTION:g} of the mean "
        f"inter-arrival gap ({gap}) and more than δ {delta:.0%} of the median E2E ({e2e}): "
        "arrivals bunched, the arm did not get the load asked for"
    )


def _lag_quantiles(lag: np.ndarray, ps: list[float], cache: dict) -> dict[float, float]:
    """``{p: Q_{1−p}(lag)}`` for the shares ``ps`` (one ``np.quantile`` call: numpy partitions
    once for all of them, the same numbers as one call each), kept in ``cache``."""
    key = ("lag_q", tuple(ps))
    if key not in cache:
        got = np.quantile(lag, [1 - p for p in ps]).tolist() if ps else []
        cache[key] = dict(zip(ps, got, strict=True))
    return cache[key]


def _lower_quantile(
    quantile, q: float, lag: np.ndarray, scale: float, cache: dict | None = None
) -> float:
    """The least the true ``q`` quantile can be when each value may include a stall distributed
    like ``lag × scale`` (module doc): ``max_p Q_{q−p}(values) − scale · Q_{1−p}(lag)``;
    ``quantile(x)`` is ``Q_x(values)``."""
    ps = [p for p in _P if q - p >= 0]
    lag_q = _lag_quantiles(lag, ps[1:], {} if cache is None else cache)
    best = -math.inf
    for p in ps:
        x = float(lag.max() if p == 0 else lag_q[p]) * scale
        best = max(best, quantile(q - p) - x)
    return best


def _quantiles_of(values: np.ndarray, q: float | None):
    """``Q_x(values)`` for the fractions :func:`_lower_quantile` asks about ``q``, from one
    ``np.quantile`` call (each was its own partition of every value: 1 s at 10⁶ requests)."""
    qs = [] if q is None else [q] + [q - p for p in _P if q - p >= 0]
    got = dict(zip(qs, np.quantile(values, qs).tolist() if qs else [], strict=True))
    return got.__getitem__


def _itl(t: RequestTable, q: float | None, rows: np.ndarray | None = None):
    """ITL of ``t`` (every chunk gap of its rows ``rows``, pooled) without holding the gaps:
    ``(n, mean, quantile)`` where ``quantile(x)`` answers the fractions
    :func:`_lower_quantile` asks about ``q`` (``None``: the mean only), as numpy's
    ``np.quantile`` on every gap would."""
    mask = np.ones(len(t), dtype=bool)
    if rows is not None:
        mask[:] = False
        mask[rows] = True
    scan = gaps.GapScan(t, [mask])
    qs = [] if q is None else [q] + [q - p for p in _P if q - p >= 0]
    got = dict(zip(qs, gaps.quantiles_s(scan, (0,), qs), strict=True))
    return scan.n((0,)), scan.mean_s((0,)), got.__getitem__


def flattery(
    t: RequestTable,
    key: str,
    lag: np.ndarray,
    rows: np.ndarray | None = None,
    cache: dict | None = None,
) -> float | None:
    """The factor ``f ≥ 1`` by which the baseline's stalls (its ``lag`` samples, seconds) may
    have flattered the ratio candidate / baseline of row ``key``, from the baseline's own rows
    (measured, ok): ``t``, or its rows ``rows`` (ascending positions; the table is not copied).
    ``inf``: the stalls could account for the whole statistic; ``None``: a row this module does
    not bound. ``cache``: a dict given to every call with the same ``t``, ``lag`` and ``rows``
    (the rows of one verdict): what the calls share (the lag and its quantiles, each metric's
    values) is computed once (at 10⁶ requests 0.2 s a call)."""
    cache = {} if cache is None else cache
    if "lag" not in cache:
        cache["lag"] = np.maximum(lag[np.isfinite(lag)], 0.0)
    lag = cache["lag"]
    if not len(lag) or "@" in key:
        return None if "@" in key else 1.0
    if lag.max() <= 0:
        return 1.0
    metric, _, stat = key.partition(".")
    if key in _RATES_UP or key in _COST:
        from abtui.metrics.summary import run_duration_s

        T = run_duration_s(t, rows)
        d = float(lag.max())
        return math.inf if not T > d else T / (T - d)
    fn = _LATENCY.get(metric)
    if metric not in _LATENCY or (stat != "mean" and stat not in _QUANTILE):
        return None
    if metric == "itl":  # per chunk gap: from a stream of the chunks, never held
        n, mean, quantile = _itl(t, _QUANTILE.get(stat), rows)
    else:
        if ("values", metric) not in cache:
            values = fn(t, rows)
            cache[("values", metric)] = values[np.isfinite(values)]
        values = cache[("values", metric)]
        n, mean = len(values), (float(values.mean()) if len(values) else math.nan)
        quantile = _quantiles_of(values, _QUANTILE.get(stat)) if n else None

    if not n:
        return 1.0
    scale = 2.0 if metric == "ttft_user" else 1.0  # the lag itself and a late read
    if metric == "tpot":  # one late read over (n − 1) gaps: the shortest request is the worst
        n = t.n_output if rows is None else t.n_output[rows]
        n = n[(n != NA) & (n > 1)]
        scale = 1.0 / (int(n.min()) - 1) if len(n) else 1.0
    if stat == "mean":
        measured, low = mean, float(mean - scale * lag.mean())
    else:
        measured = quantile(_QUANTILE[stat])
        low = _lower_quantile(quantile, _QUANTILE[stat], lag, scale, cache)
    if not measured > 0:
        return 1.0
    return math.inf if low <= 0 else max(1.0, measured / low)


def adjusted(r: float, lo: float, hi: float, f: float, lower_is_better: bool):
    """The effect and its CI with the baseline's true value ``f`` times better than measured:
    the ratio scaled by ``f`` towards "worse for the candidate"."""
    g = f if lower_is_better else 1.0 / f

    def move(x: float) -> float:
        return (1 + x) * g - 1 if math.isfinite(g) else (math.inf if lower_is_better else -1.0)

    return move(r), move(lo), move(hi)
