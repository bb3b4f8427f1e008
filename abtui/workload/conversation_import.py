"""Whole conversations from traces, and synthetic ones (:mod:`abtui.workload.conversations`).

- ``sharegpt``: every human turn an assistant turn answers becomes a turn, in order (the
  single-request importer keeps only the first pair). A leading ``system`` turn is turn 0's
  system message; consecutive human turns are joined, as are consecutive assistant turns;
  a last human turn with no answer is dropped and counted. ``max_tokens`` of a turn is its
  recorded answer's length / 4 (no tokenizer); the recorded answer is the history later turns
  carry. ShareGPT has no times: think times are drawn (:class:`ThinkTime`, seeded by the
  conversation's id and turn), conversations all arrive at 0 unless ``rate`` spaces them.
- ``mooncake``: JSON Lines rows ``{"timestamp" (ms), "input_length", "output_length",
  "hash_ids"}``, grouped into conversations by an optional ``session_id`` (in file order; a
  row without one is a conversation of one turn). A row's prompt is its whole input, its
  ``hash_ids`` the 512-token blocks it shares, so turns are not cumulative: equal ids give equal
  text (:class:`abtui.workload.jsonl.PromptSynth`), and a prefix cache sees the trace's sharing.
  Think time: the row's ``delay`` (ms) where given, else the gap between the turn's timestamp
  and the previous one's (which holds the trace's answer time too: an upper bound).
- :func:`synthetic_conversations`: turns per conversation, a system prompt every conversation
  shares, user and answer lengths, think times, conversation arrivals (:class:`ConversationShape`).

Bad rows follow the single-request importers' rules (:mod:`abtui.workload.importers`):
``FILE:LINE: what`` (or the JSON array entry), exit 2, unless ``skip_bad``; rows with nothing to
replay are left out and counted.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from abtui import limits
from abtui.client.items import synthetic_prompt
from abtui.errors import UsageError, WorkloadError
from abtui.workload import importers_io
from abtui.workload.conversations import Conversation, Turn
from abtui.workload.importers import (
    _ASSISTANT,
    _HUMAN,
    CHARS_PER_TOKEN,
    _mooncake,
    _number,
    _raise_bad,
    _rows,
)
from abtui.workload.importers_io import _Bad, _Unusable
from abtui.workload.jsonl import ReadStats
from abtui.workload.synthetic import gamma_offsets, lognormal_lengths

NO_TURN = "conversations with no human turn followed by an assistant turn"
UNANSWERED = "unanswered last human turns"


@dataclass(frozen=True, slots=True)
class ThinkTime:
    """Think time before a turn (after the previous answer): gamma, mean ``mean_s``, coefficient
    of variation ``cv`` (1: exponential); ``mean_s = 0``: none."""

    mean_s: float = 5.0
    cv: float = 1.0

    def draw(self, seed: int, conv_id: str, k: int) -> float:
        """Turn ``k``'s think time (0 for turn 0), the same for the same seed, id and turn."""
        if k == 0 or self.mean_s <= 0:
            return 0.0
        shape = 1.0 / (self.cv * self.cv)
        rng = random.Random(f"think:{seed}:{conv_id}:{k}")
        v = rng.gammavariate(shape, self.mean_s / shape)
        return round(min(v, limits.MAX_WAIT_S), 6)


# ---------------------------------------------------------------- ShareGPT


def _estimate(answer: str) -> int:
    est = max(1, round(len(answer) / CHARS_PER_TOKEN))
    return _number("item.max_tokens", est, "the answer's length / 4")


def _sharegpt_turns(entry: object) -> tuple[str | None, list[tuple[str, str]], bool]:
    """(system prompt, [(user, answer)], whether a last human turn went unanswered)."""
    entry = _raise_bad(entry)
    if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
        raise _Bad("expected an object with a 'conversations' list")
    system, pairs, asked, answer = None, [], [], []
    for i, t in enumerate(entry["conversations"]):
        if not isinstance(t, dict):
            raise _Bad(f"conversations[{i}] must be an object with 'from' and 'value'")
        who, value = str(t.get("from")).lower(), t.get("value")
        if not isinstance(value, str):
            raise _Bad(f"conversations[{i}].value must be a string")
        if who == "system" and not pairs and not asked:
            system = value
        elif who in _HUMAN:
            if answer:  # a new question: the previous pair is complete
                pairs.append(("\n".join(asked), "\n".join(answer)))
                asked, answer = [], []
            if value.strip():
                asked.append(value)
        elif who in _ASSISTANT and asked:
            answer.append(value)
    if asked and answer:
        pairs.append(("\n".join(asked), "\n".join(answer)))
    return system, pairs, bool(asked) and not answer


