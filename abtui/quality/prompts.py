"""The built-in quality suites' prompts: how they are written and how they are read back.

Every prompt has two renderings of the same text (:class:`GeneratedPrompt`):

- **chat** (``messages``): for a chat/instruct model, sent to ``/v1/chat/completions`` so the
  server applies the model's own chat template. One user message, or two worked example turns
  (user, assistant) and then the question.
- **completion** (``prompt``): for a base model, plain text for ``/v1/completions``: the same
  text, the question as ``Q: …`` and an answer that the prompt starts (``A: The pass key is``),
  so a model that only continues text continues with the answer. It is sent with a stop at the
  next question (:data:`STOPS`): a base model goes on writing questions and answers of its own.

The formats (:func:`needle_prompt`, :func:`keys_prompt`, :func:`copy_prompt` and
:func:`capital_prompt` generate them, :func:`recognise` reads them, in either rendering):

``niah`` (needle in a haystack)
    ``Below is a long text. Somewhere in it is a pass key, a five-digit number. Find it and
    remember it.``, then filler sentences with one statement ``The pass key is <VALUE>.`` at a
    chosen depth, then ``What is the pass key?`` (chat: ``… Answer with the number only.``;
    completion: ``A: The pass key is``). VALUE is a five-digit number.
``keys`` (multi-key retrieval)
    statements ``The <label> is <VALUE>.`` for several labels of the same kind of value (``pass
    key``, ``door code``, ``room number``, … :data:`LABELS`; every VALUE a five-digit number)
    spread through the filler; the opening line names the one that will be asked (``… Somewhere
    in it is the door code, a five-digit number …``) and the question asks it (``What is the
    door code?``). The other keys' values are the item's distractors: an answer that names one
    is wrong. Labels, not confusable names: SmolLM2-135M-Instruct tells ``the door code`` from
    ``the room number`` (88 % at 1k tokens) but not ``the red door`` from ``the blue door``
    (50 %, about what one key read at random from four would give).
``copy`` (exact copy)
    ``Repeat this code exactly: <CODE>`` after two worked examples; CODE is three capitals, a
    hyphen and three digits (``XGD-379``). Answer: CODE.
``capital`` (knowledge recall)
    ``What is the capital of <COUNTRY>? Answer with the city only.``, COUNTRY from a fixed list of
    countries whose capital is not in dispute. Answer: the city. The completion rendering has two
    worked examples first (a base model needs them to answer rather than ramble); the chat one
    has none (SmolLM2-135M-Instruct answered "ToKiNaL" after an example answer "Tokyo").

The filler is made of short plain sentences (``The baker waits near the river every
evening.``) with no digits and no "pass key", so it never leaks an answer. Plain sentences, not
random words: a word salad filler drives a 135M-parameter model's pass-key accuracy to 0 % at
3k tokens where the same model finds the key in plain sentences (docs/methods.md §4).

The simulator's quality face (:mod:`abtui.sim.quality_face`) answers these prompts; the
built-in suites (:mod:`abtui.quality.builtin`) send them. A chat request is recognised on its
messages' contents joined by newlines.
"""

from __future__ import annotations

import random
import re
from collections import deque
from dataclasses import dataclass

TASKS = ("niah", "keys", "copy", "capital")
STOPS = ("\nQ:", "\n\n")  # completion rendering: the answer ends before the next question

_SUBJECTS = (
    "The baker|The farmer|A child|The teacher|My neighbour|The painter|A student|The old man|"
    "Her friend|The driver|A fisherman|The gardener|His sister|The doctor|A traveller|The cook"
).split("|")
_VERBS = "walks|waits|sings|reads|writes|sleeps|works|rests|eats|talks|sits|plays".split("|")
_PLACES = (
    "near the river|by the old bridge|in the garden|at the market|under a tree|beside the "
    "station|in the small village|on the hill|along the road|behind the house|at the harbour|"
    "in the library|by the window|across the field"
).split("|")
_TIMES = (
    "in the morning|every evening|after lunch|before dawn|on Sundays|in the rain|most days|at "
    "night|in spring|late in autumn|in winter|after work"
).split("|")
# the keys suite's labels: one kind of value (a five-digit number), told apart by its name
LABELS = ("pass key", "door code", "room number", "ticket number", "order number", "locker number")
_CODE_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"  # no I or O: never read as 1 or 0
# Countries whose capital is not in dispute, and which a small chat model knows.
CAPITALS = {
    "France": "Paris",
    "Germany": "Berlin",
    "Spain": "Madrid",
    "England": "London",
    "Russia": "Moscow",
    "Egypt": "Cairo",
    "China": "Beijing",
    "Greece": "Athens",
    "Canada": "Ottawa",
    "Ireland": "Dublin",
    "Norway": "Oslo",
    "Portugal": "Lisbon",
    "Austria": "Vienna",
    "Poland": "Warsaw",
    "Sweden": "Stockholm",
    "Kenya": "Nairobi",
    "Peru": "Lima",
    "Thailand": "Bangkok",
    "Cuba": "Havana",
    "Argentina": "Buenos Aires",
    "Denmark": "Copenhagen",
    "Hungary": "Budapest",
    "Finland": "Helsinki",
    "Chile": "Santiago",
}
_CAPITAL_EXAMPLES = (("Italy", "Rome"), ("Japan", "Tokyo"))  # worked examples, never asked
_COPY_EXAMPLES = ("KTW-482", "BHM-157")

