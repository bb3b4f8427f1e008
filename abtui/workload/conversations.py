"""Conversations: a workload unit of several turns, each sent after the previous one's answer.

A :class:`Conversation` starts at ``arrival_s``; its turn ``k`` is sent when turn ``k − 1``'s
answer has completed plus the turn's think time ``think_s`` (turn 0's is 0: it goes at the
conversation's arrival). Each turn has its own new messages (the user's, and a system prompt
on turn 0), the length of the answer it asks for (``max_tokens``) and, from a trace, the answer
recorded there. The prompt of turn ``k`` (:meth:`Conversation.messages`) is, when
``cumulative``, every earlier turn's messages with an answer after each, then turn ``k``'s own:

- ``history="recorded"`` (the default): the earlier answers are the trace's (or, for a
  synthetic conversation, seeded text of the asked length), so both arms send the same prompts,
  byte for byte, and a prefix cache sees the same sharing on each;
- ``history="own"``: the earlier answers are the arm's own (given by the caller), as a real
  chat client does; the arms' prompts then differ from turn 1 on.

A Mooncake trace records each turn's whole prompt (its ``hash_ids`` cover the history), so its
conversations are not ``cumulative``: a turn's prompt is its own messages only.

abtui's conversation file is JSON Lines, one conversation a line (:func:`read_conversations`,
:func:`conversation_record`)::

    {"id": "c1", "arrival_s": 0.0, "cumulative": true,
     "turns": [{"messages": [{"role": "system", "content": "…"}, {"role": "user", "content": "…"}],
                "max_tokens": 120, "think_s": 0.0, "answer": "…"},
               {"messages": [{"role": "user", "content": "…"}], "max_tokens": 80, "think_s": 4.2}]}

A bad line stops the read with ``FILE:LINE: turns[K].FIELD …`` unless ``skip_bad`` (then it is
skipped and counted). Sending the turns is the run loop's part (docs/guide.md, Conversations).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from abtui import limits
from abtui.client.items import Item
from abtui.errors import WorkloadError
from abtui.workload import importers_io
from abtui.workload.importers_io import _Bad
from abtui.workload.jsonl import BLOCK_TOKENS, PromptSynth, ReadStats, words

HISTORIES = ("recorded", "own")
_TURN_KEYS = frozenset(
    {"messages", "max_tokens", "think_s", "answer", "input_tokens", "prefix_ids", "block_tokens"}
)
_CONV_KEYS = frozenset({"id", "arrival_s", "cumulative", "turns"})


@dataclass(slots=True)
class Turn:
    """One turn: what it adds to the conversation, the answer length it asks, the wait before."""

    messages: list[dict]  # this turn's new messages (a user message; a system one on turn 0)
    max_tokens: int
    think_s: float = 0.0  # after the previous turn's answer completed (turn 0: 0)
    answer: str | None = None  # the answer recorded in the trace (None: synthesised on demand)
    input_tokens: int | None = None  # this turn's whole prompt length, where the trace says
    # a prompt given by its length and shared blocks (Mooncake), synthesised when sent
    # (:class:`abtui.workload.jsonl.PromptSynth`: the same block id, the same text)
    prefix_ids: list[int] | None = None
    block_tokens: int = BLOCK_TOKENS


@dataclass(slots=True)
class Conversation:
    """Turns sent one after another (module docstring)."""

    id: str
    arrival_s: float
    turns: list[Turn]
    cumulative: bool = True  # a turn's prompt carries the earlier turns (False: Mooncake)
    seed: int = 0  # seeds the answers synthesised for turns that recorded none
    _answers: dict[int, str] = field(default_factory=dict, repr=False)

    def recorded_answer(self, k: int) -> str:
        """Turn ``k``'s recorded answer, or seeded text of its ``max_tokens`` words."""
        turn = self.turns[k]
        if turn.answer is not None:
            return turn.answer
        if k not in self._answers:
            rng = random.Random(f"answer:{self.seed}:{self.id}:{k}")
            self._answers[k] = words(rng, turn.max_tokens)
        return self._answers[k]

    def own_messages(self, k: int, synth: PromptSynth | None = None) -> list[dict]:
        """Turn ``k``'s new messages; a turn given by length and blocks is synthesised by
        ``synth`` (one per workload, so that equal blocks are equal text everywhere)."""
        t = self.turns[k]
        if t.prefix_ids is None:
            return list(t.messages)
        synth = synth or PromptSynth(self.seed)
        text = synth.prompt(f"{self.id}.{k}", t.input_tokens or 1, t.prefix_ids, t.block_tokens)
        return [{"role": "user", "content": text}]

    def messages(
        self, k: int, answers: list[str] | None = None, synth: PromptSynth | None = None
    ) -> list[dict]:
        """The chat messages turn ``k`` sends. ``answers``: the arm's own answers to turns
        ``0 … k − 1`` (``--history own``); None: the recorded ones (the default)."""
        if not 0 <= k < len(self.turns):
            raise IndexError(f"conversation {self.id} has {len(self.turns)} turns, not {k + 1}")
        if not self.cumulative:
            return self.own_messages(k, synth)
        if answers is not None and len(answers) < k:
            raise ValueError(f"turn {k} needs {k} earlier answers, got {len(answers)}")
        out: list[dict] = []
        for j in range(k):
            out += self.own_messages(j, synth)
            said = answers[j] if answers is not None else self.recorded_answer(j)
            out.append({"role": "assistant", "content": said})
        return out + list(self.turns[k].messages)

    @property
    def n_turns(self) -> int:
        return len(self.turns)