def _sharegpt_conversation(raw: object) -> dict:
    system, pairs, unanswered = _sharegpt_turns(raw)
    if not pairs:
        raise _Unusable(NO_TURN)
    turns = []
    for k, (user, answer) in enumerate(pairs):
        msgs = [{"role": "user", "content": user}]
        if k == 0 and system:
            msgs.insert(0, {"role": "system", "content": system})
        turns.append({"messages": msgs, "max_tokens": _estimate(answer), "answer": answer})
    limits.check("conversation.turns", len(turns), "turns (how many)")
    ident = raw.get("id") if isinstance(raw, dict) else None
    return {"id": None if ident is None else str(ident), "turns": turns, "unanswered": unanswered}


def sharegpt_conversations(
    path: str | Path,
    *,
    think: ThinkTime = ThinkTime(),
    rate: float | None = None,
    seed: int = 0,
    skip_bad: bool = False,
) -> tuple[list[Conversation], ReadStats, Counter]:
    """Whole conversations of a ShareGPT dump (module docstring): the conversations, what was
    read, and what was left out (reason → count)."""
    p = Path(path)
    stats, left_out = ReadStats(), Counter()
    out: list[Conversation] = []
    rows = _rows(
        p,
        stats,
        skip_bad,
        importers_io.json_array_or_lines(p),
        _sharegpt_conversation,
        left_out,
    )
    for i, (_, _, rec) in enumerate(rows):
        cid = rec["id"] or f"sharegpt{i}"
        if rec["unanswered"]:
            left_out[UNANSWERED] += 1
        turns = [
            Turn(
                messages=t["messages"],
                max_tokens=t["max_tokens"],
                think_s=think.draw(seed, cid, k),
                answer=t["answer"],
            )
            for k, t in enumerate(rec["turns"])
        ]
        out.append(Conversation(id=cid, arrival_s=0.0, turns=turns, seed=seed))
    if not out:
        raise WorkloadError(f"{p}: no conversations with an answered turn in this ShareGPT file")
    _space(out, rate, seed)
    return out, stats, left_out


def _usage_check(field: str, value: object, what: str) -> None:
    """A value the caller gave (a flag): out of its range is a usage error (exit 2)."""
    try:
        limits.check(field, value, what)
    except limits.OutOfRange as e:
        raise UsageError(str(e)) from None


def _space(convs: list[Conversation], rate: float | None, seed: int) -> None:
    """Conversation starts at ``rate`` per second (Poisson, seeded), when given."""
    if rate is None:
        return
    _usage_check("load.rate", rate, "--rate")
    offsets = gamma_offsets(len(convs), rate, 1.0, np.random.default_rng([seed, 35]))
    for c, a in zip(convs, offsets, strict=True):
        c.arrival_s = round(a, 6)


# ---------------------------------------------------------------- Mooncake


def _mooncake_turn(raw: object) -> dict:
    rec = _mooncake(raw)  # the single-request checks: timestamp, lengths, hash_ids
    row = raw if isinstance(raw, dict) else {}
    sid = row.get("session_id")
    if sid is not None and (not isinstance(sid, str | int) or isinstance(sid, bool)):
        raise _Bad(f"session_id must be a string or a whole number, got {sid!r}")
    rec["session_id"] = None if sid is None else str(sid)
    delay = row.get("delay")
    if delay is not None:
        most = limits.LIMITS["conversation.think_s"].high * 1000
        if (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not 0 <= delay <= most  # (NaN fails it too)
        ):
            raise _Bad(f"delay must be milliseconds from 0 to {most:,.0f}, got {delay!r}")
        rec["think_s"] = delay / 1000.0
    return rec


