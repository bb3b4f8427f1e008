"""Every number of a spec checked against the one limit table (:mod:`abtui.limits`), before
anything runs: each value out of range is a :class:`~abtui.errors.SpecError` naming the source,
the field, the value, its range and why.

:func:`field_limit` says which table row a section's field takes (the parser checks each value
as it reads the file, so the message can name its line); :func:`check_bounds` checks the whole
spec once the command line's flags are laid over it, and what only the whole spec knows: the
generator processes of every arm against this machine, the requests of every run and sweep
level together, the numbers inside each arm's ``params``.
"""

from __future__ import annotations

import dataclasses
import math

from abtui import limits as lim
from abtui.errors import SpecError

# an arm's own cost fields take the [cost] rows
_ARM_FIELDS = {"gpu_price": "cost.gpu_price", "gpus": "cost.gpus"}
# body fields an arm's params may set, and the row each takes
_PARAM_FIELDS = {
    "temperature": "request.temperature",
    "seed": "request.seed",
    "max_tokens": "item.max_tokens",
}


def field_limit(section: str, name: str) -> str | None:
    """The :data:`abtui.limits.LIMITS` row of field ``name`` of ``section`` (``"arm"`` for an
    ``[[arms]]`` table), or None for a field that is not a number."""
    if section == "arm":
        return _ARM_FIELDS.get(name)
    key = f"{section}.{name}"
    return key if key in lim.LIMITS else None


def _check(field: str, value, name: str, source: str) -> None:
    if value is None:
        return
    try:
        lim.check(field, value, name)
    except lim.OutOfRange as e:
        raise SpecError(f"{source}: {e}") from None


def check_bounds(spec, source: str) -> None:
    """Every numeric field of ``spec`` inside its row of the limit table (module docstring)."""
    sections = ("workload", "load", "request", "telemetry", "cost", "policy", "quality", "ray")
    for section in (*sections, "profile"):
        obj = getattr(spec, section)
        for f in dataclasses.fields(obj):
            row = field_limit(section, f.name)
            if row is not None:
                _check(row, getattr(obj, f.name), row, source)
    for k, v in spec.slo.items():
        _check("slo", v, f"slo.{k}", source)
    ld = spec.load
    sweep = ld.sweep_rate or ld.sweep_concurrency or []
    if sweep:
        _check("load.sweep_levels", len(sweep), "the number of sweep levels", source)
    for r in ld.sweep_rate or []:
        _check("load.rate", r, "load.sweep_rate", source)
    for c in ld.sweep_concurrency or []:
        _check("load.concurrency", c, "load.sweep_concurrency", source)
    for m, v in spec.quality.margins.items():
        _check("quality.margin", v, f"quality.margins.{m}", source)
    for i, a in enumerate(spec.arms):
        for name, row in _ARM_FIELDS.items():
            _check(row, getattr(a, name), f"arms[{i}].{name}", source)
        _check_params(a.params, f"arms[{i}].params", source)
    _check_generators(spec, source)
    _check_total(spec, source)


def _check_params(params, where: str, source: str) -> None:
    """An arm's ``params`` go into every request body: no NaN or infinity anywhere (not JSON),
    and the fields abtui itself sets inside their rows."""
    if not isinstance(params, dict):
        return
    try:
        lim.finite_json(params, where)
    except ValueError as e:
        raise SpecError(f"{source}: {e}") from None
    for key, row in _PARAM_FIELDS.items():
        if key in params and params[key] is not None:
            _check(row, params[key], f"{where}.{key}", source)


def _check_generators(spec, source: str) -> None:
    """Local generators: every arm's together within what this machine can use; on Ray, a
    fixed number per arm (the cluster's CPUs are not known here)."""
    g, n_arms = spec.load.generators, max(1, len(spec.arms))
    if spec.ray.address:  # the table's own row: checked with the rest
        return
    cap = max(n_arms, lim.max_generators())
    if n_arms * g > cap:
        per_arm = max(1, cap // n_arms)
        raise SpecError(
            f"{source}: load.generators = {g} is out of range: {n_arms} arms × {g} generator "
            f"processes; this machine has {lim.usable_cpus()} usable CPUs, so at most "
            f"{per_arm} per arm ({lim.GENERATORS_PER_CPU} processes per CPU for all arms "
            "together: a generator beyond the cores adds no sending rate, only contention)",
            f"use --generators {per_arm}, or --ray to spread generators over a cluster",
        )


def _check_total(spec, source: str) -> None:
    """The requests an arm is sent over every run and sweep level, and the count an open loop
    with a duration and no request count brings (rate × duration), within the table's row."""
    w, ld = spec.workload, spec.load
    levels = max(1, len(ld.sweep_rate or ld.sweep_concurrency or []))
    if w.requests is not None:
        total = w.requests * ld.runs * levels
        what = (
            f"workload.requests × load.runs × sweep levels = {w.requests:,} × {ld.runs} × "
            f"{levels} = {total:,}"
        )
    elif ld.duration_s is not None and (ld.rate or ld.sweep_rate):
        top = max([ld.rate or 0.0, *(ld.sweep_rate or [])])
        total = math.ceil(top * ld.duration_s) * ld.runs * levels
        what = (
            f"load.rate × load.duration = {top:g} req/s × {ld.duration_s:g} s (× runs × "
            f"levels) = {total:,} requests"
        )
    else:
        return
    if total > lim.MAX_REQUESTS:
        raise SpecError(
            f"{source}: {what} per arm, more than {lim.MAX_REQUESTS:,}",
            lim.LIMITS["workload.requests"].why,
        )
