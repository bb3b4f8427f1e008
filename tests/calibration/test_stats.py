"""The statistics, validated against known truth and independent reference values.

Repeated-trial tests (A/A false positives, power, autocorrelation) use 400–500 bootstrap
resamples instead of 10,000 to keep the suite fast; the rates they check do not depend on the
resample count beyond Monte Carlo noise of a few tenths of a percent in the CI bounds.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from abtui.stats import bootstrap, decide
from abtui.stats.classical import (
    hodges_lehmann_one,
    hodges_lehmann_two,
    mann_whitney,
    mcnemar_exact,
    wilcoxon_log_ratio,
)
from abtui.stats.effects import compare
from abtui.stats.multiple import benjamini_hochberg, holm
from abtui.stats.reasons import Code
from abtui.verdict.policy import apply_policy, resolve_policy
from tests.synthetic import ArmTruth, synthetic_table

ALPHA = 0.05
# 200 Bernoulli(0.05) trials: SD 0.0154; α + 2.6 SD is a false-alarm bound that a correct
# method exceeds with probability < 0.5%
FP_BOUND = ALPHA + 0.04


# ----------------------------------------------------------------------- reference values


def _holm_by_closed_testing(p):
    """Holm adjusted p-values from the definition: p̃_(i) = max_{j≤i} (m−j+1) p_(j), capped."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def test_holm_matches_textbook_and_definition():
    p = [0.01, 0.04, 0.03, 0.005]
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    rng = np.random.default_rng(3)
    for _ in range(20):
        q = rng.random(7) ** 3
        assert holm(q) == pytest.approx(_holm_by_closed_testing(list(q)))


def test_bh_matches_textbook_and_scipy():
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    rng = np.random.default_rng(4)
    for _ in range(20):
        q = rng.random(9) ** 2
        assert benjamini_hochberg(q) == pytest.approx(sps.false_discovery_control(q, method="bh"))


def test_corrections_skip_missing_p_values():
    out = holm([0.01, None, math.nan, 0.02])
    assert out[0] == pytest.approx(0.02) and out[3] == pytest.approx(0.02)
    assert math.isnan(out[1]) and math.isnan(out[2])


def test_mcnemar_exact_reference_values():
    assert mcnemar_exact(1, 9) == pytest.approx(2 * 11 / 1024)  # 2·P(X ≤ 1), X ~ Bin(10, ½)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 5) == 1.0
    for b, c in [(3, 12), (20, 7), (0, 6), (40, 55)]:
        assert mcnemar_exact(b, c) == pytest.approx(sps.binomtest(b, b + c, 0.5).pvalue)


def test_hodges_lehmann_matches_brute_force():
    rng = np.random.default_rng(5)
    d = rng.normal(0.1, 1, 25)
    walsh = [(d[i] + d[j]) / 2 for i, j in itertools.combinations_with_replacement(range(25), 2)]
    assert hodges_lehmann_one(d) == pytest.approx(np.median(walsh))
    a, b = rng.normal(0, 1, 12), rng.normal(0.5, 1, 15)
    assert hodges_lehmann_two(a, b) == pytest.approx(np.median([y - x for x in a for y in b]))


def test_rank_tests_agree_with_scipy_and_detect_a_shift():
    rng = np.random.default_rng(6)
    a = rng.lognormal(0, 0.3, 40)
    b = a * rng.lognormal(np.log(0.9), 0.05, 40)  # paired: every item 10% faster
    w = wilcoxon_log_ratio(a, b)
    assert w.p == pytest.approx(sps.wilcoxon(np.log(b / a)).pvalue)
    assert w.p < 1e-6 and w.shift == pytest.approx(-0.1, abs=0.03)
    mw = mann_whitney(a, b)
    assert mw.p == pytest.approx(sps.mannwhitneyu(b, a, alternative="two-sided").pvalue)


def test_bootstrap_mean_and_median_match_scipy_percentile_interval():
    rng = np.random.default_rng(7)
    v = rng.lognormal(0, 0.5, 300)
    sk = bootstrap.Sketch.of(v, np.arange(300), 300, bootstrap.Grid.covering(v))
    w = bootstrap.circular_block_weights(300, 1, 10_000, np.random.default_rng(1))
    reps = sk.resampled(w)
    for stat, fn in (
        ("mean", np.mean),
        ("p50", np.median),
        ("p90", lambda x: np.percentile(x, 90)),
    ):
        ref = sps.bootstrap((v,), fn, method="percentile", n_resamples=10_000, random_state=2)
        lo, hi = bootstrap.percentile_ci(reps[stat])
        width = ref.confidence_interval.high - ref.confidence_interval.low
        assert lo == pytest.approx(ref.confidence_interval.low, abs=0.08 * width), stat
        assert hi == pytest.approx(ref.confidence_interval.high, abs=0.08 * width), stat
    assert sk.exact["p99"] == pytest.approx(np.percentile(v, 99))


