"""Anytime-valid intervals and the sequential decision (abtui.stats.sequential, seqdecide).

The coverage checks look at one stream many times, as a run that stops when it likes does:
a confidence sequence must cover at every look at once, which a fixed-n interval recomputed at
each look does not."""

from __future__ import annotations

import math

import numpy as np
import pytest

from abtui.stats import seqdecide as sd
from abtui.stats import sequential as sq
from abtui.stats.distributions import norm_ppf
from tests.synthetic import ArmTruth, synthetic_table


def test_zeta_and_boundaries_grow_like_an_iterated_logarithm():
    assert sq._zeta(2.0) == pytest.approx(math.pi**2 / 6, rel=1e-10)
    for alpha in (0.05, 0.01, 0.001):
        z = norm_ppf(1 - alpha)
        prev_nm = prev_st = 0.0
        for v in (1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6):
            nm, st = sq.normal_mixture(v, alpha), sq.stitched(v, alpha, 1.0)
            # a boundary that holds at every time is above the one that holds at one time
            assert nm > z * math.sqrt(v) and st > z * math.sqrt(v)
            assert nm > prev_nm and st >= prev_st  # grows with intrinsic time
            prev_nm, prev_st = nm, st
        # ... but only by a log factor: the width of the mean still shrinks to 0
        assert sq.normal_mixture(1e8, alpha) / 1e8 < 1e-3
        assert sq.stitched(1e8, alpha, 1.0) / math.sqrt(1e8 * math.log(math.log(1e8))) < 5
    assert sq.normal_mixture(100.0, 0.01) > sq.normal_mixture(100.0, 0.05)
    assert sq.stitched(100.0, 0.05, 1.0, c=1.0) > sq.stitched(100.0, 0.05, 1.0, c=0.0)


def _misses(rng, sims, n, looks, gen, interval):
    """Share of streams whose interval left out the truth (0) at any look."""
    missed = 0
    for _ in range(sims):
        a, b = gen(rng, n)
        for t in looks:
            lo, hi = interval(a[:t], b[:t])
            if lo > 0 or hi < 0:
                missed += 1
                break
    return missed / sims


def _iid(rng, n):
    shared = rng.standard_normal(n) * 0.2
    return (
        np.exp(shared + 0.2 * rng.standard_normal(n)),
        np.exp(shared + 0.2 * rng.standard_normal(n)),
    )


def _naive_mean(a, b):
    """The fixed-n 95 % normal interval of the same statistic, recomputed at each look."""
    ma, mb = a.mean(), b.mean()
    psi = b / mb - a / ma
    half = 1.96 * psi.std(ddof=1) / math.sqrt(len(a))
    est = math.log(mb / ma)
    return est - half, est + half


def test_mean_cs_covers_at_every_look_where_a_repeated_fixed_interval_does_not():
    looks = range(20, 1001, 20)
    cs = lambda a, b: sq.mean_ratio_cs(a, b, 0.025, 0.025).lo_hi  # noqa: E731
    naive = _misses(np.random.default_rng(1), 100, 1000, looks, _iid, _naive_mean)
    valid = _misses(np.random.default_rng(1), 100, 1000, looks, _iid, cs)
    assert naive > 0.15  # 5 % claimed, about a quarter measured
    assert valid <= 0.05


def _ar(rng, n, rho=0.9):
    def series():
        e = rng.standard_normal(n)
        x = np.empty(n)
        x[0] = e[0]
        for i in range(1, n):
            x[i] = rho * x[i - 1] + math.sqrt(1 - rho * rho) * e[i]
        return x

    return np.exp(0.25 * series()), np.exp(0.25 * series())


def test_mean_cs_under_autocorrelation_needs_the_long_run_variance():
    looks = range(200, 2001, 100)
    dep = lambda a, b: sq.mean_ratio_cs(a, b, 0.025, 0.025).lo_hi  # noqa: E731
    iid = lambda a, b: sq.mean_ratio_cs(a, b, 0.025, 0.025, tau=1.0).lo_hi  # noqa: E731
    as_if_iid = _misses(np.random.default_rng(2), 100, 2000, looks, _ar, iid)
    with_tau = _misses(np.random.default_rng(2), 100, 2000, looks, _ar, dep)
    assert as_if_iid > 0.2
    assert with_tau <= 0.08  # 5 % claimed; ±4 points of simulation error at 100 streams


