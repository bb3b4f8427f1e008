"""The verdict policy on synthetic sessions with known truth: GO, NO-GO and the conditions that
forbid GO (a degraded load generator, more errors, an unfinished session), the ladder, δ from a
noise floor. 500 bootstrap resamples keep it fast; the effects here are far from the limits."""

from __future__ import annotations

import json
import math

import pytest

from abtui.stats import decide
from abtui.stats.reasons import Code, codes
from abtui.verdict.policy import GO, INCONCLUSIVE, NO_GO, ArmLoad, GuardState, evaluate
from tests.synthetic import ArmTruth, synthetic_table

ARMS = [{"name": "base"}, {"name": "cand"}, {"name": "cand2"}]
SPEC = {"policy": {"resamples": 500, "guardrails": ["ttft.p50", "tpot.p50", "e2e.p90"]}}
FASTER = ArmTruth(ttft_scale=0.8, tpot_scale=0.8)


def _verdict(*truths, status="complete", spec=SPEC, n=400, **kw):
    t = synthetic_table(n, list(truths), seed=7)
    return evaluate(t, ARMS[: len(truths)], spec, status=status, **kw)


def test_faster_candidate_is_go_and_says_why():
    v = _verdict(ArmTruth(), FASTER)
    assert v.result == GO and v.exit_code == 0
    assert v.pairs[0].reasons[0].code == Code.PRIMARY_IMPROVED


def test_guardrail_regression_is_no_go_naming_the_metric_and_threshold():
    v = _verdict(ArmTruth(), ArmTruth(ttft_scale=1.3, tpot_scale=0.7))
    assert v.result == NO_GO and v.exit_code == 3
    assert Code.GUARDRAIL_REGRESSED in codes(v.pairs[0].reasons)
    g = next(g for g in v.pairs[0].guardrails if g.key == "ttft.p50")
    assert g.state == GuardState.REGRESSED and g.delta == 0.02


def test_a_degraded_load_generator_cannot_be_go():
    v = _verdict(ArmTruth(), ArmTruth(ttft_scale=0.8, tpot_scale=0.8, lag_s=0.05))
    assert v.result == INCONCLUSIVE
    assert Code.LOAD_NOT_KEPT in codes(v.pairs[0].reasons)
    assert v.pairs[0].generator["cand"].behind is True


def test_more_errors_cannot_be_go_and_significantly_more_is_no_go():
    slight = _verdict(
        ArmTruth(error_rate=0.0), ArmTruth(ttft_scale=0.8, tpot_scale=0.8, error_rate=0.015)
    )
    assert slight.result == INCONCLUSIVE and Code.ERRORS_ROSE in codes(slight.pairs[0].reasons)
    many = _verdict(
        ArmTruth(error_rate=0.0), ArmTruth(ttft_scale=0.8, tpot_scale=0.8, error_rate=0.1)
    )
    assert many.result == NO_GO and Code.ERRORS_ROSE in codes(many.pairs[0].reasons)


def test_an_unfinished_session_cannot_be_go():
    v = _verdict(ArmTruth(), FASTER, status="interrupted")
    assert v.result == INCONCLUSIVE
    assert Code.INCOMPLETE in codes(v.pairs[0].reasons)


def test_several_candidates_get_a_ladder_and_the_worst_result():
    v = _verdict(ArmTruth(), FASTER, ArmTruth(ttft_scale=1.3))
    assert [p.result for p in v.pairs] == [GO, NO_GO] and v.result == NO_GO
    assert [(p.baseline, p.candidate) for p in v.ladder] == [("cand", "cand2")]


def test_noise_floor_raises_delta_per_row():
    v = _verdict(ArmTruth(), FASTER, noise_floor={"e2e.p50": 0.5, "ttft.p99": 0.01})
    rows = v.pairs[0].comparison.by_key
    assert rows["e2e.p50"].delta == 0.5 and rows["ttft.p99"].delta == 0.05
    assert rows["e2e.p50"].outcome != "IMPROVED"  # a 20% gain is inside a 50% noise floor
    assert v.result == INCONCLUSIVE


