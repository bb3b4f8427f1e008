"""Scorers: is an output right, given the item's references? Deterministic, no judge model.

- ``exact``: the output, stripped of surrounding whitespace and one trailing period, equals a
  reference (case-sensitive: following a format is part of the task).
- ``contains``: a reference occurs in the output (substring exact match, docs/methods.md §4).
- ``regex``: a reference, as a Python regular expression, matches somewhere in the output.
- ``numeric``: the first number in the output is within ``tolerance`` of a reference.
- ``choice``: the first standalone letter A–E in the output (``B``, ``(B)``, ``B.``, ``Answer: B``)
  equals a reference letter (case-insensitive).
- ``number``: the answer is the first whole number in the output that the question does not
  itself contain (the item's ``echoes``: "23 + 45 = 68" answers 68), and it must equal a
  reference; an output that also names one of the item's ``distractors`` (the other values in
  the context) is wrong, so listing every candidate never passes. Numbers are read as a real
  model writes them: ``48213``, ``**48213**``, ``48,213`` (thousands separators); a number
  glued to letters (``XK7``) or a decimal (``3.5``) is not one.
- ``word``: the reference occurs in the output as a whole word or phrase (not inside a longer
  word), case-sensitive: ``APPLE`` is in "Sure: APPLE." but not in "apple" or "PINEAPPLE".
"""

from __future__ import annotations

import math
import re

from abtui.quality.items import QualityItem

_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_CHOICE = re.compile(r"(?<![A-Za-z])([A-Ea-e])(?![A-Za-z])")
# a whole number: not glued to letters, digits or a decimal point; thousands separated by commas
_WHOLE = re.compile(
    r"(?<![A-Za-z0-9_.,])[-+]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?![A-Za-z0-9_]|[.,][0-9])"
)


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


def whole_numbers(text: str) -> list[int]:
    """The whole numbers in ``text``, in order (``48,213`` is 48213; see ``number``)."""
    return [int(m.group(0).replace(",", "")) for m in _WHOLE.finditer(text)]


def _as_int(ref: str) -> int | None:
    found = whole_numbers(ref.strip())
    return found[0] if len(found) == 1 else None


def answer_number(output: str, echoes: tuple[str, ...] = ()) -> int | None:
    """The number an output answers: its first whole number not among ``echoes``."""
    skip = {n for e in echoes if (n := _as_int(e)) is not None}
    return next((n for n in whole_numbers(output) if n not in skip), None)


def _number(output: str, refs, echoes: tuple[str, ...], distractors: tuple[str, ...]) -> bool:
    said = answer_number(output, echoes)
    if said is None or said not in {_as_int(r) for r in refs}:
        return False
    wrong = {n for d in distractors if (n := _as_int(d)) is not None}
    return not wrong.intersection(whole_numbers(output))


def _word(output: str, ref: str) -> bool:
    ref = ref.strip()
    return (
        bool(ref)
        and re.search(rf"(?<![A-Za-z0-9]){re.escape(ref)}(?![A-Za-z0-9])", output) is not None
    )


def _choice(output: str, ref: str) -> bool:
    m = _CHOICE.search(output.strip())
    return m is not None and m.group(1).upper() == ref.strip().upper()


def is_right(
    scorer: str,
    output: str,
    references: tuple[str, ...] | list[str],
    tol: float = 0.0,
    echoes: tuple[str, ...] = (),
    distractors: tuple[str, ...] = (),
) -> bool:
    """Whether ``output`` is right under ``scorer`` for any of ``references`` (``echoes`` and
    ``distractors``: the ``number`` scorer's, module docstring)."""
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
    if scorer == "number":
        return _number(output, references, tuple(echoes), tuple(distractors))
    if scorer == "word":
        return any(_word(output, r) for r in references)
    raise ValueError(f"unknown scorer {scorer!r}")


def score(item: QualityItem, output: str) -> bool:
    return is_right(
        item.scorer, output, item.references, item.tolerance, item.echoes, item.distractors
    )
