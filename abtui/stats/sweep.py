"""A load sweep: per level, goodput and cost; capacity goodput λ*; the cost/latency Pareto front.

When a session has two or more sweep levels (the table's ``level`` column; the session's
``levels`` meta gives each level's offered rate or concurrency), every arm is summarised per
level (:func:`abtui.metrics.summary.summarize` on that level's requests) into a
:class:`LevelPoint`. Then (docs/methods.md §2, §6):

- **capacity goodput λ\\*** of an arm = the largest offered load (req/s; the level's measured
  request rate when the level has no offered rate, e.g. closed loop) whose SLO attainment is
  ≥ :data:`CAPACITY_TARGET`; ``None`` when no level meets it. Without SLOs every ok request is
  good, so attainment is the success rate.
- **Pareto front**: over every (arm, level) point, those not dominated in (P99 E2E, $/Mtok good)
  — both lower is better; a point is dominated when another is no worse in both and better in
  one. Without a GPU price the second axis is goodput (output tok/s, higher is better).
- **headline**: each arm's $/Mtok good at its λ\\* level (when priced).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

from abtui.cost import arm_cost
from abtui.metrics.keys import unique_ints
from abtui.metrics.summary import summarize
from abtui.metrics.table import RequestTable

CAPACITY_TARGET = 0.90
MIN_LEVEL_REQUESTS = 1


@dataclass
class LevelPoint:
    arm: str
    level: int
    offered_rps: float | None  # the level's offered rate (None: closed loop)
    concurrency: int | None
    load_rps: float  # offered rate, else measured requests/s
    sent: int
    attainment: float
    goodput_rps: float
    goodput_tps: float
    p99_e2e_s: float
    p99_ttft_s: float
    usd_per_mtok_good: float | None
    on_front: bool = False

    def shown(self, name: str):
        """The field ``name``, ``None`` for a non-finite float (what reports print)."""
        v = getattr(self, name)
        return None if isinstance(v, float) and not math.isfinite(v) else v

    def to_dict(self) -> dict:
        return {k: self.shown(k) for k in asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> LevelPoint:
        """A stored :meth:`to_dict`: ``None`` in a field that is always a float read back as
        NaN; the optional ones stay ``None``."""
        plain = {f.name for f in fields(cls) if f.type == "float"}
        return cls(**{k: math.nan if v is None and k in plain else v for k, v in d.items()})


@dataclass(frozen=True, slots=True)
class SweepSummary:
    """A sweep's points, each arm's λ* (``None``: no level met the target) and its $/Mtok good
    there, and the two axes of the Pareto front."""

    target: float
    capacity_rps: dict[str, float | None]
    usd_per_mtok_good_at_capacity: dict[str, float | None]
    front_axes: tuple[str, str]  # P99 E2E and the cost ("usd_per_mtok_good") or "goodput_tps"
    points: list[LevelPoint]

    @property
    def priced(self) -> bool:
        return self.front_axes[1] == "usd_per_mtok_good"

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "capacity_rps": dict(self.capacity_rps),
            "usd_per_mtok_good_at_capacity": dict(self.usd_per_mtok_good_at_capacity),
            "front_axes": list(self.front_axes),
            "points": [p.to_dict() for p in self.points],
        }

    @classmethod
    def from_dict(cls, d: dict) -> SweepSummary:
        """A stored :meth:`to_dict`."""
        return cls(
            d["target"],
            dict(d["capacity_rps"]),
            dict(d["usd_per_mtok_good_at_capacity"]),
            tuple(d["front_axes"]),
            [LevelPoint.from_dict(p) for p in d["points"]],
        )


def _levels_of(table: RequestTable) -> np.ndarray:
    col = getattr(table, "level", None)
    return np.zeros(len(table), dtype=np.int64) if col is None else np.asarray(col, np.int64)


def level_points(
    table: RequestTable,
    arms: list[dict],
    slo: dict | None,
    levels_meta: list[dict] | None = None,
    prices: list[tuple[float, int]] | None = None,
) -> list[LevelPoint]:
    """One point per arm × level (empty when the table has fewer than two levels)."""
    lv_col = _levels_of(table)
    levels = [int(v) for v in unique_ints(lv_col)]
    if len(levels) < 2:
        return []
    meta = {int(m.get("level", k)): m for k, m in enumerate(levels_meta or [])}
    points = []
    for lv in levels:
        sub = table.select(lv_col == lv)
        info = meta.get(lv, {})
        for a in arms:
            s = summarize(sub, a["arm"], slo)
            if s.sent < MIN_LEVEL_REQUESTS:
                continue
            offered = info.get("rate")
            usd = None
            if prices:
                usd = arm_cost(s, *prices[a["arm"]]).usd_per_mtok_good
            good_tps = s.goodput_output_tokens_per_s if slo else s.output_tokens_per_s
            good_rps = s.goodput_requests_per_s if slo else s.requests_per_s
            attain = s.slo_attainment if slo else (s.ok / s.sent if s.sent else math.nan)
            points.append(
                LevelPoint(
                    arm=a["name"],
                    level=lv,
                    offered_rps=offered,
                    concurrency=info.get("concurrency"),
                    load_rps=float(offered) if offered else s.requests_per_s,
                    sent=s.sent,
                    attainment=attain,
                    goodput_rps=good_rps,
                    goodput_tps=good_tps,
                    p99_e2e_s=s.e2e.p99,
                    p99_ttft_s=s.ttft.p99,
                    usd_per_mtok_good=usd,
                )
            )
    return points


def capacity(points: list[LevelPoint], target: float = CAPACITY_TARGET) -> float | None:
    """λ*: the largest load whose attainment ≥ ``target`` (None when none does)."""
    ok = [p.load_rps for p in points if math.isfinite(p.attainment) and p.attainment >= target]
    return max(ok) if ok else None


def mark_pareto(points: list[LevelPoint]) -> None:
    """Set ``on_front`` on the points not dominated in (P99 E2E, cost or −goodput)."""
    priced = all(p.usd_per_mtok_good is not None for p in points)

    def axes(p: LevelPoint) -> tuple[float, float]:
        second = p.usd_per_mtok_good if priced else -p.goodput_tps
        return (p.p99_e2e_s, second if second is not None else math.inf)

    vals = [axes(p) for p in points]
    for i, p in enumerate(points):
        xi, yi = vals[i]
        if not (math.isfinite(xi) and math.isfinite(yi)):
            p.on_front = False
            continue
        p.on_front = not any(
            (xj <= xi and yj <= yi and (xj < xi or yj < yi))
            for j, (xj, yj) in enumerate(vals)
            if j != i and math.isfinite(xj) and math.isfinite(yj)
        )


def sweep_summary(
    table: RequestTable,
    arms: list[dict],
    slo: dict | None,
    levels_meta: list[dict] | None = None,
    prices: list[tuple[float, int]] | None = None,
    target: float = CAPACITY_TARGET,
) -> SweepSummary | None:
    """Points, λ* and the $/Mtok good at λ* per arm, and the front; None without a sweep."""
    points = level_points(table, arms, slo, levels_meta, prices)
    if not points:
        return None
    mark_pareto(points)
    cap, headline = {}, {}
    for a in arms:
        mine = [p for p in points if p.arm == a["name"]]
        lam = capacity(mine, target)
        cap[a["name"]] = lam
        at = [p for p in mine if lam is not None and p.load_rps == lam]
        headline[a["name"]] = at[0].usd_per_mtok_good if at else None
    second = "usd_per_mtok_good" if prices else "goodput_tps"
    return SweepSummary(target, cap, headline, ("p99_e2e_s", second), points)
