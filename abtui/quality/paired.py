"""Paired quality statistics between two arms (docs/methods.md §4).

Items are paired across arms by their index; an item whose request failed in either arm is
left out (and counted). For each suite, and each length bucket within it:

- accuracy of A and of B; the 2×2 table's discordant counts ``b`` (A right, B wrong) and ``c``
  (A wrong, B right);
- ``Δacc = (c − b) / n`` with a 95% **score interval** for paired proportions (Tango 1998,
  :func:`abtui.stats.classical.paired_difference_ci`). It has width when no answer flipped (a
  bootstrap gives [0, 0] there, and a gate on it passes any suite of any size) and holds its
  coverage with few discordant pairs. Items that share a context (a *cluster*: the haystacks of
  one document) are not independent: the counts are divided by the design effect ``deff`` (the
  Rao–Scott adjustment), the ratio of the clustered variance of ``Δacc`` (the linearised
  variance over cluster totals) to its variance with independent items, floored at 1;
- McNemar's exact p (:func:`abtui.stats.classical.mcnemar_exact`);
- the flip rate ``(b + c) / n``: accuracy can stay flat while answers change.

Holm's adjustment runs over the suite rows (one family), and separately over the bucket rows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from abtui.stats.classical import mcnemar_exact, paired_difference_ci
from abtui.stats.multiple import holm

RESAMPLES = 10_000
LEVEL = 0.95


@dataclass(frozen=True, slots=True)
class QualityRow:
    """The paired statistics of one suite (``bucket`` "all") or one of its length buckets."""

    suite: str
    bucket: str  # "all" for the suite row
    n: int  # paired items
    clusters: int
    acc_a: float
    acc_b: float
    b: int  # A right, B wrong
    c: int  # A wrong, B right
    delta: float  # Δacc = acc_b − acc_a
    lo: float
    hi: float
    p: float  # McNemar exact
    p_holm: float = math.nan
    flip_rate: float = math.nan
    deff: float = 1.0  # design effect of the clusters (counts divided by it for the CI)

    def to_dict(self) -> dict:
        """The verdict's JSON row (a non-finite float as ``null``)."""
        return {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in asdict(self).items()
        }

    @classmethod
    def from_dict(cls, d: dict) -> QualityRow:
        """A row read back from :meth:`to_dict` (``null`` in a float field as NaN)."""
        return cls(
            **{
                f.name: (math.nan if d[f.name] is None and f.type == "float" else d[f.name])
                for f in fields(cls)
                if f.name in d
            }
        )


def cluster_bootstrap_ci(
    diff: np.ndarray,
    cluster: np.ndarray,
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
    level: float = LEVEL,
) -> tuple[float, float]:
    """Percentile CI of ``mean(diff)`` resampling whole clusters (``cluster``: ids per item)."""
    if len(diff) == 0:
        return math.nan, math.nan
    ids, inv = np.unique(cluster, return_inverse=True)
    k = len(ids)
    sums = np.bincount(inv, weights=diff, minlength=k)
    counts = np.bincount(inv, minlength=k).astype(np.float64)
    if not np.any(sums):
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    w = rng.multinomial(k, np.full(k, 1.0 / k), size=resamples).astype(np.float64)
    reps = (w @ sums) / (w @ counts)
    a = (1 - level) / 2
    return float(np.quantile(reps, a)), float(np.quantile(reps, 1 - a))


def design_effect(diff: np.ndarray, cluster: np.ndarray) -> float:
    """Rao–Scott design effect of ``mean(diff)`` for items grouped in clusters (≥ 1; 1 when
    every item is its own cluster, or nothing varies)."""
    n = len(diff)
    if n < 2:
        return 1.0
    _, inv = np.unique(cluster, return_inverse=True)
    k = int(inv.max()) + 1
    if k < 2 or k == n:
        return 1.0
    est = float(diff.mean())
    sums = np.bincount(inv, weights=diff, minlength=k)
    sizes = np.bincount(inv, minlength=k).astype(np.float64)
    var_cluster = k / (k - 1) * float(((sums - est * sizes) ** 2).sum()) / n**2
    var_srs = float(((diff - est) ** 2).sum()) / (n * (n - 1))
    if not var_srs > 0:
        return 1.0
    return max(1.0, var_cluster / var_srs)


def _row(suite, bucket, ra, rb, cl) -> QualityRow:
    ra, rb = np.asarray(ra, dtype=bool), np.asarray(rb, dtype=bool)
    n = len(ra)
    b = int(np.sum(ra & ~rb))
    c = int(np.sum(~ra & rb))
    diff = rb.astype(np.float64) - ra.astype(np.float64)
    deff = design_effect(diff, np.asarray(cl))
    lo, hi = paired_difference_ci(b / deff, c / deff, n / deff, LEVEL)
    return QualityRow(
        suite,
        bucket,
        n,
        len(set(cl)),
        float(ra.mean()) if n else math.nan,
        float(rb.mean()) if n else math.nan,
        b,
        c,
        (c - b) / n if n else math.nan,
        lo,
        hi,
        mcnemar_exact(b, c),
        flip_rate=(b + c) / n if n else math.nan,
        deff=deff,
    )


@dataclass(frozen=True, slots=True)
class PairedQuality:
    """The paired statistics of two arms' quality items (:func:`paired`)."""

    suites: tuple[QualityRow, ...]  # one per suite (bucket "all"), Holm-corrected among them
    buckets: tuple[QualityRow, ...]  # per length bucket, for suites with more than one
    unpaired: int  # items left out: scored on one arm only


def bucket_order(bucket: str) -> tuple:
    """Sort key of a length bucket: ``1k`` < ``2k`` < ``32k``, then named ones."""
    digits = bucket.rstrip("k")
    return (0, int(digits)) if digits.isdigit() else (1, bucket)


def paired(rows: list[dict], a: int, b: int) -> PairedQuality:
    """The paired statistics of arms ``a`` and ``b`` from stored quality rows (``detail`` a dict
    or its JSON)."""
    import json

    by: dict[tuple[int, int], dict] = {}
    for r in rows:
        if r["arm"] in (a, b):
            d = r["detail"] if isinstance(r["detail"], dict) else json.loads(r["detail"] or "{}")
            by[(r["arm"], r["item"])] = {"correct": r["correct"], **d}
    items = sorted({k for (_, k) in by})
    groups: dict[tuple[str, str], list] = defaultdict(list)
    unpaired = 0
    for k in items:
        xa, xb = by.get((a, k)), by.get((b, k))
        if xa is None or xb is None or xa["correct"] is None or xb["correct"] is None:
            unpaired += 1
            continue
        rec = (bool(xa["correct"]), bool(xb["correct"]), xa.get("cluster") or str(k))
        groups[(xa["suite"], "all")].append(rec)
        if (xa.get("bucket") or "all") != "all":
            groups[(xa["suite"], xa["bucket"])].append(rec)
    suites, buckets = [], []
    for (suite, bucket), recs in sorted(
        groups.items(), key=lambda kv: (kv[0][0], bucket_order(kv[0][1]))
    ):
        ra, rb, cl = zip(*recs, strict=True)
        q = _row(suite, bucket, ra, rb, cl)
        if bucket == "all":
            suites.append(q)
        elif len({x[1] for x in groups if x[0] == suite}) > 2:  # a suite with one bucket: no split
            buckets.append(q)
    suites, buckets = (
        tuple(
            replace(q, p_holm=float(p)) for q, p in zip(fam, holm([q.p for q in fam]), strict=True)
        )
        for fam in (suites, buckets)
    )
    return PairedQuality(suites, buckets, unpaired)
