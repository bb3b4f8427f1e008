"""Quality in a factorial ablation (abtui.quality.factorial, abtui.quality.score): the score
interval, synthetic suites of known accuracy interaction (a combination-only drop is reported
and is a NO-GO reason for the combination; zero is not flagged), its family, the report formats,
the JSON key and the verdict screen's ablation view."""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pytest
from test_factorial import NAMES, POLICY, _table
from tui_fixtures import ablation_verdict_data

from abtui.quality import factorial as quality_factorial
from abtui.quality import synthetic as quality_synthetic
from abtui.quality.score import score_interval, score_p
from abtui.report.factorial import html, markdown, quality_lines, text_lines
from abtui.stats import factorial as stats_factorial
from abtui.stats.classical import paired_difference_ci
from abtui.stats.multiple import holm
from abtui.stats.reasons import Code
from abtui.verdict.policy import GO, NO_GO, evaluate

COEF = np.array([1.0, -1.0, -1.0, 1.0])  # base, fp8, spec, fp8+spec
DROP = [0.90, 0.88, 0.90, 0.78]  # items in [0.78, 0.88): right on base, fp8, spec; wrong on both
ZERO = [0.90, 0.87, 0.88, 0.85]  # each factor loses items, the losses add up
SPEC = {"ablation": {"factors": ["fp8", "spec"]}, "policy": POLICY, "quality": {"margin": 0.01}}


@pytest.mark.parametrize(
    "b,c,n",
    [
        (0, 0, 12),
        (0, 0, 400),
        (3, 1, 50),
        (10, 2, 100),
        (0, 5, 30),
        (30, 0, 30),
        (7, 7, 200),
        (2.5, 0.3, 40.2),
    ],
)
def test_score_interval_on_three_values_is_tangos(b, c, n):
    lo, hi = score_interval([-1, 0, 1], [b, n - b - c, c], -1, 1)
    t_lo, t_hi = paired_difference_ci(b, c, n)
    assert lo == pytest.approx(t_lo, abs=1e-8) and hi == pytest.approx(t_hi, abs=1e-8)


def test_score_interval_has_width_when_no_item_changed():
    z2 = 1.959963984540054**2
    lo, hi = score_interval([0.0], [300.0], -1, 1)
    assert hi == pytest.approx(z2 / (300 + z2), rel=1e-6) and lo == pytest.approx(-hi)
    lo2, hi2 = score_interval([0.0], [300.0], -2, 2)  # the full 2×2 lattice: twice as wide
    assert hi2 == pytest.approx(2 * hi, rel=1e-6)
    assert score_p([0.0], [300.0], -1, 1) == 1.0
    assert score_p([-1.0, 0.0], [30.0, 270.0], -1, 1) < 1e-6


def _rows(th_niah, th_keys, n=300, flip=0.01, seed=1):
    return quality_synthetic.rows(
        n, th_niah, flip=flip, cluster_size=3, rho=0.5, seed=seed, suite="niah"
    ) + quality_synthetic.rows(
        n, th_keys, flip=flip, cluster_size=3, rho=0.5, seed=seed + 1, suite="keys", first=n
    )


@pytest.fixture(scope="module")
def drop_verdict():
    """niah: a −10 pp combination-only drop; keys: no interaction."""
    return evaluate(
        _table(0.0, n=600), [{"name": n} for n in NAMES], SPEC, quality=_rows(DROP, ZERO)
    )


def _suite(v, suite):
    return next(s for s in v.factorial.quality.suites if s.suite == suite)


