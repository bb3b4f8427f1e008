"""A verdict read back from its session file instead of computed again.

The run that wrote a session stores its verdict in the file (``verdicts``: the policy and the
result's JSON, :func:`abtui.verdict.saved.session_verdict` with ``store``). Computing it again
takes seconds to a minute (thousands of bootstrap resamples per row), so ``abtui open`` and
``abtui report`` reuse the latest stored one when it answers the same question: the same
resolved policy, the same session status, written by the same verdict code
(:func:`code_version`), no cost override, no noise floor to read from another file, not an
A/A session. Otherwise they compute it (and, being read paths, store nothing).

The stored JSON loses what JSON cannot say: NaN (stored as ``null``, read back as NaN in the
float fields) and the per-arm summaries (recomputed from the requests: exact figures, no
resampling); each reason's code is stored beside its words (``reason_codes``, ``reason_code``,
``note_code``) and read back into a :class:`~abtui.stats.reasons.Reason`.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace

import numpy as np

from abtui import __version__
from abtui.cost import ArmCost
from abtui.metrics.summary import summarize
from abtui.quality.gates import QualityVerdict
from abtui.stats.classical import RankTest
from abtui.stats.decide import Outcome
from abtui.stats.effects import Comparison, ComparisonDesign, Effect
from abtui.stats.noise_floor import NoiseFloor
from abtui.stats.reasons import read_reason
from abtui.stats.sweep import SweepSummary
from abtui.verdict.comparable import Finding
from abtui.verdict.policy import (
    ArmLoad,
    ErrorRates,
    Guardrail,
    GuardState,
    PairVerdict,
    Policy,
    Result,
    SessionInfo,
    Verdict,
    resolve_policy,
)

VERDICT_FORMAT = 2  # the stored verdict's layout; a change in how a verdict is computed bumps it

_EFFECT_FLOATS = ("a", "b", "ratio", "lo", "hi", "p", "n_eff", "min_eff", "p_adj", "delta")


def code_version() -> str:
    """What a stored verdict must have been computed by to be reused."""
    return f"abtui {__version__}, verdict format {VERDICT_FORMAT}"


def _nan(x) -> float:
    return math.nan if x is None else float(x)


def _effect(d: dict) -> Effect:
    d = dict(d)
    for k in _EFFECT_FLOATS:
        if k in d and d[k] is None:
            d[k] = math.nan
    d["outcome"] = Outcome(d["outcome"])
    d["note"] = read_reason(d.get("note"), d.pop("note_code", None))
    return Effect(**d)


def _rank(d: dict) -> RankTest:
    return RankTest(d["test"], d["n"], _nan(d["p"]), _nan(d["shift"]))


def _guardrail(d: dict) -> Guardrail:
    return Guardrail(
        d["key"],
        GuardState(d["state"]),
        d["delta"],
        d["bound"],
        d["samples_needed"],
        read_reason(d["reason"], d.get("reason_code")),
    )


def _pair(d: dict, table, slo: dict) -> PairVerdict:
    c = d["comparison"]
    sums = (summarize(table, c["a"], slo), summarize(table, c["b"], slo))
    comp = Comparison(
        c["a"],
        c["b"],
        [_effect(e) for e in c["effects"]],
        {k: _rank(v) for k, v in c["rank_tests"].items()},
        ComparisonDesign.from_dict(c["design"]),
        sums,
        [_effect(e) for e in c.get("checks") or []],
    )
    err = d["errors"]
    guards = d.get("guardrails")
    reasons = d["reasons"]
    codes = d.get("reason_codes") or [None] * len(reasons)
    findings = d.get("findings")
    return PairVerdict(
        d["baseline"],
        d["candidate"],
        d["a"],
        d["b"],
        Result(d["result"]),
        [read_reason(r, c) for r, c in zip(reasons, codes, strict=True)],
        comp,
        ErrorRates(_nan(err["rate_a"]), _nan(err["rate_b"]), _nan(err["p_higher"])),
        {n: ArmLoad.from_dict(g) for n, g in (d["generator"] or {}).items() if isinstance(g, dict)},
        None if d.get("cost") is None else {n: ArmCost.from_dict(c) for n, c in d["cost"].items()},
        QualityVerdict.from_dict(d.get("quality")),
        None if guards is None else [_guardrail(g) for g in guards],
        None if findings is None else [Finding.from_dict(f) for f in findings],
    )


def _policy(d: dict) -> Policy:
    """A stored :meth:`Policy.to_dict`, with its noise floor's values and detail."""
    detail = d.get("noise_floor_detail")
    return replace(
        resolve_policy(d),
        noise_floor_values=d.get("noise_floor_values"),
        noise_floor_detail=NoiseFloor.from_dict(detail) if isinstance(detail, dict) else None,
    )