def test_a_breakdown_row_takes_the_noise_floor_of_its_base_row():
    # bucket bounds (@in64-64 …) are particular to one session: the floor is stored per base
    # row, and a breakdown row of a later verdict looks up its base key
    t = synthetic_table(400, [ArmTruth(), FASTER], seed=7, vary_input=True)
    v = evaluate(t, ARMS[:2], SPEC, noise_floor={"ttft.p50": 0.3, "e2e.p50": 0.4})
    rows = v.pairs[0].comparison.effects
    buckets = [e for e in rows if e.key.startswith(("ttft.p50@", "e2e.p50@"))]
    assert len(buckets) >= 4
    for e in buckets:
        assert e.delta == (0.3 if e.key.startswith("ttft") else 0.4), e.key
    assert v.pairs[0].comparison.get("tpot.p50").delta == 0.02  # no floor: the default


def test_cost_primary_objective():
    spec = {
        "policy": {"resamples": 500, "primary": "cost.per_mtok_good"},
        "cost": {"gpu_price": 2.0},
        "arms": [{"name": "base"}, {"name": "cand", "gpu_price": 1.0}],
    }
    v = _verdict(ArmTruth(), ArmTruth(), spec=spec)
    e = v.pairs[0].comparison.get("cost.per_mtok_good")
    assert e.ratio == pytest.approx(-0.5, abs=0.01) and e.outcome == "IMPROVED"
    assert v.pairs[0].cost["cand"].usd_per_hour == 1.0


def test_input_length_breakdowns_are_a_benjamini_hochberg_family():
    t = synthetic_table(400, [ArmTruth(), FASTER], seed=7, vary_input=True)
    v = evaluate(t, ARMS[:2], SPEC)
    rows = [e for e in v.pairs[0].comparison.effects if "@in" in e.key]
    assert {e.key for e in rows} == {
        f"{m}.p50@in{lo}-{hi}"
        for m in ("ttft", "e2e")
        for lo, hi in ((64, 64), (128, 128), (256, 256), (512, 512))
    }
    assert all(e.family == "breakdown" and e.n_a == 100 for e in rows)
    assert all(e.outcome == "IMPROVED" for e in rows)  # 20% faster in every bucket
    flat = synthetic_table(400, [ArmTruth(), FASTER], seed=7)
    assert not any(
        "@in" in e.key for e in evaluate(flat, ARMS[:2], SPEC).pairs[0].comparison.effects
    )


def test_light_load_uses_the_paired_wilcoxon_and_load_uses_mann_whitney():
    light = synthetic_table(300, [ArmTruth(), FASTER], seed=3, rate=2.0)  # ≈ 0.4 in flight
    comp = evaluate(light, ARMS[:2], SPEC).pairs[0].comparison
    assert comp.design.light_load and comp.design.rank_test == "wilcoxon"
    rt = comp.rank_tests["tpot"]
    assert rt.test == "wilcoxon" and rt.n == 300 and rt.p < 1e-6
    assert rt.shift == pytest.approx(-0.2, abs=0.05)  # Hodges–Lehmann of log(B/A): 20% faster
    loaded = synthetic_table(300, [ArmTruth(), FASTER], seed=3, rate=40.0)  # ≈ 8 in flight
    comp = evaluate(loaded, ARMS[:2], SPEC).pairs[0].comparison
    assert comp.rank_tests["tpot"].test == "mann-whitney"
    assert comp.get("tpot.p50").block_len >= 8  # a block spans the requests in flight


def _point(arm, level, load, attain, p99, usd):
    from abtui.stats.sweep import LevelPoint

    return LevelPoint(arm, level, load, None, load, 100, attain, load, load * 10, p99, p99, usd)