# ---------------------------------------------------------------- the file format


def conversation_record(c: Conversation) -> dict:
    """``c`` as one line of the conversation file (its synthesised answers written out, so that
    the file replays the same history without the seed)."""
    turns = []
    for k, t in enumerate(c.turns):
        rec: dict = {"max_tokens": t.max_tokens}
        if t.prefix_ids is None:
            rec["messages"] = t.messages
        else:
            rec["prefix_ids"] = t.prefix_ids
            if t.block_tokens != BLOCK_TOKENS:
                rec["block_tokens"] = t.block_tokens
        if t.think_s:
            rec["think_s"] = round(t.think_s, 6)
        if c.cumulative and k < len(c.turns) - 1:  # the last answer is never history
            rec["answer"] = c.recorded_answer(k)
        elif t.answer is not None:
            rec["answer"] = t.answer
        if t.input_tokens is not None:
            rec["input_tokens"] = t.input_tokens
        turns.append(rec)
    out = {"id": c.id, "arrival_s": round(c.arrival_s, 6), "turns": turns}
    if not c.cumulative:
        out["cumulative"] = False
    return out


def _check_messages(v: object, where: str) -> list[dict]:
    if not isinstance(v, list) or not v:
        raise _Bad(f"{where}.messages must be a non-empty list of messages")
    for i, m in enumerate(v):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _Bad(f"{where}.messages[{i}] must be an object with a 'role' string")
        if not isinstance(m.get("content"), str | list):
            raise _Bad(f"{where}.messages[{i}].content must be a string or a list of parts")
    return v


def _whole(v: object, field_name: str, what: str) -> int:
    if isinstance(v, float):
        raise _Bad(f"{what} must be a whole number, got {v!r}")
    try:
        return limits.check(field_name, v, what)
    except limits.OutOfRange as e:
        raise _Bad(str(e)) from None


def _seconds(v: object, field_name: str, what: str) -> float:
    try:
        return float(limits.check(field_name, v, what))
    except limits.OutOfRange as e:
        raise _Bad(str(e)) from None


def parse_turn(rec: object, k: int) -> Turn:
    """One turn of a conversation line; ``_Bad`` names the field (``turns[K].max_tokens``)."""
    where = f"turns[{k}]"
    if not isinstance(rec, dict):
        raise _Bad(f"{where} must be an object")
    unknown = sorted(set(rec) - _TURN_KEYS)
    if unknown:
        raise _Bad(
            f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(_TURN_KEYS))})"
        )
    if "max_tokens" not in rec:
        raise _Bad(f"{where}.max_tokens is missing")
    answer = rec.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise _Bad(f"{where}.answer must be a string")
    n_in = rec.get("input_tokens")
    n_in = None if n_in is None else _whole(n_in, "item.input_tokens", f"{where}.input_tokens")
    prefix = rec.get("prefix_ids")
    if (prefix is None) == (rec.get("messages") is None):
        raise _Bad(f"{where}: give messages, or input_tokens with prefix_ids")
    if prefix is not None:
        if n_in is None:
            raise _Bad(f"{where}.prefix_ids needs {where}.input_tokens (the prompt's length)")
        if not isinstance(prefix, list):
            raise _Bad(f"{where}.prefix_ids must be a list of whole numbers")
        for i, b in enumerate(prefix):
            _whole(b, "item.prefix_id", f"{where}.prefix_ids[{i}]")
    return Turn(
        messages=[] if prefix is not None else _check_messages(rec.get("messages"), where),
        max_tokens=_whole(rec["max_tokens"], "item.max_tokens", f"{where}.max_tokens"),
        think_s=_seconds(rec.get("think_s", 0.0), "conversation.think_s", f"{where}.think_s"),
        answer=answer,
        input_tokens=n_in,
        prefix_ids=prefix,
        block_tokens=_whole(
            rec.get("block_tokens", BLOCK_TOKENS), "item.block_tokens", f"{where}.block_tokens"
        ),
    )


