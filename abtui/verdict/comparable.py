"""Whether a pair's speed rows compare like with like, before any of them is called.

Two findings, each a reason that forbids GO and a set of rows that are not called (INCONCLUSIVE
with the finding as their note, out of their Holm/BH family):

- **Different output lengths** for the same items, beyond what sampling explains: the
  comparison's ``output_tokens.mean`` check (B's mean output length over A's, with the latency
  rows' bootstrap over the same paired units) is called like any row — its interval wholly past
  ±δ at level α. A candidate that stops after 1 token while the baseline generates 128 looks
  86 % faster on P50 E2E; so does one that generates half as much. The rows whose value grows
  with the work done (E2E, throughput, goodput, SLO attainment, cost) are then not comparable;
  the finding quotes the per-token rows (TPOT, ITL), the least affected (under load a shorter
  answer still frees the batch sooner, so they are not vouched for either: GO stays forbidden).
- **A ``usage`` count the stream cannot have carried**: a response whose server-reported output
  tokens exceed :data:`MAX_TOKENS_PER_CHUNK` per token-bearing chunk (128 tokens in 2 chunks: a
  TPOT of 0.0 ms). Speculative decoding streams a few tokens a chunk and llama.cpp holds back
  a split UTF-8 character, so a handful is normal; 16 is past any engine's stream. When more
  than :data:`USAGE_SHARE` of an arm's responses do it, the rows computed from those counts
  (TPOT, the output-token rates and costs) are not comparable and GO is forbidden; fewer are
  named in the reasons without blocking.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from abtui.client.records import TOKENS_USAGE
from abtui.metrics.table import NA, RequestTable
from abtui.stats import decide
from abtui.stats.effects import Comparison
from abtui.stats.labels import describe, pct
from abtui.stats.reasons import Code, Reason, code_of, read_reason

if TYPE_CHECKING:
    from abtui.verdict.resolved import Policy

MAX_TOKENS_PER_CHUNK = 16
USAGE_SHARE = 0.01
LENGTH_CHECK = "output_tokens.mean"
# rows whose value grows with the tokens generated (keys before any "@" breakdown)
LENGTH_BOUND = ("e2e.", "throughput.", "goodput.", "slo.", "cost.")
USAGE_BOUND = ("tpot.", "throughput.output_tokens", "goodput.output_tokens", "cost.per_mtok")


LENGTHS_DIFFER = Reason(Code.NOT_COMPARABLE, "not comparable: the arms' output lengths differ")
USAGE_UNCARRIED = Reason(
    Code.NOT_COMPARABLE, "not comparable: usage counts the stream did not carry"
)


@dataclass(frozen=True, slots=True)
class Finding:
    """What makes a pair's speed rows not compare like with like (module docstring)."""

    kind: str  # "output_lengths" or "usage_outruns_stream"
    reason: Reason  # said among the pair's reasons
    blocks: bool  # forbids GO, and its rows are not called
    rows: tuple[str, ...]  # the rows not called, sorted
    figures: dict  # the check's own figures: ratio, lo, hi, mean_a, mean_b | arms

    @property
    def notes(self) -> dict[str, Reason]:
        """Each row not called → its note."""
        return dict.fromkeys(self.rows, _ROW_NOTE.get(self.kind, ""))

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "reason": self.reason,
            "reason_code": code_of(self.reason),
            "blocks": self.blocks,
            "rows": list(self.rows),
            **self.figures,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Finding:
        """A stored :meth:`to_dict` (``blocks`` absent: true)."""
        figures = {k: v for k, v in d.items() if k not in _FINDING_KEYS}
        reason = read_reason(d.get("reason"), d.get("reason_code"))
        return cls(d.get("kind", ""), reason, d.get("blocks", True), tuple(d["rows"]), figures)


_FINDING_KEYS = ("kind", "reason", "reason_code", "blocks", "rows")
_ROW_NOTE = {"output_lengths": LENGTHS_DIFFER, "usage_outruns_stream": USAGE_UNCARRIED}


def _bound(key: str, prefixes: tuple[str, ...]) -> bool:
    return key.partition("@")[0].startswith(prefixes)