def test_circular_blocks_wrap_and_cover_whole_blocks():
    w = bootstrap.circular_block_weights(10, 3, 500, np.random.default_rng(0))
    assert (w.sum(axis=1) == 12).all()  # ⌈10/3⌉ = 4 blocks of 3, the last kept whole
    # every unit, including the wrap-around ones, is drawn equally often on average
    assert w.mean(axis=0) == pytest.approx(np.full(10, 1.2), abs=0.15)


def test_block_length_rule_sees_dependence():
    rng = np.random.default_rng(8)
    iid = rng.normal(size=1000)
    ar = np.zeros(1000)
    for i in range(1, 1000):
        ar[i] = 0.9 * ar[i - 1] + rng.normal()
    assert bootstrap.politis_white_length(iid) < 3
    assert bootstrap.politis_white_length(ar) > 15
    assert (
        bootstrap.block_length([iid], in_flight=12.0) == 12
    )  # a generation of concurrent requests
    assert bootstrap.block_length([iid], in_flight=12.0, unit_size=4) == 3


# ----------------------------------------------------------------------- decisions


def test_decisions_follow_ci_and_delta():
    kw = dict(lower_is_better=True, n=500, stat="p50")
    assert decide.decide(-0.10, -0.12, -0.08, 0.001, 0.02, **kw).outcome == decide.IMPROVED
    assert decide.decide(0.10, 0.08, 0.12, 0.001, 0.02, **kw).outcome == decide.REGRESSED
    assert decide.decide(0.0, -0.01, 0.01, 0.9, 0.02, **kw).outcome == decide.EQUIVALENT
    # significant but the CI reaches inside δ: not a call
    d = decide.decide(-0.03, -0.05, -0.01, 0.001, 0.02, **kw)
    assert d.outcome == decide.INCONCLUSIVE and d.samples_needed > 500
    # beyond δ but not significant after correction
    assert decide.decide(-0.10, -0.12, -0.08, 0.2, 0.02, **kw).outcome == decide.INCONCLUSIVE
    # higher is better
    assert (
        decide.decide(0.1, 0.08, 0.12, 0.001, 0.02, lower_is_better=False, n=20).outcome
        == decide.IMPROVED
    )
    # the same interval from 9 paired units is no call, in any direction
    for r, lo, hi in ((0.1, 0.08, 0.12), (0.0, -0.01, 0.01)):
        d = decide.decide(r, lo, hi, 0.001, 0.02, lower_is_better=False, n=9)
        assert d.outcome == decide.INCONCLUSIVE and not d.significant and d.samples_needed == 20
        assert d.code == Code.TOO_FEW_PAIRED
    d = decide.non_inferiority(0.0, -0.01, 0.01, 0.02, lower_is_better=True, n=500, paired=9)
    assert d.outcome == decide.INCONCLUSIVE and not d.significant


def test_p99_small_sample_rule_refuses_a_call_and_says_why():
    d = decide.decide(-0.5, -0.6, -0.4, 1e-6, 0.05, lower_is_better=True, n=500, stat="p99")
    assert d.outcome == decide.INCONCLUSIVE and not d.significant
    assert d.code == Code.TOO_FEW_TAIL and d.samples_needed == 1000
    assert (
        decide.decide(
            -0.5, -0.6, -0.4, 1e-6, 0.05, lower_is_better=True, n=1000, stat="p99"
        ).outcome
        == decide.IMPROVED
    )


def test_samples_needed_shrinks_the_ci_to_the_threshold():
    # r = −5%, CI [−8%, −2%], δ 2%: the bound facing zero must move from −2% to below −2%:
    # half-width 3% → 3% − … target |r| − δ = 3%: already there
    assert decide.samples_needed(400, -0.05, -0.08, -0.02, 0.02) == 400
    # r = −4%, CI [−8%, 0%]: half-width 4% must shrink to 2% → 4× the samples
    assert decide.samples_needed(400, -0.04, -0.08, 0.0, 0.02) == 1600
    assert decide.samples_needed(400, -0.02, -0.05, 0.01, 0.02) is None  # sits on δ


# ----------------------------------------------------------------------- known truth