def parse_conversation(rec: object, line: int) -> Conversation:
    """One line of the conversation file; ``_Bad`` says which field is wrong."""
    if not isinstance(rec, dict):
        raise _Bad(f"expected a JSON object, got {type(rec).__name__}")
    unknown = sorted(set(rec) - _CONV_KEYS)
    if unknown:
        raise _Bad(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(_CONV_KEYS))})")
    ident = rec.get("id", f"c{line}")
    if not isinstance(ident, str | int) or isinstance(ident, bool):
        raise _Bad(f"id must be a string, got {ident!r}")
    cumulative = rec.get("cumulative", True)
    if not isinstance(cumulative, bool):
        raise _Bad(f"cumulative must be true or false, got {cumulative!r}")
    turns = rec.get("turns")
    if not isinstance(turns, list) or not turns:
        raise _Bad("turns must be a non-empty list")
    limits.check("conversation.turns", len(turns), "turns (how many)")
    parsed = [parse_turn(t, k) for k, t in enumerate(turns)]
    if parsed[0].think_s:
        raise _Bad("turns[0].think_s must be 0: the first turn goes at the conversation's arrival")
    return Conversation(
        id=str(ident),
        arrival_s=_seconds(rec.get("arrival_s", 0.0), "item.arrival_s", "arrival_s"),
        turns=parsed,
        cumulative=cumulative,
    )


def read_conversations(
    path: str | Path, *, skip_bad: bool = False
) -> tuple[list[Conversation], ReadStats]:
    """The conversations of an abtui conversation file, in arrival order, and what was read.
    A bad line raises :class:`~abtui.errors.WorkloadError` ``FILE:LINE: field …`` (exit 2)
    unless ``skip_bad``."""
    p = Path(path)
    stats = ReadStats()
    out: list[Conversation] = []
    for n, raw in importers_io.json_lines(p):
        stats.lines = n
        try:
            if isinstance(raw, _Bad):
                raise raw
            conv = parse_conversation(raw, n)
        except (_Bad, limits.OutOfRange) as e:
            if not skip_bad:
                raise WorkloadError(
                    f"{p}:{n}: {e}", "fix the line, or pass --skip-bad to skip and count it"
                ) from None
            stats.skip(f"{p}:{n}", str(e))
            continue
        stats.kept += 1
        out.append(conv)
    if not out:
        raise WorkloadError(f"{p}: no conversations in this file")
    out.sort(key=lambda c: c.arrival_s)
    return out, stats


def write_conversations(path: str | Path, convs: Iterable[Conversation]) -> int:
    """Write conversations one per line; how many."""
    from abtui.workload.jsonl import write_jsonl

    return write_jsonl(path, (conversation_record(c) for c in convs))


# ---------------------------------------------------------------- turns as workload items


def turn_items(convs: Iterable[Conversation], seed: int = 0) -> list[Item]:
    """Every turn of ``convs`` as one workload item, conversation after conversation, turn
    after turn: its prompt with the recorded history (``messages``), the conversation's arrival
    (``arrival_s``), its id, turn index and think time. A turn is the unit the arms are paired
    on. ``turn_messages`` says how many of the prompt's last messages are the turn's own, so a
    generator can put the arm's own answers in their place (``history = "own"``)."""
    synth = PromptSynth(seed)  # one for the workload: equal blocks, equal text everywhere
    out: list[Item] = []
    for c in convs:
        for k, t in enumerate(c.turns):
            own = len(c.own_messages(k, synth)) if c.cumulative else 0
            out.append(
                Item(
                    index=len(out),
                    id=f"{c.id}.{k}",
                    arrival_s=c.arrival_s,
                    messages=c.messages(k, synth=synth),
                    max_tokens=t.max_tokens,
                    n_input=t.input_tokens,
                    conversation=c.id,
                    turn=k,
                    think_s=t.think_s,
                    turn_messages=own,
                )
            )
    return out


def own_history_messages(prev: list[tuple[Item, str]], item: Item) -> list[dict]:
    """The messages ``item`` (a turn) sends under ``history = "own"``: each earlier turn's own
    messages followed by the answer this arm gave to it (``prev``: the earlier turns and those
    answers, in order), then the turn's own. A turn whose prompt is whole (not cumulative:
    Mooncake) is sent as it is."""
    if not item.turn_messages or item.messages is None:
        return item.chat_messages()
    out: list[dict] = []
    for it, said in prev:
        if it.messages is not None and it.turn_messages:
            out += it.messages[-it.turn_messages :]
        out.append({"role": "assistant", "content": said})
    return out + item.messages[-item.turn_messages :]
