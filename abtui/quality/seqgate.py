"""The quality gate of a run ``--until-decided`` (docs/verdict.md §11, "Quality"): anytime-valid
per length bucket, so the run may send items until it is decided.

Per suite and length bucket (``1k`` … ``32k``; one bucket for a suite without lengths), the
unit is a *cluster* of paired items (the haystacks of one document at several depths, the
questions about one haystack; an item alone otherwise) with the mean of ``correct_B −
correct_A`` over its items, in ``[−1, 1]``: clusters are independent where items of one are
not. Its mean Δacc gets the betting confidence sequence of :mod:`abtui.stats.betting`, valid
at every look with no asymptotics (a bucket that never flips has an interval that closes
around 0, never ``[0, 0]``).

The gate looks at the buckets, not only at their average: the average of six lengths dilutes a
drop at one of them (a candidate that loses a third of its answers at 32k and none below is
−5.6 pp overall), and a user serving 32k contexts needs that bucket's own answer.

- **fail** (NO-GO): some bucket's upper bound is below ``−margin``. A union over the ``K``
  buckets: each upper bound at ``α/(2K)`` (Bonferroni; Holm decides the same, as its first step
  is Bonferroni's and one rejection fails the suite).
- **pass**: every bucket's lower bound is at least ``−margin`` (the worst bucket shown within
  the margin), which also shows the average within it. An intersection–union test: each lower
  bound at ``α/2``, no correction.
- otherwise **undecided**, with the clusters each open bucket would need at its current effect
  (and, as in the fixed gate, a baseline that scores no more than the margin cannot pass).

So the gate is wrong with probability at most ``α/2`` each way, at every look and under any
stopping rule, for items drawn independently per bucket (the built-in suites' haystacks have
their own seeds; a user file's items in the file's order must be exchangeable for it).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np

from abtui.quality.gates import FAIL, PASS, UNDECIDED, GateState, margin_of, pp
from abtui.quality.paired import bucket_order
from abtui.stats import sequential as sq
from abtui.stats.betting import bounded_mean_cs

ALPHA = 0.05  # as the fixed gate's 95 % score interval
MIN_CLUSTERS = 10  # no bucket passes on fewer (the fixed gate's 30 items, in haystacks of 3)
METHOD = (
    "betting confidence sequence per length bucket over clusters (Waudby-Smith & Ramdas "
    "2023); fail: any bucket's upper bound below -margin (Bonferroni over the buckets); pass: "
    "every bucket's lower bound at least -margin"
)


class ClusterUnit(NamedTuple):
    """One cluster of paired items: the gate's unit."""

    delta: float  # mean of correct_B − correct_A over its items, in [−1, 1]
    items: int
    right_a: int
    right_b: int


@dataclass(frozen=True, slots=True)
class BucketBound:
    """One length bucket's anytime-valid interval of Δacc and its state; ``more_clusters``: the
    clusters an open bucket would need at its current effect (None: decided, or none would)."""

    bucket: str
    clusters: int
    items: int
    acc_a: float
    acc_b: float
    delta: float
    lo: float
    hi: float
    state: GateState
    more_clusters: int | None

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["state"] = str(self.state)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> BucketBound:
        """A stored bucket (a JSON ``null`` in a float field as NaN)."""
        kw = {f.name: d.get(f.name) for f in fields(cls)}
        for k in ("acc_a", "acc_b", "delta", "lo", "hi"):
            kw[k] = math.nan if kw[k] is None else kw[k]
        kw["state"] = GateState(d["state"])
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class SuiteBound:
    """One suite of the sequential gate: its margin, state and buckets."""

    suite: str
    margin: float
    state: GateState
    buckets: tuple[BucketBound, ...]

    def to_dict(self) -> dict:
        return {
            "suite": self.suite,
            "margin": self.margin,
            "state": str(self.state),
            "buckets": [b.to_dict() for b in self.buckets],
        }

    @classmethod
    def from_dict(cls, d: dict) -> SuiteBound:
        return cls(
            d["suite"],
            d["margin"],
            GateState(d["state"]),
            tuple(BucketBound.from_dict(b) for b in d["buckets"]),
        )