_NIAH_INTRO = (
    "Below is a long text. Somewhere in it is a pass key, a five-digit number. "
    "Find it and remember it."
)
_KEYS_INTRO = (
    "Below is a long text. Somewhere in it is the {key}, a five-digit number. "
    "Find it and remember it."
)
_NUMBER_ONLY = "Answer with the number only."
_LABEL = "|".join(LABELS)
_STATEMENT = re.compile(rf"The ({_LABEL}) is (\d+)\.")
_QUESTION = re.compile(rf"What is the ({_LABEL})\?")
_COPY = re.compile(r"Repeat this code exactly: ([A-Z]{3}-[0-9]{3})")
_CAPITAL = re.compile(r"What is the capital of ([A-Z][A-Za-z ]*?)\? Answer with the city only\.")


@dataclass(frozen=True, slots=True)
class GeneratedPrompt:
    """A generated quality prompt in both renderings, and its expected answer."""

    task: str  # one of TASKS
    messages: tuple[dict, ...]  # chat rendering
    prompt: str  # completion rendering
    answer: str
    context_tokens: int  # the completion rendering's length in the sim's tokens (words)
    distractors: tuple[str, ...] = ()  # other values in the context (never right)

    @property
    def text(self) -> str:
        """The chat rendering as the simulator reads it (contents joined by newlines)."""
        return "\n".join(m["content"] for m in self.messages)


@dataclass(frozen=True, slots=True)
class Task:
    """A recognised quality prompt."""

    task: str
    answer: str
    wrong: tuple[str, ...]  # plausible wrong answers, most plausible first


def filler(rng: random.Random, n_words: int) -> list[str]:
    """Whole plain sentences, ``n_words`` words or up to 8 more; no digits, no 'pass key'."""
    out: list[str] = []
    while len(out) < n_words:
        out += (
            f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_PLACES)} "
            f"{rng.choice(_TIMES)}."
        ).split()
    return out


def _insert(body: list[str], statement: str, depth: float) -> list[str]:
    """``body`` with ``statement`` between two sentences, nearest to ``depth`` (0..1)."""
    ends = [0] + [i + 1 for i, w in enumerate(body) if w.endswith(".")]
    at = min(ends, key=lambda e: abs(e - depth * len(body)))
    return body[:at] + statement.split() + body[at:]


def _retrieval(
    task: str,
    intro: str,
    body: list[str],
    question: str,
    lead: str,
    answer: str,
    distractors: tuple[str, ...] = (),
) -> GeneratedPrompt:
    text = " ".join(body)
    chat = f"{intro}\n\n{text}\n\n{question} {_NUMBER_ONLY}"
    prompt = f"{intro}\n\n{text}\n\nQ: {question}\nA: {lead}"
    return GeneratedPrompt(
        task, ({"role": "user", "content": chat},), prompt, answer, len(prompt.split()), distractors
    )


def _fixed_words(*parts: str) -> int:
    return sum(len(p.split()) for p in parts) + 4  # + "Q:", "A:" and the lead's slack


def needle_prompt(seed: int, context_tokens: int, depth: float | None = None) -> GeneratedPrompt:
    """A ``niah`` prompt of about ``context_tokens`` words; the needle at ``depth`` (0..1,
    default: drawn from the seed)."""
    rng = random.Random(f"niah:{seed}")
    value = str(rng.randint(10_000, 99_999))
    statement = f"The pass key is {value}."
    question, lead = "What is the pass key?", "The pass key is"
    n = context_tokens - _fixed_words(_NIAH_INTRO, statement, question, lead)
    body = filler(rng, n)
    d = rng.random() if depth is None else min(1.0, max(0.0, depth))
    return _retrieval("niah", _NIAH_INTRO, _insert(body, statement, d), question, lead, value)


