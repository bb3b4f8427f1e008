"""Argument types of the command line: each a function of the option's text that returns the
value or raises ``argparse.ArgumentTypeError`` with a message naming what was expected."""

from __future__ import annotations

import argparse


def int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"expected a number ≥ {low}, got {v}")
        return v

    return parse


positive_int, nonneg_int = int_at_least(1), int_at_least(0)


def positive_number(kind):
    """``kind(text)``, finite and > 0."""

    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not v > 0 or v == float("inf"):
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return v

    return parse


positive_float = positive_number(float)


def nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number ≥ 0, got {text!r}")
    return v


def bounded(field: str):
    """A number inside the limit table's row ``field`` (:mod:`abtui.limits`): the message
    gives the range and why. A whole-number option also takes ``1e6``."""
    from abtui import limits

    limit = limits.LIMITS[field]

    def parse(text: str):
        try:
            v = float(text) if not limit.integer else int(text)
        except ValueError:
            try:
                v = float(text)
            except ValueError:
                what = "a whole number" if limit.integer else "a number"
                raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        try:
            return limits.check(field, v)
        except limits.OutOfRange:
            raise argparse.ArgumentTypeError(
                f"expected {limits.describe(limit)}, got {text!r} ({limit.why})"
            ) from None

    return parse
