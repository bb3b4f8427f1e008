"""Quality in a factorial ablation: each factor's main effect on accuracy and the interactions,
per suite, from the paired per-item answers of all 2^k arms (docs/ablation.md).

Every arm answers the same items (greedy, one seed), so an item scored on every arm gives a
row ``y_x ∈ {0, 1}`` per arm ``x``. A term ``T`` (a set of factors) is, per item, the contrast
of :mod:`abtui.stats.factorial` on the accuracy scale instead of the log scale:

    I_i = Σ_x  Π_{j∈T} (2 x_j − 1) · y_{x,i}  /  2^(k − |T|)

— a main effect is the mean, over the other factors' levels, of the factor's change in
accuracy; the 2×2 interaction is the difference in differences ``y_AB − y_A − y_B + y_base``
(0: the two factors' accuracy changes add up; −1: an item only the combination gets wrong). The
term is ``mean(I_i)`` in percentage points, with the **score interval** of
:mod:`abtui.quality.score` (Tango's interval generalised to the contrast's values; items that
share a context are counted once per design effect, as the quality gates do) and the score
test's p at 0. Where no item shows a drop, the interval lets one reach one answer flipped on one
arm (``±max|c_x|``: for the 2×2 interaction ±1, an item only the combination gets wrong — the
alternative the term is about), widened to any value observed beyond it, rather than the
contrast's whole range (±2: two coincident changes); on the whole range the interval is about
twice as wide as needed at 90 items (coverage 100 %; scripts/bench_quality_interaction.py).

**Families** (as the rest of the factorial): the quality suites are guardrails — a failing gate
is NO-GO — so their interaction terms join the factorial's ``interaction`` Holm family with the
primary objective's and the guardrails' interactions, and their main effects the ``main`` family
(:func:`abtui.stats.factorial.decide_terms`, ``extra``).

**Outcomes**, with the suite's quality margin ``m`` (:func:`abtui.quality.gates.margin_of`) as
δ: ``ANTAGONISTIC`` (Holm-significant and the interval wholly below ``−m``: the combination
loses accuracy its parts do not — a NO-GO reason for the combination), ``SYNERGISTIC`` (wholly
above ``+m``), ``INDEPENDENT`` (inside ±m), ``INCONCLUSIVE``. For the verdict an interaction is
``fail`` (antagonistic), ``clear`` (the lower bound ≥ −m: no combination-only drop beyond the
margin) or ``undecided`` (said, with the items that would decide at the flip rates seen).

**Flips only the combination makes**: items right on every other arm and wrong on the full
combination (``lost``), and the reverse (``gained``), counted and named.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from enum import StrEnum

import numpy as np

from abtui.quality.gates import MIN_ITEMS, margin_of, pp, smallest_deciding
from abtui.quality.paired import LEVEL, design_effect
from abtui.quality.score import lattice, score_interval, score_p
from abtui.stats import decide as stats_decide
from abtui.stats import factorial as stats_factorial


class InteractionState(StrEnum):
    """A quality interaction's state (a ``str``: the JSON holds these words)."""

    FAIL = "fail"
    CLEAR = "clear"
    UNDECIDED = "undecided"


FAIL, CLEAR, UNDECIDED = InteractionState
MAX_NAMED = 8  # item ids named per direction of the combination-only flips


@dataclass
class QualityTerm:
    """One term of one suite, on the accuracy scale (fractions; reported in pp)."""

    suite: str
    term: str  # ``int4`` or ``int4×spec``
    order: int  # 1: main effect; 2, 3: interaction
    n: int  # items scored on every arm
    clusters: int
    deff: float
    estimate: float  # mean per-item contrast
    lo: float
    hi: float
    p: float  # score test at 0, uncorrected
    margin: float
    vmin: float  # the contrast's possible range
    vmax: float
    counts: dict = field(default_factory=dict)  # contrast value → items
    p_adj: float = math.nan
    family: str = ""
    outcome: str = stats_decide.INCONCLUSIVE
    state: str = ""  # interactions: fail / clear / undecided
    items_needed: int | None = None
    note: str = ""
    finding: str | None = None

    @property
    def callable(self) -> bool:
        """Joins its family's correction: enough items and a p-value."""
        return self.n >= MIN_ITEMS and math.isfinite(self.p)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["counts"] = {f"{v:g}": c for v, c in self.counts.items()}
        return d


