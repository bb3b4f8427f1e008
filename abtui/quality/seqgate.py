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

import numpy as np

from abtui.quality.gates import FAIL, PASS, UNDECIDED, margin_of, pp
from abtui.quality.paired import bucket_order
from abtui.stats import sequential as sq
from abtui.stats.betting import bounded_mean_cs

ALPHA = 0.05  # as the fixed gate's 95 % score interval
MIN_CLUSTERS = 10  # no bucket passes on fewer (the fixed gate's 30 items, in haystacks of 3)


def _detail(r: dict) -> dict:
    d = r["detail"]
    return d if isinstance(d, dict) else json.loads(d or "{}")


def cluster_series(rows: list[dict], a: int, b: int) -> dict:
    """``{suite: {bucket: [(cluster mean of correct_B − correct_A, items, A right, B right)]}}``
    over the items both arms answered, clusters in the order their first item was sent."""
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
            bk: [((nb - na) / n, n, na, nb) for n, na, nb in cls.values()]
            for bk, cls in sorted(bks.items(), key=lambda kv: bucket_order(kv[0]))
        }
        for s, bks in groups.items()
    }


def _bucket(bucket: str, units, margin: float, a_lo: float, a_hi: float) -> dict:
    x = np.array([u[0] for u in units], dtype=float)
    items = sum(u[1] for u in units)
    right_a, right_b = sum(u[2] for u in units), sum(u[3] for u in units)
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
    return {
        "bucket": bucket,
        "clusters": len(x),
        "items": items,
        "acc_a": acc_a,
        "acc_b": right_b / items if items else math.nan,
        "delta": delta,
        "lo": lo,
        "hi": hi,
        "state": str(state),
        "more_clusters": more,
    }


def _head(suite: str, b: dict) -> str:
    where = "" if b["bucket"] == "all" else f" at {b['bucket']}"
    return (
        f"quality: {suite}{where} accuracy {b['acc_a']:.1%} → {b['acc_b']:.1%}, Δacc "
        f"{pp(b['delta'])} [{pp(b['lo'])}, {pp(b['hi'])}] anytime-valid ({b['items']} items, "
        f"{b['clusters']} clusters)"
    )


def sequential_gate(rows: list[dict], a: int, b: int, qspec: dict | None, alpha=ALPHA) -> dict:
    """The pair's sequential quality gate (the module's docstring): ``{"suites": [{suite,
    margin, state, buckets}], "no_go", "undecided", "decided"}``. ``decided``: a suite failed
    (the pair is NO-GO whatever the rest) or every suite passed."""
    qspec = qspec or {}
    suites, no_go, undecided = [], [], []
    for suite, bks in sorted(cluster_series(rows, a, b).items()):
        m = margin_of(qspec, suite)
        k = len(bks)
        rows_b = [_bucket(bk, u, m, alpha / 2, alpha / (2 * k)) for bk, u in bks.items()]
        failed = [x for x in rows_b if x["state"] == FAIL]
        state = FAIL if failed else PASS if all(x["state"] == PASS for x in rows_b) else UNDECIDED
        suites.append({"suite": suite, "margin": m, "state": str(state), "buckets": rows_b})
        if failed:
            worst = min(failed, key=lambda x: x["hi"])
            no_go.append(f"{_head(suite, worst)}: dropped beyond the −{m * 100:g} pp margin")
        elif state == UNDECIDED:
            open_b = [x for x in rows_b if x["state"] != PASS]
            worst = min(open_b, key=lambda x: x["lo"])
            need = [x["more_clusters"] for x in open_b]
            more = (
                f"about {max(need):,} more clusters per open bucket would decide"
                if need and all(n is not None for n in need)
                else "more items are not expected to decide at these effects"
            )
            blind = worst["acc_a"] <= m
            why = (
                f"the baseline itself scores {worst['acc_a']:.1%} there: no drop of the margin "
                "could show"
                if blind
                else f"{len(open_b)} of {k} bucket(s) not shown within −{m * 100:g} pp"
            )
            undecided.append(f"{_head(suite, worst)}: undecided ({why}); {more}")
    decided = bool(suites) and (
        any(s["state"] == FAIL for s in suites) or all(s["state"] == PASS for s in suites)
    )
    return {
        "method": "betting confidence sequence per length bucket over clusters (Waudby-Smith "
        "& Ramdas 2023); fail: any bucket's upper bound below -margin (Bonferroni over the "
        "buckets); pass: every bucket's lower bound at least -margin",
        "alpha": alpha,
        "suites": suites,
        "no_go": no_go,
        "undecided": undecided,
        "decided": decided,
    }
