"""The verdict's policy as the verdict code reads it: the spec's ``[policy]`` over its defaults,
resolved and checked once (:func:`resolve_policy`), then a frozen :class:`Policy`. Its own module
so that every verdict module can take one without importing :mod:`abtui.verdict.policy`, which
imports them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

from abtui import limits
from abtui.errors import SpecError
from abtui.spec import PolicySpec

if TYPE_CHECKING:
    from abtui.stats.noise_floor import NoiseFloor


@dataclass(frozen=True, slots=True)
class Policy:
    """The verdict's policy, resolved (:func:`resolve_policy`): the spec's ``[policy]``
    (:class:`abtui.spec.PolicySpec`) over its defaults, its numbers checked. The JSON documents
    hold :meth:`to_dict`."""

    primary: str
    guardrails: tuple[str, ...]
    alpha: float
    delta: float
    delta_tail: float
    resamples: int
    seed: int
    noise_floor: str | None = None  # the A/A session that raises δ, as named
    noise_floor_values: dict[str, float] | None = None  # its floor per row, when one raised δ
    noise_floor_detail: NoiseFloor | None = None  # how that floor was measured (reports)

    def to_dict(self) -> dict:
        """The JSON form: the spec's fields (guardrails a list), then the floor's values and
        detail when there are any."""
        d = {f: getattr(self, f) for f in _SPEC_FIELDS}
        d["guardrails"] = list(self.guardrails)
        if self.noise_floor_values is not None:
            d["noise_floor_values"] = self.noise_floor_values
        if self.noise_floor_detail is not None:
            d["noise_floor_detail"] = self.noise_floor_detail.to_dict()
        return d


_SPEC_FIELDS = tuple(f.name for f in fields(PolicySpec))


def resolve_policy(policy: dict | None) -> Policy:
    """The default policy with ``policy``'s keys laid over it; its numbers inside the limit
    table (a session file's stored policy is checked as a spec's is: a crafted one cannot ask
    for 10¹¹ resamples)."""
    out = asdict(PolicySpec())  # the spec's defaults: one source
    out.update({k: v for k, v in (policy or {}).items() if k in out})
    out["guardrails"] = tuple(out["guardrails"])
    for key in ("alpha", "delta", "delta_tail", "resamples", "seed"):
        try:
            out[key] = limits.check(f"policy.{key}", out[key])
        except limits.OutOfRange as e:
            raise SpecError(f"the verdict's policy: {e}") from None
    return Policy(**out)