def _load(rows: list[dict], arms: list[int]) -> tuple[dict[str, list], dict[str, int]]:
    """``{suite: [(item, id, cluster, [y per arm])]}`` of the items scored on every arm, and
    ``{suite: items left out}``."""
    by: dict[tuple[int, int], dict] = {}
    for r in rows:
        if r["arm"] in arms:
            d = r["detail"] if isinstance(r["detail"], dict) else json.loads(r["detail"] or "{}")
            by[(r["arm"], r["item"])] = {"correct": r["correct"], **d}
    items: dict[str, list] = defaultdict(list)
    left: dict[str, int] = defaultdict(int)
    for k in sorted({k for (_, k) in by}):
        xs = [by.get((a, k)) for a in arms]
        first = next(x for x in xs if x is not None)
        suite = first.get("suite") or "?"
        if any(x is None or x["correct"] is None for x in xs):
            left[suite] += 1
            continue
        items[suite].append(
            (
                k,
                first.get("id") or str(k),
                first.get("cluster") or str(k),
                [int(bool(x["correct"])) for x in xs],
            )
        )
    return dict(items), dict(left)


def reach_of(
    coef: np.ndarray, vals: list[float], full_lattice: bool = False
) -> tuple[float, float]:
    """The values the score interval lets an unobserved drop or gain take (module docstring
    of :mod:`abtui.quality.score`): one answer flipped on one arm, ``±max|c_x|`` (for the 2×2
    interaction ±1: an item only the combination gets wrong, or right), widened to the values
    observed; ``full_lattice``: the contrast's whole range instead (±2 for the 2×2)."""
    if full_lattice:
        return float(coef[coef < 0].sum()), float(coef[coef > 0].sum())
    h = float(np.abs(coef).max())
    return min([-h, *vals]), max([h, *vals])


def term_of(
    suite: str,
    name: str,
    order: int,
    contrast: np.ndarray,
    cl: np.ndarray,
    coef: np.ndarray,
    margin: float,
    *,
    full_lattice: bool = False,
) -> QualityTerm:
    """One term from its per-item contrasts (``cl``: each item's cluster; ``coef``: the arms'
    coefficients)."""
    deff = design_effect(contrast, cl)
    vals, cnts = lattice(contrast, deff)
    vmin, vmax = reach_of(coef, vals, full_lattice)
    lo, hi = score_interval(vals, cnts, vmin, vmax, LEVEL)
    return QualityTerm(
        suite,
        name,
        order,
        len(contrast),
        len(set(cl.tolist())),
        deff,
        float(contrast.mean()),
        lo,
        hi,
        score_p(vals, cnts, vmin, vmax),
        margin,
        vmin,
        vmax,
        dict(zip(*lattice(contrast), strict=True)),
    )


@dataclass(frozen=True, slots=True)
class OnlyCombination:
    """Items whose answer only the full combination changes (named up to a few)."""

    lost: int  # right on every other arm, wrong on the combination
    gained: int
    lost_items: tuple[str, ...]
    gained_items: tuple[str, ...]

    def to_dict(self) -> dict:
        return {
            "lost": self.lost,
            "gained": self.gained,
            "lost_items": list(self.lost_items),
            "gained_items": list(self.gained_items),
        }

    @classmethod
    def from_dict(cls, d: dict | None) -> OnlyCombination | None:
        if d is None:
            return None
        return cls(d["lost"], d["gained"], tuple(d["lost_items"]), tuple(d["gained_items"]))


