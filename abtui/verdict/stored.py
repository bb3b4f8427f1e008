"""A verdict read back from its session file instead of computed again.

The run that wrote a session stores its verdict in the file (``verdicts``: the policy and the
result's JSON, :func:`abtui.verdict.saved.session_verdict` with ``store``). Computing it again
takes seconds to a minute (thousands of bootstrap resamples per row), so ``abtui open`` and
``abtui report`` reuse the latest stored one when it answers the same question: the same
resolved policy, the same session status, written by the same verdict code
(:func:`code_version`), no cost override, no noise floor to read from another file, not an
A/A session. Otherwise they compute it (and, being read paths, store nothing).

The stored JSON loses what JSON cannot say: NaN (stored as ``null``, read back as NaN in the
float fields), each reason's code (stored beside it as ``reason_codes``, text → code) and the
per-arm summaries (recomputed from the requests: exact figures, no resampling).
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np

from abtui import __version__
from abtui.metrics.summary import summarize
from abtui.stats.classical import RankTest
from abtui.stats.decide import Outcome
from abtui.stats.effects import Comparison, Effect
from abtui.stats.reasons import Code, Reason
from abtui.verdict.policy import (
    ErrorRates,
    Guardrail,
    GuardState,
    PairVerdict,
    Result,
    Verdict,
    resolve_policy,
)

VERDICT_FORMAT = 2  # the stored verdict's layout; a change in how a verdict is computed bumps it

_EFFECT_FLOATS = ("a", "b", "ratio", "lo", "hi", "p", "n_eff", "min_eff", "p_adj", "delta")


def code_version() -> str:
    """What a stored verdict must have been computed by to be reused."""
    return f"abtui {__version__}, verdict format {VERDICT_FORMAT}"


def reason_codes(verdict: Verdict) -> dict[str, str]:
    """Every reason's text → its code: the pairs' reasons, their guardrails', the rows' notes."""
    out: dict[str, str] = {}
    for pair in verdict.pairs + verdict.ladder:
        texts = [*pair.reasons, *(g.reason for g in pair.guardrails or [])]
        texts += [e.note for e in pair.comparison.effects + pair.comparison.checks]
        for r in texts:
            if getattr(r, "code", None) is not None:
                out[str(r)] = str(r.code)
    return out


def _nan(x) -> float:
    return math.nan if x is None else float(x)


def _reason(text, codes: dict[str, str]) -> Reason | str:
    if not text:
        return text or ""
    code = codes.get(text)
    try:
        return Reason(Code(code), text) if code else text
    except ValueError:  # a code this version does not know
        return text


def _effect(d: dict, codes: dict[str, str]) -> Effect:
    d = dict(d)
    for k in _EFFECT_FLOATS:
        if k in d and d[k] is None:
            d[k] = math.nan
    d["outcome"] = Outcome(d["outcome"])
    d["note"] = _reason(d.get("note"), codes)
    return Effect(**d)


def _rank(d: dict) -> RankTest:
    return RankTest(d["test"], d["n"], _nan(d["p"]), _nan(d["shift"]))


def _guardrail(d: dict, codes: dict[str, str]) -> Guardrail:
    return Guardrail(
        d["key"],
        GuardState(d["state"]),
        d["delta"],
        d["bound"],
        d["samples_needed"],
        _reason(d["reason"], codes),
    )


def _pair(d: dict, codes: dict[str, str], table, slo: dict) -> PairVerdict:
    c = d["comparison"]
    sums = (summarize(table, c["a"], slo), summarize(table, c["b"], slo))
    comp = Comparison(
        c["a"],
        c["b"],
        [_effect(e, codes) for e in c["effects"]],
        {k: _rank(v) for k, v in c["rank_tests"].items()},
        c["design"],
        sums,
        [_effect(e, codes) for e in c.get("checks") or []],
    )
    err = d["errors"]
    guards = d.get("guardrails")
    return PairVerdict(
        d["baseline"],
        d["candidate"],
        d["a"],
        d["b"],
        Result(d["result"]),
        [_reason(r, codes) for r in d["reasons"]],
        comp,
        ErrorRates(_nan(err["rate_a"]), _nan(err["rate_b"]), _nan(err["p_higher"])),
        d["generator"],
        d.get("cost"),
        d.get("quality"),
        None if guards is None else [_guardrail(g, codes) for g in guards],
        d.get("findings"),
    )


def verdict_from_dict(d: dict, table, slo: dict) -> Verdict:
    """The :class:`Verdict` a stored result (``SessionVerdict.to_dict``) describes, its pairs'
    summaries recomputed from ``table`` (the session's requests) with ``slo``."""
    codes = d.get("reason_codes") or {}
    return Verdict(
        Result(d["result"]),
        [_pair(p, codes, table, slo) for p in d["pairs"]],
        [_pair(p, codes, table, slo) for p in d["ladder"]],
        d["policy"],
        d["session"],
        d["created"],
        d.get("sweep"),
        d.get("factorial"),
    )


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
        want = json.loads(json.dumps(resolve_policy(policy), default=str, sort_keys=True))
    except Exception:  # noqa: BLE001 (a policy the verdict refuses is computed, and said there)
        return None
    if last.get("policy") != want or (result.get("session") or {}).get("status") != status:
        return None
    return result
