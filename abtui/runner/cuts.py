"""What the client's bounds left out of a session's responses, per arm: SSE events over
:data:`abtui.client.sse.MAX_EVENT_BYTES` (dropped as they came, never held) and text past
:data:`abtui.client.stream_state.MAX_TEXT_CHARS` a request (not stored). The records carry the counts
(``RequestRecord.cut_*``); the main process adds them up here as batches arrive and stores them
at the end: ``meta.capped`` per arm, an ``events`` row and a message for each arm with any."""

from __future__ import annotations

from abtui.client.records import RequestRecord
from abtui.client.sse import MAX_EVENT_BYTES
from abtui.client.stream_state import MAX_TEXT_CHARS


class Cuts:
    """Per arm: requests cut, SSE events dropped, their bytes, characters of text not stored."""

    def __init__(self, n_arms: int) -> None:
        self.counts = [[0, 0, 0, 0] for _ in range(n_arms)]

    def add(self, arm: int, recs: list[RequestRecord]) -> None:
        c = self.counts[arm]
        for r in recs:
            if r.cut_events or r.cut_text:
                c[0] += 1
                c[1] += r.cut_events
                c[2] += r.cut_bytes
                c[3] += r.cut_text

    def store(self, writer, names: list[str], obs) -> None:
        capped = {}
        for arm, (n, events, nbytes, text) in enumerate(self.counts):
            if not n:
                continue
            capped[names[arm]] = {
                "requests": n,
                "events": events,
                "event_bytes": nbytes,
                "text_chars": text,
            }
            what = []
            if events:
                what.append(
                    f"{events} SSE events over {MAX_EVENT_BYTES >> 20} MiB dropped "
                    f"({nbytes:,} bytes)"
                )
            if text:
                what.append(
                    f"{text:,} characters of text past {MAX_TEXT_CHARS:,} a request not stored"
                )
            msg = f"{names[arm]}: {n} responses cut by abtui's bounds: " + "; ".join(what)
            writer.event("capped", msg, arm=arm)
            obs.message(f"CAPPED: {msg}")
        if capped:
            writer.write_meta(capped=capped)
