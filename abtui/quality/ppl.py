"""Perplexity of a fixed text via ``echo`` + ``logprobs`` on ``/v1/completions`` (docs/methods.md §4).

One non-streamed request per arm: ``prompt`` = :data:`FIXED_TEXT`, ``max_tokens`` 1, ``echo``
true, ``logprobs`` 1, greedy. An endpoint that scores the prompt (vLLM) returns
``choices[0].logprobs.token_logprobs`` over the echoed prompt; ``PPL = exp(−mean)`` of them over
the prompt's tokens (the first is null: it has no context; the generated token is left out).
An endpoint that refuses ``echo``, or returns no prompt logprobs (llama.cpp's ``llama-server``:
it takes ``echo`` but its ``logprobs`` / ``n_probs`` cover the generated tokens only; abtui's
simulator with ``--logprobs off``), gets "not supported by this endpoint", with which of the
two — never a made-up figure. (abtui's simulator otherwise serves simulated logprobs: :mod:`abtui.sim.logprobs`;
for llama.cpp, ``abtui.engine.perplexity`` runs its ``llama-perplexity`` tool on the arm's model.)

PPL is a prefill-only measure: it may never read a quantised KV cache, so a flat PPL says
nothing about long-context retrieval. The verdict never gates on it; it warns when PPL is flat
(within :data:`FLAT`) while a quality gate failed (:func:`abtui.quality.gates.flat_ppl_warning`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import httpx

from abtui.client.target import Target

FLAT = 0.02  # |PPL_B / PPL_A − 1| below this is "flat"
NOT_SUPPORTED = "not supported by this endpoint"
# Plain prose written for abtui (no digits, no quality-suite formats).
FIXED_TEXT = (
    "The harbour was quiet in the early morning. A few boats rocked against the old stone wall, "
    "and the smell of salt and tar hung over the water. On the hill above the town, the baker "
    "had already opened his shop, and the first loaves were cooling on a wooden table by the "
    "window. Children walked to school along the narrow road, stopping now and then to watch "
    "the gulls circle over the fishing nets. By the time the sun cleared the cliffs, the market "
    "square was full of voices: farmers selling apples and cheese, a painter setting up his "
    "easel, and an old teacher reading the newspaper on a bench beside the fountain."
)


@dataclass(frozen=True, slots=True)
class Perplexity:
    """One arm's perplexity of :data:`FIXED_TEXT` (``ppl`` None and a ``note`` saying why when
    the endpoint gives no prompt logprobs). Stored per arm name in ``meta.quality_ppl``."""

    supported: bool
    ppl: float | None
    tokens: int = 0
    note: str = ""

    def to_dict(self) -> dict:
        return {
            "supported": self.supported,
            "ppl": self.ppl,
            "tokens": self.tokens,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Perplexity:
        return cls(
            bool(d.get("supported")), d.get("ppl"), d.get("tokens") or 0, d.get("note") or ""
        )


def perplexity_of(body: object, n_generated: int = 1) -> tuple[float, int] | None:
    """``(PPL, tokens)`` from a completions response with echoed prompt logprobs, else None."""
    try:
        lp = body["choices"][0]["logprobs"]["token_logprobs"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(lp, list):
        return None
    usage = body.get("usage") if isinstance(body, dict) else None
    n_in, n_out = (
        (usage.get("prompt_tokens"), usage.get("completion_tokens"))
        if isinstance(usage, dict)
        else (None, None)
    )
    if isinstance(n_in, int) and isinstance(n_out, int) and n_in > 0 and n_in + n_out == len(lp):
        prompt = lp[:n_in]  # the echoed prompt exactly, however many tokens were generated
    else:
        prompt = lp[: len(lp) - n_generated] if n_generated else lp
    vals = [float(x) for x in prompt if isinstance(x, int | float) and math.isfinite(x)]
    if len(vals) < 2:
        return None
    return math.exp(-sum(vals) / len(vals)), len(vals)


def measure(target: Target, timeout_s: float = 60.0) -> Perplexity:
    """One arm's :class:`Perplexity`."""
    body = {
        "model": target.model,
        "prompt": FIXED_TEXT,
        "max_tokens": 1,
        "echo": True,
        "logprobs": 1,
        "temperature": 0.0,
        "stream": False,
    }
    url = f"{target.base_url}/completions"
    why = "no answer"
    try:
        with httpx.Client(trust_env=False, timeout=timeout_s, verify=target.tls) as c:
            r = c.post(url, json=body, headers=target.headers)
        if r.status_code == 200:
            got, why = perplexity_of(r.json()), "no prompt logprobs in its answer"
        else:
            got, why = None, f"it refused echo (HTTP {r.status_code}): no prompt logprobs"
    except (httpx.HTTPError, ValueError):
        got = None
    if got is None:
        return Perplexity(False, None, 0, f"{NOT_SUPPORTED} ({why})")
    return Perplexity(True, got[0], got[1])


def ppl_line(ppl: dict[str, Perplexity] | None) -> str | None:
    """``perplexity of the fixed text: base 5.21, cand 5.34 (+2.5%)`` (arm name → measure)."""
    if not ppl:
        return None
    parts = [
        f"{n} {m.ppl:.3f}" if m.supported else f"{n} {m.note or NOT_SUPPORTED}"
        for n, m in ppl.items()
    ]
    vals = [m.ppl for m in ppl.values() if m.supported]
    ratio = f" ({vals[1] / vals[0] - 1:+.1%})" if len(vals) == 2 and len(ppl) == 2 else ""
    return "perplexity of the fixed text (echo + logprobs): " + ", ".join(parts) + ratio
