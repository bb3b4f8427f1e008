"""Verdicts the data cannot support: no call from fewer paired units than the bootstrap needs
(docs/verdict.md §9), and no GO from arms that do different work — outputs of different
lengths for the same items, or a ``usage`` count the stream did not carry (§10). On synthetic
sessions of known truth, and end to end against the simulator's ``--stop-after`` and
``--usage-tokens`` faults."""

from __future__ import annotations

import json

import pytest

from abtui.cli import main
from abtui.sim.engine import SimConfig
from abtui.sim.faults import FaultConfig
from abtui.sim.process import SimProcess
from abtui.stats import decide
from abtui.stats.reasons import Code
from abtui.store.reader import SessionReader
from abtui.verdict.comparable import Finding
from abtui.verdict.policy import GO, INCONCLUSIVE, GuardState, evaluate
from tests.synthetic import ArmTruth, synthetic_table

ARMS = [{"name": "base"}, {"name": "cand"}]
P50_ONLY = {"policy": {"resamples": 500, "guardrails": ["ttft.p50"]}}
CALLS = (decide.IMPROVED, decide.REGRESSED, decide.EQUIVALENT)


@pytest.mark.parametrize("n", [2, 5, 10, decide.MIN_PAIRED - 1])
def test_tiny_runs_against_identical_arms_never_call_an_effect(n):
    """2 requests per arm gave 15 NO-GO and 1 GO in 40 seeds (p = 0.0004, zero-width CIs)."""
    for seed in range(20):
        t = synthetic_table(n, [ArmTruth(), ArmTruth()], seed=seed)
        v = evaluate(t, ARMS, P50_ONLY)
        pair = v.pairs[0]
        assert v.result == INCONCLUSIVE, (n, seed, pair.reasons)
        called = [e.key for e in pair.comparison.effects if e.outcome in CALLS]
        assert not called, (n, seed, called)
        assert all(g.state != GuardState.SHOWN for g in pair.guardrails)
        e2e = pair.comparison.get("e2e.p50")
        assert e2e.note.code == Code.TOO_FEW_PAIRED and e2e.samples_needed >= decide.MIN_PAIRED


def test_from_the_minimum_on_an_effect_is_called():
    t = synthetic_table(
        decide.MIN_PAIRED + 5, [ArmTruth(), ArmTruth(ttft_scale=0.5, tpot_scale=0.5)], seed=1
    )
    v = evaluate(t, ARMS, P50_ONLY)
    assert v.result == GO, v.pairs[0].reasons
    assert v.pairs[0].comparison.get("e2e.p50").outcome == decide.IMPROVED


def test_a_candidate_that_stops_after_one_token_is_not_faster(tmp_path):
    t = synthetic_table(400, [ArmTruth(), ArmTruth(n_output=1)], n_output=128, seed=3)
    v = evaluate(t, ARMS, P50_ONLY)
    pair = v.pairs[0]
    e2e = pair.comparison.get("e2e.p50")
    assert e2e.ratio < -0.9  # what it looked like: P50 E2E −97 %
    assert v.result == INCONCLUSIVE and e2e.outcome == decide.INCONCLUSIVE
    assert e2e.note.code == Code.NOT_COMPARABLE
    for key in ("throughput.output_tokens", "throughput.requests"):
        assert pair.comparison.get(key).outcome == decide.INCONCLUSIVE
    reason = next(r for r in pair.reasons if r.code == Code.OUTPUT_LENGTHS_DIFFER)
    assert "cand's outputs are -99.2%" in reason and "(mean 1.0 vs 128.0 tokens)" in reason
    assert pair.findings[0].kind == "output_lengths" and "e2e.p50" in pair.findings[0].rows
    assert pair.findings[0].reason.code == Code.OUTPUT_LENGTHS_DIFFER and pair.findings[0].blocks
    check = pair.comparison.checks[0]
    assert check.key == "output_tokens.mean" and check.outcome == decide.IMPROVED
    # the same candidate with the same lengths is not flagged, and a faster one is still GO
    t = synthetic_table(
        400, [ArmTruth(), ArmTruth(ttft_scale=0.8, tpot_scale=0.8)], n_output=128, seed=3
    )
    v = evaluate(t, ARMS, P50_ONLY)
    assert v.result == GO and not v.pairs[0].findings
    assert v.pairs[0].comparison.checks[0].outcome == decide.EQUIVALENT


