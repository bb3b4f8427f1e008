"""The A/A noise floor (abtui.stats.noise_floor, docs/methods-aa.md): |pooled bias| + 1.96 τ over
alternation blocks, on synthetic A/A sessions whose copies took turns (A B | B A …) with a known
bias and a known between-block wobble; compared with the old floor, max(|lo|, |hi|) of the A/A
CI, on the same tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from abtui.stats import noise_floor as nfm
from abtui.verdict.policy import evaluate
from abtui.verdict.saved import ci_bound_floor
from tests.synthetic import ArmTruth, alternating_table, synthetic_table

ARMS = [{"name": "base"}, {"name": "base-again"}]
SPEC = {"policy": {"resamples": 2000}}


def test_the_same_small_bias_in_every_block_gives_a_floor_of_that_bias():
    # every block pair: the second copy 1% slower, tiny within-block noise (σ 0.01)
    quiet = ArmTruth(sigma=0.01)
    slower = ArmTruth(sigma=0.01, ttft_scale=1.01, tpot_scale=1.01)
    t = alternating_table(500, [[quiet, slower]] * 8, seed=3)
    nf = nfm.measure(t)
    assert nf.blocks == 8 and nf.method == nfm.METHOD
    for key in ("e2e.p50", "ttft.p50", "tpot.p50", "e2e.mean"):
        r = nf.rows[key]
        assert r.bias == pytest.approx(math.log(1.01), abs=0.002), key
        assert r.tau == 0.0 and r.floor == pytest.approx(abs(r.bias)), key  # no wobble: no τ
        assert r.within_sd < 0.003 and r.blocks == 8
    assert (
        "e2e.p99" in nf.left_out and "P99 needs ≥ 1000" in nf.left_out["e2e.p99"]
    )  # 500 per block
    assert not any("@" in k for k in nf.rows)


@pytest.mark.parametrize("seed", [0, 2])
def test_a_small_noisy_aa_gives_a_floor_near_its_bias_not_its_ci_width(seed):
    # 13 requests per copy and block, 8 blocks, no bias and no wobble: the old floor (the A/A
    # CI's largest bound, alternation blocks resampled whole) was 11-12 % on P50 E2E
    t = alternating_table(13, [[ArmTruth(), ArmTruth()]] * 8, seed=seed)
    old = ci_bound_floor(evaluate(t, ARMS, SPEC))
    r = nfm.measure(t).rows["e2e.p50"]
    assert old["e2e.p50"] > 0.10
    assert r.tau == 0.0 and r.q_p >= nfm.HETEROGENEITY_ALPHA  # nothing beyond block noise
    assert r.floor == pytest.approx(abs(r.bias)) and r.floor < 0.04
    assert r.floor < old["e2e.p50"] / 3
    assert r.tau_detectable > 0.05  # such a small A/A could not see a spread below ~5 %


def test_a_real_between_block_wobble_gives_bias_plus_1_96_tau():
    # the second copy is off by u_j in block j (±1–4 %): run-to-run wobble a later parallel
    # A/B's CI cannot see; the within-block noise is ~0.5 %
    u = [0.03, -0.03, 0.02, -0.02, 0.04, -0.04, 0.01, -0.01]
    blocks = [
        [ArmTruth(sigma=0.1), ArmTruth(sigma=0.1, ttft_scale=math.exp(x), tpot_scale=math.exp(x))]
        for x in u
    ]
    t = alternating_table(600, blocks, seed=1)
    nf = nfm.measure(t)
    tau_true = float(np.std(u, ddof=1))  # 2.9 %
    for key in ("e2e.p50", "ttft.p50", "e2e.mean"):
        r = nf.rows[key]
        assert r.q_p < nfm.HETEROGENEITY_ALPHA, key
        assert r.tau == pytest.approx(tau_true, abs=0.004), key
        assert r.floor == pytest.approx(abs(r.bias) + 1.96 * r.tau), key
        assert abs(r.bias) < 0.01 and 0.045 < r.floor < 0.07, key
    # the old floor only covered the uncertainty of the pooled mean: under half of this
    old = ci_bound_floor(evaluate(t, ARMS, SPEC))
    assert old["e2e.p50"] < nf.rows["e2e.p50"].floor / 1.8


def test_copies_in_parallel_measure_no_floor():
    # synthetic_table plays both arms at the same instants (an old, parallel --aa)
    t = synthetic_table(400, [ArmTruth(), ArmTruth()], seed=4)
    t.block = t.item // 50
    assert nfm.overlapped(t, 0, 1)
    nf = nfm.measure(t)
    assert nf.rows == {} and "parallel" in nf.notes[0]
    assert not nfm.overlapped(alternating_table(20, [[ArmTruth(), ArmTruth()]] * 2), 0, 1)


def test_breakdown_keys_are_not_stored_and_legacy_floors_load_base_keys_only():
    t = alternating_table(100, [[ArmTruth(), ArmTruth()]] * 8, seed=5)
    nf = nfm.measure(t)
    doc = nf.to_dict()
    assert doc["rows"] and not any("@" in k for k in doc["rows"])
    assert set(doc["rows"]["e2e.p50"]) >= {"bias", "bias_se", "tau", "floor", "blocks"}
    assert nfm.from_stored({"noise_floor_detail": doc, "noise_floor": {"x": 1.0}}) == nf
    legacy = nfm.from_stored({"noise_floor": {"e2e.p50": 0.12, "ttft.p50@in16-255": 0.3}})
    assert legacy.method == nfm.LEGACY_METHOD and legacy.legacy
    assert legacy.values() == {"e2e.p50": 0.12}


def test_a_floor_document_reads_back_as_the_record_it_was_written_from():
    """The JSON (through a JSON round trip, null for a non-finite figure) gives the record
    again, and the record the same JSON: a legacy one, and one read from a file (its path)."""
    import json

    t = alternating_table(100, [[ArmTruth(), ArmTruth()]] * 8, seed=5)
    nf = nfm.measure(t)
    doc = json.loads(json.dumps(nf.to_dict()))
    assert nfm.NoiseFloor.from_dict(doc) == nf and nfm.NoiseFloor.from_dict(doc).to_dict() == doc
    assert list(doc) == ["method", "z", "blocks", "rows", "left_out", "notes"]
    row = nfm.FloorRow(math.nan, 0.1, 0.0, 0.0, 0.2, 8, 0.1, 0.5, math.inf)
    back = nfm.FloorRow.from_dict(json.loads(json.dumps(row.to_dict())))
    assert back.bias != back.bias and math.isnan(back.tau_detectable) and back.blocks == 8
    legacy = nfm.NoiseFloor(method="ci-bound", notes=("x",), legacy_values={"e2e.p50": 0.1})
    read = {"method": "ci-bound", "values": {"e2e.p50": 0.1}, "notes": ["x"], "path": "aa.duckdb"}
    assert nfm.NoiseFloor.from_dict(read).to_dict() == read
    assert nfm.NoiseFloor.from_dict(read).values() == legacy.values() == {"e2e.p50": 0.1}
    assert nfm.base_key("ttft.p50@in16-255") == "ttft.p50"
