"""The anytime-valid quality gate (abtui.quality.seqgate) and its betting confidence sequence
(abtui.stats.betting): covers at every look, closes around 0 when nothing flips, and fails a
suite on the bucket that dropped where the average over the buckets does not show it."""

from __future__ import annotations

import numpy as np

from abtui.quality.gates import evaluate_quality
from abtui.quality.seqgate import sequential_gate
from abtui.stats.betting import bounded_mean_cs
from abtui.stats.classical import paired_difference_ci

BUCKETS = ("1k", "2k", "4k", "8k", "16k", "32k")


def test_betting_cs_covers_at_every_look():
    rng = np.random.default_rng(0)
    missed = 0
    for _ in range(100):
        d = rng.choice([-1.0, 0.0, 1.0], p=[0.06, 0.86, 0.08], size=300)  # true mean +0.02
        for n in range(20, 301, 20):
            lo, hi = bounded_mean_cs(d[:n], 0.025, 0.025)
            if not lo <= 0.02 <= hi:
                missed += 1
                break
    assert missed / 100 <= 0.06  # α = 5 % at any look; a fixed interval looked at as often: more


def test_nothing_flipped_closes_around_zero_at_about_1_5_times_the_fixed_items():
    lo, hi = bounded_mean_cs(np.zeros(560), 0.025, 0.025)
    assert -0.01 <= lo < 0 < hi <= 0.01  # never [0, 0]
    assert bounded_mean_cs(np.zeros(500), 0.025, 0.025)[0] < -0.01
    fixed_lo, _ = paired_difference_ci(0, 0, 380, 0.95)
    assert fixed_lo > -0.0105  # the fixed gate passes −1 pp at ~380 items; this one at ~550


def _rows(drop_at: dict[str, float], clusters: int, seed: int, per_cluster: int = 3) -> list[dict]:
    """Quality rows of two arms: niah items in haystacks of ``per_cluster``, the baseline
    right on 99 %, the candidate wrong where the baseline is and on a further share
    ``drop_at[bucket]`` of the items (a superset, as the simulator's variants)."""
    rng = np.random.default_rng(seed)
    rows, k = [], 0
    for s in range(clusters):
        for bk in BUCKETS:
            for _ in range(per_cluster):
                u = rng.random()
                a = u < 0.99
                b = u < 0.99 - drop_at.get(bk, 0.0)
                detail = {"suite": "niah", "bucket": bk, "cluster": f"niah-{bk}-s{s}"}
                rows += [
                    {"arm": 0, "item": k, "correct": a, "detail": detail},
                    {"arm": 1, "item": k, "correct": b, "detail": detail},
                ]
                k += 1
    return rows


def test_a_drop_at_one_length_fails_the_suite_there():
    rows = _rows({"32k": 0.33}, clusters=40, seed=1)
    g = sequential_gate(rows, 0, 1, {"margin": 0.01})
    (suite,) = g.suites
    by = {b.bucket: b for b in suite.buckets}
    assert suite.state == "fail" and by["32k"].state == "fail" and by["32k"].hi < -0.01
    assert all(by[b].state != "fail" for b in BUCKETS[:-1])
    assert g.decided and "niah at 32k" in g.no_go[0]
    # the fixed gate on the first 3 haystacks (54 items) sees only the diluted average
    first = [r for r in rows if int(r["detail"]["cluster"].rsplit("s", 1)[1]) < 3]
    fixed = evaluate_quality(first, 0, 1, {"margin": 0.01})
    assert fixed.gates[0].state != "fail"


def test_identical_arms_are_never_failed_and_say_what_would_decide():
    for seed in range(5):
        g = sequential_gate(_rows({}, clusters=30, seed=seed), 0, 1, {"margin": 0.01})
        assert g.suites[0].state == "inconclusive" and not g.decided
        assert "more clusters per open bucket would decide" in g.undecided[0]


def test_every_bucket_shown_within_the_margin_passes():
    rows = _rows({}, clusters=320, seed=2, per_cluster=1)
    for r in rows:  # nothing flips: both arms the same on every item
        r["correct"] = True
    g = sequential_gate(rows, 0, 1, {"margin": 0.02})
    assert g.suites[0].state == "pass" and g.decided and not g.undecided
    assert sequential_gate(rows, 0, 1, {"margin": 0.01}).suites[0].state == "inconclusive"


def test_the_sequential_gate_reads_back_from_the_stored_meta():
    """The document a run --until-decided stores (``meta.sequential.quality``), and read back:
    the same record, the same JSON; one that sent no round has no gate."""
    import json

    from abtui.quality.seqgate import Look, SequentialQuality

    g = sequential_gate(_rows({"32k": 0.33}, clusters=40, seed=1), 0, 1, {"margin": 0.01})
    run = SequentialQuality(g, (Look(1, 12, False), Look(2, 24, True)), 24, "decided", 1.5, 60.0)
    doc = json.loads(json.dumps(run.to_dict()))
    assert doc["rounds"] == 2 and doc["suites"][0]["buckets"][-1]["state"] == "fail"
    assert list(doc)[:6] == ["method", "alpha", "suites", "no_go", "undecided", "decided"]
    back = SequentialQuality.from_dict(doc)
    assert back == run and back.to_dict() == doc
    assert back.no_go == g.no_go and back.suites[0].buckets[-1].bucket == "32k"
    none = SequentialQuality(None, (), 0, "none", 0.0, 60.0)
    doc = json.loads(json.dumps(none.to_dict()))
    assert doc["suites"] == [] and not doc["decided"] and "alpha" not in doc
    back = SequentialQuality.from_dict(doc)
    assert back == none and back.to_dict() == doc and back.no_go == ()