def test_combination_only_drop_is_antagonistic_and_no_go(drop_verdict):
    v = drop_verdict
    niah = _suite(v, "niah")
    inter = niah.interactions[0]
    truth = quality_synthetic.truth(DROP, list(COEF), 0.01)  # −9.8 pp
    assert inter.term == "fp8×spec" and inter.lo <= truth <= inter.hi
    assert inter.outcome == stats_factorial.ANTAGONISTIC and inter.state == quality_factorial.FAIL
    assert inter.family == "interaction" and inter.p_adj < 0.05
    oc = niah.only_combination
    assert oc.lost >= 20 and oc.lost > 5 * oc.gained and oc.lost_items
    combo = next(p for p in v.pairs if p.candidate == "fp8+spec")
    assert combo.result == NO_GO
    reason = next(r for r in combo.reasons if r.code == Code.INTERACTION)
    assert reason.startswith("quality: niah accuracy interaction fp8×spec −") or "niah" in reason
    assert "beyond the −1 pp margin" in reason and "wrong only on fp8+spec" in reason
    assert any("niah accuracy" in f and "antagonistic" in f for f in v.factorial.findings)
    # each factor alone is measured on the baseline by its pair verdict
    assert set(niah.alone) == {"fp8", "spec"} and niah.combined.delta < -0.05
    keys = _suite(v, "keys").interactions[0]
    assert (
        keys.outcome not in (stats_factorial.ANTAGONISTIC, stats_factorial.SYNERGISTIC)
        and keys.state != quality_factorial.FAIL
    )


def test_quality_interactions_join_the_interaction_holm_family(drop_verdict):
    v = drop_verdict
    lat = [
        i
        for r in v.factorial.rows
        for i in r.interactions
        if i.family == "interaction" and math.isfinite(i.p_adj)
    ]
    qual = [i for s in v.factorial.quality.suites for i in s.interactions]
    ps = [i.p for i in lat + qual]
    assert len(qual) == 2 and len(lat) >= 1
    for i, p_adj in zip(lat + qual, holm(ps), strict=True):
        assert i.p_adj == pytest.approx(p_adj)
    mains = [t for s in v.factorial.quality.suites for t in s.main]
    assert {t.family for t in mains} == {"main"} and len(mains) == 4


def test_interaction_alone_makes_the_combination_no_go():
    # each factor gains 5 pp that the combination does not: the combination is no worse than the
    # baseline (its own gate passes), but it loses what each of its parts gains
    th = [0.85, 0.90, 0.90, 0.85]
    v = evaluate(
        _table(0.0, n=600),
        [{"name": n} for n in NAMES],
        SPEC,
        quality=quality_synthetic.rows(400, th, seed=3, suite="niah"),
    )
    combo = next(p for p in v.pairs if p.candidate == "fp8+spec")
    assert combo.quality.gates[0].state == "pass"
    assert combo.result == NO_GO and combo.reasons[0].code == Code.INTERACTION
    assert "fp8×spec" in combo.reasons[0]
    inter = _suite(v, "niah").interactions[0]
    assert (
        inter.estimate == pytest.approx(-0.10, abs=0.04) and inter.state == quality_factorial.FAIL
    )


def test_undecided_interaction_is_said_with_the_items_that_would_decide():
    v = evaluate(
        _table(0.0, n=600),
        [{"name": n} for n in NAMES],
        SPEC,
        quality=quality_synthetic.rows(
            60, [0.90, 0.88, 0.90, 0.85], flip=0.02, seed=4, suite="niah"
        ),
    )
    inter = _suite(v, "niah").interactions[0]
    assert inter.state == quality_factorial.UNDECIDED and inter.items_needed > 60
    combo = next(p for p in v.pairs if p.candidate == "fp8+spec")
    said = [r for r in combo.reasons if r.code == Code.INTERACTION]
    assert said and f"about {inter.items_needed:,} items per suite would decide" in said[0]
    assert list(v.factorial.quality.undecided) == said and not v.factorial.quality.no_go
    assert combo.result != GO  # (its own gate at 60 items is undecided too)


def _draws(thresholds, n, seeds):
    out = []
    for seed in seeds:
        y, cl = quality_synthetic.answers(
            n, thresholds, flip=0.01, cluster_size=3, rho=0.5, seed=seed
        )
        t = quality_factorial.term_of("niah", "a×b", 2, y @ COEF, cl, COEF, 0.01)
        t.p_adj = t.p
        quality_factorial.decide([t], 0.05)
        out.append(t)
    return out


