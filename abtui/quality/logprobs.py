"""Logprob agreement between the baseline and a candidate (docs/methods.md §4), where the endpoint
returns logprobs for generated tokens.

Collection (after the quality items): for each of :data:`N_PROMPTS` fixed free-form prompts
(:func:`prompts`: openings of :data:`abtui.quality.ppl.FIXED_TEXT`, cut at growing lengths, so
every model continues prose rather than a one-token quiz answer), one non-streamed
``/v1/completions`` request per arm — greedy, ``logprobs`` = :data:`TOP_K`, ``max_tokens`` =
:data:`MAX_TOKENS` — keeping each generated token and its top-k ``{token: logprob}``. The raw
lists are stored (``meta.quality_logprobs``); figures are derived when the verdict is made.

Comparison, on the baseline's greedy continuation: the candidate's distribution at position
``t`` is conditioned on the same text as the baseline's only while both continuations agree
before ``t``, so positions are compared up to and including the first where the generated tokens
differ. At each position:

- **top-1 agreement**: the two arms' most likely tokens are the same;
- **KL(A‖B) lower bound**: over the union of both top-k lists plus one OTHER bucket. A token in
  only one list has an unknown probability in the other arm, bounded by that arm's k-th listed
  probability and its unlisted mass; the minimum of KL over every such choice is a lower bound
  on the true KL (:mod:`abtui.quality.kl_union`: the argument, and the exact solution of that
  small convex problem). It is never below the bound over the tokens in *both* lists, and says
  nothing of what neither list shows.

Both are averaged over positions, with a 95% CI from the bootstrap of whole prompts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import httpx
import numpy as np

from abtui.client.target import Target
from abtui.quality.kl_union import union_bound
from abtui.quality.paired import cluster_bootstrap_ci
from abtui.quality.ppl import FIXED_TEXT, NOT_SUPPORTED

TOP_K = 5
MAX_TOKENS = 16
N_PROMPTS = 16


def prompts() -> list[str]:
    """The fixed prompts: :data:`N_PROMPTS` openings of the fixed text, 8, 14, 20… words long."""
    words = FIXED_TEXT.split()
    return [" ".join(words[: 8 + 6 * i]) for i in range(N_PROMPTS)]


def parse(body: object) -> list[tuple[str, dict[str, float]]] | None:
    """``[(token, {token: logprob})]`` from a completions response with logprobs, else None.

    Two shapes: the legacy completions one (``logprobs.tokens`` + ``logprobs.top_logprobs``, a
    ``{token: logprob}`` per position: vLLM, llama-cpp-python) and the chat-style one that
    llama.cpp's llama-server also uses for completions (``logprobs.content``: per position
    ``{token, logprob, top_logprobs: [{token, logprob}…]}``). Where two listed tokens render to
    the same text (byte tokens of a split character), the likelier is kept."""
    try:
        lp = body["choices"][0]["logprobs"]  # type: ignore[index]
        if isinstance(lp, dict) and "content" in lp and "tokens" not in lp:
            return _parse_content(lp["content"])
        tokens, tops = lp["tokens"], lp["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(tokens, list) or not isinstance(tops, list) or len(tokens) != len(tops):
        return None
    out = []
    for tok, top in zip(tokens, tops, strict=True):
        if not isinstance(tok, str) or not isinstance(top, dict) or not top:
            return None
        out.append((tok, {str(k): float(v) for k, v in top.items()}))
    return out or None


def _parse_content(content: object) -> list[tuple[str, dict[str, float]]] | None:
    if not isinstance(content, list):
        return None
    out = []
    for pos in content:
        if not isinstance(pos, dict) or not isinstance(pos.get("token"), str):
            return None
        tops = pos.get("top_logprobs")
        if not isinstance(tops, list) or not tops:
            return None
        top: dict[str, float] = {}
        for t in tops:
            if not (
                isinstance(t, dict)
                and isinstance(t.get("token"), str)
                and isinstance(t.get("logprob"), int | float)
            ):
                return None
            top[t["token"]] = max(top.get(t["token"], -math.inf), float(t["logprob"]))
        out.append((pos["token"], top))
    return out or None


def collect(target: Target, prompts: list[str], seed: int, timeout_s: float = 60.0) -> dict:
    """One arm's ``meta.quality_logprobs`` document: ``{"supported", "sequences", "note"}``, one
    parsed sequence (``[token, {token: logprob}]`` per position) per prompt."""
    seqs = []
    with httpx.Client(trust_env=False, timeout=timeout_s, verify=target.tls) as c:
        for prompt in prompts:
            body = {
                "model": target.model,
                "prompt": prompt,
                "max_tokens": MAX_TOKENS,
                "temperature": 0.0,
                "seed": seed,
                "logprobs": TOP_K,
                "stream": False,
            }
            try:
                r = c.post(f"{target.base_url}/completions", json=body, headers=target.headers)
                got = parse(r.json()) if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                got = None
            if got is None:
                return {"supported": False, "sequences": [], "note": NOT_SUPPORTED}
            seqs.append([[t, top] for t, top in got])
    return {"supported": True, "sequences": seqs, "note": ""}


def kl_lower_bound(top_a: dict[str, float], top_b: dict[str, float], k: int | None = None) -> float:
    """KL(A‖B) over the union of both top-k lists ∪ OTHER, minimised over what the lists do not
    say (logprobs in, nats out; ``k`` the top-k asked); ≤ the true KL."""
    return union_bound(
        {t: math.exp(v) for t, v in top_a.items()}, {t: math.exp(v) for t, v in top_b.items()}, k
    )


@dataclass(frozen=True, slots=True)
class LogprobAgreement:
    """Top-1 agreement and the KL lower bound (nats) of B against A on A's greedy
    continuations, each with its 95 % prompt-cluster bootstrap interval."""

    positions: int
    prompts: int
    top1_agreement: float
    top1_lo: float
    top1_hi: float
    kl_lower_bound: float
    kl_lo: float
    kl_hi: float

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def compare(seqs_a: list, seqs_b: list) -> LogprobAgreement | None:
    """Top-1 agreement and the KL lower bound of B against A (module docstring); None when no
    position could be compared."""
    agree, kl, prompt = [], [], []
    for k, (sa, sb) in enumerate(zip(seqs_a, seqs_b, strict=False)):
        for (ta, top_a), (tb, top_b) in zip(sa, sb, strict=False):
            agree.append(float(max(top_a, key=top_a.get) == max(top_b, key=top_b.get)))
            kl.append(kl_lower_bound(top_a, top_b, TOP_K))
            prompt.append(k)
            if ta != tb:
                break
    if not agree:
        return None
    agree_a, kl_a, cl = np.array(agree), np.array(kl), np.array(prompt)
    finite = np.isfinite(kl_a)
    a_lo, a_hi = cluster_bootstrap_ci(agree_a - 1.0, cl, resamples=2000)
    k_lo, k_hi = cluster_bootstrap_ci(kl_a[finite], cl[finite], resamples=2000)
    return LogprobAgreement(
        len(agree),
        len(set(prompt)),
        float(agree_a.mean()),
        1.0 + a_lo,
        1.0 + a_hi,
        float(kl_a[finite].mean()) if finite.any() else math.inf,
        k_lo,
        k_hi,
    )


def logprob_line(name_a: str, name_b: str, raw: dict | None) -> str | None:
    """One sentence for the reports, from ``meta.quality_logprobs`` (arm name → collect())."""
    if not raw or name_a not in raw or name_b not in raw:
        return None
    ra, rb = raw[name_a], raw[name_b]
    if not (ra.get("supported") and rb.get("supported")):
        return f"logprob agreement: {NOT_SUPPORTED}"
    c = compare(ra["sequences"], rb["sequences"])
    if c is None:
        return None
    return (
        f"logprob agreement on {name_a}'s greedy continuation ({c.prompts} prompts, "
        f"{c.positions} positions): top-1 {c.top1_agreement:.1%} "
        f"[{c.top1_lo:.1%}, {c.top1_hi:.1%}], KL ≥ {c.kl_lower_bound:.4f} nats "
        f"[{c.kl_lo:.4f}, {c.kl_hi:.4f}] (a lower bound: union of both top-{TOP_K} + OTHER)"
    )
