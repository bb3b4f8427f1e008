"""The simulator's quality face: it answers the built-in quality suites' prompts from the prompt,
right with a probability that depends on the served variant and the context length.

Everything here is **simulated**: no model runs. The face exists so that a demo, and the tests
of the quality suites, see a quality delta between two variants that behaves like the real
thing (quantised weights or KV cache lose retrieval accuracy at long contexts, several keys
suffer more), deterministically.

The prompts are the built-in suites' (:mod:`abtui.quality.prompts`, the one definition of their
formats): the face recognises them there and answers.

Accuracy (:func:`accuracy`): with ``L`` the prompt's length in tokens and
``d = max(0, log2(L / 4096))`` (the number of doublings beyond 4k),

    p = BASE[task] − SHORT[w] − d × (LONG_W[w] + LONG_KV[kv]) × (CONFUSABLE if keys else 1)

for the retrieval tasks (``niah``, ``keys``), and ``p = BASE[task] − SHORT[w]`` for the short
``copy`` and ``capital`` tasks; ``w``/``kv`` are the weight and KV-cache dtypes, ``p`` is clamped
to [0.02, 1]. The constants are below; they are illustrative (shaped after published
long-context results for quantised models: KV-cache and int4 weight quantisation hurt
retrieval more as context grows), not a fit to any model.

Determinism: an answer is right when ``u < p``, ``u`` a uniform draw from a hash of
``(seed, prompt)`` — the same draw for every variant, so a weaker variant fails a superset of
the items a stronger one fails (two endpoints with the same seed and variant answer
identically). A wrong answer is plausible, chosen by a hash of ``(seed, variant, prompt)``:
another key's value (``keys``), the value with one digit changed (``niah``), the code
with one character changed (``copy``), another country's capital (``capital``).

Streaming: a recognised prompt's answer is one token (`` VALUE``). Without ``ignore_eos`` the
response stops after it (``finish_reason: "stop"``, or ``"length"`` when ``max_tokens`` is
smaller); with ``ignore_eos: true`` filler words follow it up to ``max_tokens``, as a model
forced past its end would. Free-form prompts get the usual deterministic filler text.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from abtui.quality.prompts import TASKS, Task, recognise
from abtui.sim.engine import SimRequest, text_base, words

BASE = {"niah": 0.995, "keys": 0.98, "copy": 0.99, "capital": 0.97}
SHORT = {"bf16": 0.0, "fp8": 0.003, "int4": 0.02}  # any task, by weight dtype
LONG_W = {"bf16": 0.005, "fp8": 0.008, "int4": 0.03}  # per doubling beyond 4k, by weights
LONG_KV = {"bf16": 0.0, "fp8": 0.015}  # per doubling beyond 4k, by KV-cache dtype
CONFUSABLE = 2.0  # several keys in one context multiply the long-context loss
LONG_FROM = 4096  # tokens: no long-context loss up to here
FLOOR = 0.02


@dataclass(frozen=True, slots=True)
class Variant:
    """What the served model is: weight and KV-cache dtypes (from the sim's preset)."""

    weight_dtype: str = "bf16"  # "bf16" | "fp8" | "int4"
    kv_dtype: str = "bf16"  # "bf16" | "fp8"

    @property
    def name(self) -> str:
        return f"w{self.weight_dtype}-kv{self.kv_dtype}"


def accuracy(task: str, variant: Variant, context_tokens: int) -> float:
    """The probability that the simulated model answers ``task`` right (module docstring)."""
    w, kv = variant.weight_dtype, variant.kv_dtype
    p = BASE[task] - SHORT.get(w, SHORT["int4"])
    if task in ("niah", "keys"):
        d = max(0.0, math.log2(max(1, context_tokens) / LONG_FROM))
        loss = LONG_W.get(w, LONG_W["int4"]) + LONG_KV.get(kv, LONG_KV["fp8"])
        p -= d * loss * (CONFUSABLE if task == "keys" else 1.0)
    return min(1.0, max(FLOOR, p))


# -- the face ------------------------------------------------------------------------------


def _u(*parts: object) -> float:
    data = "\x00".join(map(str, parts)).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") / 2.0**64


def _wrong(task: Task, v: float) -> str:
    if task.wrong:  # keys: another key's value; copy: a near miss; capital: another city
        return task.wrong[0] if v < 0.7 or len(task.wrong) == 1 else task.wrong[1]
    digits = list(task.answer)  # niah: one digit changed, a near miss
    i = int(v * len(digits))
    digits[i] = str((int(digits[i]) + 1 + int(v * 1e6) % 8) % 10)
    return "".join(digits)


def answer(prompt: str, context_tokens: int, variant: Variant, seed: int) -> str | None:
    """The simulated model's answer to ``prompt`` (``None``: not a quality prompt)."""
    task = recognise(prompt)
    if task is None:
        return None
    if _u(seed, prompt) < accuracy(task.task, variant, context_tokens):
        return task.answer
    return _wrong(task, _u(seed, variant.name, prompt))


class QualityFace:
    """One server's quality face: decides each request's answer and its text source."""

    def __init__(self, seed: int, variant: Variant) -> None:
        self.seed = seed
        self.variant = variant

    def describe(self) -> dict:
        """For ``/v1/models`` metadata: the face is simulated, and for which variant."""
        return {
            "simulated": True,
            "weight_dtype": self.variant.weight_dtype,
            "kv_dtype": self.variant.kv_dtype,
            "tasks": list(TASKS),
            "note": "answers to the built-in quality prompts are simulated (abtui.sim.quality_face)",
        }

    def prepare(self, req: SimRequest) -> None:
        """Set ``req.answer`` for a recognised prompt; unless ``req.ignore_eos`` the response
        ends after the answer (``max_tokens`` shortened, ``finish_reason`` "stop")."""
        text = answer(req.prompt, req.prompt_tokens, self.variant, self.seed)
        if text is None:
            return
        req.answer = (" " + text,)
        if not req.ignore_eos and req.max_tokens >= len(req.answer):
            req.max_tokens = len(req.answer)
            req.finish_reason = "stop"

    def text_source(self, req: SimRequest) -> Callable[[int, int], str]:
        """``text(start, n)``: the response's tokens ``start .. start+n-1`` as text."""
        base = text_base(self.seed, req.prompt)
        ans = req.answer
        if not ans:
            return partial(words, base)

        def text(start: int, n: int) -> str:
            head = "".join(ans[start : start + n])
            k = len(ans)
            if start + n <= k:
                return head
            lo = max(start, k)
            return head + words(base, lo, start + n - lo)

        return text


def variant_of(preset: object | None) -> Variant:
    """The :class:`Variant` of a :class:`~abtui.sim.presets.Preset` (bf16/bf16 without one)."""
    if preset is None:
        return Variant()
    return Variant(getattr(preset, "weight_dtype", "bf16"), getattr(preset, "kv_dtype", "bf16"))