@dataclass(frozen=True, slots=True)
class SequentialGate:
    """The pair's sequential quality gate (:func:`sequential_gate`). ``decided``: a suite
    failed (the pair is NO-GO whatever the rest) or every suite passed."""

    alpha: float
    suites: tuple[SuiteBound, ...]
    no_go: tuple[str, ...]
    undecided: tuple[str, ...]
    decided: bool
    method: str = METHOD

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "alpha": self.alpha,
            "suites": [s.to_dict() for s in self.suites],
            "no_go": list(self.no_go),
            "undecided": list(self.undecided),
            "decided": self.decided,
        }

    @classmethod
    def from_dict(cls, d: dict) -> SequentialGate:
        return cls(
            d["alpha"],
            tuple(SuiteBound.from_dict(s) for s in d.get("suites") or []),
            tuple(d.get("no_go") or []),
            tuple(d.get("undecided") or []),
            bool(d.get("decided")),
            d.get("method", METHOD),
        )


def _detail(r: dict) -> dict:
    """A stored quality row's ``detail`` (a dict, or its JSON text)."""
    d = r["detail"]
    return d if isinstance(d, dict) else json.loads(d or "{}")


def cluster_series(rows: list[dict], a: int, b: int) -> dict[str, dict[str, list[ClusterUnit]]]:
    """``{suite: {bucket: [ClusterUnit]}}`` over the items both arms answered, clusters in the
    order their first item was sent."""
    by: dict[tuple[int, int], tuple[bool, dict]] = {}
    for r in rows:
        if r["arm"] in (a, b) and r["correct"] is not None:
            by[(r["arm"], r["item"])] = (bool(r["correct"]), _detail(r))
    groups: dict = defaultdict(lambda: defaultdict(dict))
    for k in sorted({k for (_, k) in by}):
        if (a, k) not in by or (b, k) not in by:
            continue
        ra, d = by[(a, k)]
        rb, _ = by[(b, k)]
        suite, bucket = d.get("suite") or "?", d.get("bucket") or "all"
        cl = groups[suite][bucket].setdefault(d.get("cluster") or str(k), [0, 0, 0])
        cl[0] += 1
        cl[1] += ra
        cl[2] += rb
    return {
        s: {
            bk: [ClusterUnit((nb - na) / n, n, na, nb) for n, na, nb in cls.values()]
            for bk, cls in sorted(bks.items(), key=lambda kv: bucket_order(kv[0]))
        }
        for s, bks in groups.items()
    }


def _bucket(
    bucket: str, units: list[ClusterUnit], margin: float, a_lo: float, a_hi: float
) -> BucketBound:
    x = np.array([u.delta for u in units], dtype=float)
    items = sum(u.items for u in units)
    right_a, right_b = sum(u.right_a for u in units), sum(u.right_b for u in units)
    lo, hi = bounded_mean_cs(x, a_lo, a_hi)
    delta = float(x.mean()) if len(x) else math.nan
    acc_a = right_a / items if items else math.nan
    state = UNDECIDED
    if hi < -margin:
        state = FAIL
    elif lo >= -margin and len(x) >= MIN_CLUSTERS and acc_a > margin:
        state = PASS
    more = None
    if state == UNDECIDED and len(x):
        if delta > -margin:  # heading for pass: the lower bound must rise to −margin
            more = sq.units_to_clear(len(x), delta - lo, delta + margin, a_lo)
        elif delta < -margin:
            more = sq.units_to_clear(len(x), hi - delta, -margin - delta, a_hi)
        more = None if more is None else max(more, MIN_CLUSTERS) - len(x)
    return BucketBound(
        bucket,
        len(x),
        items,
        acc_a,
        right_b / items if items else math.nan,
        delta,
        lo,
        hi,
        state,
        more,
    )


def _head(suite: str, b: BucketBound) -> str:
    where = "" if b.bucket == "all" else f" at {b.bucket}"
    return (
        f"quality: {suite}{where} accuracy {b.acc_a:.1%} → {b.acc_b:.1%}, Δacc "
        f"{pp(b.delta)} [{pp(b.lo)}, {pp(b.hi)}] anytime-valid ({b.items} items, "
        f"{b.clusters} clusters)"
    )


