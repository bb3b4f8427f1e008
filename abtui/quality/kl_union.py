"""A lower bound on KL(A‖B) from two top-k lists: over the union of both lists plus OTHER.

An endpoint returns, per position, its ``k`` most likely tokens with their probabilities. A
token in both lists has both probabilities; a token in only A's list has an *unknown*
probability under B, and the reverse. What is known of an unknown probability:

- it is at most ``cap_B``, the ``k``-th largest probability B listed (the token was not in B's
  top-k; with a list longer than ``k`` — vLLM appends the sampled token — the ``k``-th largest
  is the safe cap), and at most the mass B left unlisted, ``r_B = 1 − Σ listed``;
- the unknowns of one arm together take at most its unlisted mass; what they leave is the arm's
  OTHER bucket (every token in neither list).

Partition the vocabulary into the union's tokens, one cell each, and OTHER. The true
distributions, coarse-grained onto that partition, are one feasible choice of the unknowns, and
coarse-graining never increases KL (data-processing inequality). So

    min over feasible unknowns of KL(Ã‖B̃)  ≤  KL(coarse A ‖ coarse B)  ≤  KL(A‖B),

and the minimum is a valid lower bound. It is also ≥ the bound over the intersection of the two
lists plus one OTHER (every feasible point, with the cells "only in A", "only in B" and OTHER
merged, gives exactly the intersection bound's masses; merging cells never increases KL).

Solving it. With ``x_t`` A's unknowns (tokens only B listed, B's ``b_t`` known), ``y_t`` B's
unknowns (tokens only A listed, ``a_t`` known) and ``P_o = r_A − Σx``, ``Q_o = r_B − Σy``:

    f(x, y) = C + Σ x_t log(x_t / b_t) + Σ a_t log(a_t / y_t) + P_o log(P_o / Q_o),

``C`` the shared tokens' terms. ``f`` is jointly convex (the last term is a perspective of
−log) over a polytope (a box and one sum per arm), so a point meeting the KKT conditions is the
minimum. Two cases cover every optimum:

(i) ``P_o > 0`` and ``Q_o > 0`` (the sums slack). Stationarity gives, for one
    ``κ = P_o / Q_o``, ``x_t = min(cap_A, κ b_t)`` and ``y_t = min(cap_B, a_t / κ)``. On the
    interval of ``κ`` where ``P_o(κ) > 0`` and ``Q_o(κ) > 0`` (``P_o`` falls and ``Q_o`` rises
    with ``κ``), ``P_o(κ) − κ Q_o(κ)`` falls strictly, from > 0 at its left end to < 0 at its
    right end: exactly one root, found by bisection on ``log κ``. That point meets every KKT
    condition with zero multipliers on the sums: it is the minimum.
(ii) otherwise ``P_o = 0`` (``Q_o = 0`` with ``P_o > 0`` is infinite), and the problem splits:
    A's unknowns take all of ``r_A`` in proportion to ``b_t`` under their cap, B's take as much
    of ``r_B`` as their cap allows, in proportion to ``a_t`` (closed-form water-filling).

Degenerate lists (an arm's listed mass ≥ 1 − :data:`REST_FLOOR` from rounding, a zero
probability, no feasible point) fall back to the intersection bound, always valid. The result
is ``max(intersection, minimum)``. ``tests/unit/test_quality_logprobs.py`` checks it against a
general solver and, by property, between the intersection bound and the true KL.
"""

from __future__ import annotations

import math

_INF = math.inf
# An arm's unlisted mass is taken as at least this: logprobs rounded by the server can make a
# list's probabilities sum to 1 or more, which would otherwise claim an infinite KL.
REST_FLOOR = 1e-6


def _kl_terms(pairs: list[tuple[float, float]]) -> float:
    kl = 0.0
    for p, q in pairs:
        if p <= 0:
            continue
        if q <= 0:
            return _INF
        kl += p * math.log(p / q)
    return kl


