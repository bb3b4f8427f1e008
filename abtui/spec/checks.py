"""Checking a spec once it is read (:func:`validate`): every arm, the load, the workload, the
policy, cost and ablation, each message naming the source and the field."""

from __future__ import annotations

import re

from abtui.errors import SpecError
from abtui.quality.config import validate_quality
from abtui.spec.model import APIS, ARRIVALS, HTTP_CLIENTS, MAX_ARMS, Spec


def validate(spec: Spec, source: str = "spec") -> Spec:
    """Cross-field checks, after flags were applied. Fills defaults that depend on others."""
    if len(spec.arms) < 2:
        raise SpecError(
            f"{source}: needs at least two arms (a baseline and a candidate), got {len(spec.arms)}",
            "give --baseline URL --candidate URL, or [[arms]] tables in the spec",
        )
    if len(spec.arms) > MAX_ARMS:
        raise SpecError(
            f"{source}: {len(spec.arms)} arms; abtui compares at most {MAX_ARMS}",
            "each arm gets its own load-generator process: split the comparison into several runs",
        )
    from abtui.spec.bounds import check_bounds

    check_bounds(spec, source)  # every number in its range before anything uses it
    names = [a.name for a in spec.arms]
    if len(set(names)) != len(names):
        raise SpecError(f"{source}: arm names must be unique, got {names}")
    roles = [a.role for a in spec.arms]
    for a in spec.arms:
        if a.role not in ("baseline", "candidate"):
            raise SpecError(
                f"{source}: arm {a.name!r}: role must be 'baseline' or 'candidate', got {a.role!r}"
            )
    if roles.count("baseline") == 0:
        spec.arms[0].role = "baseline"
    elif roles.count("baseline") > 1:
        raise SpecError(
            f"{source}: exactly one arm can be the baseline, got {roles.count('baseline')}"
        )
    # the baseline first: arm index 0 is the baseline everywhere downstream
    spec.arms.sort(key=lambda a: a.role != "baseline")
    for a in spec.arms:
        a.url = a.url.rstrip("/")
        if not re.match(r"^https?://[^/\s]+", a.url):
            raise SpecError(
                f"{source}: arm {a.name!r}: url {a.url!r} is not an http(s) URL",
                "e.g. http://127.0.0.1:8000/v1",
            )
        if not a.url.endswith("/v1"):
            raise SpecError(
                f"{source}: arm {a.name!r}: url {a.url!r} does not end in /v1",
                f"OpenAI-compatible servers serve under /v1: try {a.url}/v1",
            )
        from abtui.client.tls import check_arm_tls

        check_arm_tls(a, f"{source}: arm {a.name!r}")
        a.api = a.api or spec.request.api
        if a.api not in APIS:
            raise SpecError(
                f"{source}: arm {a.name!r}: api must be one of {', '.join(APIS)}, got {a.api!r}"
            )
    w, ld = spec.workload, spec.load
    from_file = w.file is not None or w.conversations is not None
    if w.requests is None and not from_file and ld.duration_s is None:
        w.requests = 200
    sweep = ld.sweep_rate or ld.sweep_concurrency
    if (
        ld.rate is None
        and ld.concurrency is None
        and not (from_file or sweep or ld.arrival == "replay")
    ):
        raise SpecError(
            f"{source}: set load.rate (open loop, requests/s) or load.concurrency (closed loop)",
            "e.g. --rate 20 or --concurrency 8",
        )
    if ld.arrival not in ARRIVALS:
        raise SpecError(
            f"{source}: load.arrival must be one of {', '.join(ARRIVALS)}, got {ld.arrival!r}"
        )
    from abtui.workload.spec_check import check_workload

    check_workload(spec, source)
    if spec.request.http not in HTTP_CLIENTS:
        raise SpecError(f"{source}: request.http must be one of {', '.join(HTTP_CLIENTS)}")
    if spec.request.api not in APIS:
        raise SpecError(f"{source}: request.api must be one of {', '.join(APIS)}")
    _validate_cost_policy(spec, source)
    _validate_ablation(spec, source)
    validate_quality(spec.quality, source, spec.load)
    from abtui.telemetry.arm_check import check_telemetry

    check_telemetry(spec, source)
    if spec.ray.placement not in ("spread", "pack"):
        raise SpecError(
            f"{source}: ray.placement must be 'spread' or 'pack', got {spec.ray.placement!r}"
        )
    _validate_until_decided(spec, source)
    _validate_profile(spec, source)
    if spec.name is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", spec.name):
        raise SpecError(
            f"{source}: name {spec.name!r} must be letters, digits, '.', '_' or '-'",
            "it becomes the session file's name",
        )
    return spec


