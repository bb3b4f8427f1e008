"""Prompts a real instruct model answers, for workloads whose *content* matters.

abtui's default synthetic prompts are strings of common words: right for load shape, wrong for
optimisations whose gain depends on what the model writes. n-gram speculative decoding drafts
tokens by finding the last few tokens earlier in the sequence: it gains when the answer repeats
its input, and barely at all when the model writes something new. So ``workload.task`` picks
one of two kinds of real prompt, each seeded by (seed, item id):

- ``repeat`` (input-grounded): "Repeat the following paragraph exactly …" and a paragraph of
  about ``n`` words of plain, grammatical sentences made from the lists below. A model that
  follows the instruction copies the paragraph: its output's n-grams are the prompt's.
- ``story`` (open generation): "Write a short story about …" with a subject, a deed and a
  place drawn from the same lists; the requested prompt length is not used (the instruction is
  what it is, ~20 words), the story is the model's own.

The sentences are made here (no outside text): no digits, no markup, nothing a tokenizer or a
model treats specially.
"""

from __future__ import annotations

import random

TASKS = ("repeat", "story")

_SUBJECTS = (
    "the old fisherman",
    "a young teacher",
    "the baker",
    "my neighbour",
    "the village doctor",
    "a tired traveller",
    "the head gardener",
    "our captain",
    "the librarian",
    "a quiet student",
    "the blacksmith",
    "the farmer's daughter",
    "a street musician",
    "the night guard",
    "the shop owner",
    "an old sailor",
    "the postman",
    "a curious child",
    "the innkeeper",
    "my grandmother",
)
_VERBS = (
    "mended",
    "carried",
    "painted",
    "found",
    "sold",
    "cleaned",
    "opened",
    "lost",
    "borrowed",
    "repaired",
    "wrapped",
    "moved",
    "polished",
    "hid",
    "bought",
    "dropped",
    "washed",
    "dried",
)
_OBJECTS = (
    "a wooden chair",
    "the broken gate",
    "a basket of apples",
    "the brass lamp",
    "a torn fishing net",
    "an old map",
    "the blue boat",
    "a letter from home",
    "the church bell",
    "a pair of boots",
    "the garden fence",
    "a loaf of bread",
    "the kitchen clock",
    "a box of candles",
    "the iron kettle",
    "a green umbrella",
    "a heavy coat",
    "the silver key",
)
_PLACES = (
    "near the harbour",
    "in the market square",
    "behind the school",
    "at the top of the hill",
    "by the river",
    "outside the bakery",
    "in the small library",
    "on the station platform",
    "under the old bridge",
    "beside the fountain",
    "in the quiet garden",
    "at the edge of town",
)
_TIMES = (
    "before sunrise",
    "after lunch",
    "on a rainy morning",
    "late in the evening",
    "during the storm",
    "on the first day of spring",
    "while the town slept",
    "just before noon",
    "at the end of the summer",
    "on a cold winter night",
)
_WEATHER = ("raining", "windy", "very cold", "warm and bright", "foggy", "almost dark")

REPEAT_INSTRUCTION = "Repeat the following paragraph exactly, word for word. Write nothing else."
STORY_INSTRUCTION = "Write a short story about {subject} who {verb} {obj} {place}."


def sentence(rng: random.Random) -> str:
    """One plain sentence, e.g. "After lunch, the baker carried a loaf of bread by the river."."""
    s, v, o = rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)
    p, t = rng.choice(_PLACES), rng.choice(_TIMES)
    shape = rng.randrange(3)
    if shape == 0:
        text = f"{s} {v} {o} {p} {t}."
    elif shape == 1:
        text = f"{t}, {s} {v} {o} {p}."
    else:
        text = f"it was {rng.choice(_WEATHER)} when {s} {v} {o} {p}."
    return text[0].upper() + text[1:]


def paragraph(rng: random.Random, n_words: int) -> str:
    """Sentences until the paragraph holds at least ``n_words`` words (at least one sentence)."""
    out: list[str] = []
    words = 0
    while words < n_words or not out:
        s = sentence(rng)
        out.append(s)
        words += len(s.split())
    return " ".join(out)


def task_prompt(task: str, seed: int, item_id: str, n_words: int) -> str:
    """The prompt of one item of ``task`` (``repeat`` | ``story``): the same for the same
    (seed, item id), whatever other items are made."""
    rng = random.Random(f"task:{task}:{seed}:{item_id}")
    if task == "repeat":
        return f"{REPEAT_INSTRUCTION}\n\n{paragraph(rng, n_words)}"
    if task == "story":
        return STORY_INSTRUCTION.format(
            subject=rng.choice(_SUBJECTS),
            verb=rng.choice(_VERBS),
            obj=rng.choice(_OBJECTS),
            place=rng.choice(_PLACES),
        )
    raise ValueError(f"unknown task {task!r} (known: {', '.join(TASKS)})")