def intersection_bound(a: dict[str, float], b: dict[str, float]) -> float:
    """KL over (tokens in both lists) ∪ OTHER, probabilities given (not logprobs)."""
    common = [t for t in a if t in b]
    ra = max(0.0, 1.0 - sum(a[t] for t in common))
    rb = max(REST_FLOOR, 1.0 - sum(b[t] for t in common))
    return max(0.0, _kl_terms([(a[t], b[t]) for t in common] + [(ra, rb)]))


def _cap(probs: list[float], k: int | None) -> float:
    """The largest probability an unlisted token can have: the k-th largest listed."""
    s = sorted(probs, reverse=True)
    return s[min(len(s), k or len(s)) - 1]


def _water(w: list[float], cap: float, budget: float) -> list[float]:
    """``min(cap, λ w_t)`` with λ such that they sum to ``budget`` (all at ``cap`` when even
    that falls short)."""
    if len(w) * cap <= budget:
        return [cap] * len(w)
    order = sorted(range(len(w)), key=w.__getitem__, reverse=True)
    rest = sum(w)
    for m, i in enumerate(order):  # the m largest clipped at cap
        lam = (budget - m * cap) / rest
        if lam * w[i] <= cap:
            return [min(cap, lam * wt) for wt in w]
        rest -= w[i]
    return [cap] * len(w)  # not reached: len(w) * cap > budget


def union_bound(a: dict[str, float], b: dict[str, float], k: int | None = None) -> float:
    """The lower bound of the module docstring; ``a``/``b`` map token → probability, ``k`` is
    the top-k asked (None: each list's own length)."""
    inter = intersection_bound(a, b)
    only_a = [a[t] for t in a if t not in b and a[t] > 0]  # B's unknowns y
    only_b = [b[t] for t in b if t not in a and b[t] > 0]  # A's unknowns x
    c = _kl_terms([(a[t], b[t]) for t in a if t in b])
    ra, rb = 1.0 - sum(a.values()), 1.0 - sum(b.values())
    if not (only_a or only_b) or math.isinf(c) or min(ra, rb) < REST_FLOOR:
        return inter  # nothing unknown, already infinite, or a list holding all its mass
    cx, cy = min(_cap(list(a.values()), k), ra), min(_cap(list(b.values()), k), rb)

    def point(kappa: float) -> tuple[list[float], list[float], float, float]:
        x = [min(cx, kappa * bt) for bt in only_b]
        y = [min(cy, at / kappa) for at in only_a]
        return x, y, ra - sum(x), rb - sum(y)

    def value(x: list[float], y: list[float], po: float, qo: float) -> float:
        v = c + _kl_terms(list(zip(x, only_b, strict=True)))
        v += _kl_terms(list(zip(only_a, y, strict=True)))
        return v + _kl_terms([(po, qo)])

    # (i) P_o > 0 and Q_o > 0: the root of P_o(κ) − κ Q_o(κ), decreasing on that interval
    lo, hi, found = -60.0, 60.0, False
    for _ in range(100):
        mid = (lo + hi) / 2
        _, _, po, qo = point(math.exp(mid))
        if po > 0 and qo > 0:
            found = True
        if qo <= 0 < po or (po > 0 and qo > 0 and po - math.exp(mid) * qo > 0):
            lo = mid  # κ too small
        elif po <= 0 < qo or (po > 0 and qo > 0):
            hi = mid  # κ too large
        else:
            break  # P_o ≤ 0 and Q_o ≤ 0: no interior point
    if found:
        x, y, po, qo = point(math.exp((lo + hi) / 2))
        if po > 0 and qo > 0:
            return max(0.0, inter, value(x, y, po, qo))
    # (ii) P_o = 0: A's unknowns take all its unlisted mass; B's as much as they can
    if len(only_b) * cx < ra:
        return inter
    x, y = _water(only_b, cx, ra), _water(only_a, cy, rb)
    return max(0.0, inter, value(x, y, 0.0, rb - sum(y)))
