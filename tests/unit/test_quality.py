"""Quality suites: built-in generators, scorers, user JSONL files, paired statistics, gates."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest

from abtui.errors import UsageError, WorkloadError
from abtui.quality import builtin, userfile
from abtui.quality.gates import evaluate_quality
from abtui.quality.paired import cluster_bootstrap_ci, paired
from abtui.quality.prompts import recognise
from abtui.quality.scorers import is_right
from abtui.stats.classical import mcnemar_exact


def _build(seed=0, ctx=20000, per_cell=2):
    return builtin.build(
        ["niah", "keys", "exact"], seed=seed, max_context=ctx, max_tokens=32, per_cell=per_cell
    )


def test_builtin_suites_are_deterministic_and_seeded():
    a, b, c = _build(0), _build(0), _build(1)
    assert a == b
    assert [i.prompt for i in a] != [i.prompt for i in c]
    assert len({(i.suite, i.id) for i in a}) == len(a)  # ids unique


def test_lengths_fit_the_context_and_prompts_hit_their_length():
    # tokenizer not measured: lengths in words, (20000 − 32) × 0.85 = 16972: up to 16k
    assert builtin.lengths_for(20000, 32) == [1024, 2048, 4096, 8192, 16384]
    assert builtin.lengths_for(131072, 32, max_length=8192)[-1] == 8192
    with pytest.raises(UsageError, match="too small"):
        builtin.lengths_for(1000, 32)
    # measured (the endpoint's tokens): a length fits with 5 % + 64 tokens of room, so an 8k
    # model (SmolLM2) runs 1k-4k, and 8k in a context of 8,700
    assert builtin.lengths_for(8192, 32, tokens_per_word=1.14) == [1024, 2048, 4096]
    assert builtin.lengths_for(8700, 32, tokens_per_word=1.14)[-1] == 8192
    for it in _build():
        if it.suite == "exact":
            continue
        target = int(it.bucket[:-1]) * 1024
        words = len(it.prompt.split())
        assert abs(words - target) <= 0.02 * target, (it.id, words, target)  # ±2% (sim tokens)
    # with a measured tokenizer a haystack is sized in its tokens: 1.25 tokens a word, 4k
    # tokens is ~3,277 words
    for it in builtin.niah(0, [4096], 1, tokens_per_word=1.25):
        assert abs(len(it.prompt.split()) - 4096 / 1.25) <= 0.02 * 4096 / 1.25
        assert it.context_tokens == 4096 and it.bucket == "4k"


def test_items_are_what_the_sim_recognises_and_the_answer_does_not_leak():
    for it in _build():
        for text in (it.prompt, "\n".join(m["content"] for m in it.messages)):
            task = recognise(text)
            assert task is not None and task.answer == it.references[0], it.id
        assert it.stop and all(s.startswith("\n") for s in it.stop)  # completion: one answer
        if it.suite in ("niah", "keys"):
            assert it.scorer == "number"
            # the answer occurs once: in its statement, never in the filler or the question
            assert len(re.findall(rf"\b{it.references[0]}\b", it.prompt)) == 1
            filler = re.sub(r"The [a-z]+ [a-z]+ is \d+\.", "", it.prompt)
            assert not re.search(r"\d", filler)
            assert len(it.distractors) == (3 if it.suite == "keys" else 0)
        else:
            assert it.scorer == "word" and it.bucket == "short"


def test_clusters_group_items_sharing_a_context():
    items = [i for i in _build() if i.suite == "niah" and i.bucket == "4k"]
    by = {}
    for i in items:
        by.setdefault(i.cluster, []).append(i)
    assert len(by) == 2 and all(len(v) == len(builtin.DEPTHS) for v in by.values())
    for group in by.values():  # same haystack and needle, moved: same words, other order
        assert len({i.prompt for i in group}) == len(group)
        assert len({tuple(sorted(i.prompt.split())) for i in group}) == 1
    keys = [i for i in _build() if i.suite == "keys" and i.cluster == "keys-4k-s0"]
    assert len(keys) == 2 and keys[0].references != keys[1].references
    # one haystack, two of its keys asked: the same text between the intro and the question
    assert keys[0].prompt.split("\n\n")[1] == keys[1].prompt.split("\n\n")[1]
    assert keys[0].references[0] in keys[1].distractors


@pytest.mark.parametrize(
    ("scorer", "output", "refs", "tol", "right"),
    [
        ("exact", " APPLE\n", ["APPLE"], 0, True),
        ("exact", "APPLE.", ["APPLE"], 0, True),
        ("exact", "apple", ["APPLE"], 0, False),
        ("exact", "APPLE PIE", ["APPLE"], 0, False),
        ("contains", "The key is 1234567.", ["1234567"], 0, True),
        ("contains", "1234568", ["1234567"], 0, False),
        ("regex", "answer: 42 apples", [r"\b42\b"], 0, True),
        ("regex", "answer: 421", [r"\b42\b"], 0, False),
        ("numeric", " 3.14159", ["3.14"], 0.01, True),
        ("numeric", "1,234", ["1234"], 0, True),
        ("numeric", "-7", ["7"], 0, False),
        ("numeric", "no number", ["7"], 0, False),
        ("choice", "(B) because", ["B"], 0, True),
        ("choice", "Answer: c", ["C"], 0, True),
        ("choice", "Because A is wrong", ["B"], 0, False),
        ("exact", "x", ["y", "x"], 0, True),  # any reference
    ],
)
def test_scorers_on_hand_made_cases(scorer, output, refs, tol, right):
    assert is_right(scorer, output, refs, tol) is right


@pytest.mark.parametrize(
    ("output", "ref", "echoes", "distractors", "right"),
    [
        # how real models phrase a right answer (SmolLM2 and Gemma 3 outputs among them)
        ("The pass key is 48213.", "48213", (), (), True),
        ("The door code is 48213", "48213", (), ("27078",), True),
        (" 48213.\nQ: What is the pass key?", "48213", (), (), True),
        ("**48213**", "48213", (), (), True),
        ("48,213", "48213", (), (), True),
        ("Answer: 48213 is the pass key.", "48213", (), (), True),
        ("23 + 45 = 68", "68", ("23", "45"), (), True),  # the question's numbers passed over
        ("The sum of 23 and 45 is 68.", "68", ("23", "45"), (), True),
        # wrong: another key's value, a list of candidates, a near miss, an echo only
        ("The room number is 27078", "48213", (), ("27078",), False),
        ("48213, 27078, 33321", "48213", (), ("27078", "33321"), False),  # lists every value
        ("The pass keys are 27078 and 48213.", "48213", (), ("27078",), False),
        ("482131", "48213", (), (), False),
        ("4821", "48213", (), (), False),
        ("48213.5", "48213", (), (), False),
        ("23 + 45", "68", ("23", "45"), (), False),
        ("The pass key is a five-digit number.", "48213", (), (), False),
        ("code XK7", "7", (), (), False),  # a digit glued to letters is no number
        ("", "48213", (), (), False),
    ],
)
def test_number_scorer_reads_real_phrasings_and_rejects_candidate_lists(
    output, ref, echoes, distractors, right
):
    assert is_right("number", output, [ref], 0, echoes, distractors) is right


@pytest.mark.parametrize(
    ("output", "ref", "right"),
    [
        ("Paris", "Paris", True),
        ("The capital of France is Paris.", "Paris", True),
        ("**Buenos Aires**", "Buenos Aires", True),
        ("XGD-379:\n\nXGD-379", "XGD-379", True),
        ("paris", "Paris", False),  # case-sensitive: a proper name, a code
        ("Parisian", "Paris", False),
        ("XGD-3790", "XGD-379", False),
        ("XGD-37", "XGD-379", False),
        ("Buenos", "Buenos Aires", False),
    ],
)
def test_word_scorer(output, ref, right):
    assert is_right("word", output, [ref]) is right


def test_user_suite_loads_and_bad_lines_name_file_line_field(tmp_path):
    p = tmp_path / "mine.jsonl"
    p.write_text(
        "# comment\n"
        '{"id": "q1", "prompt": "2+2?", "reference": "4", "scorer": "numeric", "cluster": "c"}\n'
        "\n"
        '{"messages": [{"role": "user", "content": "pick"}], "references": ["B"], "scorer": "choice"}\n'
        '{"prompt": "Ann is 9, Bo is 12. How old is Bo?", "reference": "12", "scorer": "number",'
        ' "distractors": ["9"]}\n'
    )
    items = userfile.load(p)
    assert [i.id for i in items] == ["q1", "line 4", "line 5"] and items[0].suite == "mine"
    assert items[1].messages[0]["content"] == "pick" and items[1].cluster == "line 4"
    assert items[2].distractors == ("9",) and items[2].echoes == ()
    from abtui.quality.scorers import score

    assert score(items[2], "Bo is 12.") and not score(items[2], "Ann is 9 and Bo is 12.")
    bad = {
        '{"prompt": "x"}': "field 'reference'",
        '{"prompt": "x", "reference": "y", "scorer": "judge"}': "unknown scorer 'judge'",
        '{"prompt": "x", "reference": "y", "colour": 1}': "unknown field 'colour'",
        '{"reference": "y"}': "exactly one of 'prompt' and 'messages'",
        '{"prompt": "x", "reference": "(", "scorer": "regex"}': "bad regular expression",
        '{"prompt": "x", "reference": "F", "scorer": "choice"}': "one letter A–E",
        '{"prompt": "x", "reference": "y", "tolerance": -1}': "tolerance",
        '{"prompt": "x", "reference": "4.5", "scorer": "number"}': "one whole number",
        '{"prompt": "x", "reference": "4", "distractors": [5]}': "'distractors' must be a list",
        "{not json": "not valid JSON",
        "[1, 2]": "JSON object",
    }
    for line, msg in bad.items():
        p.write_text(line + "\n")
        with pytest.raises(WorkloadError) as e:
            userfile.load(p)
        assert f"{p}:1" in e.value.message and msg in e.value.message, e.value.message
    p.write_text(
        '{"id": "a", "prompt": "x", "reference": "y"}\n{"id": "a", "prompt": "z", "reference": "y"}\n'
    )
    with pytest.raises(WorkloadError, match=r":2: id 'a' repeats line 1"):
        userfile.load(p)
    with pytest.raises(WorkloadError, match="cannot read"):
        userfile.load(tmp_path / "missing.jsonl")


def test_mcnemar_exact_by_hand():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 0) == pytest.approx(2 * 0.5**5)  # 0.0625
    assert mcnemar_exact(10, 2) == pytest.approx(
        2 * sum(__import__("math").comb(12, k) for k in range(3)) / 2**12
    )
    assert mcnemar_exact(3, 3) == 1.0


def _rows(outcomes_a, outcomes_b, clusters=None, bucket=None, suite="s"):
    rows = []
    for arm, outs in ((0, outcomes_a), (1, outcomes_b)):
        for k, ok in enumerate(outs):
            d = {
                "suite": suite,
                "cluster": (clusters or [str(k) for k in range(len(outs))])[k],
                "bucket": (bucket or ["all"] * len(outs))[k],
            }
            rows.append({"arm": arm, "item": k, "run": 0, "correct": ok, "detail": json.dumps(d)})
    return rows


def test_paired_table_delta_flip_rate_and_unpaired_items():
    a = [True] * 8 + [False, True, None]
    b = [True] * 6 + [False, False, True, False, True]
    st = paired(_rows(a, b), 0, 1)
    q = st.suites[0]
    assert st.unpaired == 1 and q.n == 10
    assert (q.b, q.c) == (3, 1)  # items 6, 7, 9 lost; item 8 gained
    assert q.delta == pytest.approx(-0.2) and q.flip_rate == pytest.approx(0.4)
    assert q.acc_a == pytest.approx(0.9) and q.acc_b == pytest.approx(0.7)
    assert q.p == pytest.approx(mcnemar_exact(3, 1))
    assert q.lo < q.delta < q.hi


def test_flat_accuracy_with_flips_is_seen():
    a = [True, False] * 10
    b = [False, True] * 10
    q = paired(_rows(a, b), 0, 1).suites[0]
    assert q.delta == 0 and q.flip_rate == 1.0


def test_cluster_bootstrap_is_wider_when_items_share_a_context():
    rng = np.random.default_rng(0)
    diff = np.repeat(rng.choice([-1.0, 0.0, 0.0, 1.0], 20), 5)  # 20 clusters of 5 identical items
    lo_c, hi_c = cluster_bootstrap_ci(diff, np.repeat(np.arange(20), 5), resamples=4000)
    lo_i, hi_i = cluster_bootstrap_ci(diff, np.arange(100), resamples=4000)
    assert (hi_c - lo_c) > 1.7 * (hi_i - lo_i)
    assert cluster_bootstrap_ci(np.zeros(5), np.arange(5)) == (0.0, 0.0)


def test_buckets_and_holm_across_suites():
    buckets = ["1k"] * 10 + ["16k"] * 10
    a = [True] * 20
    b = [True] * 10 + [True, False] * 5
    rows = _rows(a, b, bucket=buckets, suite="niah") + [
        dict(r, item=r["item"] + 100) for r in _rows([True] * 4, [True] * 4, suite="exact")
    ]
    st = paired(rows, 0, 1)
    assert [q.suite for q in st.suites] == ["exact", "niah"]
    assert [(q.bucket, q.b) for q in st.buckets] == [("1k", 0), ("16k", 5)]
    ps = [q.p for q in st.suites]
    assert max(q.p_holm for q in st.suites) == pytest.approx(min(1.0, max(ps)))
    assert min(q.p_holm for q in st.suites) == pytest.approx(min(1.0, 2 * min(ps)))


def test_gate_fails_on_a_drop_and_passes_identical_arms():
    buckets = ["1k"] * 20 + ["32k"] * 20
    a = [True] * 40
    b = [True] * 20 + [True, True, False, True] * 5
    res = evaluate_quality(_rows(a, b, bucket=buckets, suite="niah"), 0, 1, {})
    assert res.gates[0].state == "fail" and len(res.no_go) == 1
    assert "niah accuracy 100.0% → 87.5%" in res.no_go[0]
    assert "dropped beyond the −1 pp margin" in res.no_go[0] and "worst at 32k" in res.no_go[0]
    # a wide enough margin passes it, per suite
    res = evaluate_quality(
        _rows(a, b, bucket=buckets, suite="niah"), 0, 1, {"margins": {"niah": 0.5}}
    )
    assert res.gates[0].passed and not res.no_go and not res.undecided
    # identical answers on 400 items show non-inferiority within 1 pp (the interval is ±0.95 pp)
    same = evaluate_quality(_rows([True] * 400, [True] * 400, suite="niah"), 0, 1, None)
    assert same.gates[0].passed and not same.no_go and not same.warnings
    assert evaluate_quality([], 0, 1, None) is None


def test_no_flipped_answer_on_few_items_is_undecided_not_a_pass():
    # 40 identical answers: no flip, but ±8.8 pp of score interval; the bootstrap said [0, 0]
    # and the gate passed any suite of any size (a true 10 pp drop on 12 items passed 29 %)
    res = evaluate_quality(_rows([True] * 40, [True] * 40, suite="niah"), 0, 1, None)
    g = res.gates[0]
    assert g.state == "inconclusive" and not g.passed and not res.no_go
    assert g.lo == pytest.approx(-(1.96**2) / (40 + 1.96**2), abs=1e-3)
    assert 370 <= g.items_needed <= 400  # z²/(n + z²) ≤ 1 pp from n ≈ 380
    assert "underpowered: about" in res.undecided[0] and "items would decide" in res.undecided[0]
    tiny = evaluate_quality(_rows([True] * 12, [True] * 12), 0, 1, {"margin": 0.5})
    assert tiny.gates[0].state == "inconclusive"  # inside a 50 pp margin, but 12 < 30 items
    assert "fewer than 30 paired items" in tiny.undecided[0]


def test_a_few_flips_each_way_is_undecided_not_no_go():
    # true Δ = 0 with 2 % of answers flipping each way, 300 items: was NO-GO in 81 % of runs
    a = [True] * 300
    b = [True] * 300
    for k in range(6):  # 6 lost, 6 gained
        b[k] = False
        a[100 + k] = False
    res = evaluate_quality(_rows(a, b), 0, 1, None)
    g = res.gates[0]
    assert g.state == "inconclusive" and not res.no_go
    assert -0.03 < g.lo < -0.01 < 0.01 < g.hi < 0.03
    assert 1000 < g.items_needed < 3000


def test_a_significant_drop_beyond_the_margin_fails_even_when_the_ci_reaches_it():
    # 8 lost, 1 gained of 200: Δ −3.5 pp, significant (hi < 0) but hi above −1 pp
    a, b = [True] * 200, [True] * 200
    for k in range(8):
        b[k] = False
    a[50] = False
    res = evaluate_quality(_rows(a, b), 0, 1, None)
    g = res.gates[0]
    assert -0.01 < g.hi < 0 and g.state == "fail" and res.no_go


def test_score_interval_known_values_and_coverage():
    from abtui.stats.classical import paired_difference_ci

    z2 = 1.959963984540054**2
    for n in (12, 100, 400):
        lo, hi = paired_difference_ci(0, 0, n)
        assert lo == pytest.approx(-z2 / (n + z2), rel=1e-6) and hi == pytest.approx(z2 / (n + z2))
    lo, hi = paired_difference_ci(10, 2, 100)
    assert lo < -0.08 < hi < 0  # Δ = −8 pp, clearly below zero
    assert paired_difference_ci(20, 0, 20)[0] == -1.0
    # coverage near 95 % with few discordant pairs (n = 60, 3 % flips each way)
    rng = np.random.default_rng(1)
    cells = rng.multinomial(60, [0.03, 0.03, 0.94], size=2000)
    hits = sum(lo <= 0 <= hi for lo, hi in (paired_difference_ci(b, c, 60) for b, c, _ in cells))
    assert 0.93 <= hits / 2000 <= 0.995


def test_clusters_widen_the_score_interval_by_their_design_effect():
    from abtui.quality.paired import design_effect

    rng = np.random.default_rng(0)
    flips = np.repeat(rng.choice([-1.0, 0.0, 0.0, 1.0], 20), 5)  # 20 clusters of 5 alike items
    assert design_effect(flips, np.repeat(np.arange(20), 5)) > 3
    assert design_effect(flips, np.arange(100)) == 1.0
    a = [True] * 100
    b = [x >= 0 for x in flips]
    a = [x <= 0 for x in flips]
    clustered = paired(_rows(a, b, clusters=[str(k // 5) for k in range(100)]), 0, 1)
    single = paired(_rows(a, b), 0, 1)
    qc, qs = clustered.suites[0], single.suites[0]
    assert qc.delta == qs.delta and (qc.hi - qc.lo) > 1.7 * (qs.hi - qs.lo)


def test_perplexity_from_echoed_logprobs_and_the_flat_ppl_warning():
    from abtui.quality.gates import GateState, QualityVerdict, SuiteGate, flat_ppl_warning
    from abtui.quality.paired import QualityRow
    from abtui.quality.ppl import Perplexity, perplexity_of

    body = {"choices": [{"logprobs": {"token_logprobs": [None, -1.0, -2.0, -3.0, -0.5]}}]}
    ppl, n = perplexity_of(body)  # the first (no context) and the generated token left out
    assert n == 3 and ppl == pytest.approx(np.exp(2.0))
    # usage says where the prompt ends when it adds up (vLLM): here 2 generated tokens, not 1
    body["usage"] = {"prompt_tokens": 3, "completion_tokens": 2}
    assert perplexity_of(body) == (pytest.approx(np.exp(1.5)), 2)
    body["usage"] = {"prompt_tokens": 9, "completion_tokens": 1}  # does not add up: ignored
    assert perplexity_of(body)[1] == 3
    assert perplexity_of({"choices": [{"text": "x", "logprobs": None}]}) is None
    assert perplexity_of({"error": "echo is not supported"}) is None
    row = QualityRow("niah", "all", 100, 100, 0.9, 0.84, 6, 0, -0.06, -0.11, -0.02, 0.03)
    failed = SuiteGate("niah", 0.01, -0.11, -0.02, GateState.FAIL, False, None, False)
    qual = QualityVerdict((row,), (), 0, (failed,), ("x",), (), ())
    flat = {"a": Perplexity(True, 5.00), "b": Perplexity(True, 5.04)}
    assert "PPL flat (+0.8%), but accuracy dropped: niah -6.0 pp" in flat_ppl_warning(
        flat, "a", "b", qual
    )
    moved = {"a": Perplexity(True, 5.0), "b": Perplexity(True, 6.0)}
    assert flat_ppl_warning(moved, "a", "b", qual) is None
    ok = replace(failed, state=GateState.PASS, passed=True)
    passed = replace(qual, no_go=(), gates=(ok,))
    assert flat_ppl_warning(flat, "a", "b", passed) is None
    undecided = replace(passed, gates=(replace(ok, state=GateState.UNDECIDED, passed=False),))
    assert "but accuracy may have dropped: niah -6.0 pp (not yet shown" in flat_ppl_warning(
        flat, "a", "b", undecided
    )
    unmeasured = {"a": Perplexity(False, None, 0, "no"), "b": Perplexity(True, 5.0)}
    assert flat_ppl_warning(unmeasured, "a", "b", qual) is None


def test_bad_quality_options_fail_before_anything_runs(tmp_path, capsys):
    from abtui.cli import main

    base = [
        "run",
        "--baseline",
        "http://127.0.0.1:9/v1",
        "--candidate",
        "http://127.0.0.1:9/v1",
        "--rate",
        "1",
        "--headless",
        "--sessions-dir",
        str(tmp_path),
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x", "reference": "y"}\n{"prompt": "x"}\n')
    for extra, msg in (
        (["--quality", "niah,mmlu"], "quality.suites: unknown suite 'mmlu'"),
        (["--quality-file", str(bad)], f"{bad}:2: field 'reference'"),
        (
            ["--quality", "exact", "--quality-margin", "5"],
            "--quality-margin: expected a finite number from 0 to 0.99",
        ),
    ):
        assert main(base + extra) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err, err
    assert not list(tmp_path.glob("*.duckdb"))  # nothing was run


def test_logprob_agreement_and_kl_lower_bound_by_hand():
    import math

    from abtui.quality.logprobs import compare, kl_lower_bound, parse

    full_a = {"x": 0.6, "y": 0.25, "z": 0.1, "w": 0.05}
    full_b = {"x": 0.4, "y": 0.3, "z": 0.2, "w": 0.1}
    true_kl = sum(p * math.log(p / full_b[t]) for t, p in full_a.items())
    top = lambda d, k: {t: math.log(p) for t, p in sorted(d.items(), key=lambda kv: -kv[1])[:k]}  # noqa: E731
    # top-2 of each: x, y in both; OTHER = 0.15 vs 0.3
    by_hand = 0.6 * math.log(0.6 / 0.4) + 0.25 * math.log(0.25 / 0.3) + 0.15 * math.log(0.15 / 0.3)
    assert kl_lower_bound(top(full_a, 2), top(full_b, 2)) == pytest.approx(by_hand)
    assert by_hand <= true_kl
    assert kl_lower_bound(top(full_a, 4), top(full_b, 4)) == pytest.approx(true_kl)
    assert kl_lower_bound(top(full_a, 3), top(full_a, 3)) == pytest.approx(0.0, abs=1e-12)
    # positions compared up to and including the first where the continuations differ
    same, other = top(full_a, 3), {"y": math.log(0.5), "x": math.log(0.3)}
    seq_a = [[["x", same], ["y", same], ["z", same]]]
    seq_b = [[["x", same], ["q", other], ["z", same]]]
    c = compare(seq_a, seq_b)
    assert c.positions == 2 and c.top1_agreement == pytest.approx(0.5)
    assert (
        c.to_dict()["positions"] == 2 and list(c.to_dict())[-1] == "kl_hi"
    )  # the engine tables' dict
    body = {
        "choices": [
            {
                "logprobs": {
                    "tokens": [" a", " b"],
                    "top_logprobs": [{" a": -0.1}, {" b": -0.2, " c": -2.0}],
                }
            }
        ]
    }
    assert parse(body) == [(" a", {" a": -0.1}), (" b", {" b": -0.2, " c": -2.0})]
    assert parse({"choices": [{"text": "x", "logprobs": None}]}) is None


def test_a_suite_the_baseline_fails_cannot_vouch_for_the_candidate():
    """Both arms at 0 % on 400 items: Δacc = 0 with a tight interval, which used to pass. But no
    drop can show when the baseline has nothing to lose (a tiny random model on niah), so the
    suite is undecided — with the reason, and no "more items would decide"."""
    res = evaluate_quality(_rows([False] * 400, [False] * 400, suite="niah"), 0, 1, None)
    g = res.gates[0]
    assert g.state == "inconclusive" and g.blind and g.items_needed is None
    assert not res.no_go and len(res.undecided) == 1
    assert "the baseline itself scores 0.0%" in res.undecided[0]
    assert "cannot vouch for the candidate" in res.undecided[0]
    # a baseline just above the margin is informative again: 5 % of 400 with a 1 pp margin
    some = [True] * 20 + [False] * 380
    ok = evaluate_quality(_rows(some, some, suite="niah"), 0, 1, None)
    assert ok.gates[0].passed and not ok.gates[0].blind


def test_a_suite_whose_every_item_failed_is_undecided_not_absent():
    """Every niah item failed on both arms (the server's context was too small: a real
    llama-server answer): no paired row, so before, no gate at all and a pair could be GO."""
    rows = []
    for arm in (0, 1):
        for k in range(4):
            d = {
                "suite": "niah",
                "cluster": str(k),
                "bucket": "1k",
                "status": "error",
                "error": "http: HTTP 400: request (4671 tokens) exceeds the available context size",
            }
            rows.append({"arm": arm, "item": k, "run": 0, "correct": None, "detail": json.dumps(d)})
    rows += _rows([True] * 400, [True] * 400, suite="keys")
    for r in rows[8:]:
        r["item"] += 100
    res = evaluate_quality(rows, 0, 1, None)
    states = {g.suite: g.state for g in res.gates}
    assert states == {"keys": "pass", "niah": "inconclusive"}
    assert (
        len(res.undecided) == 1
        and "niah: no item was scored on both arms (4 items" in res.undecided[0]
    )
    assert "exceeds the available context size" in res.undecided[0]


def test_the_quality_section_reads_back_from_its_json():
    """A pair's quality section (length buckets, an unscored suite, the session's notes) as
    the verdict stores it, and read back: the same record, the same JSON."""
    from abtui.jsonable import json_ready
    from abtui.quality.gates import GateState, QualityVerdict, SuiteGate
    from abtui.quality.ppl import Perplexity

    buckets = ["1k"] * 40 + ["32k"] * 40
    a = [True] * 80
    b = [True] * 40 + [True, True, False, True] * 10
    rows = _rows(a, b, bucket=buckets, suite="niah")
    for arm in (0, 1):  # a suite no item of which was scored
        d = {"suite": "keys", "cluster": "k", "bucket": "1k", "error": "http: HTTP 400"}
        rows.append({"arm": arm, "item": 900, "run": 0, "correct": None, "detail": json.dumps(d)})
    q = evaluate_quality(rows, 0, 1, {"margins": {"niah": 0.05}})
    assert [g.suite for g in q.gates] == ["niah", "keys"] and q.gate("keys").lo is None
    assert [r.bucket for r in q.buckets] == ["1k", "32k"] and q.suite("niah").n == 80
    assert "logprob_line" not in q.to_dict() and "ppl" not in q.to_dict()  # not attached
    ppl = {"base": Perplexity(True, 5.2, 120), "cand": Perplexity(False, None, 0, "no")}
    q = q.with_notes("logprob agreement: not supported by this endpoint", ppl, "a warning")
    assert q.warnings[-1] == "a warning" and q.ppl["base"].ppl == 5.2
    doc = json.loads(json.dumps(json_ready(q.to_dict())))
    assert doc["gates"][1]["state"] == "inconclusive" and doc["ppl"]["cand"]["note"] == "no"
    back = QualityVerdict.from_dict(doc)
    assert back == q and json_ready(back.to_dict()) == doc
    assert QualityVerdict.from_dict(None) is None
    # a gate stored before the third state existed has only ``passed``
    old = SuiteGate.from_dict({"suite": "niah", "margin": 0.01, "passed": False})
    assert old.state == GateState.FAIL and old.lo is None and not old.blind
