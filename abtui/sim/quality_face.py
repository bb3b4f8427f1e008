"""The simulator's quality face: it answers the built-in quality suites' prompts from the prompt,
right with a probability that depends on the served variant and the context length.

Everything here is **simulated**: no model runs. The face exists so that a demo, and the tests
of the quality suites, see a quality delta between two variants that behaves like the real
thing (quantised weights or KV cache lose retrieval accuracy at long contexts, confusable keys
suffer more), deterministically.

Prompt formats (the one definition; :func:`needle_prompt`, :func:`keys_prompt`,
:func:`arithmetic_prompt` and :func:`format_prompt` generate them, :func:`recognise` reads them):

``niah`` (needle in a haystack)
    filler sentences with one statement ``The pass key for <KEY> is <VALUE>.`` at a chosen
    depth, then the last line ``Question: what is the pass key for <KEY>? Answer with the pass
    key only.`` KEY looks like ``amber-falcon-17``, VALUE is a 7-digit number. Answer: VALUE.
``keys`` (multi-key retrieval, confusable keys)
    the same, with several statements whose keys share the ``adjective-noun`` stem and differ
    only in the 2-digit suffix (``amber-falcon-17``, ``amber-falcon-71``, …); one is asked.
``arith`` (exact answer)
    ``What is <A> <op> <B>? Answer with the number only.`` (op ``+``, ``-`` or ``*``).
    Answer: the integer.
``format`` (format instruction)
    ``Write the word <word> in capital letters. Answer with that word only.`` Answer: WORD.

Filler text is drawn from a word list with no digits and no "pass key", so it never leaks an
answer. A chat request is recognised on its messages' contents joined by newlines.

Accuracy (:func:`accuracy`): with ``L`` the prompt's length in tokens and
``d = max(0, log2(L / 4096))`` (the number of doublings beyond 4k),

    p = BASE[task] − SHORT[w] − d × (LONG_W[w] + LONG_KV[kv]) × (CONFUSABLE if keys else 1)

for the retrieval tasks (``niah``, ``keys``), and ``p = BASE[task] − SHORT[w]`` for the short
``arith`` and ``format`` tasks; ``w``/``kv`` are the weight and KV-cache dtypes, ``p`` is clamped
to [0.02, 1]. The constants are below; they are illustrative (shaped after published
long-context results for quantised models: KV-cache and int4 weight quantisation hurt
retrieval more as context grows), not a fit to any model.

Determinism: an answer is right when ``u < p``, ``u`` a uniform draw from a hash of
``(seed, prompt)`` — the same draw for every variant, so a weaker variant fails a superset of
the items a stronger one fails (two endpoints with the same seed and variant answer
identically). A wrong answer is plausible, chosen by a hash of ``(seed, variant, prompt)``:
a confusable key's value (``keys``), the value with one digit changed (``niah``), the result
off by 1 or 10 (``arith``), the word left in lower case (``format``).

Streaming: a recognised prompt's answer is one token (`` VALUE``). Without ``ignore_eos`` the
response stops after it (``finish_reason: "stop"``, or ``"length"`` when ``max_tokens`` is
smaller); with ``ignore_eos: true`` filler words follow it up to ``max_tokens``, as a model
forced past its end would. Free-form prompts get the usual deterministic filler text.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from abtui.sim.engine import SimRequest, text_base, words

TASKS = ("niah", "keys", "arith", "format")
BASE = {"niah": 0.995, "keys": 0.98, "arith": 0.97, "format": 0.99}
SHORT = {"bf16": 0.0, "fp8": 0.003, "int4": 0.02}  # any task, by weight dtype
LONG_W = {"bf16": 0.005, "fp8": 0.008, "int4": 0.03}  # per doubling beyond 4k, by weights
LONG_KV = {"bf16": 0.0, "fp8": 0.015}  # per doubling beyond 4k, by KV-cache dtype
CONFUSABLE = 2.0  # confusable keys multiply the long-context loss
LONG_FROM = 4096  # tokens: no long-context loss up to here
FLOOR = 0.02

_ADJ = (
    "amber azure brisk calm coral crimson dusty eager frosty gentle golden hollow ivory jolly "
    "lunar misty noble olive proud quiet rapid rustic silent silver solar stormy swift tawny "
    "velvet vivid wild witty"
).split()
_NOUN = (
    "badger beacon canyon cedar comet falcon fjord garnet harbor heron lantern maple meadow "
    "nebula orchid otter pepper quarry raven reef saddle spruce summit thistle tundra walrus "
    "willow yarrow zephyr"
).split()
_FILLER = (
    "the a river stone bridge garden morning evening window market city village road hill "
    "field forest cloud rain wind light shadow music letter paper table chair door house "
    "street harbor boat train station school teacher student child friend neighbour farmer "
    "baker painter walks runs waits sings reads writes carries opens closes finds keeps sees "
    "slowly quietly often never always near under over along across beside old new small "
    "large quiet busy green grey warm cold bright dark early late"
).split()
_FORMAT_WORDS = (
    "apple river candle violet marble thunder pocket lemon anchor velvet willow copper "
    "meadow falcon lantern harbor"
).split()

_STATEMENT = re.compile(r"The pass key for (\S+) is (\d+)\.")
_QUESTION = re.compile(
    r"Question: what is the pass key for (\S+)\? Answer with the pass key only\."
)
_ARITH = re.compile(r"What is (-?\d+) ([+*-]) (-?\d+)\? Answer with the number only\.")
_FORMAT = re.compile(r"Write the word ([a-z]+) in capital letters\. Answer with that word only\.")


@dataclass(frozen=True, slots=True)
class Variant:
    """What the served model is: weight and KV-cache dtypes (from the sim's preset)."""

    weight_dtype: str = "bf16"  # "bf16" | "fp8" | "int4"
    kv_dtype: str = "bf16"  # "bf16" | "fp8"

    @property
    def name(self) -> str:
        return f"w{self.weight_dtype}-kv{self.kv_dtype}"


@dataclass(frozen=True, slots=True)
class QualityItem:
    """A generated quality prompt and its expected answer."""

    task: str  # one of TASKS
    prompt: str
    answer: str
    context_tokens: int  # the prompt's length in the sim's tokens (whitespace words)


@dataclass(frozen=True, slots=True)
class Task:
    """A recognised quality prompt."""

    task: str
    answer: str
    wrong: tuple[str, ...]  # plausible wrong answers, most plausible first


def accuracy(task: str, variant: Variant, context_tokens: int) -> float:
    """The probability that the simulated model answers ``task`` right (module docstring)."""
    w, kv = variant.weight_dtype, variant.kv_dtype
    p = BASE[task] - SHORT.get(w, SHORT["int4"])
    if task in ("niah", "keys"):
        d = max(0.0, math.log2(max(1, context_tokens) / LONG_FROM))
        loss = LONG_W.get(w, LONG_W["int4"]) + LONG_KV.get(kv, LONG_KV["fp8"])
        p -= d * loss * (CONFUSABLE if task == "keys" else 1.0)
    return min(1.0, max(FLOOR, p))


# -- generators ----------------------------------------------------------------------------


def _filler(rng: random.Random, n_words: int) -> list[str]:
    """About ``n_words`` words of sentences; no digits, no 'pass key'."""
    out: list[str] = []
    while len(out) < n_words:
        k = min(rng.randint(6, 14), max(1, n_words - len(out)))
        sent = [rng.choice(_FILLER) for _ in range(k)]
        sent[0] = sent[0].capitalize()
        sent[-1] += "."
        out += sent
    return out


def _key_stem(rng: random.Random) -> str:
    return f"{rng.choice(_ADJ)}-{rng.choice(_NOUN)}"


def _haystack(rng: random.Random, context_tokens: int, statements: list[str], key: str) -> str:
    question = f"Question: what is the pass key for {key}? Answer with the pass key only."
    fixed = sum(len(s.split()) for s in statements) + len(question.split())
    body = _filler(rng, max(0, context_tokens - fixed))
    # statements go in at depths spread over the body, between sentences
    ends = [i + 1 for i, w in enumerate(body) if w.endswith(".")] or [0]
    for j, s in enumerate(statements):
        depth = (j + 0.5) / len(statements)
        at = min(ends, key=lambda e, d=depth: abs(e - d * len(body)))
        body[at:at] = s.split()
        ends = [e + len(s.split()) if e >= at else e for e in ends]
    return " ".join(body) + "\n" + question


def needle_prompt(seed: int, context_tokens: int, depth: float | None = None) -> QualityItem:
    """A ``niah`` prompt of about ``context_tokens`` tokens; the needle at ``depth`` (0..1,
    default: drawn from the seed)."""
    rng = random.Random(f"niah:{seed}")
    key = f"{_key_stem(rng)}-{rng.randint(10, 99)}"
    value = str(rng.randint(1_000_000, 9_999_999))
    statement = f"The pass key for {key} is {value}."
    question = f"Question: what is the pass key for {key}? Answer with the pass key only."
    fixed = len(statement.split()) + len(question.split())
    body = _filler(rng, max(0, context_tokens - fixed))
    ends = [0] + [i + 1 for i, w in enumerate(body) if w.endswith(".")]
    d = rng.random() if depth is None else min(1.0, max(0.0, depth))
    at = min(ends, key=lambda e: abs(e - d * len(body)))
    body[at:at] = statement.split()
    prompt = " ".join(body) + "\n" + question
    return QualityItem("niah", prompt, value, len(prompt.split()))


def keys_prompt(seed: int, context_tokens: int, n_keys: int = 4) -> QualityItem:
    """A ``keys`` prompt: ``n_keys`` (≥ 2) confusable keys spread through the context."""
    rng = random.Random(f"keys:{seed}")
    stem = _key_stem(rng)
    suffixes = rng.sample(range(10, 100), max(2, min(n_keys, 90)))
    values = rng.sample(range(1_000_000, 10_000_000), len(suffixes))
    keys = [f"{stem}-{s}" for s in suffixes]
    statements = [f"The pass key for {k} is {v}." for k, v in zip(keys, values, strict=True)]
    asked = rng.randrange(len(keys))
    prompt = _haystack(rng, context_tokens, statements, keys[asked])
    return QualityItem("keys", prompt, str(values[asked]), len(prompt.split()))


def arithmetic_prompt(seed: int) -> QualityItem:
    rng = random.Random(f"arith:{seed}")
    op = rng.choice("+-*")
    a, b = (rng.randint(2, 99), rng.randint(2, 99)) if op == "*" else (
        rng.randint(10, 999), rng.randint(10, 999),
    )  # fmt: skip
    prompt = f"What is {a} {op} {b}? Answer with the number only."
    return QualityItem("arith", prompt, str(_calc(a, op, b)), len(prompt.split()))


def format_prompt(seed: int) -> QualityItem:
    word = random.Random(f"format:{seed}").choice(_FORMAT_WORDS)
    prompt = f"Write the word {word} in capital letters. Answer with that word only."
    return QualityItem("format", prompt, word.upper(), len(prompt.split()))


def _calc(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


# -- the face ------------------------------------------------------------------------------


def _last(rx: re.Pattern, text: str) -> re.Match | None:
    """The last match (a question comes at the end of its prompt)."""
    found = deque(rx.finditer(text), maxlen=1)
    return found[0] if found else None


def recognise(prompt: str) -> Task | None:
    """The quality task ``prompt`` asks, or ``None`` for a free-form prompt."""
    if "pass key for" in prompt:
        q = _last(_QUESTION, prompt)
        if q is not None:
            asked = q.group(1)
            facts = dict(_STATEMENT.findall(prompt[: q.start()]))
            if asked in facts:
                stem = asked.rsplit("-", 1)[0]
                others = [(k.rsplit("-", 1)[0] != stem, v) for k, v in facts.items() if k != asked]
                wrong = tuple(v for _, v in sorted(others, key=lambda o: o[0]))  # confusable 1st
                task = "keys" if len(facts) > 1 else "niah"
                return Task(task, facts[asked], wrong)
        return None
    if "Answer with the number only." in prompt:
        m = _last(_ARITH, prompt)
        if m is not None:
            return Task("arith", str(_calc(int(m.group(1)), m.group(2), int(m.group(3)))), ())
        return None
    if "in capital letters." in prompt:
        m = _last(_FORMAT, prompt)
        if m is not None:
            return Task("format", m.group(1).upper(), (m.group(1),))
    return None


def _u(*parts: object) -> float:
    data = "\x00".join(map(str, parts)).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") / 2.0**64


def _wrong(task: Task, v: float) -> str:
    if task.wrong:  # keys: a confusable key's value; format: the word as given
        return task.wrong[0] if v < 0.7 or len(task.wrong) == 1 else task.wrong[1]
    if task.task == "arith":
        delta = (1, -1, 10, -10)[int(v * 4)]
        return str(int(task.answer) + delta)
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