def test_usage_that_the_stream_did_not_carry_is_flagged_and_blocks_go():
    fast_lie = ArmTruth(ttft_scale=0.8, tpot_scale=0.8, n_output=2, usage_tokens=128)
    t = synthetic_table(400, [ArmTruth(n_output=2, usage_tokens=2), fast_lie], n_output=128, seed=3)
    v = evaluate(t, ARMS, P50_ONLY)
    pair = v.pairs[0]
    assert v.result == INCONCLUSIVE
    reason = next(r for r in pair.reasons if r.code == Code.USAGE_OVERCOUNTS)
    assert "cand: 400 of 400 responses (e.g. 128 tokens in 2 chunks)" in reason
    assert pair.comparison.get("tpot.p50").note.code == Code.NOT_COMPARABLE
    f = next(f for f in pair.findings if f.kind == "usage_outruns_stream")
    assert f.blocks and f.figures["arms"]["cand"]["responses"] == 400
    stored = json.loads(json.dumps(pair.to_dict()))["findings"]  # as a stored verdict holds it
    back = [Finding.from_dict(d) for d in stored]
    assert back == pair.findings and [b.notes for b in back] == [f.notes for f in pair.findings]
    assert [d["reason_code"] for d in stored] == [f.reason.code for f in pair.findings]


BASE = dict(ttft_ms=15.0, itl_ms=1.5, jitter_ms=0.5)


def _run(tmp_path, name, a, b, *extra) -> tuple[int, dict]:
    rc = main(
        [
            "run",
            "--baseline",
            a.url,
            "--candidate",
            b.url,
            "--rate",
            "20",
            "--input-tokens",
            "16",
            "--name",
            name,
            "--sessions-dir",
            str(tmp_path),
            "--headless",
            *extra,
        ]
    )
    with SessionReader(tmp_path / f"{name}.duckdb") as rd:
        return rc, rd.verdicts()[-1]["result"]


def test_two_requests_against_identical_endpoints_call_nothing(tmp_path, capsys):
    with SimProcess(SimConfig(seed=1, **BASE)) as a, SimProcess(SimConfig(seed=2, **BASE)) as b:
        rc, res = _run(
            tmp_path,
            "tiny",
            a,
            b,
            "--requests",
            "2",
            "--output-tokens",
            "8",
            "--primary",
            "ttft.p50",
        )
    out = capsys.readouterr().out
    assert rc == 4 and res["result"] == "INCONCLUSIVE", out
    effects = res["pairs"][0]["comparison"]["effects"]
    assert not [e["key"] for e in effects if e["outcome"] in CALLS]
    assert "too few samples: 2 paired" in out


def test_a_candidate_stopping_early_through_the_simulator(tmp_path, capsys):
    early = FaultConfig(stop_after=1)
    with (
        SimProcess(SimConfig(seed=1, **BASE)) as a,
        SimProcess(SimConfig(seed=2, faults=early, **BASE)) as b,
    ):
        rc, res = _run(tmp_path, "early", a, b, "--requests", "60", "--output-tokens", "32")
    out = capsys.readouterr().out
    assert rc == 4, out
    pair = res["pairs"][0]
    rows = {e["key"]: e for e in pair["comparison"]["effects"]}
    assert rows["e2e.p50"]["ratio"] < -0.5 and rows["e2e.p50"]["outcome"] == "INCONCLUSIVE"
    assert rows["e2e.p50"]["note"] == "not comparable: the arms' output lengths differ"
    assert any(
        "different output lengths" in r and "(mean 1.0 vs 32.0 tokens)" in r
        for r in pair["reasons"]
    )
    assert "different output lengths" in out


def test_a_usage_count_the_stream_did_not_carry_through_the_simulator(tmp_path, capsys):
    lie = FaultConfig(stop_after=2, usage_tokens=64)
    honest = FaultConfig(stop_after=2)
    with (
        SimProcess(SimConfig(seed=1, faults=honest, **BASE)) as a,
        SimProcess(SimConfig(seed=2, faults=lie, **BASE)) as b,
    ):
        rc, res = _run(
            tmp_path,
            "lie",
            a,
            b,
            "--requests",
            "60",
            "--output-tokens",
            "64",
            "--primary",
            "tpot.p50",
        )
    out = capsys.readouterr().out
    assert rc == 4, out
    pair = res["pairs"][0]
    f = {f["kind"]: f for f in pair["findings"]}
    assert f["usage_outruns_stream"]["arms"]["candidate"]["example_tokens"] == 64
    rows = {e["key"]: e for e in pair["comparison"]["effects"]}
    assert rows["tpot.p50"]["outcome"] == "INCONCLUSIVE"
    assert "usage counts more output tokens than the stream carried" in out
