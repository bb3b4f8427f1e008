"""The simulator's logprobs: next-token distributions for ``/v1/completions`` with ``logprobs``
and ``echo`` — **simulated**, no model runs.

They exist so that abtui's perplexity and logprob-agreement figures (:mod:`abtui.quality.ppl`,
:mod:`abtui.quality.logprobs`) can be tested end to end, and behave like a quantised model's:
deterministic, identical for identical variants, further from the BF16 reference the coarser
the weights (and, at long context, the KV cache).

**The model.** The vocabulary is the sim's 64 words (:data:`abtui.sim.engine.VOCAB`, tokens
``" word"``), plus, at a position, the token actually there when it is not one of them (a
prompt word, a quality-face answer). At each position the *context* is a 64-bit hash chained
over ``(seed, every token before it)``. From it:

- **reference logits** (the "BF16 model"): one normal draw per word, × :data:`SPREAD`; the
  position's *favourite* gets ``max(others) + gap``. For a generated token the favourite is the
  sim's usual filler word at that position (so a BF16 endpoint's greedy text is exactly the text
  it sends without logprobs) and ``gap`` is exponential with mean :data:`GAP`; for a prompt
  token (``echo``) the favourite is that token and ``gap ~ N(PROMPT_GAP)`` (it is often not the
  most likely: that is what gives a perplexity);
- **the served variant** adds noise to every logit: ``NOISE_W[weights] · N(0, 1)`` drawn from a
  hash of ``(seed, weight dtype, context)``, and for generated tokens only (a prompt's prefill
  does not read a quantised KV cache, docs/methods.md §4) ``σ_kv · N(0, 1)`` from a hash of
  ``(seed, KV dtype, context)``, ``σ_kv = KV_BASE[kv] + KV_LONG[kv] × doublings of the context
  beyond 4k``; BF16 adds nothing.

A generated token is the argmax of the served distribution (greedy), so a quantised variant's
continuation departs from BF16's where the noise beats the gap, and from there its contexts
differ. A quality-suite prompt keeps the quality face's answer (:mod:`abtui.sim.quality_face`):
the answer token's logit is swapped with the served argmax when they differ. The constants are
illustrative — chosen so that the perplexity of :data:`abtui.quality.ppl.FIXED_TEXT` rises by
about 0.5% with FP8 weights and 3% with INT4, and top-1 agreement falls to about 97% and
90% (docs/simulator.md) — not a fit to any model.

**The wire format** (OpenAI's legacy completions, as vLLM): ``choices[0].logprobs =
{tokens, token_logprobs, top_logprobs, text_offset}``; ``top_logprobs`` holds the ``k`` most
likely tokens plus the chosen one when it is not among them (vLLM's way), ``k`` ≤
:data:`MAX_LOGPROBS`. With ``echo`` the text starts with the prompt and the lists with its
tokens (the sim's tokens: each word with the whitespace before it), the first one's logprob and
top list ``null``. Only non-streamed completions carry logprobs; streams and chat completions
send ``"logprobs": null``, and so does everything with ``--logprobs off`` (an endpoint like
llama.cpp's server, which cannot score a prompt). Cost, on the server's event loop: 0.1–0.2 ms
per generated token and ~12 µs per echoed prompt token (``scripts/sim_logprobs_table.py`` on
the 2-core dev VM, quiet to loaded), so ask for logprobs on short answers.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from abtui.sim.engine import VOCAB, SimRequest, text_base, words

MAX_LOGPROBS = 20
SPREAD = 1.5  # sd of the reference logits
GAP = 2.5  # mean margin of a generated token's favourite over the rest
PROMPT_GAP = (-0.5, 1.5)  # mean and sd of a prompt token's margin over the rest
NOISE_W = {"bf16": 0.0, "fp8": 0.075, "int4": 0.23}  # logit noise sd, by weight dtype
PENALTY = {"bf16": 0.0, "fp8": 0.004, "int4": 0.015}  # the favourite's logit loss, by weights
KV_BASE = {"bf16": 0.0, "fp8": 0.05}  # logit noise sd of a quantised KV cache (decode only)
KV_LONG = {"bf16": 0.0, "fp8": 0.05}  # ... plus this per doubling of the context beyond 4k
LONG_FROM = 4096

TOKENS = tuple(" " + w for w in VOCAB)
_INDEX = {t: i for i, t in enumerate(TOKENS)}
_V = len(TOKENS)
_WORD = re.compile(r"\s*\S+")
_M64 = (1 << 64) - 1
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_BLOCK = 2048  # echoed prompt positions scored at once


def _h64(*parts: object) -> int:
    data = "\x00".join(map(str, parts)).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _uniforms(h: np.ndarray, salt: int, n: int) -> np.ndarray:
    """``len(h) × n`` uniforms in (0, 1) from the hashes ``h`` (splitmix64, vectorised)."""
    with np.errstate(over="ignore"):
        z = h[:, None] + (np.arange(1, n + 1, dtype=np.uint64) + np.uint64(salt)) * _GOLD
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0**53


def _normals(h: np.ndarray, salt: int, n: int) -> np.ndarray:
    u1, u2 = _uniforms(h, salt, n), _uniforms(h, salt + 7919, n)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def kv_noise_sd(kv_dtype: str, context: int) -> float:
    """A quantised KV cache's logit noise at a decode position with ``context`` tokens before."""
    d = max(0.0, math.log2(max(1, context) / LONG_FROM))
    return KV_BASE.get(kv_dtype, KV_BASE["fp8"]) + KV_LONG.get(kv_dtype, KV_LONG["fp8"]) * d


