"""The raw facts of one request, as measured by the client.

Times are ``time.perf_counter_ns()`` values (CLOCK_MONOTONIC on Linux, so comparable across
processes on one machine). Nothing derived is stored here: metrics are computed from these facts
in :mod:`abtui.metrics`, so a fix to a formula re-derives old sessions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Outcome of a request.
OK = "ok"
ERROR = "error"
CANCELLED = "cancelled"

# Error classes (``RequestRecord.error_class``).
E_CONNECT = "connect"  # could not connect / connection refused / DNS
E_TIMEOUT = "timeout"  # connect, read or total timeout
E_HTTP = "http"  # non-2xx status, or an error object inside the stream
E_MALFORMED = "malformed"  # the body is not a valid SSE / JSON stream
E_DISCONNECTED = "disconnected"  # the server closed the stream before it finished
E_CANCELLED = "cancelled"  # abtui stopped the request (Ctrl-C, end of run)
# a conversation's turn not sent because an earlier turn of it failed on this arm (status
# CANCELLED: never sent, so neither an error nor a latency sample)
E_SKIPPED = "skipped"
E_OTHER = "other"  # anything else; the message says what

# Where token counts came from (``RequestRecord.token_source``).
TOKENS_USAGE = "usage"  # the server's ``usage`` object
TOKENS_CHUNKS = "chunks"  # counted from the stream's token chunks (one per chunk unless known)


@dataclass(slots=True)
class RequestRecord:
    """One request to one arm: what was scheduled, sent, received, and how it ended."""

    arm: int  # index of the arm in the spec (0 = baseline)
    item: int  # index of the workload item
    run: int = 0  # repetition (``--runs k``)
    level: int = 0  # sweep level (index into the session's ``levels``)
    block: int = 0  # schedule block (``alternate`` arm scheduling; 0 in ``parallel``)
    warmup: bool = False  # warm-up requests are stored but excluded from results
    scheduled_ns: int = 0  # when the schedule said to send
    dispatched_ns: int = 0  # when the generator handed the request to the client
    # Time this request spent opening the connection it was sent on (TCP connect, plus the TLS
    # handshake for https), in ns from ``dispatched_ns`` to that connection being open; 0 when
    # it went out on a connection already open (the pool's, opened before t0). When the fast
    # client retried on a new connection because a kept-alive one had gone stale, the detour is
    # in it too. The service view (TTFT, E2E) starts after it; TTFT (user) includes it.
    connect_ns: int = 0
    first_byte_ns: int | None = None  # first response body byte (headers excluded)
    done_ns: int | None = None  # end of the stream (``[DONE]`` / close) or the error
    # Token-bearing chunks (docs/methods.md §1): arrival time and tokens carried, in order.
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    # Chunks that are tokens but carried no text (llama.cpp: a token ending inside a UTF-8
    # character). They count as output tokens when the server sends no usage; they do not
    # move TTFT or ITL, since the user saw nothing.
    empty_token_chunks: int = 0
    # The first chunk of the answer itself (``content``, ``text`` or ``tool_calls``), as against
    # the first of any kind: a reasoning model streams its thinking (``reasoning_content`` /
    # ``reasoning``) first. None when no answer chunk came (the stream ended while thinking).
    first_output_ns: int | None = None
    # Reasoning tokens: the server's ``usage.completion_tokens_details.reasoning_tokens``, else
    # those of the reasoning-only chunks counted; None when neither says there were any.
    reasoning_tokens: int | None = None
    reasoning_chunk_tokens: int = 0  # tokens of the chunks that carried reasoning and no answer
    # Prompt tokens the server served from its prefix cache: ``usage.prompt_tokens_details
    # .cached_tokens`` (OpenAI, vLLM, SGLang, the simulator); None when the usage does not say.
    # llama.cpp's equivalent is its ``timings.cache_n`` (``timings`` below).
    cached_tokens: int | None = None
    status: str = OK  # OK / ERROR / CANCELLED
    http_status: int | None = None
    error_class: str | None = None
    error_message: str | None = None
    n_input: int | None = None  # prompt tokens (usage, else the workload's intended length)
    n_output: int | None = None  # generated tokens (usage, else counted)
    token_source: str = TOKENS_CHUNKS
    finish_reason: str | None = None
    text: str | None = None  # generated text, unless the spec says not to store it
    # The server's own account of the request, where it sends one (llama.cpp's ``timings``
    # object in the last chunk): the fields of TIMING_FIELDS that were well-formed numbers;
    # ``timings_note`` says what was dropped and why (None when nothing was).
    timings: dict[str, float] | None = None
    timings_note: str | None = None
    # What the client's bounds left out (docs/reliability.md): SSE events over
    # abtui.client.sse.MAX_EVENT_BYTES, dropped unparsed, and their bytes; characters of text
    # past abtui.client.stream_state.MAX_TEXT_CHARS, not stored. Counted per arm in the session's
    # ``capped`` meta and event, not stored per request.
    cut_events: int = 0
    cut_bytes: int = 0
    cut_text: int = 0
    # the conversation this request is a turn of, and the turn's index (None: not a turn)
    conversation_id: str | None = None
    turn: int | None = None


# llama-server's ``timings`` (tools/server/server-common.cpp, ``server_slot_stats::to_json``):
# prompt tokens computed (``cache_n`` more came from the cache) and the ms from the slot's start
# to the prompt's last batch; generated tokens and the ms from there to the last token; with a
# draft model, the draft tokens proposed and accepted. Counts are whole numbers, times ms.
TIMING_COUNTS = ("cache_n", "prompt_n", "predicted_n", "draft_n", "draft_n_accepted")
TIMING_MS = ("prompt_ms", "predicted_ms")
TIMING_FIELDS = TIMING_COUNTS + TIMING_MS
