"""Scorers: is an output right, given the item's references? Deterministic, no judge model.

- ``exact``: the output, stripped of surrounding whitespace and one trailing period, equals a
  reference (case-sensitive: following a format is part of the task).
- ``contains``: a reference occurs in the output (substring exact match, docs/methods.md §4).
- ``regex``: a reference, as a Python regular expression, matches somewhere in the output.
- ``numeric``: the first number in the output is within ``tolerance`` of a reference.
- ``choice``: the first standalone letter A–E in the output (``B``, ``(B)``, ``B.``, ``Answer: B``)
  equals a reference letter (case-insensitive).
"""

from __future__ import annotations

import math
import re

from abtui.quality.items import QualityItem

_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_CHOICE = re.compile(r"(?<![A-Za-z])([A-Ea-e])(?![A-Za-z])")


def first_number(text: str) -> float | None:
    m = _NUMBER.search(text)
    if m is None:
        return None
    try:
        return float(m.group(0).replace(",", ""))
    except ValueError:
        return None


def _exact(output: str, ref: str) -> bool:
    out = output.strip()
    if out.endswith(".") and not ref.endswith("."):
        out = out[:-1].rstrip()
    return out == ref.strip()


def _numeric(output: str, ref: str, tol: float) -> bool:
    x, r = first_number(output), first_number(ref)
    return x is not None and r is not None and math.isfinite(x) and abs(x - r) <= tol


def _choice(output: str, ref: str) -> bool:
    m = _CHOICE.search(output.strip())
    return m is not None and m.group(1).upper() == ref.strip().upper()


def is_right(
    scorer: str, output: str, references: tuple[str, ...] | list[str], tol: float = 0.0
) -> bool:
    """Whether ``output`` is right under ``scorer`` for any of ``references``."""
    output = output or ""
    if scorer == "exact":
        return any(_exact(output, r) for r in references)
    if scorer == "contains":
        return any(r and r in output for r in references)
    if scorer == "regex":
        return any(re.search(r, output) is not None for r in references)
    if scorer == "numeric":
        return any(_numeric(output, r, tol) for r in references)
    if scorer == "choice":
        return any(_choice(output, r) for r in references)
    raise ValueError(f"unknown scorer {scorer!r}")


def score(item: QualityItem, output: str) -> bool:
    return is_right(item.scorer, output, item.references, item.tolerance)
