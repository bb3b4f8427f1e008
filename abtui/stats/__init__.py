"""Is a difference real? Bootstrap CIs, rank tests, multiple comparisons, decisions, verdict.

docs/methods.md §3 and §7. Pure numpy/scipy; no UI.
"""
