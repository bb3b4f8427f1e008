"""Factorial ablation (abtui.stats.factorial): synthetic truths of known interaction, the
design's checks, the combination's NO-GO, the spec and the CLI flags."""

from __future__ import annotations

import json
import math

import pytest

from abtui.errors import SpecError, UsageError
from abtui.stats import factorial
from abtui.stats.reasons import Code
from abtui.verdict.ablation import Factorial
from abtui.verdict.policy import NO_GO, evaluate, resolve_policy
from tests.synthetic import ArmTruth, shared_load, synthetic_table

NAMES = ["base", "fp8", "spec", "fp8+spec"]
POLICY = {"primary": "tpot.p50", "resamples": 1000}


def _table(inter: float, n: int = 800, seed: int = 1, a: float = 0.85, b: float = 0.80):
    """TPOT medians: base 1, fp8 ``a``, spec ``b``, both ``a·b·(1 + inter)``; each arm its own
    noise plus a load every arm sees (the pairing cancels it)."""
    truths = [
        ArmTruth(),
        ArmTruth(tpot_scale=a),
        ArmTruth(tpot_scale=b),
        ArmTruth(tpot_scale=a * b * (1 + inter)),
    ]
    return synthetic_table(
        n, truths, seed=seed, shared=shared_load(n, seed=seed, sigma=0.2, ar=0.5)
    )


def _terms(table, metrics=("tpot",)):
    design, why = factorial.design_of(NAMES, ["fp8", "spec"])
    assert why is None
    terms, point = factorial.estimate(table, design, resamples=1000, seed=0, metrics=metrics)
    pol = resolve_policy(
        {
            "primary": "tpot.p50",
            "guardrails": ["tpot.p99"],
            "alpha": 0.05,
            "delta": 0.02,
            "delta_tail": 0.05,
        }
    )
    factorial.decide_terms(terms, pol)
    return {(t.key, t.term): t for t in terms}, point


@pytest.mark.parametrize("inter", [0.0, -0.10, 0.10])
def test_interaction_ci_covers_the_truth(inter):
    terms, _ = _terms(_table(inter))
    for key in ("tpot.p50", "tpot.mean"):
        t = terms[(key, "fp8×spec")]
        assert t.lo <= inter <= t.hi, (key, inter, t.lo, t.ratio, t.hi)
        assert abs(t.ratio - inter) < 0.04
        assert t.order == 2 and t.family in ("interaction", "interaction-breakdown")
    t = terms[("tpot.p50", "fp8×spec")]
    if inter == 0:
        assert t.outcome not in (factorial.ANTAGONISTIC, factorial.SYNERGISTIC)
    else:  # latency: a combination slower than its parts predict gains less
        assert t.outcome == (factorial.ANTAGONISTIC if inter > 0 else factorial.SYNERGISTIC)


def test_main_effect_is_the_mean_log_ratio_over_the_other_level():
    terms, point = _terms(_table(-0.10))
    p = point["tpot.p50"]
    want = math.expm1((math.log(p[1] / p[0]) + math.log(p[3] / p[2])) / 2)
    assert terms[("tpot.p50", "fp8")].ratio == pytest.approx(want)
    inter = math.log(p[3]) - math.log(p[1]) - math.log(p[2]) + math.log(p[0])
    assert terms[("tpot.p50", "fp8×spec")].log == pytest.approx(inter)


def test_three_factors_terms_and_coefficients():
    names = ["base", "a", "b", "a+b", "c", "a+c", "b+c", "a+b+c"]
    design, why = factorial.design_of(names, ["a", "b", "c"])
    assert why is None and design.full == 7 and design.singles() == [1, 2, 4]
    assert [design.term_name(t) for t in design.terms()] == [
        "a",
        "b",
        "c",
        "a×b",
        "a×c",
        "b×c",
        "a×b×c",
    ]
    c = design.coefficients((0, 1, 2))
    assert c[7] == 1 and c[0] == -1 and sum(c.values()) == 0
    assert design.coefficients((0,))[1] == pytest.approx(0.25)


def test_design_refuses_what_is_not_a_full_factorial():
    assert factorial.design_of(["base", "fp8", "spec"], ["fp8", "spec"])[1].startswith(
        "missing arms"
    )
    assert (
        "not a combination"
        in factorial.design_of(["base", "fp8", "x", "fp8+spec"], ["fp8", "spec"])[1]
    )
    assert factorial.levels_of("spec+fp8", ["fp8", "spec"]) == (1, 1)
    assert factorial.design_of(NAMES, ["fp8"])[0] is None