def length_finding(comp: Comparison, policy: Policy, names: tuple[str, str]) -> Finding | None:
    """The output-length check of ``comp`` called at the policy's α and δ; a :class:`Finding`
    when the lengths differ, else None."""
    check = next((e for e in comp.checks if e.key == LENGTH_CHECK), None)
    if check is None:
        return None
    d = decide.decide(
        check.ratio,
        check.lo,
        check.hi,
        check.p,
        policy.delta,
        lower_is_better=True,
        n=min(check.n_a, check.n_b),
        stat="mean",
        alpha=policy.alpha,
        paired=check.paired,
    )
    check.outcome, check.significant, check.note = d.outcome, d.significant, d.note
    check.delta = policy.delta
    if d.outcome not in (decide.IMPROVED, decide.REGRESSED):
        return None
    a, b = names
    shorter = "shorter" if check.ratio < 0 else "longer"
    per_token = [describe(e) for k in ("tpot.p50", "itl.p50") if (e := comp.get(k)) is not None]
    reason = Reason(
        Code.OUTPUT_LENGTHS_DIFFER,
        f"the arms generated different output lengths for the same items: {b}'s outputs are "
        f"{pct(check.ratio)} [{pct(check.lo)}, {pct(check.hi)}] {shorter} than {a}'s (mean "
        f"{check.b:.1f} vs {check.a:.1f} tokens), beyond what sampling explains; E2E, "
        "throughput, goodput and cost compare different work and are not called, and this run "
        "cannot be GO" + (f" (per token: {'; '.join(per_token)})" if per_token else ""),
    )
    rows = sorted({e.key for e in comp.effects if _bound(e.key, LENGTH_BOUND)})
    figures = {
        "ratio": check.ratio,
        "lo": check.lo,
        "hi": check.hi,
        "mean_a": check.a,
        "mean_b": check.b,
    }
    return Finding("output_lengths", reason, True, tuple(rows), figures)


def usage_finding(table: RequestTable, comp: Comparison, names: list[str]) -> Finding | None:
    """Responses whose ``usage`` claims more tokens than their stream carried (module doc), per
    arm of the pair; a :class:`Finding` when any arm has one, else None."""
    per_arm, worst = {}, 0.0
    for x in (comp.a, comp.b):
        m = (table.arm == x) & ~table.warmup & table.ok
        n_ok = int(m.sum())
        if not n_ok:
            continue
        src = table.token_source[m]
        n_out = table.n_output[m]
        chunks = np.maximum(table.n_chunks[m] + table.empty_token_chunks[m], 1)
        odd = (src == TOKENS_USAGE) & (n_out != NA) & (n_out > MAX_TOKENS_PER_CHUNK * chunks)
        k = int(odd.sum())
        if k:
            i = int(np.flatnonzero(odd)[0])
            per_arm[names[x]] = {
                "responses": k,
                "of": n_ok,
                "example_tokens": int(n_out[i]),
                "example_chunks": int(chunks[i]),
            }
            worst = max(worst, k / n_ok)
    if not per_arm:
        return None
    said = "; ".join(
        f"{name}: {v['responses']} of {v['of']} responses (e.g. {v['example_tokens']} "
        f"tokens in {v['example_chunks']} chunks)"
        for name, v in per_arm.items()
    )
    blocks = worst > USAGE_SHARE
    reason = Reason(
        Code.USAGE_OVERCOUNTS,
        f"the server's usage counts more output tokens than the stream carried, over "
        f"{MAX_TOKENS_PER_CHUNK} a chunk — {said}: TPOT and the token rates from those "
        "counts are not measurements"
        + (
            "; they are not called, and this run cannot be GO"
            if blocks
            else f" (under {USAGE_SHARE:.0%} of responses: noted, not blocking)"
        ),
    )
    rows = sorted({e.key for e in comp.effects if _bound(e.key, USAGE_BOUND)}) if blocks else []
    return Finding("usage_outruns_stream", reason, blocks, tuple(rows), {"arms": per_arm})


RATE_SET = ("throughput.requests", "throughput.output_tokens")


def rate_set_notes(load: dict | None) -> dict[str, Reason]:
    """Open-loop arrivals with no in-flight cap offer both arms the same requests at the same
    instants, so each arm's throughput is the offered rate while it keeps up (and E2E, TTFT and
    the generator checks show one that does not): the throughput rows are not called, and no
    number of requests would decide them — an "about N requests would decide" there was an
    extrapolation of noise (a shorter tail ending the run sooner). ``{row: note}``; empty for a
    closed loop or a capped rate, where throughput is the server's."""
    load = load or {}
    open_loop = (
        load.get("rate") is not None or load.get("sweep_rate") or (load.get("arrival") == "replay")
    )
    if not open_loop or load.get("concurrency") or load.get("sweep_concurrency"):
        return {}
    rate = load.get("rate")
    offered = f"{rate:g} req/s offered to both arms" if rate else "the same arrivals for both arms"
    note = Reason(
        Code.SET_BY_LOAD,
        f"set by the open-loop rate ({offered}): it follows the rate while an arm keeps up, "
        "so it is not called, and more requests would not decide it",
    )
    return dict.fromkeys(RATE_SET, note)