@dataclass(frozen=True, slots=True)
class SuiteEstimate:
    """One suite of a factorial's quality items (:func:`estimate`): the items scored on every
    arm (``n``, in ``clusters``), those left out, each arm's accuracy (arm index → fraction),
    the combination-only flips and the suite's terms (none without items)."""

    suite: str
    n: int
    unpaired: int
    margin: float
    clusters: int = 0
    accuracy: dict[int, float] = field(default_factory=dict)
    only_combination: OnlyCombination | None = None
    terms: tuple[QualityTerm, ...] = ()


def only_combination(y: np.ndarray, ids: list[str], full: int) -> OnlyCombination:
    """Items whose answer on the full combination (column ``full``) differs from the one every
    other arm gave: ``lost`` (right elsewhere, wrong on the combination), ``gained``."""
    others = np.delete(y, full, axis=1)
    agree = (others == others[:, :1]).all(axis=1)
    lost = agree & (others[:, 0] == 1) & (y[:, full] == 0)
    gained = agree & (others[:, 0] == 0) & (y[:, full] == 1)
    name = lambda m: tuple(ids[i] for i in np.flatnonzero(m)[:MAX_NAMED])  # noqa: E731
    return OnlyCombination(int(lost.sum()), int(gained.sum()), name(lost), name(gained))


def estimate(
    rows: list[dict], design: stats_factorial.Design, qspec: dict | None
) -> tuple[list[SuiteEstimate], list[QualityTerm]]:
    """``(suites, terms)``: each suite's :class:`SuiteEstimate` and every :class:`QualityTerm`
    (undecided; :func:`decide` after the family correction)."""
    arms = sorted(design.arm_of.values())
    items, left = _load(rows, arms)
    col = {a: i for i, a in enumerate(arms)}
    suites, terms = [], []
    for suite in sorted(set(items) | set(left)):
        recs = items.get(suite) or []
        margin = margin_of(qspec or {}, suite)
        if not recs:
            suites.append(SuiteEstimate(suite, 0, left.get(suite, 0), margin))
            continue
        y = np.array([r[3] for r in recs], dtype=np.int8)
        cl = np.array([r[2] for r in recs], dtype=object)
        own = []
        for tm in design.terms():
            cs = design.coefficients(tm)
            coef = np.array([cs[a] for a in arms])
            own.append(term_of(suite, design.term_name(tm), len(tm), y @ coef, cl, coef, margin))
        terms += own
        suites.append(
            SuiteEstimate(
                suite,
                len(recs),
                left.get(suite, 0),
                margin,
                len(set(cl.tolist())),
                {a: float(y[:, col[a]].mean()) for a in arms},
                only_combination(y, [r[1] for r in recs], col[design.full]),
                tuple(own),
            )
        )
    return suites, terms


def items_needed(t: QualityTerm) -> int | None:
    """Items at which the interval would clear ``−margin`` on the side the estimate is (the
    lower bound above it, the upper bound below it), if the contrasts kept their frequencies."""
    m = t.margin
    if not (t.n and math.isfinite(t.estimate)) or t.estimate == -m:
        return None
    above = t.estimate > -m
    vals = list(t.counts)

    def decided(n2: float) -> bool:
        k = n2 / t.n / t.deff
        lo, hi = score_interval(vals, [t.counts[v] * k for v in vals], t.vmin, t.vmax, LEVEL)
        return lo >= -m if above else hi < -m

    return smallest_deciding(t.n, decided)


def decide(terms: list[QualityTerm], alpha: float) -> None:
    """Outcome (and, for an interaction, the verdict's state) of every term, once its family's
    correction has set ``p_adj`` (module docstring)."""
    for t in terms:
        p_adj = t.p_adj if math.isfinite(t.p_adj) else None
        # min_paired=0: the score interval holds at few items (MIN_ITEMS gates passing)
        d = stats_decide.decide(
            t.estimate,
            t.lo,
            t.hi,
            p_adj,
            t.margin,
            lower_is_better=False,
            n=t.n,
            stat="mean",
            alpha=alpha,
            min_paired=0,
        )
        t.outcome = stats_factorial.interaction_outcome(d.outcome) if t.order > 1 else d.outcome
        t.note = "" if t.callable else f"fewer than {MIN_ITEMS} items scored on every arm"
        if t.order == 1:
            continue
        if t.outcome == stats_factorial.ANTAGONISTIC:
            t.state = FAIL
        elif t.lo >= -t.margin and t.n >= MIN_ITEMS:
            t.state = CLEAR
        else:
            t.state = UNDECIDED
            t.items_needed = items_needed(t)


