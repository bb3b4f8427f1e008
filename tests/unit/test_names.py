"""One source per name: every row a comparison makes is in the metric catalogue, and every reason
a verdict gives carries a code (the words stay what the reports print and the JSON stores)."""

from __future__ import annotations

import json
import pickle

from abtui.metrics import catalogue as cat
from abtui.stats.effects import compare
from abtui.stats.labels import label, short_label
from abtui.stats.reasons import Code, Reason
from abtui.verdict.policy import evaluate
from tests.synthetic import ArmTruth, synthetic_table

ARMS = [{"name": "base"}, {"name": "cand"}]
POLICY = {"policy": {"resamples": 300, "guardrails": ["ttft.p50", "tpot.p50"]}}


def test_every_row_a_comparison_makes_is_named_by_the_catalogue():
    # reasoning: TTFO and the reasoning and answer TPOT have values (where they are shown)
    truths = [ArmTruth(reasoning=4), ArmTruth(ttft_scale=0.9, reasoning=4)]
    t = synthetic_table(300, truths, seed=2, vary_input=True)
    every = cat.LATENCY_KEYS
    assert cat.latency_keys(t) == every
    comp = compare(t, 0, 1, {"e2e": 0.5}, resamples=200, prices=(2.0, 2.0), metrics=every)
    keys = {e.key.partition("@")[0] for e in comp.effects}
    assert keys == set(cat.ROW_KEYS)  # every row, and nothing the catalogue does not name
    for e in comp.effects:  # the direction each row is called in is the catalogue's
        assert e.lower_is_better == _lower_is_better(e.key), e.key
    names = [label(k) for k in cat.ROW_KEYS]
    shorts = [short_label(k) for k in cat.ROW_KEYS]
    assert len(set(names)) == len(names) and len(set(shorts)) == len(shorts)
    assert (
        label("ttft_user.p99") == "P99 TTFT (user)"
        and short_label("ttft_user.p99") == "P99 TTFT(u)"
    )


def _lower_is_better(key: str) -> bool:
    base = key.partition("@")[0]
    metric = cat.METRICS.get(base.partition(".")[0])
    return metric.lower_is_better if metric else cat.ROWS[base].lower_is_better


def test_every_reason_and_note_of_a_verdict_carries_a_code():
    cases = [
        ([ArmTruth(), ArmTruth(ttft_scale=0.8, tpot_scale=0.8)], "complete"),  # GO
        ([ArmTruth(), ArmTruth(ttft_scale=1.3, error_rate=0.1)], "complete"),  # NO-GO
        ([ArmTruth(), ArmTruth(ttft_scale=0.8, lag_s=0.05)], "interrupted"),  # INCONCLUSIVE
    ]
    seen = set()
    for truths, status in cases:
        v = evaluate(
            synthetic_table(120, truths, seed=5),
            ARMS,
            POLICY,
            status=status,
        )
        for p in v.pairs:
            assert p.reasons and all(isinstance(r, Reason) for r in p.reasons), p.reasons
            seen |= {r.code for r in p.reasons}
            for e in p.comparison.effects:
                assert not e.note or isinstance(e.note, Reason), (e.key, e.note)
    assert {Code.PRIMARY_IMPROVED, Code.ERRORS_ROSE, Code.INCOMPLETE, Code.LOAD_NOT_KEPT} <= seen


def test_a_reason_is_its_words_in_json_and_keeps_its_code_when_copied():
    r = Reason(Code.ERRORS_ROSE, "errors rose: 3.0% of requests vs 0.0%")
    assert r == "errors rose: 3.0% of requests vs 0.0%"
    assert json.loads(json.dumps({"reasons": [r]})) == {"reasons": [str(r)]}
    assert pickle.loads(pickle.dumps(r)).code == Code.ERRORS_ROSE
