"""The verdict: what a stored session's measurements mean for shipping.

It sits above the statistics, quality gates, telemetry and the runner and composes them:
:mod:`abtui.verdict.policy` applies the policy (primary, guardrails, δ, α; resolved by
:mod:`abtui.verdict.resolved`) to each pair's
comparison and says GO / NO-GO / INCONCLUSIVE with reasons; :mod:`abtui.verdict.saved`
computes and stores that for a session file (noise floor, quality, the generator's machine,
Ray clocks); :mod:`abtui.verdict.ablation` summarises a factorial ablation's steps.
"""