def test_capacity_and_pareto_front_on_hand_made_points():
    from abtui.stats.sweep import capacity, mark_pareto

    pts = [
        _point("a", 0, 5.0, 0.99, 0.20, 3.0),
        _point("a", 1, 10.0, 0.95, 0.30, 2.0),
        _point("a", 2, 20.0, 0.60, 0.90, 1.5),
        _point("b", 0, 5.0, 0.99, 0.25, 3.5),  # dominated by a@5 (slower and dearer)
        _point("b", 1, 10.0, 0.97, 0.28, 2.5),
    ]
    assert capacity(pts[:3]) == 10.0 and capacity(pts[3:]) == 10.0
    assert capacity(pts[:3], target=0.999) is None
    mark_pareto(pts)
    assert [p.on_front for p in pts] == [True, True, True, False, True]
    gap = _point("a", 3, 30.0, math.nan, math.nan, None)  # a level that measured nothing
    d = gap.to_dict()
    assert d["attainment"] is None and d["p99_e2e_s"] is None and d["usd_per_mtok_good"] is None
    back = type(gap).from_dict(d)  # floats back as NaN, the optional price back as None
    assert math.isnan(back.attainment) and back.usd_per_mtok_good is None
    assert back.shown("attainment") is None and back.shown("load_rps") == 30.0


def test_a_sweep_session_gets_capacity_cost_at_capacity_and_a_front():
    import numpy as np

    from abtui.metrics.table import RequestTable

    parts = []
    for k, scale in enumerate((1.0, 2.0, 4.0)):  # latency grows with the offered load
        t = synthetic_table(
            200,
            [ArmTruth(ttft_scale=scale), ArmTruth(ttft_scale=0.6 * scale)],
            seed=20 + k,
            rate=5.0 * 2**k,
        )
        parts.append(t)
    table = RequestTable.concat(parts)
    table.level = np.concatenate([np.full(len(t), k) for k, t in enumerate(parts)])
    spec = {**SPEC, "slo": {"ttft": 0.1}, "cost": {"gpu_price": 2.0}}
    levels = [{"level": k, "rate": 5.0 * 2**k} for k in range(3)]
    v = evaluate(table, ARMS[:2], spec, levels=levels)
    sw = v.sweep
    assert len(sw.points) == 6 and {p.level for p in sw.points} == {0, 1, 2}
    cap = sw.capacity_rps
    assert cap["base"] in (5.0, 10.0) and cap["cand"] >= cap["base"]  # faster: more capacity
    assert sw.usd_per_mtok_good_at_capacity["cand"] > 0
    assert any(p.on_front for p in sw.points)
    d = v.to_dict()["sweep"]
    assert d["target"] == 0.9 and d["front_axes"] == ["p99_e2e_s", "usd_per_mtok_good"]
    back = type(sw).from_dict(json.loads(json.dumps(d)))  # a stored verdict's sweep read back
    assert back.to_dict() == d and back.points[0].arm == sw.points[0].arm
    assert _verdict(ArmTruth(), FASTER).sweep is None  # one level: no sweep section


def test_alternation_blocks_are_resampled_whole():
    t = synthetic_table(400, [ArmTruth(), FASTER], seed=5)
    t.block = t.item // 50  # 8 alternation blocks of 50 items (arms took turns)
    comp = evaluate(t, ARMS[:2], SPEC).pairs[0].comparison
    assert comp.design.resampling == "alternation blocks" and comp.design.units == 8
    assert comp.get("e2e.p50").block_len == 1
    flat = evaluate(synthetic_table(400, [ArmTruth(), FASTER], seed=5), ARMS[:2], SPEC)
    assert flat.pairs[0].comparison.design.resampling == "circular blocks of items"
    assert comp.get("e2e.p50").outcome == "IMPROVED"  # 20% faster is still clear with 8 blocks
    assert comp.get("e2e.p50").n_eff > 300  # independent requests: the n_eff rule lets it be


# ---------------------------------------------------------------- guardrails must be shown

DEFAULT_GUARDS = {"policy": {"resamples": 1000}}  # the default guardrails: P50 and P99 TTFT/TPOT…