def _aa_calls(n, reps, resamples, **truth):
    """Over ``reps`` seeded A/A tables: fraction of raw p < α on e2e.p50, and of any primary
    family row significant after Holm (δ = 0: significance alone makes the call)."""
    raw = fam = 0
    policy = resolve_policy(
        {
            "primary": "e2e.p50",
            "guardrails": ["tpot.p50", "tpot.p90", "e2e.mean"],
            "delta": 0.0,
            "delta_tail": 0.0,
        }
    )
    for seed in range(reps):
        t = synthetic_table(n, [ArmTruth(**truth), ArmTruth(**truth)], seed=seed)
        comp = compare(t, 0, 1, None, resamples=resamples, seed=seed, metrics=("tpot", "e2e"))
        apply_policy(comp, policy)
        raw += comp.get("e2e.p50").p < ALPHA
        fam += any(
            e.outcome in (decide.IMPROVED, decide.REGRESSED)
            for e in comp.effects
            if e.family == "primary"
        )
    return raw / reps, fam / reps


@pytest.mark.slow
def test_aa_false_positive_rate_is_at_most_alpha():
    raw, family = _aa_calls(n=200, reps=200, resamples=400)
    assert raw <= FP_BOUND
    assert family <= FP_BOUND  # Holm keeps the family-wise rate at α
    assert raw > 0.0  # the test can see a false positive at all


@pytest.mark.slow
def test_ten_percent_tpot_shift_is_called_with_high_power_at_the_recommended_size():
    """docs/methods.md §3: 500 requests per arm (P99 calls need ≥ 1000). Per-request TPOT spread here is
    log-normal σ = 0.25 (a wide spread); δ is the default 2%."""
    policy = resolve_policy({"primary": "tpot.p50", "guardrails": ["tpot.mean"]})
    calls = {
        (k, o): 0 for k in ("tpot.p50", "tpot.mean") for o in (decide.IMPROVED, decide.REGRESSED)
    }
    reps = 40
    for seed in range(reps):
        for scale, outcome in ((0.9, decide.IMPROVED), (1.1, decide.REGRESSED)):
            t = synthetic_table(500, [ArmTruth(), ArmTruth(tpot_scale=scale)], seed=1000 + seed)
            comp = compare(t, 0, 1, None, resamples=400, seed=seed, metrics=("tpot",))
            apply_policy(comp, policy)
            for key in ("tpot.p50", "tpot.mean"):
                calls[(key, outcome)] += comp.get(key).outcome == outcome
    for k, v in calls.items():
        assert v / reps >= 0.9, k


@pytest.mark.slow
def test_autocorrelated_series_fools_iid_bootstrap_but_not_block_bootstrap():
    """Two arms with identical truth whose latencies drift (AR(1), φ = 0.9, as under load)."""
    rejections = {"iid": 0, "block": 0}
    reps = 150
    for seed in range(reps):
        t = synthetic_table(1000, [ArmTruth(ar=0.9), ArmTruth(ar=0.9)], seed=seed, n_output=4)
        for kind, ell in (("iid", 1), ("block", None)):
            comp = compare(
                t, 0, 1, None, resamples=400, seed=seed, metrics=("tpot",), block_len=ell
            )
            rejections[kind] += comp.get("tpot.mean").p < ALPHA
    iid, block = rejections["iid"] / reps, rejections["block"] / reps
    assert iid >= 0.4  # the i.i.d. bootstrap calls a change in most identical pairs
    assert block <= 0.10  # blocks of ≈ 40–60 items keep it near α


def test_units_never_span_a_segment():
    keys = np.arange(20)
    unit, n_units, m = bootstrap.unit_index(keys, max_units=5, segments=keys // 7)  # 3 segments
    assert m == 4 and n_units == 6
    assert list(unit) == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4, 5, 5]
    assert list(bootstrap.unit_index(keys, max_units=5)[0][:8]) == [0, 0, 0, 0, 1, 1, 1, 1]


def test_block_length_follows_the_paired_contrast_not_a_shared_load():
    """A load both arms see alike (a shared AR(1), φ = 0.95) makes each arm's series strongly
    dependent, but it cancels in the paired contrast log(B/A) the CI is about: blocks stay
    short (light load, so no in-flight floor). Independent AR noise per arm does not cancel."""
    from tests.synthetic import shared_load

    shared = shared_load(1000, seed=3, sigma=0.5, ar=0.95)
    t = synthetic_table(1000, [ArmTruth(), ArmTruth()], seed=3, rate=2.0, shared=shared)
    comp = compare(t, 0, 1, None, resamples=200, seed=3, metrics=("ttft", "tpot", "e2e"))
    assert comp.design.in_flight[0] < 1.0
    for key in ("ttft.p50", "tpot.p50", "e2e.p50", "e2e.mean"):
        assert comp.get(key).block_len <= 4, key  # each arm's own series: ≈ 30–60 units
    t = synthetic_table(1000, [ArmTruth(ar=0.9), ArmTruth(ar=0.9)], seed=3, rate=2.0)
    comp = compare(t, 0, 1, None, resamples=200, seed=3, metrics=("e2e",))
    assert comp.get("e2e.p50").block_len >= 10