def test_quantile_cs_covers_a_p99_and_a_median_at_every_look():
    rng = np.random.default_rng(3)
    z99 = norm_ppf(0.99)
    missed = {0.5: 0, 0.99: 0}
    for _ in range(150):
        x = np.exp(0.25 * rng.standard_normal(3000))
        for p, truth in ((0.5, 1.0), (0.99, math.exp(0.25 * z99))):
            for t in range(100, 3001, 100):
                lo, hi, _ = sq.quantile_bounds(x[:t], p, 0.025, 0.025)
                if lo > truth or hi < truth:
                    missed[p] += 1
                    break
    assert missed[0.5] / 150 <= 0.05 and missed[0.99] / 150 <= 0.05


def test_quantile_bounds_are_order_statistics_and_infinite_until_the_data_allow():
    x = np.arange(1.0, 301.0)
    lo, hi, est = sq.quantile_bounds(x, 0.99, 0.025, 0.025, tau=1.0)
    assert hi == math.inf and lo in x and est == pytest.approx(np.percentile(x, 99))
    n = sq.finite_from(0.99, 0.025)
    assert 900 < n < 1100
    assert 1100 < sq.finite_from(0.99, 0.0125) < 1300  # a default design's GO side
    y = np.arange(1.0, n + 1.0)
    assert math.isfinite(sq.quantile_bounds(y, 0.99, 0.025, 0.025, tau=1.0)[1])
    assert sq.quantile_bounds(y[:-1], 0.99, 0.025, 0.025, tau=1.0)[1] == math.inf


def _series(n, scale, seed, **kw):
    t = synthetic_table(
        n, [ArmTruth(), ArmTruth(ttft_scale=scale, tpot_scale=scale)], seed=seed, **kw
    )
    return sd.paired_series(t, 0, 1)


def test_a_clear_gain_is_go_a_clear_loss_no_go_an_a_a_neither():
    assert sd.evaluate_sequential(_series(2000, 0.5, 1), sd.Design()).decision == sd.GO
    slow = sd.evaluate_sequential(_series(300, 1.5, 1), sd.Design())
    assert slow.decision == sd.NO_GO and slow.stop
    assert any(r.state == sd.REGRESSED for r in slow.rows)
    for seed in range(5):
        aa = sd.evaluate_sequential(_series(2000, 1.0, seed), sd.Design())
        assert aa.decision in (sd.UNDECIDED, sd.NO_GAIN)


def test_the_p99_guardrails_hold_a_go_until_they_can_be_bounded():
    medians = sd.Design(guardrails=("ttft.p50", "tpot.p50"))
    early = _series(200, 0.5, 4)
    v = sd.evaluate_sequential(early, sd.Design())
    assert v.decision == sd.UNDECIDED and not v.stop
    p99 = [r for r in v.rows if r.key.endswith("p99")]
    assert all(not r.decided and "no anytime-valid bound" in r.note for r in p99)
    assert v.more is not None and v.pairs + v.more == 1000  # P99: 10 beyond, the paired CS
    exact = sd.evaluate_sequential(early, sd.Design(tails="exact"))
    assert exact.more is not None and 1100 < exact.pairs + exact.more < 1600
    assert sd.evaluate_sequential(early, medians).decision == sd.GO


def test_more_pairs_estimate_points_at_a_decision():
    medians = sd.Design(guardrails=("ttft.p50", "tpot.p50"))
    full = _series(4000, 0.93, 5)
    first = sd.evaluate_sequential({k: (a[:150], b[:150]) for k, (a, b) in full.items()}, medians)
    assert first.decision == sd.UNDECIDED and first.more is not None
    later = 150 + 2 * first.more  # twice the estimate: decided on this stream
    v = sd.evaluate_sequential({k: (a[:later], b[:later]) for k, (a, b) in full.items()}, medians)
    assert v.decision == sd.GO


