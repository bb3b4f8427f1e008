"""The server's own account of each request next to abtui's (llama.cpp's stream ``timings``).

llama-server ends every streamed response with a ``timings`` object (stored per request in the
session's ``server_timings`` table, :mod:`abtui.client.stream`). Its clocks, in the vendored
source (``tools/server/server-common.h``, ``server_slot_stats``):

- ``prompt_ms``: from the moment a slot starts on the request to the end of the prompt's last
  batch. The first token comes from that batch's logits, so this is the server's TTFT *without*
  the time the request waited for a slot (``requests_deferred``) and without the network.
- ``predicted_ms``: from there to the last generated token; ``predicted_n`` tokens, the first
  of them free, so ``predicted_ms / (predicted_n - 1)`` is the server's decode time per token.

Against abtui's client-side figures on the *same* requests (ok, not warm-up):
``client TTFT - prompt_ms`` is what lies outside the engine's compute before the first token
(queueing for a slot + network + HTTP + client overhead: a check of abtui's TTFT no peer has),
and ``client TPOT - server decode per token`` what streaming adds per token — near zero, and it
can be slightly negative: ``predicted_ms`` starts at the prompt's end, before the first token is
sampled and sent, where the client's decode span starts at that token's arrival. With a draft model
the streams' ``draft_n_accepted / draft_n`` is the acceptance rate of these requests, the
cross-check of the one from the server's counters (``spec_accepted_tokens / spec_draft_tokens``,
whole-server, over the measured windows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class TimingCheck:
    """Means over one arm's ok, measured requests that carried server timings (ms)."""

    n: int  # requests with prompt_ms and a client TTFT
    server_prompt_ms: float
    client_ttft_ms: float
    ttft_gap_ms: float  # mean of (client TTFT - server prompt_ms), request by request
    server_predicted_ms: float | None = None  # mean predicted_ms (first to last token)
    n_decode: int = 0  # requests with predicted_n > 1 and a client TPOT
    server_decode_ms: float | None = None  # mean predicted_ms / (predicted_n - 1)
    client_tpot_ms: float | None = None
    tpot_gap_ms: float | None = None
    draft_n: int | None = None  # summed over the requests that drafted
    draft_accepted: int | None = None
    stream_acceptance: float | None = None  # draft_accepted / draft_n
    noted: int = 0  # requests whose timings had a malformed field (dropped, see the note)

    @property
    def server_ttft_share(self) -> float | None:
        """The server's prompt time as a share of the client's TTFT."""
        return self.server_prompt_ms / self.client_ttft_ms if self.client_ttft_ms > 0 else None


_QUERY = """
SELECT r.arm, (r.first_token_ns - r.dispatched_ns - {connect}) / 1e6,
       CASE WHEN r.n_output > 1
            THEN (r.last_token_ns - r.first_token_ns) / 1e6 / (r.n_output - 1) END,
       t.prompt_ms, t.predicted_n, t.predicted_ms, t.draft_n, t.draft_n_accepted,
       t.note IS NOT NULL
FROM server_timings t JOIN requests r ON t.req = r.req
WHERE r.status = 'ok' AND NOT r.warmup AND r.first_token_ns IS NOT NULL
"""


def timing_checks(rd) -> dict[int, TimingCheck]:
    """One :class:`TimingCheck` per arm that has server timings, from an open
    :class:`~abtui.store.reader.SessionReader` (none for a file without the table)."""
    has = rd.query("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'server_timings'")
    if not has[0][0]:
        return {}
    by_arm: dict[int, list[tuple]] = {}
    for row in rd.query(_QUERY.format(connect=rd.connect_sql("r."))):  # TTFT: after any connect
        by_arm.setdefault(int(row[0]), []).append(row[1:])
    out = {}
    for arm, rows in sorted(by_arm.items()):
        a = np.array([[np.nan if v is None else float(v) for v in r] for r in rows], dtype=float)
        ttft, tpot, p_ms, p_n, d_ms, dr_n, dr_acc, noted = a.T
        m = np.isfinite(ttft) & np.isfinite(p_ms)
        if not m.any():
            continue
        c = TimingCheck(
            n=int(m.sum()),
            server_prompt_ms=float(p_ms[m].mean()),
            client_ttft_ms=float(ttft[m].mean()),
            ttft_gap_ms=float((ttft[m] - p_ms[m]).mean()),
            noted=int(noted.sum()),
        )
        if np.isfinite(d_ms[m]).any():
            c.server_predicted_ms = float(np.nanmean(d_ms[m]))
        with np.errstate(invalid="ignore", divide="ignore"):
            server_tpot = np.where(p_n > 1, d_ms / (p_n - 1), np.nan)
        md = np.isfinite(server_tpot) & np.isfinite(tpot)
        if md.any():
            c.n_decode = int(md.sum())
            c.server_decode_ms = float(server_tpot[md].mean())
            c.client_tpot_ms = float(tpot[md].mean())
            c.tpot_gap_ms = float((tpot[md] - server_tpot[md]).mean())
        ms = np.isfinite(dr_n) & np.isfinite(dr_acc) & (dr_n > 0)
        if ms.any():
            c.draft_n, c.draft_accepted = int(dr_n[ms].sum()), int(dr_acc[ms].sum())
            c.stream_acceptance = c.draft_accepted / c.draft_n
        out[arm] = c
    return out


def _ms(x: float | None, fmt: str = ".1f") -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:{fmt}} ms"


def timing_lines(c: TimingCheck | None, counters_acceptance: float | None) -> list[str]:
    """The diagnosis lines of one arm's check (indented like the rest of the block)."""
    if c is None:
        return []
    share = c.server_ttft_share
    lines = [
        f"    server timings ({c.n} requests): TTFT {_ms(c.client_ttft_ms)} at the client, "
        f"{_ms(c.server_prompt_ms)} prompt in the server"
        + (f" ({share:.0%})" if share is not None else "")
        + f": {c.ttft_gap_ms:+.1f} ms outside its compute (slot queue + network + client)"
    ]
    if c.server_decode_ms is not None:
        lines.append(
            f"    server timings: decode {_ms(c.server_decode_ms, '.2f')}/token in the server "
            f"(predicted_ms / (predicted_n - 1)), TPOT {_ms(c.client_tpot_ms, '.2f')} at the "
            f"client (client - server {c.tpot_gap_ms:+.2f} ms/token)"
        )
    if c.stream_acceptance is not None or counters_acceptance is not None:
        ctr = "n/a" if counters_acceptance is None else f"{counters_acceptance:.1%}"
        stream = (
            "n/a"
            if c.stream_acceptance is None
            else f"{c.stream_acceptance:.1%} ({c.draft_accepted}/{c.draft_n} draft tokens)"
        )
        check = ""
        if c.stream_acceptance is not None and counters_acceptance is not None:
            check = f", {abs(c.stream_acceptance - counters_acceptance) * 100:.1f} points apart"
        lines.append(
            f"    spec decode acceptance: {ctr} from the server's counters, {stream} "
            f"from the streams' timings{check}"
        )
    if c.noted:
        lines.append(
            f"    server timings: {c.noted} request(s) sent a malformed field, left out "
            "(server_timings.note says which)"
        )
    return lines