def test_rate_rows_take_their_block_length_from_their_own_contrast():
    """Requests arrive at a fixed rate (2/s: windows of ~10 requests, flat counts) while each
    arm's latency drifts slowly (AR(1), φ = 0.98) around an SLO at the median: attainment per
    window is strongly dependent though the counts are not, so its row gets longer blocks (never
    shorter than the counts' length, which throughput uses)."""
    att = thr = 0
    for seed in range(4):
        t = synthetic_table(1000, [ArmTruth(ar=0.98), ArmTruth(ar=0.98)], seed=seed, rate=2.0)
        comp = compare(t, 0, 1, {"e2e": 0.19}, resamples=200, seed=seed, metrics=("e2e",))
        a, r = comp.get("slo.attainment").block_len, comp.get("throughput.requests").block_len
        assert a >= r and comp.get("goodput.requests").block_len >= r
        assert comp.get("cost.per_mtok_good") is None  # no prices: no cost rows
        att, thr = att + a, thr + r
    assert att >= thr + 15


def _ar1(rng, n: int, rho: float) -> np.ndarray:
    from scipy.signal import lfilter

    e = rng.standard_normal(n)
    e[0] /= math.sqrt(1 - rho * rho)  # start in the stationary distribution
    return lfilter([math.sqrt(1 - rho * rho)], [1.0, -rho], e)


def test_autocorrelation_time_sees_a_persistent_state_the_flat_top_window_misses():
    """AR(1) ρ = 0.9 over 200 values: τ = (1 + ρ)/(1 − ρ) = 19. The flat-top window alone sums
    only the lags whose sample correlation is still visibly non-zero (median ≈ 12: the n_eff it
    gives is 60 % too high); with the bias-corrected ARMA(1,1) estimate beside it the median is
    ≈ 15.5. An independent series stays near 1, and a short (MA-like) dependence near its own τ
    (MA(1) θ = 1: τ = 2)."""
    rng = np.random.default_rng(5)
    series = [_ar1(rng, 200, 0.9) for _ in range(80)]
    both = np.median([bootstrap.autocorrelation_time(x) for x in series])
    flat = np.median([bootstrap.autocorrelation_time(x, persistent=False) for x in series])
    assert flat < 14 and 14 < both < 23
    iid = np.median([bootstrap.autocorrelation_time(rng.standard_normal(200)) for _ in range(40)])
    assert iid < 1.6
    e = rng.standard_normal((40, 501))
    ma = np.median([bootstrap.autocorrelation_time(r[1:] + r[:-1]) for r in e])
    assert 1.6 < ma < 2.6
    assert bootstrap.effective_size(series[0]) == pytest.approx(
        200 / bootstrap.autocorrelation_time(series[0])
    )


def test_block_shortfall_is_the_variance_the_blocks_cannot_see():
    """Blocks of ℓ values see a Bartlett window of the autocovariances: an AR(1) with ρ = 0.81
    (τ 9.5) in blocks of 20 misses 23 % of the long-run variance, so the interval must be
    √(1/0.77) ≈ 1.14× wider; blocks several τ long miss less, and an independent series loses
    nothing to short blocks. (Very long blocks lose again: the bootstrap's variance is centred on
    the sample mean, a bias of about −ℓ/n of the long-run variance, which the factor includes.)"""
    rng = np.random.default_rng(6)
    ar = [_ar1(rng, 500, 0.81) for _ in range(60)]
    short = np.median([bootstrap.block_shortfall(x, 20) for x in ar])
    assert 1.07 < short < 1.25
    assert np.median([bootstrap.block_shortfall(x, 50) for x in ar]) < short - 0.04
    # i.i.d. resampling: ≈ √τ
    assert np.median([bootstrap.block_shortfall(x, 1) for x in ar]) > 2.5
    assert (
        np.median([bootstrap.block_shortfall(rng.standard_normal(500), 5) for _ in range(40)])
        < 1.05
    )


