"""A conversation's turns in the load generator (docs/guide.md, Conversations).

The generator plays a conversation as one task: turn 0 at the conversation's arrival (the same
instant on every arm), turn k when turn k − 1's answer completed *on this arm* plus the turn's
think time, so an arm that answers slower also asks its next turn later. A turn that fails (or
is cut short by an error) ends the conversation on that arm: its later turns are not sent, and
each is recorded as skipped (status ``cancelled``, error class ``skipped``), so the verdict,
which pairs the arms turn by turn, drops those pairs on both sides alike.
"""

from __future__ import annotations

import dataclasses
from urllib.parse import quote

from abtui.client.items import Item
from abtui.client.records import CANCELLED, E_SKIPPED, RequestRecord
from abtui.client.target import Target

# characters a conversation id keeps in a header value; the rest is %-escaped (an id comes
# from a file: it must not end the header or start another one)
_HEADER_SAFE = "!#$&'()*+,-./:;<=>?@[]^_`{|}~"


def conversations_of(items: list[Item]) -> list[list[Item]]:
    """``items`` (turns, conversation after conversation) grouped by conversation, in order."""
    out: list[list[Item]] = []
    for it in items:
        if out and it.turn > 0 and out[-1][-1].conversation == it.conversation:
            out[-1].append(it)
        else:
            out.append([it])
    return out


def session_target(target: Target, conversation: str, header: str | None) -> Target:
    """``target`` for one conversation's turns: with the session header naming it (when
    ``header``), and its id as the fast client's connection affinity."""
    headers = target.headers
    if header:
        headers = {**headers, header: quote(conversation, safe=_HEADER_SAFE)}
    return dataclasses.replace(target, headers=headers, affinity=conversation)


def skipped(rec: RequestRecord, failed_turn: int, t_ns: int) -> RequestRecord:
    """``rec`` (a later turn) marked as not sent because ``failed_turn`` failed on this arm."""
    rec.scheduled_ns = rec.dispatched_ns = t_ns
    rec.done_ns = t_ns
    rec.status = CANCELLED
    rec.error_class = E_SKIPPED
    rec.error_message = f"not sent: turn {failed_turn} of this conversation failed on this arm"
    return rec