def test_verdict_carries_the_factorial_and_the_ladder_is_single_to_combination():
    v = evaluate(
        _table(-0.10, n=600),
        [{"name": n} for n in NAMES],
        {"ablation": {"factors": ["fp8", "spec"]}, "policy": POLICY},
    )
    d = v.to_dict()["factorial"]
    assert d["factors"] == ["fp8", "spec"] and d["combination"] == "fp8+spec"
    row = next(r for r in d["rows"] if r["key"] == "tpot.p50")
    assert set(row["values"]) == set(NAMES) and set(row["alone"]) == {"fp8", "spec"}
    assert row["interactions"][0]["term"] == "fp8×spec"
    assert row["interactions"][0]["outcome"] == factorial.SYNERGISTIC
    assert any("P50 TPOT" in f and "synergistic" in f for f in d["findings"])
    inter = v.factorial.row("tpot.p50").interactions[0]
    assert inter.finding in v.factorial.findings and "finding" not in row["main"][0]
    # a stored verdict reads the same document back (JSON's nulls as NaN, then null again)
    assert Factorial.from_dict(json.loads(json.dumps(d))).to_dict() == d
    assert [(p.baseline, p.candidate) for p in v.ladder] == [
        ("fp8", "fp8+spec"),
        ("spec", "fp8+spec"),
    ]


def test_combination_worse_than_every_single_factor_is_no_go():
    # each factor alone −20 %; together only −10 %: worse than either alone
    t = _table(0.40, n=600, a=0.80, b=0.80)
    v = evaluate(
        t,
        [{"name": n} for n in NAMES],
        {"ablation": {"factors": ["fp8", "spec"]}, "policy": POLICY},
    )
    combo = next(p for p in v.pairs if p.candidate == "fp8+spec")
    assert combo.result == NO_GO and combo.reasons[0].code == Code.COMBINATION_WORSE
    assert v.result == NO_GO and v.factorial.no_go == combo.reasons[0]


def test_no_factorial_without_factors_and_an_error_for_a_bad_design():
    arms = [{"name": n} for n in NAMES]
    assert evaluate(_table(0.0, n=300), arms, {"policy": POLICY}).factorial is None
    bad = evaluate(
        _table(0.0, n=300),
        [{"name": n} for n in ["base", "a", "b", "c"]],
        {"ablation": {"factors": ["fp8", "spec"]}, "policy": POLICY},
    )
    assert bad.factorial.error and bad.to_dict()["factorial"]["rows"] == []
    stored = bad.to_dict()["factorial"]
    assert Factorial.from_dict(stored).to_dict() == stored and len(stored) == 4


def _spec(text: str):
    import tomllib

    from abtui.spec import spec_from_dict, validate

    return validate(spec_from_dict(tomllib.loads(text), "t.toml"), "t.toml")


ARMS = "".join(
    f'[[arms]]\nname = "{n}"\nurl = "http://127.0.0.1:{8000 + i}/v1"\n' for i, n in enumerate(NAMES)
)


def test_spec_ablation_section():
    s = _spec('[ablation]\nfactors = ["fp8", "spec"]\n[load]\nrate = 4\n' + ARMS)
    assert s.ablation.factors == ["fp8", "spec"] and s.baseline.name == "base"
    assert s.to_dict()["ablation"] == {"factors": ["fp8", "spec"]}
    with pytest.raises(SpecError, match="missing arms for fp8\\+spec"):
        _spec(
            '[ablation]\nfactors = ["fp8", "spec"]\n[load]\nrate = 4\n'
            + ARMS.rsplit("[[arms]]", 1)[0]
        )
    with pytest.raises(SpecError, match="2 or 3"):
        _spec('[ablation]\nfactors = ["a", "b", "c", "d"]\n[load]\nrate = 4\n' + ARMS)


def test_cli_factor_flags_build_the_arms():
    from abtui.cli import apply_flags, build_parser
    from abtui.spec import Spec, validate

    args = build_parser().parse_args(
        [
            "run",
            "--baseline",
            "http://h:1/v1",
            "--factor",
            "fp8=http://h:2/v1",
            "--factor",
            "spec=http://h:3/v1",
            "--combined",
            "fp8+spec=http://h:4/v1",
            "--rate",
            "2",
        ]
    )
    spec = validate(apply_flags(Spec(), args), "command line")
    assert [a.name for a in spec.arms] == NAMES and spec.ablation.factors == ["fp8", "spec"]
    args = build_parser().parse_args(
        [
            "run",
            "--baseline",
            "http://h:1/v1",
            "--factor",
            "fp8=http://h:2/v1",
            "--factor",
            "spec=http://h:3/v1",
            "--rate",
            "2",
        ]
    )
    with pytest.raises(SpecError, match="missing arms"):
        validate(apply_flags(Spec(), args), "command line")
    with pytest.raises(UsageError, match="NAME=URL"):
        apply_flags(
            Spec(),
            build_parser().parse_args(["run", "--baseline", "http://h:1/v1", "--factor", "fp8"]),
        )
