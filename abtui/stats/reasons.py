"""Why a row was not called, or why a pair is GO, NO-GO or INCONCLUSIVE: a sentence for people
and a code for programs and tests.

A :class:`Reason` is the sentence itself (a ``str``: reports print it, the verdict's JSON stores
it, unchanged) and carries its :class:`Code`, so that a test or a script asks what was said by
its code rather than by a phrase of the wording. The JSON stores each code beside its sentence
(``reason_codes``, ``reason_code``, ``note_code``: docs/verdict.md lists them), and
:func:`read_reason` makes the pair a :class:`Reason` again.
"""

from __future__ import annotations

from enum import StrEnum


class Code(StrEnum):
    """What a reason says."""

    # one row (abtui.stats.decide): why it was not called, or not shown non-inferior
    TOO_FEW_PAIRED = "too_few_paired"  # fewer paired units than a call needs
    TOO_FEW_TAIL = "too_few_tail"  # a percentile below its small-sample minimum
    TOO_DEPENDENT = "too_dependent"  # the paired series is strongly autocorrelated
    NO_ESTIMATE = "no_estimate"  # missing data in an arm
    AT_THRESHOLD = "at_threshold"  # the effect sits at δ: no sample size decides soon
    UNDERPOWERED = "underpowered"  # more requests would decide
    PAST_DELTA = "past_delta"  # non-inferiority: the estimate itself is at or past δ
    CI_PAST_DELTA = "ci_past_delta"  # non-inferiority: the CI's worse bound reaches past δ
    NOT_COMPARABLE = "not_comparable"  # the arms did not do the same work (verdict.comparable)
    SET_BY_LOAD = "set_by_load"  # a rate the open-loop arrivals set (verdict.comparable)
    # one pair (abtui.verdict.policy)
    PRIMARY_IMPROVED = "primary_improved"
    PRIMARY_IMPROVED_BUT = "primary_improved_but"  # ... but something forbids GO
    PRIMARY_REGRESSED = "primary_regressed"
    PRIMARY_EQUIVALENT = "primary_equivalent"
    PRIMARY_UNDECIDED = "primary_undecided"
    PRIMARY_MISSING = "primary_missing"
    GUARDRAILS_SHOWN = "guardrails_shown"  # every guardrail shown non-inferior
    GUARDRAIL_REGRESSED = "guardrail_regressed"
    GUARDRAIL_UNDECIDED = "guardrail_undecided"  # not shown non-inferior
    GUARDRAIL_MISSING = "guardrail_missing"  # not measured
    ERRORS_ROSE = "errors_rose"
    INCOMPLETE = "incomplete"  # the session did not carry out its plan
    GENERATOR_LOST = "generator_lost"  # a Ray node died under a generator
    LOAD_NOT_KEPT = "load_not_kept"  # an arm's generator fell behind its schedule
    LAG_EXPLAINS = "lag_explains"  # the baseline's stalls could explain the result
    LAG_UNBOUNDED = "lag_unbounded"  # the baseline lagged and a row cannot be bounded for it
    MACHINE_BUSY = "machine_busy"  # what the machine was doing meanwhile
    OUTPUT_LENGTHS_DIFFER = "output_lengths_differ"  # verdict.comparable
    USAGE_OVERCOUNTS = "usage_overcounts"  # verdict.comparable
    QUALITY_NO_GO = "quality_no_go"  # a quality gate failed
    QUALITY_UNDECIDED = "quality_undecided"  # quality not shown non-inferior
    COMBINATION_WORSE = "combination_worse"  # a factorial's combination (verdict.ablation)
    INTERACTION = "interaction"  # a factorial's quality interaction, said or NO-GO
    AA_CHANGED = "aa_changed"  # an A/A session: the baseline differs from itself
    AA_UNSTABLE = "aa_unstable"
    AA_CALIBRATED = "aa_calibrated"
    # the load generators' health (abtui.runner.health); LOAD_NOT_KEPT and MACHINE_BUSY too
    LAG_PAST_LIMITS = "lag_past_limits"  # lag past the fixed limits, but the load was kept
    GENERATOR_BUSY = "generator_busy"  # a generator used most of a core
    MAIN_BEHIND = "main_behind"  # the main process read the generators' records late


class Reason(str):
    """A reason in words (the string itself) with its :class:`Code` (``.code``)."""

    code: Code

    def __new__(cls, code: Code, text: str) -> Reason:
        r = super().__new__(cls, text)
        r.code = code
        return r

    def __getnewargs__(self) -> tuple[Code, str]:  # pickles and copies keep the code
        return (self.code, str(self))

    def __repr__(self) -> str:
        return f"Reason({self.code.name}, {str.__repr__(self)})"


def codes(reasons) -> list[Code | None]:
    """The code of each of ``reasons`` (None for a plain string)."""
    return [getattr(r, "code", None) for r in reasons]


def code_of(reason) -> Code | None:
    """The code of ``reason`` (None for a plain string or nothing)."""
    return getattr(reason, "code", None)


def read_reason(text, code) -> Reason | str:
    """A reason read back from JSON: ``text`` with its ``code``; the text alone (a ``str``) when
    the code is missing or one this version does not know."""
    if not isinstance(text, str) or code is None:
        return text if isinstance(text, str) else ""
    try:
        return Reason(Code(code), text)
    except (ValueError, TypeError):  # not a code this version knows
        return text