def sequential_gate(
    rows: list[dict], a: int, b: int, qspec: dict | None, alpha=ALPHA
) -> SequentialGate:
    """The pair's sequential quality gate (the module's docstring)."""
    qspec = qspec or {}
    suites, no_go, undecided = [], [], []
    for suite, bks in sorted(cluster_series(rows, a, b).items()):
        m = margin_of(qspec, suite)
        k = len(bks)
        rows_b = tuple(_bucket(bk, u, m, alpha / 2, alpha / (2 * k)) for bk, u in bks.items())
        failed = [x for x in rows_b if x.state == FAIL]
        state = FAIL if failed else PASS if all(x.state == PASS for x in rows_b) else UNDECIDED
        suites.append(SuiteBound(suite, m, state, rows_b))
        if failed:
            worst = min(failed, key=lambda x: x.hi)
            no_go.append(f"{_head(suite, worst)}: dropped beyond the −{m * 100:g} pp margin")
        elif state == UNDECIDED:
            open_b = [x for x in rows_b if x.state != PASS]
            worst = min(open_b, key=lambda x: x.lo)
            need = [x.more_clusters for x in open_b]
            more = (
                f"about {max(need):,} more clusters per open bucket would decide"
                if need and all(n is not None for n in need)
                else "more items are not expected to decide at these effects"
            )
            blind = worst.acc_a <= m
            why = (
                f"the baseline itself scores {worst.acc_a:.1%} there: no drop of the margin "
                "could show"
                if blind
                else f"{len(open_b)} of {k} bucket(s) not shown within −{m * 100:g} pp"
            )
            undecided.append(f"{_head(suite, worst)}: undecided ({why}); {more}")
    decided = bool(suites) and (
        any(s.state == FAIL for s in suites) or all(s.state == PASS for s in suites)
    )
    return SequentialGate(alpha, tuple(suites), tuple(no_go), tuple(undecided), decided)


@dataclass(frozen=True, slots=True)
class Look:
    """One look of a run's sequential quality gate: after ``round`` rounds, ``items`` per arm."""

    round: int
    items: int
    decided: bool

    def to_dict(self) -> dict:
        return {"round": self.round, "items": self.items, "decided": self.decided}


@dataclass(frozen=True, slots=True)
class SequentialQuality:
    """The quality items of a run ``--until-decided`` (:func:`abtui.quality.seqrun.run_until_decided`):
    the last look's gate (None: no round was sent), the looks and why the rounds stopped.
    Stored as ``meta.sequential.quality`` (:meth:`to_dict`: the gate's keys and the run's)."""

    gate: SequentialGate | None
    looks: tuple[Look, ...]
    items_per_arm: int
    stop_reason: str
    seconds: float
    budget_s: float

    @property
    def suites(self) -> tuple[SuiteBound, ...]:
        return self.gate.suites if self.gate else ()

    @property
    def no_go(self) -> tuple[str, ...]:
        return self.gate.no_go if self.gate else ()

    @property
    def undecided(self) -> tuple[str, ...]:
        return self.gate.undecided if self.gate else ()

    @property
    def rounds(self) -> int:
        return len(self.looks)

    def to_dict(self) -> dict:
        gate = (
            self.gate.to_dict()
            if self.gate
            else {"suites": [], "no_go": [], "undecided": [], "decided": False}
        )
        return gate | {
            "looks": [x.to_dict() for x in self.looks],
            "rounds": self.rounds,
            "items_per_arm": self.items_per_arm,
            "stop_reason": self.stop_reason,
            "seconds": self.seconds,
            "budget_s": self.budget_s,
        }

    @classmethod
    def from_dict(cls, d: dict) -> SequentialQuality:
        """A stored document (one without ``alpha`` sent no round: no gate)."""
        return cls(
            SequentialGate.from_dict(d) if "alpha" in d else None,
            tuple(Look(x["round"], x["items"], x["decided"]) for x in d.get("looks") or []),
            d.get("items_per_arm") or 0,
            str(d.get("stop_reason")),
            d.get("seconds") or 0.0,
            d.get("budget_s") or 0.0,
        )
