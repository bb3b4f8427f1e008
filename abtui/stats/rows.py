"""The effect row: one metric, both arms' values, the ratio effect, its CI and decision."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from abtui.jsonable import json_ready
from abtui.stats.decide import INCONCLUSIVE, MIN_EFFECTIVE, Outcome
from abtui.stats.reasons import Reason, code_of


@dataclass
class Effect:
    """One row: metric, statistic, both arms' values, the ratio effect, its CI and decision."""

    key: str
    metric: str
    stat: str
    lower_is_better: bool
    a: float
    b: float
    n_a: int
    n_b: int
    ratio: float  # B / A − 1
    lo: float
    hi: float
    p: float  # bootstrap p-value (two-sided, uncorrected)
    block_len: int  # in units
    n_eff: float = math.nan  # effectively independent paired units (latency, SLO rows; NaN: none)
    min_eff: float = MIN_EFFECTIVE  # the n_eff a call needs (decide.too_dependent)
    paired: int | None = None  # paired units both arms have values in (None: min(n_a, n_b))
    p_adj: float = math.nan
    family: str = "breakdown"  # "primary" (Holm) or "breakdown" (Benjamini–Hochberg)
    delta: float = math.nan
    outcome: Outcome = INCONCLUSIVE
    significant: bool = False
    samples_needed: int | None = None
    note: Reason | str = ""  # why it was not called (a Reason: words and a code)

    def to_dict(self) -> dict:
        """The JSON row: every field, and ``note_code`` (the note's code, or null)."""
        return json_ready(dict(asdict(self), note_code=code_of(self.note)))


def ratio_effect(b: float, a: float) -> float:
    """``b / a − 1``; NaN when either is missing or ``a`` is 0."""
    if not (math.isfinite(a) and math.isfinite(b)) or a == 0:
        return math.nan
    return b / a - 1.0