def verdict_from_dict(d: dict, table, slo: dict) -> Verdict:
    """The :class:`Verdict` a stored result (``SessionVerdict.to_dict``) describes, its pairs'
    summaries recomputed from ``table`` (the session's requests) with ``slo``."""
    return Verdict(
        Result(d["result"]),
        [_pair(p, table, slo) for p in d["pairs"]],
        [_pair(p, table, slo) for p in d["ladder"]],
        _policy(d["policy"]),
        SessionInfo.from_dict(d["session"]),
        d["created"],
        None if d.get("sweep") is None else SweepSummary.from_dict(d["sweep"]),
        _factorial(d.get("factorial")),
    )


def _factorial(d: dict | None):
    """A stored ablation section (None: none). Imported only then: the factorial's quality
    part takes its normal quantiles from scipy.stats, which a verdict otherwise never loads."""
    if d is None:
        return None
    from abtui.verdict.ablation import Factorial

    return Factorial.from_dict(d)


def data_fingerprint(table) -> str:
    """A digest of what a verdict is computed from: every request's arm, item, times, token
    counts and outcome (a file whose requests were edited after its run gets a new verdict)."""
    h = hashlib.blake2b(digest_size=16)
    for name in _FINGERPRINTED:
        col = getattr(table, name, None)
        if col is None:
            h.update(b"-")
        elif col.dtype == object:
            h.update("\x00".join(map(str, col.tolist())).encode("utf-8", "surrogatepass"))
        else:
            h.update(np.ascontiguousarray(col).tobytes())
        h.update(name.encode())
    return h.hexdigest()


_FINGERPRINTED = (
    "arm",
    "item",
    "run",
    "warmup",
    "scheduled_ns",
    "dispatched_ns",
    "first_byte_ns",
    "first_token_ns",
    "last_token_ns",
    "done_ns",
    "n_input",
    "n_output",
    "n_chunks",
    "status",
    "error_class",
    "chunk_t_ns",
    "chunk_n",
)


def reusable(rows: list[dict], policy: dict, status: str, data: str | None = None) -> dict | None:
    """The latest stored result of ``rows`` (``SessionReader.verdicts``) when it was computed
    under ``policy`` (resolved here as the verdict resolves it), for a session in ``status``,
    by this :func:`code_version`, from the same requests (``data``: :func:`data_fingerprint`
    of the table read now); else None."""
    if not rows:
        return None
    last = max(rows, key=lambda r: str(r.get("created") or ""))
    result = last.get("result")
    if not isinstance(result, dict) or result.get("code_version") != code_version():
        return None
    if data is not None and result.get("data") != data:
        return None
    if result.get("aa") or "noise_floor_values" in (last.get("policy") or {}):
        return None
    try:
        want = json.loads(json.dumps(resolve_policy(policy).to_dict(), default=str, sort_keys=True))
    except Exception:  # noqa: BLE001 (a policy the verdict refuses is computed, and said there)
        return None
    if last.get("policy") != want or (result.get("session") or {}).get("status") != status:
        return None
    return result