def keys_prompt(
    seed: int, context_tokens: int, n_keys: int = 4, asked: int | None = None
) -> GeneratedPrompt:
    """A ``keys`` prompt: ``n_keys`` (2–6) labelled five-digit numbers spread through the
    context; the ``asked``-th (default: drawn from the seed) is asked. The same seed and length
    give the same text and values whichever key is asked."""
    rng = random.Random(f"keys:{seed}")
    n_keys = max(2, min(n_keys, len(LABELS)))
    labels = rng.sample(LABELS, n_keys)
    values = [str(v) for v in rng.sample(range(10_000, 100_000), n_keys)]
    statements = [f"The {k} is {v}." for k, v in zip(labels, values, strict=True)]
    drawn = rng.randrange(n_keys)  # drawn either way: the text is the same whichever is asked
    a = drawn if asked is None else asked % n_keys
    intro = _KEYS_INTRO.format(key=labels[a])
    question, lead = f"What is the {labels[a]}?", f"The {labels[a]} is"
    n = context_tokens - _fixed_words(intro, *statements, question, lead)
    body = filler(rng, n)
    for j, s in enumerate(statements):
        body = _insert(body, s, (j + 0.5) / n_keys)
    others = tuple(v for j, v in enumerate(values) if j != a)
    return _retrieval("keys", intro, body, question, lead, values[a], others)


def _shots(
    task: str,
    examples: list[tuple[str, str]],
    question: str,
    answer: str,
    chat_examples: bool = True,
) -> GeneratedPrompt:
    """Worked examples, then ``question``: example turns (chat, unless ``chat_examples`` is
    false) or Q/A lines (completion)."""
    messages: list[dict] = []
    for q, a in examples if chat_examples else ():
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    messages.append({"role": "user", "content": question})
    prompt = "".join(f"Q: {q}\nA: {a}\n\n" for q, a in examples) + f"Q: {question}\nA:"
    return GeneratedPrompt(task, tuple(messages), prompt, answer, len(prompt.split()))


def _code(rng: random.Random) -> str:
    return "".join(rng.choice(_CODE_LETTERS) for _ in range(3)) + f"-{rng.randint(100, 999)}"


def copy_prompt(seed: int) -> GeneratedPrompt:
    """A ``copy`` prompt: repeat a code exactly."""
    code = _code(random.Random(f"copy:{seed}"))
    ex = [(f"Repeat this code exactly: {c}", c) for c in _COPY_EXAMPLES]
    return _shots("copy", ex, f"Repeat this code exactly: {code}", code)


def _capital_question(country: str) -> str:
    return f"What is the capital of {country}? Answer with the city only."


def capital_prompt(seed: int, country: str | None = None) -> GeneratedPrompt:
    """A ``capital`` prompt: the capital of ``country`` (default: drawn from the seed), one of
    :data:`CAPITALS`."""
    country = country or random.Random(f"capital:{seed}").choice(sorted(CAPITALS))
    ex = [(_capital_question(c), city) for c, city in _CAPITAL_EXAMPLES]
    return _shots("capital", ex, _capital_question(country), CAPITALS[country], chat_examples=False)


# -- reading them back ---------------------------------------------------------------------


def _last(rx: re.Pattern, text: str) -> re.Match | None:
    """The last match (a question comes at the end of its prompt)."""
    found = deque(rx.finditer(text), maxlen=1)
    return found[0] if found else None


def _near_miss(code: str) -> str:
    """``code`` with one character changed: a plausible wrong copy."""
    i = len(code) - 1
    c = code[i]
    return code[:i] + (str((int(c) + 1) % 10) if c.isdigit() else "A")


def recognise(prompt: str) -> Task | None:
    """The quality task ``prompt`` asks (either rendering), or ``None`` for a free-form prompt."""
    if "What is the " in prompt and (q := _last(_QUESTION, prompt)) is not None:
        facts = dict(_STATEMENT.findall(prompt[: q.start()]))
        asked = q.group(1)
        if asked not in facts:
            return None
        wrong = tuple(v for k, v in facts.items() if k != asked)
        return Task("keys" if len(facts) > 1 else "niah", facts[asked], wrong)
    if "Repeat this code exactly:" in prompt:
        m = _last(_COPY, prompt)
        return None if m is None else Task("copy", m.group(1), (_near_miss(m.group(1)),))
    if "What is the capital of" in prompt:
        m = _last(_CAPITAL, prompt)
        if m is not None and m.group(1) in CAPITALS:
            city = CAPITALS[m.group(1)]
            near = [c for c in CAPITALS.values() if c != city]
            return Task("capital", city, (near[len(city) % len(near)],))
    return None