def mooncake_conversations(
    path: str | Path, *, seed: int = 0, skip_bad: bool = False
) -> tuple[list[Conversation], ReadStats, Counter]:
    """Conversations of a Mooncake trace (module docstring), in order of their first turn."""
    p = Path(path)
    stats, left_out = ReadStats(), Counter()
    by_session: dict[str, list[dict]] = {}
    for i, (_, _, rec) in enumerate(
        _rows(p, stats, skip_bad, importers_io.json_lines(p), _mooncake_turn, left_out)
    ):
        by_session.setdefault(rec["session_id"] or f"mooncake{i}", []).append(rec)
    if not by_session:
        raise WorkloadError(f"{p}: no usable requests in this mooncake file")
    t0 = min(rows[0]["arrival_s"] for rows in by_session.values())
    out = []
    for sid, rows in by_session.items():
        if len(rows) > limits.LIMITS["conversation.turns"].high:
            raise WorkloadError(
                f"{p}: session_id {sid!r} has {len(rows):,} turns",
                f"a conversation holds at most {limits.LIMITS['conversation.turns'].high:,.0f}",
            )
        turns = []
        for k, r in enumerate(rows):
            gap = 0.0 if k == 0 else max(0.0, r["arrival_s"] - rows[k - 1]["arrival_s"])
            think = 0.0 if k == 0 else r.get("think_s", min(gap, limits.MAX_WAIT_S))
            turns.append(
                Turn(
                    messages=[],
                    max_tokens=r["max_tokens"],
                    think_s=round(think, 6),
                    input_tokens=r["input_tokens"],
                    prefix_ids=r["prefix_ids"],
                )
            )
        arrival = round(rows[0]["arrival_s"] - t0, 6)
        try:
            limits.check("item.arrival_s", arrival, f"session {sid}'s offset from the first row")
        except limits.OutOfRange as e:
            raise WorkloadError(f"{p}: {e}", "a trace spans at most that long") from None
        out.append(Conversation(sid, arrival, turns, cumulative=False, seed=seed))
    out.sort(key=lambda c: c.arrival_s)
    return out, stats, left_out


# ---------------------------------------------------------------- synthetic


@dataclass(frozen=True, slots=True)
class ConversationShape:
    """Conversations of a chat service: lengths lognormal (median, σ, clamp), think times
    gamma, conversation starts Poisson at ``rate`` per second."""

    turns_median: int = 4
    turns_sigma: float = 0.5
    turns_range: tuple[int, int] = (1, 20)
    system_tokens: int = 256  # one system prompt every conversation shares (0: none)
    user_median: int = 64
    user_sigma: float = 0.6
    user_range: tuple[int, int] = (4, 2048)
    output_median: int = 128
    output_sigma: float = 0.6
    output_range: tuple[int, int] = (8, 1024)
    think: ThinkTime = ThinkTime()
    rate: float = 1.0  # conversations started per second

    def validate(self) -> None:
        if self.system_tokens < 0:
            raise UsageError(f"system prompt tokens must be >= 0, got {self.system_tokens}")
        if not (self.think.mean_s >= 0 and self.think.cv > 0):
            raise UsageError(
                f"think time needs mean >= 0 and cv > 0, got {self.think.mean_s}, {self.think.cv}"
            )
        _usage_check("conversation.think_s", self.think.mean_s, "think time's mean")
        _usage_check("load.rate", self.rate, "conversation rate")


def synthetic_conversations(
    n: int, seed: int = 0, shape: ConversationShape | None = None
) -> list[Conversation]:
    """``n`` seeded conversations of ``shape``: the same seed, the same conversations. The
    system prompt is the same text in all (a shared prefix); each user message starts with its
    conversation and turn (``c3 t1``), so nothing else is shared by accident. The answers the
    history carries are synthesised from the seed (:meth:`Conversation.recorded_answer`)."""
    shape = shape or ConversationShape()
    shape.validate()
    rng = np.random.default_rng([seed, 35])
    turns_n = lognormal_lengths(n, shape.turns_median, shape.turns_sigma, *shape.turns_range, rng)
    arrivals = gamma_offsets(n, shape.rate, 1.0, rng)
    text = random.Random(f"conversations:{seed}")
    system = synthetic_prompt(shape.system_tokens, text) if shape.system_tokens else None
    out = []
    for c in range(n):
        m = turns_n[c]
        users = lognormal_lengths(m, shape.user_median, shape.user_sigma, *shape.user_range, rng)
        outs = lognormal_lengths(
            m, shape.output_median, shape.output_sigma, *shape.output_range, rng
        )
        cid = f"c{c}"
        turns = []
        for k in range(m):
            msgs = [
                {"role": "user", "content": f"{cid} t{k} {synthetic_prompt(users[k] - 2, text)}"}
            ]
            if k == 0 and system:
                msgs.insert(0, {"role": "system", "content": system})
            turns.append(Turn(msgs, outs[k], shape.think.draw(seed, cid, k)))
        out.append(Conversation(cid, round(arrivals[c], 6), turns, seed=seed))
    return out