def family_of(t: QualityTerm) -> str:
    """The quality terms join the Holm families of the primary and the guardrails."""
    return "main" if t.order == 1 else "interaction"


def _p(x: float) -> str:
    return "n/a" if not math.isfinite(x) else (f"{x:.2g}" if x >= 1e-3 else "< 0.001")


def term_words(t: QualityTerm) -> str:
    """``int4×spec −10.0 pp [−13.3 pp, −6.9 pp] (Holm p < 0.001)``."""
    return f"{t.term} {pp(t.estimate)} [{pp(t.lo)}, {pp(t.hi)}] (Holm p {_p(t.p_adj)})"


def sentences(
    s: SuiteEstimate,
    t: QualityTerm,
    combo: str,
    alone: dict,
    combined,
    singles: list[str],
    k: int,
) -> tuple[str | None, str | None, str | None]:
    """``(finding, no_go, undecided)`` of one interaction term in words (each may be None).
    ``alone``: arm name → its pair's accuracy change on the suite, ``combined`` the
    combination's (records with ``delta``, ``lo``, ``hi``; None where not measured)."""
    oc = s.only_combination
    lost, gained = (oc.lost, oc.gained) if oc else (0, 0)
    others = ", ".join(["base", *singles]) if k == 2 else "every other arm"
    flips = (
        f"{lost} item{'s' if lost != 1 else ''} right on {others} "
        f"{'are' if lost != 1 else 'is'} wrong only on {combo}, {gained} the reverse"
    )
    if oc and oc.lost_items:
        flips += f" (e.g. {', '.join(oc.lost_items[:3])})"
    m = f"{t.margin * 100:g} pp"
    head = f"quality: {s.suite} accuracy interaction {term_words(t)}"
    finding = no_go = undecided = None
    if t.outcome in (stats_factorial.ANTAGONISTIC, stats_factorial.SYNERGISTIC):
        delta = {n: alone[n].delta if alone.get(n) else None for n in singles}
        parts = ", ".join(f"{n} alone {pp(delta[n])}" for n in singles)
        pred = sum(d if d is not None and math.isfinite(d) else 0.0 for d in delta.values())
        how = (
            "loses accuracy its parts do not (antagonistic)"
            if t.outcome == stats_factorial.ANTAGONISTIC
            else "keeps accuracy its parts lose (synergistic)"
        )
        lead = (
            f"{combo}: {s.suite} accuracy {pp(combined.delta)} [{pp(combined.lo)}, "
            f"{pp(combined.hi)}] against the baseline; {parts} would give {pp(pred)} "
            f"added: "
            if k == 2 and combined is not None
            else f"{s.suite}: "
        )
        finding = f"{lead}interaction {term_words(t)}, the combination {how}; {flips}"
    if t.state == FAIL:
        no_go = (
            f"{head}, beyond the −{m} margin: the combination {combo} loses answers its "
            f"parts keep; {flips}"
        )
    elif t.state == UNDECIDED:
        if t.n < MIN_ITEMS:
            why = f"fewer than {MIN_ITEMS} items scored on every arm"
        else:
            why = f"a combination-only drop beyond −{m} is not ruled out"
        more = (
            f"about {t.items_needed:,} items per suite would decide"
            if t.items_needed
            else "more items would decide"
        )
        undecided = f"{head}: {why}; {more} (at the answers' flip rates seen); {flips}"
    return finding, no_go, undecided