def test_paired_series_aligns_items_and_marks_failures():
    t = synthetic_table(50, [ArmTruth(), ArmTruth(error_rate=0.2)], seed=6)
    keep = ~((t.arm == 0) & (t.item == 7))  # item 7 missing in the baseline
    s = sd.paired_series(t.select(keep), 0, 1)
    a, b = s["e2e"]
    assert len(a) == len(b) == 49
    assert np.isnan(b).sum() == (t.status[(t.arm == 1) & (t.item != 7)] == "error").sum() > 0
    assert not np.isnan(a).any()
    v = sd.evaluate_sequential(s, sd.Design())
    assert v.rows[0].n == 49 - int(np.isnan(b).sum())  # the candidate's successes


def test_too_few_pairs_and_strong_dependence_are_never_called():
    v = sd.evaluate_sequential(_series(10, 0.5, 7), sd.Design(guardrails=()))
    assert v.decision == sd.UNDECIDED and "too few pairs" in v.rows[0].note
    dep = _series(300, 0.8, 8)
    rng = np.random.default_rng(8)
    walk = np.exp(0.3 * np.cumsum(rng.standard_normal(300)) / 4)  # each arm its own drift
    walk_b = np.exp(0.3 * np.cumsum(rng.standard_normal(300)) / 4)
    dep = {"e2e": (dep["e2e"][0] * walk, dep["e2e"][1] * walk_b)}
    v = sd.evaluate_sequential(dep, sd.Design(primary="e2e.mean", guardrails=()))
    assert v.rows[0].state == sd.UNDECIDED and "autocorrelated" in v.rows[0].note


def test_monitor_keeps_the_looks_and_where_it_stopped():
    full = _series(400, 0.5, 9)
    mon = sd.Monitor(sd.Design(guardrails=("ttft.p50", "tpot.p50")))
    for t in range(20, 401, 20):
        v = mon.look({k: (a[:t], b[:t]) for k, (a, b) in full.items()})
        if v.stop:
            break
    d = mon.to_dict()
    assert d["decision"] == sd.GO and d["stopped_at"] == d["looks"][-1]["pairs"] < 400
    assert [x["decision"] for x in d["looks"][:-1]] == [sd.UNDECIDED] * (len(d["looks"]) - 1)
    assert d["rows"][0]["key"] == "e2e.p50" and d["rows"][0]["hi"] < -0.02


def test_an_a_a_stops_on_no_gain_and_a_missing_row_is_not_measured():
    medians = sd.Design(guardrails=("ttft.p50", "tpot.p50"))
    s = _series(5000, 1.0, 10)
    v = sd.evaluate_sequential(s, medians)
    assert v.decision == sd.NO_GAIN and v.stop and v.rows[0].lo > -0.02
    keep = sd.Design(guardrails=("ttft.p50", "tpot.p50"), stop_on_no_gain=False)
    assert not sd.evaluate_sequential(s, keep).stop
    odd = sd.evaluate_sequential(s, sd.Design(guardrails=("ttft_user.p50",)))
    assert odd.rows[1].note == "not measured" and odd.decision != sd.GO


def test_an_a_a_that_may_not_stop_on_no_gain_has_no_time_to_a_decision():
    """A run stops on GO or NO-GO only: an A/A heads for neither, so it has no "more pairs
    would decide" (the live strip's time left), while a slower candidate's rows point at the
    NO-GO they head for."""
    keep = sd.Design(guardrails=("ttft.p50", "tpot.p50"), stop_on_no_gain=False)
    v = sd.evaluate_sequential(_series(600, 1.0, 11), keep)
    assert v.decision in (sd.UNDECIDED, sd.NO_GAIN) and v.more is None
    assert sd.evaluate_sequential(_series(600, 1.0, 11), sd.Design(guardrails=())).more
    slow = sd.evaluate_sequential(_series(120, 1.08, 12), keep)
    assert slow.decision == sd.UNDECIDED and slow.more is not None


def test_paired_series_has_ttfo_for_a_sequential_primary():
    t = synthetic_table(40, [ArmTruth(), ArmTruth()], seed=13)
    s = sd.paired_series(t, 0, 1, ("ttfo", "ttft"))
    (a, b), (ta, tb) = s["ttfo"], s["ttft"]
    assert len(a) == 40 and np.allclose(a, ta, equal_nan=True)  # no reasoning: TTFO is TTFT
    assert np.allclose(b, tb, equal_nan=True)
    assert sd.supported("ttfo.p50") and sd.supported("ttfo.p99")