def test_a_fast_candidate_with_undecidable_p99_guardrails_is_not_go():
    # the audit's case: P50 −10 %, P99 TTFT far worse; at n = 500 the P99 rows cannot be called,
    # and "no guardrail regressed" made this GO in 90 % of runs
    cand = ArmTruth(ttft_scale=0.9, tpot_scale=0.9, tail_share=0.03, tail_scale=3.0)
    v = evaluate(synthetic_table(500, [ArmTruth(), cand], seed=3), ARMS[:2], DEFAULT_GUARDS)
    pair = v.pairs[0]
    assert pair.comparison.get("e2e.p50").outcome == "IMPROVED"
    assert not any(pair.comparison.get(k).outcome == "REGRESSED" for k in ("ttft.p99", "e2e.p99"))
    assert v.result == INCONCLUSIVE and v.exit_code == 4
    assert pair.reasons[0].code == Code.PRIMARY_IMPROVED_BUT
    g = next(g for g in pair.guardrails if g.key == "ttft.p99")
    assert g.reason in pair.reasons and g.reason.code == Code.GUARDRAIL_UNDECIDED
    assert g.samples_needed == 1000  # the P99's small-sample minimum
    states = {g.key: g.state for g in pair.guardrails}
    assert states["ttft.p99"] == GuardState.UNDECIDED and states["ttft.p50"] == GuardState.SHOWN


def test_a_fast_candidate_at_60_requests_per_arm_is_not_go():
    v = evaluate(
        synthetic_table(60, [ArmTruth(), ArmTruth(ttft_scale=0.5, tpot_scale=0.5)], seed=1),
        ARMS[:2],
        DEFAULT_GUARDS,
    )
    assert v.pairs[0].comparison.get("e2e.p50").outcome == "IMPROVED"
    assert v.result == INCONCLUSIVE
    assert codes(v.pairs[0].reasons).count(Code.GUARDRAIL_UNDECIDED) == 3  # the three P99s


def test_a_guardrail_whose_ci_reaches_past_delta_blocks_go_and_says_what_would_decide():
    spec = {"policy": {"resamples": 1000, "guardrails": ["ttft.p50", "ttft.p99"]}}
    cand = ArmTruth(ttft_scale=0.9, tpot_scale=0.9, tail_share=0.01, tail_scale=2.0)
    v = evaluate(synthetic_table(1200, [ArmTruth(), cand], seed=2), ARMS[:2], spec)
    e = v.pairs[0].comparison.get("ttft.p99")
    assert e.outcome == "INCONCLUSIVE" and e.hi > 0.05  # callable, but the CI reaches past +5 %
    assert v.pairs[0].comparison.get("e2e.p50").outcome == "IMPROVED"
    assert v.result == INCONCLUSIVE  # GO before: nothing REGRESSED
    g = next(g for g in v.pairs[0].guardrails if g.key == "ttft.p99")
    assert g.state == GuardState.UNDECIDED and g.reason in v.pairs[0].reasons
    assert g.bound > g.delta == 0.05  # its CI reaches past δ
    assert g.samples_needed > 1200


def test_go_names_each_guardrail_bound_and_an_unmeasured_guardrail_blocks_go():
    v = _verdict(ArmTruth(), FASTER)
    assert v.result == GO
    assert v.pairs[0].reasons[1].code == Code.GUARDRAILS_SHOWN
    assert all(g.state == GuardState.SHOWN for g in v.pairs[0].guardrails)
    assert next(g for g in v.pairs[0].guardrails if g.key == "ttft.p50").bound < 0
    # goodput needs SLOs: a guardrail on it is not measured here, so GO is not possible
    spec = {"policy": dict(SPEC["policy"], guardrails=["ttft.p50", "goodput.requests"])}
    v = _verdict(ArmTruth(), FASTER, spec=spec)
    assert v.result == INCONCLUSIVE
    g = next(g for g in v.pairs[0].guardrails if g.key == "goodput.requests")
    assert g.state == GuardState.MISSING and g.reason.code == Code.GUARDRAIL_MISSING
    assert g.reason in v.pairs[0].reasons


def test_quality_not_shown_non_inferior_turns_go_into_inconclusive():
    def rows(n):
        return [
            {
                "arm": arm,
                "item": k,
                "run": 0,
                "correct": True,
                "detail": {"suite": "exact", "cluster": str(k)},
            }
            for arm in (0, 1)
            for k in range(n)
        ]

    few = _verdict(ArmTruth(), FASTER, quality=rows(40))  # no flip, but ±8.8 pp on 40 items
    assert few.result == INCONCLUSIVE
    assert any("underpowered: about 381 items would decide" in r for r in few.pairs[0].reasons)
    assert Code.QUALITY_UNDECIDED in codes(few.pairs[0].reasons)
    assert few.pairs[0].reasons[0].code == Code.PRIMARY_IMPROVED_BUT
    assert _verdict(ArmTruth(), FASTER, quality=rows(400)).result == GO


