"""Metrics derived from raw request facts (docs/methods.md §1–2).

:mod:`abtui.metrics.table` holds requests in columnar form, :mod:`abtui.metrics.request` is the
one place per-request formulas live, and :mod:`abtui.metrics.summary` aggregates an arm of a run
into plain, JSON-ready numbers.
"""