def _validate_ablation(spec: Spec, source: str) -> None:
    factors = spec.ablation.factors
    if not factors:
        return
    from abtui.stats.factorial import (
        BASE_NAME,
        MAX_FACTORS,
        MIN_FACTORS,
        SEP,
        combo_name,
        design_of,
    )

    hint = (
        f'[ablation] factors = ["fp8", "spec"] needs arms named {BASE_NAME} (the '
        f"baseline), fp8, spec and fp8{SEP}spec"
    )
    if not MIN_FACTORS <= len(factors) <= MAX_FACTORS:
        raise SpecError(
            f"{source}: ablation.factors: {len(factors)} factors; a factorial takes "
            f"2 or 3 (2^k arms: 4 or 8; beyond 3 the arm count is impractical)",
            hint,
        )
    for f in factors:
        if not f or SEP in f or f == BASE_NAME or len(set(factors)) != len(factors):
            raise SpecError(
                f"{source}: ablation.factors: {f!r} must be a unique name without "
                f"{SEP!r}, not {BASE_NAME!r}",
                hint,
            )
    design, why = design_of([a.name for a in spec.arms], factors)
    if design is None:
        want = [
            combo_name(factors, tuple((i >> j) & 1 for j in range(len(factors))))
            for i in range(2 ** len(factors))
        ]
        raise SpecError(
            f"{source}: ablation: {why}",
            f"the arms must be {', '.join(want)} (the baseline first: every factor off)",
        )


def _validate_profile(spec: Spec, source: str) -> None:
    """``[profile]``: the window, the class table and the classes an optimisation targets, the
    arms the trace paths name."""
    from abtui.errors import AbtuiError
    from abtui.profile.classes import table_from_dict

    pr = spec.profile
    where = f"{source}: profile"
    try:
        table = table_from_dict(pr.classes, f"{where}.classes")
    except AbtuiError as e:
        raise SpecError(e.message, e.hint) from None
    unknown = [c for c in pr.optimises if c not in table.order]
    if unknown:
        raise SpecError(
            f"{where}.optimises: unknown class {', '.join(map(repr, unknown))}",
            f"the classes: {', '.join(table.order)}",
        )
    names = {a.name for a in spec.arms}
    for arm, path in pr.traces.items():
        if arm not in names:
            raise SpecError(
                f"{where}.traces: no arm named {arm!r}", f"the arms: {', '.join(sorted(names))}"
            )
        if not isinstance(path, str) or not path:
            raise SpecError(f"{where}.traces.{arm}: give a path (a file or a folder)")


def _validate_until_decided(spec: Spec, source: str) -> None:
    """``load.until_decided``: one candidate, one load level, and rows that have an
    anytime-valid interval (abtui.stats.seqdecide)."""
    if not spec.load.until_decided:
        return
    from abtui.stats.seqdecide import supported

    hint = "run with a fixed --requests / --duration instead (drop --until-decided)"
    if len(spec.arms) != 2:
        raise SpecError(
            f"{source}: load.until_decided compares one candidate with the baseline; "
            f"got {len(spec.arms)} arms",
            hint,
        )
    if spec.load.sweep_rate or spec.load.sweep_concurrency:
        raise SpecError(f"{source}: load.until_decided does not apply to a sweep", hint)
    pol = spec.policy
    bad = [k for k in [pol.primary, *pol.guardrails] if not supported(k)]
    if bad:
        raise SpecError(
            f"{source}: load.until_decided decides latency rows only (ttft, ttft_user, ttfo, "
            f"tpot, e2e: mean, p50, p90, p95, p99); not {', '.join(bad)}",
            "set policy.primary / policy.guardrails to latency rows, or "
            + hint[0].lower()
            + hint[1:],
        )


def _validate_cost_policy(spec: Spec, source: str) -> None:
    from abtui.stats.decide import METRIC_KEYS

    if spec.cost.gpu_price is None and any(a.gpu_price is not None for a in spec.arms):
        missing = [a.name for a in spec.arms if a.gpu_price is None]
        if missing:
            raise SpecError(
                f"{source}: gpu_price is set on some arms but not on {', '.join(missing)}",
                "set [cost] gpu_price for every arm, or gpu_price on each [[arms]] table",
            )
    pol = spec.policy
    hint = "known: " + ", ".join(METRIC_KEYS)
    if pol.primary not in METRIC_KEYS:
        raise SpecError(f"{source}: policy.primary: unknown metric {pol.primary!r}", hint)
    for g in pol.guardrails:
        if g not in METRIC_KEYS:
            raise SpecError(f"{source}: policy.guardrails: unknown metric {g!r}", hint)
