"""An engine experiment with several candidates against one baseline (``knobs``): each candidate
gets its own pair, its own llama-perplexity comparison and its own "PPL flat, accuracy dropped"
check; the quality cell counts right answers per arm and per length. No engine needed: the
report is the shape ``abtui report --format json`` writes."""

from __future__ import annotations

import json
from pathlib import Path

from abtui.engine.experiment_table import quality_cell
from abtui.engine.experiments import EXPERIMENTS, KNOBS, ExperimentResult, arm_setups
from abtui.engine.perplexity import Perplexity, PerplexityComparison


def _ppl(x: float) -> Perplexity:
    return Perplexity(ppl=x, stderr=0.1, chunks=2, ctx=512, seconds=1.0)


def _cmp(base: float, cand: float) -> PerplexityComparison:
    return PerplexityComparison(_ppl(base), _ppl(cand), cand / base, 0.004, 0.01, 0.001, 0.95, 0.01)


def _quality(acc_a: float, acc_b: float, n: int, state: str) -> dict:
    """A pair's quality section as ``abtui report --format json`` writes it."""
    from abtui.quality.gates import GateState, QualityVerdict, SuiteGate
    from abtui.quality.paired import QualityRow

    def row(bucket: str, k: int) -> QualityRow:
        lost = round(k * (acc_a - acc_b))
        return QualityRow("keys", bucket, k, k, acc_a, acc_b, lost, 0, acc_b - acc_a, -1, 0, 0.01)

    gate = SuiteGate("keys", 0.01, -1, 0, GateState(state), state == "pass", None, False)
    q = QualityVerdict(
        (row("all", n),), (row("1k", n // 2), row("2k", n // 2)), 0, (gate,), (), (), ()
    )
    return json.loads(json.dumps(q.to_dict()))


def test_every_knob_is_an_arm_of_the_knobs_experiment():
    exp = EXPERIMENTS["knobs"]
    names = [s.name for _, s in arm_setups(exp)]
    assert names == ["base", *(cand.name for _, _, cand in KNOBS)]
    assert exp.ppl and exp.quality == ("niah", "keys", "exact")


def test_each_candidate_has_its_pair_ppl_and_flat_ppl_warning():
    report = {
        "pairs": [
            {"candidate": "kv-q8_0", "result": "NO-GO", "quality": _quality(1.0, 0.5, 8, "fail")},
            {"candidate": "Q2_K", "result": "NO-GO", "quality": _quality(1.0, 0.5, 8, "fail")},
        ]
    }
    res = ExperimentResult("knobs", Path("x"), 3, report, {}, 1.0)
    res.ppls = {"kv-q8_0": _cmp(24.6, 24.65), "Q2_K": _cmp(24.6, 34.18)}
    assert res.pair_of("Q2_K") is report["pairs"][1]
    assert res.ppl is res.ppls["Q2_K"]  # the experiment's own candidate
    warn = res.flat_ppl_warning("kv-q8_0")
    assert warn is not None and "PPL flat (+0.2%), but accuracy dropped: keys -50.0 pp" in warn
    assert res.flat_ppl_warning("Q2_K") is None  # PPL +39 %: not flat, no trap
    assert res.flat_ppl_warning() is None


def test_the_quality_cell_counts_right_answers_per_arm_and_length():
    cell = quality_cell(_quality(1.0, 0.5, 8, "fail"))
    assert cell == "keys 8/8 → 4/8 (-50.0 pp, fail; 1k 4/4 → 2/4, 2k 4/4 → 2/4)"
    one = _quality(1.0, 1.0, 2, "inconclusive")
    one["buckets"] = []  # one length: no per-bucket rows
    assert quality_cell(one) == "keys 2/2 → 2/2 (+0.0 pp, inconclusive)"
    assert quality_cell(None) == "—"
