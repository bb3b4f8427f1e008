"""The built-in quality suites' prompts: how they are written and how they are read back.

Formats (:func:`needle_prompt`, :func:`keys_prompt`,
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

The simulator's quality face (:mod:`abtui.sim.quality_face`) answers these prompts; the
built-in suites (:mod:`abtui.quality.builtin`) send them.
"""

from __future__ import annotations

import random
import re
from collections import deque
from dataclasses import dataclass

TASKS = ("niah", "keys", "arith", "format")

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
class GeneratedPrompt:
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


def needle_prompt(seed: int, context_tokens: int, depth: float | None = None) -> GeneratedPrompt:
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
    return GeneratedPrompt("niah", prompt, value, len(prompt.split()))


def keys_prompt(seed: int, context_tokens: int, n_keys: int = 4) -> GeneratedPrompt:
    """A ``keys`` prompt: ``n_keys`` (≥ 2) confusable keys spread through the context."""
    rng = random.Random(f"keys:{seed}")
    stem = _key_stem(rng)
    suffixes = rng.sample(range(10, 100), max(2, min(n_keys, 90)))
    values = rng.sample(range(1_000_000, 10_000_000), len(suffixes))
    keys = [f"{stem}-{s}" for s in suffixes]
    statements = [f"The pass key for {k} is {v}." for k, v in zip(keys, values, strict=True)]
    asked = rng.randrange(len(keys))
    prompt = _haystack(rng, context_tokens, statements, keys[asked])
    return GeneratedPrompt("keys", prompt, str(values[asked]), len(prompt.split()))


def arithmetic_prompt(seed: int) -> GeneratedPrompt:
    rng = random.Random(f"arith:{seed}")
    op = rng.choice("+-*")
    a, b = (rng.randint(2, 99), rng.randint(2, 99)) if op == "*" else (
        rng.randint(10, 999), rng.randint(10, 999),
    )  # fmt: skip
    prompt = f"What is {a} {op} {b}? Answer with the number only."
    return GeneratedPrompt("arith", prompt, str(_calc(a, op, b)), len(prompt.split()))


def format_prompt(seed: int) -> GeneratedPrompt:
    word = random.Random(f"format:{seed}").choice(_FORMAT_WORDS)
    prompt = f"Write the word {word} in capital letters. Answer with that word only."
    return GeneratedPrompt("format", prompt, word.upper(), len(prompt.split()))


def _calc(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


# -- reading them back ---------------------------------------------------------------------


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


