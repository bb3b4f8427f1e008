"""Logprob agreement and perplexity: the KL lower bound over the union of two top-k lists (hand
cases and a property test against full distributions), the simulator's logprobs, and a real run
of two simulated endpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abtui.quality.kl_union import intersection_bound, union_bound
from abtui.quality.logprobs import kl_lower_bound


def _top(p: dict[str, float], k: int) -> dict[str, float]:
    return dict(sorted(p.items(), key=lambda kv: -kv[1])[:k])


def _kl(p: dict[str, float], q: dict[str, float]) -> float:
    return sum(v * math.log(v / q[t]) for t, v in p.items() if v > 0)


# -- the bound, by hand --------------------------------------------------------------------


def test_identical_lists_give_zero():
    a = {"x": 0.5, "y": 0.2, "z": 0.1}
    assert union_bound(a, dict(a), 3) == 0.0
    assert kl_lower_bound({t: math.log(v) for t, v in a.items()},
                          {t: math.log(v) for t, v in a.items()}, 3) == 0.0  # fmt: skip


def test_disjoint_lists_by_hand():
    # A lists x .5, y .3 (0.2 unlisted); B lists z .5, w .3 (0.2 unlisted). The intersection
    # bound sees nothing (both OTHER buckets hold everything: 0). Over the union, B can give x
    # and y at most 0.2 together (its unlisted mass), A likewise z and w; the least KL splits
    # B's 0.2 in proportion to A's (0.125, 0.075) and A's 0.2 in proportion to B's.
    a, b = {"x": 0.5, "y": 0.3}, {"z": 0.5, "w": 0.3}
    by_hand = 0.5 * math.log(0.5 / 0.125) + 0.3 * math.log(0.3 / 0.075)
    by_hand += 0.125 * math.log(0.125 / 0.5) + 0.075 * math.log(0.075 / 0.3)
    assert intersection_bound(a, b) == 0.0
    assert union_bound(a, b, 2) == pytest.approx(by_hand, rel=1e-9)
    # and the bound holds against a full pair of distributions with those top-2 lists
    full_a = {"x": 0.5, "y": 0.3, "z": 0.1, "w": 0.1}
    full_b = {"x": 0.1, "y": 0.1, "z": 0.5, "w": 0.3}
    assert union_bound(a, b, 2) <= _kl(full_a, full_b)


def test_union_strictly_above_intersection_and_below_the_true_kl():
    full_a = {"x": 0.6, "y": 0.25, "z": 0.1, "w": 0.05}
    full_b = {"x": 0.4, "z": 0.3, "y": 0.05, "w": 0.25}
    a, b = _top(full_a, 2), _top(full_b, 2)  # {x, y} and {x, z}: y and z in one list each
    inter, union = intersection_bound(a, b), union_bound(a, b, 2)
    assert inter < union - 0.01
    assert union <= _kl(full_a, full_b)


def test_a_list_longer_than_k_caps_unknowns_at_the_kth():
    # vLLM appends the sampled token to the top-k: B's cap for unknowns is its 2nd, not its 3rd
    a, b = {"x": 0.5, "y": 0.4}, {"x": 0.5, "z": 0.3, "q": 0.01}
    assert union_bound(a, b, 2) <= union_bound(a, b, None)


def test_lists_summing_to_one_fall_back_to_the_intersection():
    # rounded logprobs can sum past 1: never an infinite or made-up figure
    a, b = {"x": 0.6, "y": 0.4000001}, {"x": 0.5, "z": 0.5}
    assert union_bound(a, b, 2) == intersection_bound(a, b)
    assert math.isfinite(union_bound(a, b, 2))


# -- the bound, against full distributions -------------------------------------------------


@st.composite
def _pair(draw):
    n = draw(st.integers(3, 24))
    k = draw(st.integers(1, min(n, 8)))
    w = st.floats(0.001, 1.0)
    pa = np.array(draw(st.lists(w, min_size=n, max_size=n)))
    pb = np.array(draw(st.lists(w, min_size=n, max_size=n)))
    sharp = draw(st.sampled_from([1.0, 2.0, 4.0]))
    pa, pb = pa**sharp, pb ** draw(st.sampled_from([1.0, 2.0, 4.0]))
    pa, pb = pa / pa.sum(), pb / pb.sum()
    return ({str(i): float(v) for i, v in enumerate(pa)},
            {str(i): float(v) for i, v in enumerate(pb)}, k)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(_pair())
def test_bound_between_intersection_and_true_kl(pair):
    full_a, full_b, k = pair
    a, b = _top(full_a, k), _top(full_b, k)
    union = union_bound(a, b, k)
    assert intersection_bound(a, b) - 1e-12 <= union <= _kl(full_a, full_b) + 1e-9


def test_bound_is_the_minimum_found_by_a_general_solver():
    """Against scipy's trust-constr from several starts on the same convex problem: the exact
    solution is never above (it would not be the minimum) nor far below (it would be loose)."""
    from scipy.optimize import LinearConstraint, minimize

    rng = np.random.default_rng(5)
    for _ in range(6):
        n, k = 8, 3
        pa, pb = rng.dirichlet(np.ones(n)), rng.dirichlet(np.ones(n))
        full_a = {str(i): v for i, v in enumerate(pa)}
        full_b = {str(i): v for i, v in enumerate(pb)}
        a, b = _top(full_a, k), _top(full_b, k)
        oa = [a[t] for t in a if t not in b]
        ob = [b[t] for t in b if t not in a]
        if not oa:
            continue
        c = sum(a[t] * math.log(a[t] / b[t]) for t in a if t in b)
        ra, rb = 1 - sum(a.values()), 1 - sum(b.values())
        cx, cy = min(min(a.values()), ra), min(min(b.values()), rb)
        nx = len(ob)

        def f(z, c=c, ra=ra, rb=rb, oa=oa, ob=ob, nx=nx):
            x, y = np.maximum(z[:nx], 1e-300), np.maximum(z[nx:], 1e-300)
            po, qo = max(ra - x.sum(), 1e-300), max(rb - y.sum(), 1e-300)
            return (c + float(np.sum(x * np.log(x / ob))) + float(np.sum(oa * np.log(oa / y)))
                    + po * math.log(po / qo))  # fmt: skip

        m = np.zeros((2, nx + len(oa)))
        m[0, :nx], m[1, nx:] = 1, 1
        best = min(
            minimize(f, np.concatenate([rng.uniform(0.1, 0.9, nx) * cx / (nx + 1),
                                        rng.uniform(0.1, 0.9, len(oa)) * cy / (len(oa) + 1)]),
                     bounds=[(1e-12, cx)] * nx + [(1e-12, cy)] * len(oa), method="trust-constr",
                     constraints=[LinearConstraint(m, [0, 0], [ra, rb])],
                     options={"xtol": 1e-12, "gtol": 1e-12, "maxiter": 2000}).fun
            for _ in range(2)
        )  # fmt: skip
        got = union_bound(a, b, k)
        assert got <= best + 1e-9
        assert got >= max(best, intersection_bound(a, b)) - 1e-5