def _alternating(t, items_per_block: int = 50, gap_s: float = 0.5):
    """``t`` replayed as ``schedule = "alternate"``: blocks of ``items_per_block`` items, arms
    taking turns A B | B A | …, each turn on its own stretch of wall clock (its requests shifted
    there, chunks too), ``gap_s`` between turns: an arm is idle while the other plays."""
    import numpy as np

    from abtui.metrics.table import NA
    from abtui.workload.segments import alternate_order

    t.block = t.item // items_per_block
    n_blocks = int(t.block.max()) + 1
    span = (t.scheduled_ns.max() - t.scheduled_ns.min()) * items_per_block // len(np.unique(t.item))
    turn_ns = int(span + gap_s * 1e9)
    shift = np.zeros(len(t), dtype=np.int64)
    for b in range(n_blocks):
        for slot, arm in enumerate(alternate_order(b, 2)):
            rows = (t.block == b) & (t.arm == arm)
            shift[rows] = (2 * b + slot) * turn_ns - b * span  # turn start − the block's offset
    for col in (
        "scheduled_ns",
        "dispatched_ns",
        "first_byte_ns",
        "done_ns",
        "first_token_ns",
        "last_token_ns",
    ):
        v = getattr(t, col)
        setattr(t, col, np.where(v != NA, v + shift, v))
    t.chunk_t_ns = t.chunk_t_ns + shift[t.chunk_req_idx]
    return t


def test_alternating_rates_use_each_arms_own_turns():
    """A/A under alternation: each arm's throughput is over the blocks it played, not first
    dispatch → last completion (which spans the other arm's turns: arm A opens and closes the
    session, A B | B A | … | B A, so it looked ~14% slower), and the CI resamples whole blocks."""
    from abtui.metrics.summary import summarize
    from abtui.stats.effects import compare

    t = _alternating(synthetic_table(400, [ArmTruth(), ArmTruth()], seed=11))
    sa, sb = summarize(t, 0), summarize(t, 1)
    assert sa.duration_s == pytest.approx(sb.duration_s, rel=0.01)
    turn_s = 49 / 20.0 + 0.19  # 50 arrivals at 20/s, then the last one's E2E (≈ 0.19 s)
    assert sa.duration_s == pytest.approx(8 * turn_s, rel=0.03)
    assert sa.requests_per_s == pytest.approx(50 / turn_s, rel=0.03)
    comp = compare(t, 0, 1, {"e2e": 0.5}, resamples=1000, seed=1, prices=(2.0, 2.0))
    for key in (
        "throughput.requests",
        "throughput.output_tokens",
        "goodput.requests",
        "cost.per_mtok_output",
    ):
        e = comp.get(key)
        assert abs(e.ratio) < 0.01 and e.lo < 0 < e.hi and e.hi - e.lo < 0.05, key
        assert e.block_len == 1, key  # whole alternation blocks


def test_a_strongly_autocorrelated_contrast_is_not_called():
    # AR(1) ρ = 0.95 in each arm, independently, 200 requests: ~10 effectively independent
    # pairs. The block bootstrap's CI is far too narrow there (15-24 % false calls in A/A);
    # the row says so and makes no call.
    t = synthetic_table(200, [ArmTruth(ar=0.95), ArmTruth(ar=0.95)], seed=4)
    comp = evaluate(t, ARMS[:2], DEFAULT_GUARDS).pairs[0].comparison
    e = comp.get("e2e.p50")
    assert e.n_eff < decide.MIN_EFFECTIVE and e.outcome == "INCONCLUSIVE"
    assert e.note.code == Code.TOO_DEPENDENT
    assert e.samples_needed > 200 and not math.isfinite(e.p_adj)  # out of the Holm family


