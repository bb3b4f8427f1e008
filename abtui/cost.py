"""Cost per million tokens and per good request (docs/methods.md §6).

An arm costs ``usd_per_hour = gpu_price × gpus`` (``--gpu-price USD_PER_GPU_HOUR`` and ``--gpus N``
for every arm, ``[cost]`` in the spec, or ``gpu_price`` / ``gpus`` on one ``[[arms]]`` table).
From the arm's measured rates over the run (first dispatch → last completion):

- ``$/Mtok output = usd_per_hour × 10⁶ / (3600 × output tokens/s)``
- ``$/Mtok total  = … / (input + output tokens/s)``
- ``$/Mtok good   = … / (output tokens/s of requests that met every SLO)`` — the goodput price;
  equal to the output price when no SLO is set
- ``$ per 1k good requests = usd_per_hour × 1000 / (3600 × good requests/s)``

A rate of zero gives an infinite price (reported as ``None`` in JSON). Effects with CIs on these
prices come from the throughput/goodput bootstrap (:mod:`abtui.stats.effects`): a price is
``usd_per_hour`` over a rate, so ``r_cost = (usd_B / usd_A) / (1 + r_rate) − 1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from abtui.metrics.summary import ArmSummary


@dataclass(frozen=True, slots=True)
class ArmCost:
    """One arm's prices. A price whose rate is zero is infinite and one whose rate was not
    measured is NaN: :meth:`shown` and the JSON (:meth:`to_dict`) give ``None`` for both."""

    gpu_price: float  # USD per GPU-hour
    gpus: int
    usd_per_hour: float
    usd_per_mtok_output: float
    usd_per_mtok_total: float
    usd_per_mtok_good: float
    usd_per_1k_good_requests: float

    def shown(self, name: str) -> float | None:
        """The field ``name`` when it is a finite price, else ``None`` (what reports print)."""
        v = getattr(self, name)
        return v if math.isfinite(v) else None

    def to_dict(self) -> dict:
        return {f.name: self.shown(f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict) -> ArmCost:
        """A stored :meth:`to_dict` (``None`` read back as NaN)."""
        nan = {f.name: math.nan for f in fields(cls)}
        return cls(**{**nan, **{k: v for k, v in d.items() if v is not None}})


def _per(usd_per_hour: float, per_s: float, scale: float) -> float:
    if not math.isfinite(per_s):
        return math.nan
    if per_s <= 0:
        return math.inf
    return usd_per_hour * scale / (3600.0 * per_s)


def arm_cost(s: ArmSummary, gpu_price: float, gpus: int = 1) -> ArmCost:
    """Prices of one arm from its summary (see the module docstring)."""
    usd = float(gpu_price) * int(gpus)
    good_tokens = s.goodput_output_tokens_per_s if s.slo else s.output_tokens_per_s
    good_requests = s.goodput_requests_per_s if s.slo else s.requests_per_s
    return ArmCost(
        gpu_price=float(gpu_price),
        gpus=int(gpus),
        usd_per_hour=usd,
        usd_per_mtok_output=_per(usd, s.output_tokens_per_s, 1e6),
        usd_per_mtok_total=_per(usd, s.total_tokens_per_s, 1e6),
        usd_per_mtok_good=_per(usd, good_tokens, 1e6),
        usd_per_1k_good_requests=_per(usd, good_requests, 1e3),
    )


def arm_prices(spec: dict, n_arms: int) -> list[tuple[float, int]] | None:
    """``(gpu_price, gpus)`` per arm from a resolved spec dict (``[cost]`` then per-arm
    overrides); ``None`` when no arm has a price."""
    cost = spec.get("cost") or {}
    arms = spec.get("arms") or []
    out = []
    for i in range(n_arms):
        arm = arms[i] if i < len(arms) else {}
        price = arm.get("gpu_price") if arm.get("gpu_price") is not None else cost.get("gpu_price")
        gpus = arm.get("gpus") if arm.get("gpus") is not None else cost.get("gpus", 1)
        out.append((price, int(gpus or 1)))
    if all(p is None for p, _ in out):
        return None
    if any(p is None for p, _ in out):
        missing = [
            arms[i].get("name", str(i)) if i < len(arms) else str(i)
            for i, (p, _) in enumerate(out)
            if p is None
        ]
        from abtui.errors import SpecError

        raise SpecError(
            f"a GPU price is set for some arms but not for {', '.join(missing)}",
            "set [cost] gpu_price (or --gpu-price) for every arm, or gpu_price on each [[arms]]",
        )
    return [(float(p), g) for p, g in out]