@pytest.mark.slow
def test_a_dependent_aa_interval_covers_the_truth():
    """A/A, each arm's latency its own AR(1) ρ = 0.9, 500 requests per arm (≈ 26 effectively
    independent pairs). The circular block bootstrap alone misses the truth (Δ = 0) about twice
    as often as a 95 % interval should; widened by what its blocks cannot see
    (:func:`block_shortfall`, on a τ̂ that sees the persistent state) it covers."""
    miss = {True: 0, False: 0}
    reps = 60
    for seed in range(reps):
        t = synthetic_table(500, [ArmTruth(ar=0.9), ArmTruth(ar=0.9)], seed=100 + seed)
        for on in (True, False):
            comp = compare(
                t, 0, 1, None, resamples=300, seed=seed, metrics=("ttft", "tpot"), shortfall=on
            )
            miss[on] += sum(
                not (comp.get(k).lo <= 0 <= comp.get(k).hi)
                for k in ("ttft.p50", "tpot.p50", "ttft.mean", "tpot.mean")
            )
    rate_on, rate_off = miss[True] / (4 * reps), miss[False] / (4 * reps)
    assert rate_on <= 0.08 and rate_off >= rate_on + 0.03, (rate_on, rate_off)


@pytest.mark.parametrize("n_bins", [1, 7, 32, 33, 200, 512])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("way", ["blocks", "whole"])
def test_crossings_are_those_of_the_full_product(n_bins, dtype, way, monkeypatch):
    """The crossings (abtui/stats/crossing.py), block-wise and with the product taken whole,
    against the whole product computed here: the same bin, counts and rank for every resample
    and quantile, empty resamples and heavy bins too."""
    from abtui.stats import crossing
    from abtui.stats.crossing import crossings

    big = 10**9 if way == "whole" else 0  # 0: block-wise past 2 × STRIDE bins
    monkeypatch.setattr(crossing, "FULL_BINS", big)
    monkeypatch.setattr(crossing, "FULL_CELLS", big)
    rng = np.random.default_rng(n_bins)
    units = 60
    hist = rng.poisson(0.3, size=(units, n_bins)) * (rng.random((units, n_bins)) < 0.4)
    hist[:, n_bins // 2] += rng.integers(0, 40, units)  # one heavy bin: many ties at a rank
    cum = np.cumsum(hist, axis=1).astype(dtype)
    w = rng.integers(0, 4, size=(300, units)).astype(dtype)
    w[:3] = 0  # empty resamples: n = 0
    fractions = [0.5, 0.9, 0.95, 0.99]
    full = w @ cum
    n, found = crossings(w, cum, fractions)
    assert np.array_equal(n, full[:, -1].astype(np.float64))
    rows = np.arange(len(w))
    for q, (rank, j, before, at) in zip(fractions, found, strict=True):
        want_rank = q * (n - 1)
        want_j = np.minimum(
            np.count_nonzero(full <= np.floor(want_rank).astype(dtype)[:, None], axis=1),
            n_bins - 1,
        )
        assert np.array_equal(rank, want_rank) and np.array_equal(j, want_j)
        assert np.array_equal(at, full[rows, want_j].astype(np.float64))
        want_before = np.where(want_j > 0, full[rows, np.maximum(want_j - 1, 0)], 0)
        assert np.array_equal(before, want_before.astype(np.float64))


@pytest.mark.parametrize(("n", "decimals"), [(40, 9), (320, 9), (3000, 2)])
def test_resampled_quantiles_the_same_whole_or_in_blocks(n, decimals, monkeypatch):
    """A bootstrap's quantiles (Sketch.resampled) on random data: a small product taken whole
    (crossing.whole) gives every resample's quantiles bit for bit as the block-wise crossings."""
    from abtui.stats import crossing
    from abtui.stats.bootstrap import Grid, Sketch, circular_block_weights, resample_rows

    rng = np.random.default_rng(n)
    values = np.round(rng.lognormal(-1.0, 0.8, n), decimals)  # 2: ties, fewer bins
    values[rng.random(n) < 0.05] = np.nan  # failed requests: no value
    units = min(n, 320)
    sk = Sketch.of(values, np.arange(n) * units // n, units, Grid.covering(values))
    w = circular_block_weights(units, 3, 2_000, rng)
    occupied = int(sk.hist.any(axis=0).sum())
    assert occupied > 2 * crossing.STRIDE and crossing.whole(resample_rows(units), occupied)
    fast = sk.resampled(w)
    monkeypatch.setattr(crossing, "FULL_BINS", 0)
    slow = sk.resampled(w)
    for s in slow:
        assert np.array_equal(fast[s], slow[s], equal_nan=True), s