def test_alternation_blocks_a_per_arm_state_outlasts_are_not_called():
    """Alternating A/A, 8 blocks of 25 items, each arm's latency its own AR(1) ρ = 0.98 (a state
    that outlasts the blocks): neighbouring blocks are correlated, so the whole-block bootstrap's
    interval, even widened for 8 blocks, is far too narrow; here it lies beyond δ in most seeds.
    The n_eff rule on the per-item paired contrast applies under alternation too (it did not:
    11 % false calls in the calibration's AR 0.98 cell at 200 requests per arm)."""
    beyond = 0
    for seed in range(8):
        truths = [ArmTruth(ar=0.98), ArmTruth(ar=0.98)]
        t = _alternating(synthetic_table(200, truths, seed=seed), items_per_block=25)
        v = evaluate(t, ARMS[:2], DEFAULT_GUARDS)
        comp = v.pairs[0].comparison
        assert comp.design.resampling == "alternation blocks" and v.result == INCONCLUSIVE
        for key in ("e2e.p50", "ttft.p50", "tpot.p50"):
            e = comp.get(key)
            assert e.min_eff == decide.MIN_EFFECTIVE_UNWIDENED  # whole turns: not widened
            assert e.n_eff < e.min_eff and e.outcome == "INCONCLUSIVE", (seed, key)
            assert e.note.code == Code.TOO_DEPENDENT and not math.isfinite(e.p_adj)
            beyond += e.lo > e.delta or e.hi < -e.delta
    assert beyond >= 6  # what the interval alone would have called (10 of 24 rows)


def test_slo_rows_of_a_strongly_autocorrelated_pair_are_not_called():
    """Each arm's latency its own AR(1) ρ = 0.95 around an SLO at the median, 200 requests: the
    per-window attainment bootstrap sees 20 windows and no dependence in them, so its interval
    is far too narrow (calibration slo cell, AR 0.98: 21 % false calls at 200, 10 % at 1,000).
    The SLO rows now carry the n_eff of their per-item contrast (good_B − good_A), and make no
    call below the rule; a real attainment change of independent requests is still called."""
    beyond = 0
    for seed in range(10):
        t = synthetic_table(200, [ArmTruth(ar=0.95), ArmTruth(ar=0.95)], seed=seed)
        v = evaluate(t, ARMS[:2], {"policy": {"resamples": 500}, "slo": {"e2e": 0.19}})
        comp = v.pairs[0].comparison
        for key in ("slo.attainment", "goodput.requests", "goodput.output_tokens"):
            e = comp.get(key)
            assert e.min_eff == decide.MIN_EFFECTIVE_UNWIDENED  # windows: not widened
            assert e.n_eff < e.min_eff and e.outcome == "INCONCLUSIVE", (seed, key)
            assert e.note.code == Code.TOO_DEPENDENT and not math.isfinite(e.p_adj)
        e = comp.get("slo.attainment")
        beyond += e.lo > e.delta or e.hi < -e.delta
        assert math.isnan(comp.get("throughput.requests").n_eff)  # counts: not an SLO row
    assert beyond >= 2  # what the interval alone would have called
    t = synthetic_table(400, [ArmTruth(), FASTER], seed=3)
    v = evaluate(t, ARMS[:2], {"policy": {"resamples": 500}, "slo": {"e2e": 0.19}})
    e = v.pairs[0].comparison.get("slo.attainment")
    assert e.n_eff > 200 and e.outcome == "IMPROVED"


def test_a_load_both_arms_share_cancels_in_the_contrast_and_is_called():
    from tests.synthetic import shared_load

    shared = shared_load(400, seed=2, sigma=0.25, ar=0.95)  # as dependent, but common to both
    t = synthetic_table(
        400, [ArmTruth(), ArmTruth(ttft_scale=0.8, tpot_scale=0.8)], seed=2, shared=shared
    )
    e = evaluate(t, ARMS[:2], SPEC).pairs[0].comparison.get("e2e.p50")
    assert e.n_eff >= decide.MIN_EFFECTIVE and e.outcome == "IMPROVED"