class Model:
    """One endpoint's simulated distributions: its seed is the model, its variant the noise."""

    def __init__(self, seed: int, weight_dtype: str = "bf16", kv_dtype: str = "bf16") -> None:
        self.seed, self.w, self.kv = seed, weight_dtype, kv_dtype
        self._w_salt = np.uint64(_h64("weights", weight_dtype))
        self._kv_salt = np.uint64(_h64("kv", kv_dtype))

    def start(self) -> int:
        return _h64("bos", self.seed)

    @staticmethod
    def step(h: int, token: str) -> int:
        return _h64(h, token)

    def served(
        self, hs: list[int], fav: list[str], decode: bool, first_ctx: int, prompt: bool
    ) -> tuple[np.ndarray, list[list[str]]]:
        """Served logits ``P × (V + 1)`` (the last column: a favourite outside the vocabulary,
        −inf when unused) and each row's token list, for contexts ``hs`` whose favourites are
        ``fav``; position ``p`` has ``first_ctx + p`` tokens before it."""
        h = np.array(hs, dtype=np.uint64)
        p = len(hs)
        z = np.full((p, _V + 1), -np.inf)
        z[:, :_V] = SPREAD * _normals(h, 1, _V)
        col = np.array([_INDEX.get(t, _V) for t in fav])
        rows = np.arange(p)
        z[rows, col] = -np.inf
        top = z[:, :_V].max(axis=1)
        if prompt:
            gap = PROMPT_GAP[0] + PROMPT_GAP[1] * _normals(h, 2, 1)[:, 0]
        else:
            gap = -GAP * np.log(_uniforms(h, 3, 1)[:, 0])
        z[rows, col] = top + gap
        sd_w = NOISE_W.get(self.w, NOISE_W["int4"])
        noise = None
        if sd_w:
            noise = sd_w * _normals(h ^ self._w_salt, 4, _V + 1)
        if decode and self.kv != "bf16":
            sd = np.array([kv_noise_sd(self.kv, first_ctx + i) for i in range(p)])
            kv = sd[:, None] * _normals(h ^ self._kv_salt, 5, _V + 1)
            noise = kv if noise is None else noise + kv
        if noise is not None:  # the favourite: a fixed loss instead of noise
            noise[rows, col] = -PENALTY.get(self.w, PENALTY["int4"])
            z = z + noise
        names = [list(TOKENS) + [t if c == _V else ""] for t, c in zip(fav, col, strict=True)]
        return z, names


