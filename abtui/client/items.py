"""Workload items: what is sent, identically, to every arm."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# Short, common English words: each is a single token (with its leading space) in the
# Llama-3, Mistral, Qwen and GPT tokenizers, so ``n`` words make a prompt of about ``n`` tokens.
# The simulator counts prompt tokens the same way (whitespace-separated words).
_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no what "
    "up out who them some could into more other then its time only new about two may these first "
    "any my now such like our over man me even most made after also did many before must through "
    "back years where much your way well down should because each just those people how too "
    "little state good very make world still own see men work long get here between both life "
    "being under never day same another know while last might us great old year off come since "
    "against go came right used take three"
).split()


@dataclass(slots=True)
class Item:
    """One request of the workload, sent identically to every arm."""

    index: int  # position in the workload (0-based)
    id: str  # stable identifier (from a trace, or ``"i<index>"``)
    arrival_s: float = 0.0  # offset from the start of the run at which to send it
    prompt: str | None = None  # completions-style prompt (or the single user turn for chat)
    messages: list[dict] | None = None  # chat messages; when set, used instead of ``prompt``
    max_tokens: int = 128
    n_input: int | None = None  # intended prompt length in tokens, when known
    expected: str | None = None  # expected answer (quality suites)
    suite: str | None = None
    tags: list[str] = field(default_factory=list)
    # a turn of a conversation (abtui.workload.conversations): sent when the previous turn's
    # answer completed on the same arm plus ``think_s``; ``arrival_s`` is the conversation's
    conversation: str | None = None  # the conversation's id (None: a request on its own)
    turn: int = 0  # the turn's index in its conversation
    think_s: float = 0.0  # wait after the previous turn's answer (turn 0: none)
    # how many of the last ``messages`` are the turn's own (the rest is the recorded history,
    # replaced by the arm's own answers under ``history = "own"``); 0: the prompt is whole
    turn_messages: int = 0
    # the images it sends (abtui.client.images.describe of each, in order): made ones carry
    # their "seed" and are made again for the body; a workload file's are in ``messages``
    images: list[dict] | None = None

    def chat_messages(self) -> list[dict]:
        if self.messages is not None:
            return self.messages
        if self.images:  # made images, after the text (made now: never held with the item)
            from abtui.client.images import made_parts

            text = {"type": "text", "text": self.prompt or ""}
            return [{"role": "user", "content": [text, *made_parts(self.images)]}]
        return [{"role": "user", "content": self.prompt or ""}]


def synthetic_prompt(n_tokens: int, rng: random.Random) -> str:
    """A prompt of about ``n_tokens`` tokens of common words, deterministic given ``rng``."""
    return " ".join(rng.choice(_WORDS) for _ in range(max(1, n_tokens)))


def synthetic_items(
    n: int, input_tokens: int, output_tokens: int, seed: int, arrivals: list[float]
) -> list[Item]:
    """``n`` items with prompts of ``input_tokens`` tokens, ``max_tokens = output_tokens``.

    Every prompt starts with its index so that no two items share a prefix by accident
    (prefix caching would otherwise make later items look faster).
    """
    rng = random.Random(seed)
    items = []
    for i in range(n):
        body = synthetic_prompt(max(1, input_tokens - 1), rng)
        items.append(
            Item(
                index=i,
                id=f"i{i}",
                arrival_s=arrivals[i],
                prompt=f"{i} {body}",
                max_tokens=output_tokens,
                n_input=input_tokens,
            )
        )
    return items