def test_zero_interaction_is_not_flagged_over_many_seeds():
    terms = _draws(ZERO, 300, range(200))
    flagged = np.mean(
        [t.outcome in (stats_factorial.ANTAGONISTIC, stats_factorial.SYNERGISTIC) for t in terms]
    )
    size = np.mean([t.p < 0.05 for t in terms])
    covered = np.mean([t.lo <= 0 <= t.hi for t in terms])
    assert flagged <= 0.05 and size <= 0.09 and covered >= 0.91  # (±3 % simulation error)


def test_combination_only_drop_is_covered_and_found_at_300_items():
    truth = quality_synthetic.truth(DROP, list(COEF), 0.01)
    terms = _draws(DROP, 300, range(1000, 1150))
    assert np.mean([t.lo <= truth <= t.hi for t in terms]) >= 0.90
    assert np.mean([t.state == quality_factorial.FAIL for t in terms]) >= 0.90


def test_three_factors_have_seven_accuracy_terms_and_the_full_combination():
    names = ["base", "a", "b", "a+b", "c", "a+c", "b+c", "a+b+c"]
    design, _ = stats_factorial.design_of(names, ["a", "b", "c"])
    th = [0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8]  # only a+b+c loses 10 %
    suites, terms = quality_factorial.estimate(
        quality_synthetic.rows(200, th, seed=5, suite="keys"), design, {}
    )
    assert [t.term for t in terms] == ["a", "b", "c", "a×b", "a×c", "b×c", "a×b×c"]
    assert suites[0].only_combination.lost == pytest.approx(20, abs=12)
    abc = terms[-1]
    assert abc.vmin == -1 and abc.vmax == 1  # one answer flipped on one arm
    assert abc.estimate == pytest.approx(-suites[0].only_combination.lost / 200)


def test_reports_and_json_carry_the_quality_interaction(drop_verdict):
    v = drop_verdict
    fac, pol = v.factorial, v.policy
    text = "\n".join(text_lines(fac, pol, 100))
    assert "quality: accuracy in pp" in text
    assert "interaction fp8×spec -" in text and "ANTAGONISTIC" in text
    assert "NO-GO for fp8+spec: quality: niah accuracy interaction" in text
    assert "flips only fp8+spec makes:" in text
    md = "\n".join(markdown(fac, pol, str))
    assert "### Quality in the factorial" in md and "| niah | 300 |" in md and "| fail |" in md
    h = html(fac, pol, str)
    assert "interaction fp8×spec" in h and "NO-GO for fp8+spec:</b> quality: niah" in h
    doc = json.loads(json.dumps(v.to_dict()))
    q = doc["factorial"]["quality"]
    s = next(x for x in q["suites"] if x["suite"] == "niah")
    assert {
        "suite",
        "n",
        "accuracy",
        "alone",
        "combined",
        "predicted",
        "only_combination",
        "main",
        "interactions",
    } <= set(s)
    inter = s["interactions"][0]
    assert {
        "term",
        "estimate",
        "lo",
        "hi",
        "p",
        "p_adj",
        "family",
        "margin",
        "outcome",
        "state",
        "items_needed",
        "counts",
        "finding",
    } <= set(inter)
    assert q["no_go"] and all(
        math.isfinite(x) for x in (inter["estimate"], inter["lo"], inter["hi"])
    )


def test_verdict_screen_ablation_view_shows_the_quality_line(drop_verdict, tmp_path):
    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.verdict import VerdictScreen

    data = ablation_verdict_data(drop_verdict, NAMES, tmp_path)

    async def run():
        app = AbtuiApp()
        async with app.run_test(size=(80, 24)) as pilot:
            await app.push_screen(VerdictScreen(data))
            await pilot.pause()
            view = app.screen.query_one("#ablation")
            shown = str(view.render())
            await pilot.press("q")
        return shown

    shown = asyncio.run(run())
    assert "quality: accuracy in pp" in shown
    inter = next(ln for ln in shown.splitlines() if ln.startswith("  interaction fp8×spec -"))
    assert "ANTAGONISTIC" in inter
    assert "NO-GO for fp8+spec: quality: niah accuracy interaction" in shown.replace("\n", " ")
    assert all(len(ln) <= 80 for ln in quality_lines(drop_verdict.factorial, 76))