def _log_softmax(z: np.ndarray) -> np.ndarray:
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def _top(lp: np.ndarray, names: list[str], k: int, chosen: int) -> dict[str, float]:
    order = [int(i) for i in np.argsort(-lp, kind="stable")[:k]]
    if chosen not in order:
        order.append(chosen)
    return {names[i]: float(lp[i]) for i in order}


@dataclass(slots=True)
class Scored:
    """A non-streamed completion's generated tokens and its ``logprobs`` object."""

    tokens: list[str]
    echo: str  # the prompt when echoed, else ""
    logprobs: dict | None  # None when only echo was asked

    def text(self, start: int, n: int) -> str:
        return "".join(self.tokens[start : start + n])

    def render(self, text: str) -> tuple[str, str]:
        """(the choice's text, JSON-escaped, with the echoed prompt; the logprobs JSON)."""
        body = json.dumps(self.echo + text)[1:-1]
        return body, json.dumps(self.logprobs) if self.logprobs is not None else "null"


def score(model: Model, req: SimRequest) -> Scored:
    """The greedy continuation of ``req.max_tokens`` tokens with their logprobs, and the
    prompt's when ``req.echo``."""
    k = req.logprobs
    toks, lps, tops = [], [], []
    prompt = _WORD.findall(req.prompt)
    h, hs = model.start(), []
    for t in prompt:
        hs.append(h)
        h = model.step(h, t)
    if req.echo and k is not None and prompt:
        toks, lps, tops = [prompt[0]], [None], [None]
        for lo in range(1, len(prompt), _BLOCK):  # blocks: a long prompt's arrays stay small
            chunk = prompt[lo : lo + _BLOCK]
            z, names = model.served(hs[lo : lo + _BLOCK], chunk, False, lo, prompt=True)
            ls = _log_softmax(z)
            for i, t in enumerate(chunk):
                c = names[i].index(t) if t in _INDEX else _V
                toks.append(t)
                lps.append(float(ls[i, c]))
                tops.append(_top(ls[i], names[i], k, c))
    base = text_base(model.seed, req.prompt)
    ans = req.answer or ()
    gen: list[str] = []
    for pos in range(req.max_tokens):
        forced = ans[pos] if pos < len(ans) else None
        fav = forced or words(base, pos, 1)
        z, names = model.served([h], [fav], True, len(prompt) + pos, prompt=False)
        row = z[0]
        c = int(np.argmax(row))
        if forced is not None:  # the quality face's answer stays the greedy token
            want = names[0].index(forced) if forced in _INDEX else _V
            row[want], row[c] = row[c], row[want]
            c = want
        ls = _log_softmax(row)
        tok = names[0][c]
        gen.append(tok)
        if k is not None:
            toks.append(tok)
            lps.append(float(ls[c]))
            tops.append(_top(ls, names[0], k, c))
        h = model.step(h, tok)
    logprobs = None
    echo = req.prompt if req.echo else ""
    if k is not None:
        offsets, at = [], 0
        for t in toks:
            offsets.append(at)
            at += len(t)
        logprobs = {
            "tokens": toks,
            "token_logprobs": lps,
            "top_logprobs": tops,
            "text_offset": offsets,
        }
        if req.echo:
            echo = "".join(prompt)  # the text the offsets count (the prompt, trailing space off)
    return Scored(gen, echo, logprobs)


class LogprobFace:
    """One server's logprobs: which requests get them, and their text."""

    def __init__(self, seed: int, variant: object, enabled: bool = True) -> None:
        self.model = Model(
            seed, getattr(variant, "weight_dtype", "bf16"), getattr(variant, "kv_dtype", "bf16")
        )
        self.enabled = enabled

    def text_source(
        self, req: SimRequest, fallback: Callable[[int, int], str]
    ) -> Callable[[int, int], str]:
        """``fallback`` unless ``req`` is a non-streamed completion asking for logprobs or
        echo: then its scored text (and ``req.scored`` for the response body)."""
        if not self.enabled or req.chat or req.stream or (req.logprobs is None and not req.echo):
            return fallback
        req.scored = score(self.model, req)
        return req.scored.text