# The generator rule in proportion (abtui.stats.lagguard). A busy client at 30 req/s
# with a 350 ms E2E (TTFT 50 ms, TPOT 20 ms): lag P99 ≈ 11 ms, max ≈ 22 ms in both arms, and the
# same stalls delay the reads of the first and last token.
BUSY = {"ttft_s": 0.05, "tpot_s": 0.02, "stall_s": 0.0032}


def _busy(scale: float, stall_s: float = BUSY["stall_s"]):
    base = ArmTruth(**dict(BUSY, stall_s=stall_s))
    cand = ArmTruth(**dict(BUSY, stall_s=stall_s), ttft_scale=scale, tpot_scale=scale)
    t = synthetic_table(1000, [base, cand], rate=30, seed=3)
    return evaluate(t, ARMS[:2], {"policy": {"resamples": 500}})


def test_a_lag_too_small_to_explain_a_large_gain_does_not_block_go():
    v = _busy(0.6)
    g = v.pairs[0].generator["base"]
    assert 0.010 < g.lag_p99_s < 0.012 and g.behind  # past the fixed 10 ms limit
    assert g.load_kept and 1.0 < g.flattery["e2e.p50"] < 1.05
    assert ArmLoad.from_dict(json.loads(json.dumps(g.to_dict()))) == g  # as a stored verdict
    assert v.result == GO, v.pairs[0].reasons


def test_a_lag_that_could_explain_the_gain_still_blocks_go():
    # −10%: the same stalls could make the baseline's 50 ms P50 TTFT look ~15% slower, so the
    # TTFT guardrail cannot be vouched for — said with the figures
    v = _busy(0.9)
    assert v.result == INCONCLUSIVE
    assert codes(v.pairs[0].reasons).count(Code.LAG_EXPLAINS) == 1, v.pairs[0].reasons
    assert v.pairs[0].generator["base"].flattery["ttft.p50"] > 1.1  # the guardrail's bound


def test_arrivals_late_by_more_than_half_a_gap_block_go_whatever_the_gain():
    v = _busy(0.6, stall_s=0.02)  # lag P99 ≈ 68 ms against a 33 ms gap and a 350 ms E2E
    assert v.result == INCONCLUSIVE
    assert not v.pairs[0].generator["base"].load_kept
    assert Code.LOAD_NOT_KEPT in codes(v.pairs[0].reasons)


def test_the_candidates_own_stalls_cannot_fake_a_gain():
    """Only the baseline's stalls flatter the candidate; the candidate's make it look slower."""
    base = ArmTruth(**dict(BUSY, stall_s=0.0))
    cand = ArmTruth(**BUSY, ttft_scale=0.6, tpot_scale=0.6)
    v = evaluate(
        synthetic_table(1000, [base, cand], rate=30, seed=3),
        ARMS[:2],
        {"policy": {"resamples": 500}},
    )
    assert v.result == GO and v.pairs[0].generator["cand"].flattery == {}


def test_throughput_at_an_open_loop_rate_is_not_called_nor_extrapolated():
    """Open-loop arrivals offer both arms the same load: throughput follows the rate, so its
    rows get no outcome and no "requests would decide"; a closed loop's are called."""
    from abtui.verdict.comparable import rate_set_notes

    assert rate_set_notes({"rate": 20.0})["throughput.output_tokens"].code == Code.SET_BY_LOAD
    assert rate_set_notes({"rate": None, "concurrency": 8}) == {}
    assert rate_set_notes({"rate": 20.0, "concurrency": 4}) == {}  # a cap: the server's rate
    assert rate_set_notes({"sweep_rate": [5.0, 10.0]})
    fast = ArmTruth(ttft_s=0.025, tpot_s=0.006)
    for load, called in (({"rate": 20.0}, False), ({"concurrency": 8}, True)):
        v = _verdict(ArmTruth(), fast, spec={**SPEC, "load": load})
        for key in ("throughput.requests", "throughput.output_tokens"):
            e = v.pairs[0].comparison.get(key)
            if called:
                assert "open-loop" not in str(e.note)
                continue
            assert e.outcome == INCONCLUSIVE and e.samples_needed is None
            assert "set by the open-loop rate (20 req/s" in e.note
            assert "would decide" not in e.note
