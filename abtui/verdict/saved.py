"""The verdict of a saved session: read the file, evaluate, and (for the run that wrote it)
store the result in it.

Everything comes from the session file (requests, arms, the resolved spec with its SLOs, cost
and policy), so ``abtui report`` on another machine gives the same verdict as the run did
(the bootstrap is seeded by ``policy.seed``). Overrides (``--gpu-price``, ``--primary``, …)
change what is evaluated, not the stored spec.

**A/A sessions** (every arm has the same URL, model, API and request settings: ``abtui run --aa``)
measure the setup's noise floor instead of a verdict (:mod:`abtui.stats.noise_floor`,
docs/methods-aa.md): the copies take turns in alternation blocks, and per latency row
``floor = |pooled A/A bias| + 1.96 τ``, ``τ`` the between-block spread of the block effects
beyond within-block sampling noise. Breakdown rows (``…@in16-255``) are not stored; rows whose
blocks are too small for the statistic are left out with the reason. A later verdict given that
session (``--noise-floor FILE`` or ``policy.noise_floor``) uses ``δ = max(default δ, floor)`` per
row (a breakdown row: its base row's floor): no change smaller than what the setup produces
between identical arms can be called. The A/A result is CALIBRATED (exit 0) when no row changed
significantly, INCONCLUSIVE (exit 4) when the baseline "changed" against itself — the setup is
not stable enough to compare anything at that size.

Old A/A sessions stored ``max(|lo|, |hi|)`` of the A/A CI. Loading one: when its copies
alternated, the floor is recomputed from its requests; when they ran in parallel (same instants:
nothing to recompute from), the stored values still load (base keys only), marked legacy.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from pathlib import Path

from abtui.errors import StoreError, UsageError
from abtui.quality.attach import attach as attach_ppl
from abtui.runner.machine import MachineUse, machine_words
from abtui.stats import decide
from abtui.stats import noise_floor as nfm
from abtui.stats.labels import describe
from abtui.stats.reasons import Code, Reason
from abtui.stats.seqdecide import SequentialRun
from abtui.store.reader import SessionReader, reading
from abtui.store.verdicts import append_verdict
from abtui.verdict.policy import CALIBRATED, INCONCLUSIVE, SessionInfo, Verdict, evaluate
from abtui.verdict.sequential import apply_sequential


@dataclass
class SessionVerdict:
    verdict: Verdict
    path: Path
    arms: list[dict]
    spec: dict
    meta: dict
    aa: bool
    noise_floor: dict[str, float] | None  # measured here (A/A session): {row: floor}
    stored: bool | None  # None: not asked to (a read path); False: asked, the file refused
    noise_floor_detail: nfm.NoiseFloor | None = None  # measured here (an A/A session)
    sequential: SequentialRun | None = None  # a run --until-decided: what it stored

    @property
    def result(self) -> str:
        return self.verdict.result

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    def to_dict(self) -> dict:
        d = self.verdict.to_dict()
        d["exit_code"] = self.exit_code
        d["aa"] = self.aa
        if self.noise_floor is not None:
            d["noise_floor"] = self.noise_floor
        if self.noise_floor_detail is not None:
            d["noise_floor_detail"] = self.noise_floor_detail.to_dict()
        if self.sequential is not None:  # a run --until-decided
            d["sequential"] = self.sequential.to_dict()
        from abtui.verdict.stored import code_version

        d["code_version"] = code_version()  # what computed it (a read path reuses only its own)
        return d


def is_aa(arms: list[dict]) -> bool:
    """Every arm is the same endpoint with the same settings (an A/A calibration)."""
    if len(arms) < 2:
        return False
    sig = [(a["url"], a["model"], a["api"], repr(a.get("config"))) for a in arms]
    return all(s == sig[0] for s in sig)


def ci_bound_floor(verdict: Verdict) -> dict[str, float]:
    """The old floor, ``max(|lo|, |hi|)`` of the A/A CI per row (kept to compare against: it
    mixes the A/A's own sampling noise with bias; docs/methods-aa.md)."""
    floor: dict[str, float] = {}
    for pair in verdict.pairs:
        for e in pair.comparison.effects:
            if min(e.n_a, e.n_b) < decide.tail_min_n(e.stat):
                continue
            if math.isfinite(e.lo) and math.isfinite(e.hi):
                floor[e.key] = max(floor.get(e.key, 0.0), abs(e.lo), abs(e.hi))
    return floor


def load_noise_floor(path: str | Path) -> dict[str, float]:
    """The noise floor of an A/A session, ``{row: floor}`` (base rows only)."""
    return read_noise_floor(path).values()


def read_noise_floor(path: str | Path) -> nfm.NoiseFloor:
    """The noise floor of the A/A session at ``path``, its ``path`` set: ``method``
    (:data:`~abtui.stats.noise_floor.METHOD`, or ``ci-bound`` for an old parallel session's stored
    values), its rows (bias, spread, floor per row) or legacy values, and notes. A stored
    new-method floor is read as is; an old one is recomputed from the requests when the copies
    alternated (see the module docstring)."""
    with SessionReader(path) as rd:
        arms = rd.arms()
        rows = rd.verdicts()
        meta = rd.meta()
        table = None
        stored = next(
            (d for r in reversed(rows) if (d := nfm.from_stored(r.get("result") or {}))), None
        )
        if stored is None or stored.legacy:
            table = rd.request_table()
    if not is_aa(arms):
        raise UsageError(
            f"{path} is not an A/A session (its arms differ)",
            "run `abtui run --aa --baseline URL …` to measure the noise floor",
        )
    if table is not None:
        seed = int(((meta.get("spec") or {}).get("policy") or {}).get("seed") or 0)
        nf = nfm.measure_aa(table, len(arms), seed=seed)
        if nf.rows or stored is None:
            if stored is not None:
                nf = replace(
                    nf,
                    notes=(
                        *nf.notes,
                        "recomputed from the requests (the session stored the old CI-bound floor)",
                    ),
                )
            stored = nf
        else:
            stored = replace(
                stored,
                notes=(
                    *nf.notes,
                    "legacy floor (largest |A/A CI bound|, "
                    "copies in parallel): rerun `abtui run --aa`",
                ),
            )
    return replace(stored, path=str(path))


def sequential_of(meta: dict) -> SequentialRun | None:
    """The anytime-valid verdict a run ``--until-decided`` stored in ``meta`` (None: not
    such a run)."""
    seq = meta.get("sequential")
    return SequentialRun.from_dict(seq) if isinstance(seq, dict) else None


def _apply_overrides(spec: dict, cost: dict | None, policy: dict | None) -> dict:
    spec = copy.deepcopy(spec)
    if cost:
        spec.setdefault("cost", {}).update({k: v for k, v in cost.items() if v is not None})
        for arm in spec.get("arms") or []:  # flags apply to every arm
            for k, v in cost.items():
                if v is not None:
                    arm[k] = None
    if policy:
        spec["policy"] = {
            **(spec.get("policy") or {}),
            **{k: v for k, v in policy.items() if v is not None},
        }
    return spec


def lost_generators(meta: dict) -> list[str]:
    """The generators a Ray run lost (``meta.ray.lost``), one line each."""
    lost = (meta.get("ray") or {}).get("lost") or []
    from abtui.runner.ray.clocks import where

    return [
        f"generator {x.get('worker')} of {x.get('arm')} on node {where(x)} "
        f"({x.get('in_flight', 0)} request(s) in flight counted as errors)"
        for x in lost
        if isinstance(x, dict)
    ]


def session_verdict(
    path: str | Path | SessionReader,
    *,
    cost: dict | None = None,
    policy: dict | None = None,
    noise_floor_path: str | Path | None = None,
    store: bool = False,
    computing=None,
) -> SessionVerdict:
    """Evaluate the session at ``path``; with ``store`` (the run that wrote the file, right
    after it: ``abtui run``, the TUI's run), append the result to its ``verdicts`` table. A read
    path (``abtui report``, ``abtui open``) never writes: docs/session-file.md says why; it
    reuses the verdict the run stored when that answers the same question
    (:func:`abtui.verdict.stored.reusable`), else computes it, calling ``computing()`` first
    (to say so: seconds to a minute).

    ``cost``: ``{"gpu_price": …, "gpus": …}`` for every arm; ``policy``: fields of ``[policy]``.
    ``path``: or an open reader of the file (:func:`~abtui.store.reader.reading`: the report
    after a run reads it once); with ``store`` it is closed before the verdict is stored (DuckDB
    opens a file for writing only where this process has no read-only connection to it)."""
    from abtui.verdict.stored import data_fingerprint, reusable, verdict_from_dict

    given = path if isinstance(path, SessionReader) else None
    path = given.path if given is not None else Path(path)
    with reading(given or path) as rd:
        meta = rd.meta()
        arms = rd.arms()
        table = rd.request_table()
        quality = rd.quality()
        rows = rd.verdicts() if not store else []
    if not arms:
        raise StoreError(f"{path} has no arms: the run failed before it started")
    spec = _apply_overrides(meta.get("spec") or {}, cost, policy)
    pol = spec.get("policy") or {}
    status = meta.get("status") or "running"
    again = None
    overridden = any(v is not None for v in (cost or {}).values())  # cost rows to compute
    if not (store or overridden or noise_floor_path or pol.get("noise_floor") or is_aa(arms)):
        again = reusable(rows, pol, status, data_fingerprint(table))
    seq = sequential_of(meta)
    if again is not None:
        verdict = verdict_from_dict(again, table, spec.get("slo") or {})
        verdict.session = replace(verdict.session, path=str(path))  # where the file is now
        return SessionVerdict(verdict, path, arms, spec, meta, False, None, None, sequential=seq)
    if computing is not None:
        computing()
    floor_path = noise_floor_path or pol.get("noise_floor")
    applied = read_noise_floor(floor_path) if floor_path else None
    floor = applied.values() if applied else None
    aa = is_aa(arms)
    session = SessionInfo(
        name=meta.get("session_name", path.stem),
        path=str(path),
        load=meta.get("load"),
        arms=tuple(a["name"] for a in arms),
    )
    health = meta.get("generator_health")
    machine = health.get("machine") if isinstance(health, dict) else None
    verdict = evaluate(
        table,
        arms,
        spec,
        status=status,
        policy=pol,
        noise_floor=floor,
        session=session,
        levels=meta.get("levels"),
        quality=quality,
        lost=lost_generators(meta),
        machine_note=machine_words(MachineUse.from_dict(machine)),
    )
    attach_ppl(verdict, meta)  # perplexity per arm, when the quality suites measured it
    if seq is not None and not is_aa(arms):  # --until-decided: the anytime-valid verdict
        apply_sequential(verdict, seq, meta, table)
    if applied is not None:  # how the floor that raised δ was measured, for the reports
        verdict.policy = replace(verdict.policy, noise_floor_detail=applied)
    measured = detail = None
    if aa:
        nf = nfm.measure_aa(table, len(arms), seed=int(verdict.policy.seed))
        measured, detail = nf.values(), nf
        changed = [
            e
            for p in verdict.pairs
            for e in p.comparison.effects
            if e.outcome in (decide.IMPROVED, decide.REGRESSED)
        ]
        if changed:
            verdict.result = INCONCLUSIVE
            reasons = [
                Reason(Code.AA_CHANGED, f"the baseline differs from itself: {describe(e)}")
                for e in changed[:5]
            ]
            reasons.append(
                Reason(
                    Code.AA_UNSTABLE,
                    "the setup is not stable enough to compare endpoints at this size",
                )
            )
        else:
            verdict.result = CALIBRATED
            floor = "noise floor stored"
            if not measured:
                floor = "no noise floor: " + "; ".join(nf.notes[:1] or ["no row could be measured"])
            reasons = [
                Reason(
                    Code.AA_CALIBRATED,
                    f"no significant difference between identical arms; {floor}",
                )
            ]
        for p in verdict.pairs:
            p.result, p.reasons = verdict.result, reasons
    sv = SessionVerdict(verdict, path, arms, spec, meta, aa, measured, None, detail, seq)
    if store:
        doc = sv.to_dict()
        doc["data"] = data_fingerprint(table)  # a read path reuses it only for these requests
        if given is not None:
            given.close()
        sv.stored = append_verdict(path, verdict.policy.to_dict(), doc)
    return sv
