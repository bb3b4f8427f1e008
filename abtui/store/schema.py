"""DDL of the session file.

Conventions:

- Times are monotonic ``time.perf_counter_ns()`` values (BIGINT ns). The ``clock_anchor`` meta
  key holds one (perf_counter_ns, wall time) pair taken at session start so that any ``*_ns``
  value can be shown as wall time.
- JSON values (every ``meta.value``, ``arms.config``, ``items.messages``, ``items.tags``,
  ``verdicts.*``) are JSON *text* in VARCHAR columns, so that no DuckDB extension is needed.
- Raw facts only: ``requests.first_token_ns`` / ``last_token_ns`` duplicate the first and last
  rows of ``chunks`` for convenience; every metric is derived (see :mod:`abtui.metrics.request`).
- ``server_timings`` (one row per request whose server sent its own ``timings``: llama.cpp)
  came after schema 1's first files; a file without the table reads as one with no such rows,
  and an older abtui ignores the table, so the version stays 1.
- ``requests.connect_ns`` (ns the request spent opening its connection, TCP + TLS; 0 on a
  connection already open) came after schema 1's first files, as the last column: a file
  without it reads as 0 everywhere (those sessions counted any connect time inside TTFT, as
  abtui then did), and an older abtui reads columns by name and ignores it, so the version
  stays 1 (docs/session-file.md).
- ``requests.first_output_ns`` (the first chunk of the answer, not of the reasoning: TTFO; NULL
  when none came) and ``requests.reasoning_tokens`` (NULL when unknown) came after, appended
  the same way: a file without them reads ``first_output_ns`` as ``first_token_ns`` (those
  sessions took a reasoning stream's first thinking token for its first token) and
  ``reasoning_tokens`` as NULL; the version stays 1.
- ``requests.cached_tokens`` (the prompt tokens the server said it served from its prefix cache,
  ``usage.prompt_tokens_details.cached_tokens``; NULL when it did not say) came after, appended
  the same way: a file without it reads it as NULL; the version stays 1.
- ``requests.conversation_id`` and ``requests.turn`` (the conversation a request is a turn of
  and the turn's index, NULL for a request on its own) came after, appended the same way: a
  file without them reads both as NULL; the version stays 1.
- ``items.images`` (JSON: per image its format, width, height, bytes and digest, and a made
  image's seed; NULL when the item sends none) came after, appended the same way: a file without
  it reads as no images; the version stays 1. The image bytes are not stored: the stored
  ``messages`` carry a stand-in for each data URL (:func:`abtui.client.images.elide`).
- ``items.conversation_id``, ``turn``, ``think_s`` and ``turn_messages`` (a conversation's turn:
  its conversation, index, think time, and how many of its prompt's last messages are its
  own) came after, appended the same way; a file without them reads them as a request on its
  own. Where ``turn > 0`` and ``turn_messages > 0``, ``items.messages`` holds only what the
  turn's prompt adds to the previous turn's (the recorded answer to that turn, then the
  turn's own messages), so that a conversation's text is stored once, not once per later
  turn; the reader rebuilds each whole prompt (:meth:`SessionReader.items`). An abtui
  before these columns reads such a turn's messages as that part alone; the version stays 1.
- Bump ``SCHEMA_VERSION`` on any incompatible change; readers refuse newer versions.
"""

from __future__ import annotations

from enum import StrEnum

SCHEMA_VERSION = 1


class Status(StrEnum):
    """``meta["status"]``: how far the session got (a ``str``: stored as these words)."""

    RUNNING = "running"
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    WRITE_FAILED = "write_failed"  # the file itself could not be written (disk full, I/O error)


RUNNING, COMPLETE, INTERRUPTED, FAILED, WRITE_FAILED = Status
STATUSES = tuple(s.value for s in Status)  # plain strings, for messages that list them

# Columns of ``requests`` in table order (the writer inserts them by name).
REQUEST_COLUMNS = (
    "req",
    "arm",
    "item",
    "run",
    "level",
    "block",
    "warmup",
    "scheduled_ns",
    "dispatched_ns",
    "first_byte_ns",
    "done_ns",
    "first_token_ns",
    "last_token_ns",
    "n_chunks",
    "empty_token_chunks",
    "status",
    "http_status",
    "error_class",
    "error_message",
    "n_input",
    "n_output",
    "token_source",
    "finish_reason",
    "text",
    "connect_ns",
    "first_output_ns",
    "reasoning_tokens",
    "cached_tokens",
    "conversation_id",
    "turn",
)

# Columns of ``server_timings``: the request, llama.cpp's fields (abtui.client.records
# TIMING_FIELDS; NULL where absent or malformed) and the note on what was dropped.
TIMING_COLUMNS = (
    "req",
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "predicted_n",
    "predicted_ms",
    "draft_n",
    "draft_n_accepted",
    "note",
)

ITEM_COLUMNS = (
    "item",
    "id",
    "arrival_s",
    "prompt",
    "messages",
    "max_tokens",
    "n_input",
    "expected",
    "suite",
    "tags",
    "images",
    "conversation_id",
    "turn",
    "think_s",
    "turn_messages",
)

DDL = (
    """CREATE TABLE IF NOT EXISTS meta (
        key VARCHAR PRIMARY KEY,
        value VARCHAR
    )""",
    """CREATE TABLE IF NOT EXISTS arms (
        arm INTEGER,
        name VARCHAR,
        role VARCHAR,
        url VARCHAR,
        model VARCHAR,
        api VARCHAR,
        config VARCHAR
    )""",
    """CREATE TABLE IF NOT EXISTS items (
        item INTEGER,
        id VARCHAR,
        arrival_s DOUBLE,
        prompt VARCHAR,
        messages VARCHAR,
        max_tokens INTEGER,
        n_input INTEGER,
        expected VARCHAR,
        suite VARCHAR,
        tags VARCHAR,
        images VARCHAR,
        conversation_id VARCHAR,
        turn INTEGER,
        think_s DOUBLE,
        turn_messages INTEGER
    )""",
    """CREATE TABLE IF NOT EXISTS requests (
        req BIGINT,
        arm INTEGER,
        item INTEGER,
        run INTEGER,
        level INTEGER,
        block INTEGER,
        warmup BOOLEAN,
        scheduled_ns BIGINT,
        dispatched_ns BIGINT,
        first_byte_ns BIGINT,
        done_ns BIGINT,
        first_token_ns BIGINT,
        last_token_ns BIGINT,
        n_chunks INTEGER,
        empty_token_chunks INTEGER,
        status VARCHAR,
        http_status INTEGER,
        error_class VARCHAR,
        error_message VARCHAR,
        n_input INTEGER,
        n_output INTEGER,
        token_source VARCHAR,
        finish_reason VARCHAR,
        text VARCHAR,
        connect_ns BIGINT,
        first_output_ns BIGINT,
        reasoning_tokens BIGINT,
        cached_tokens BIGINT,
        conversation_id VARCHAR,
        turn INTEGER
    )""",
    """CREATE TABLE IF NOT EXISTS chunks (
        req BIGINT,
        seq INTEGER,
        t_ns BIGINT,
        n_tokens INTEGER
    )""",
    """CREATE TABLE IF NOT EXISTS server_timings (
        req BIGINT,
        cache_n BIGINT,
        prompt_n BIGINT,
        prompt_ms DOUBLE,
        predicted_n BIGINT,
        predicted_ms DOUBLE,
        draft_n BIGINT,
        draft_n_accepted BIGINT,
        note VARCHAR
    )""",
    """CREATE TABLE IF NOT EXISTS telemetry (
        arm INTEGER,
        source VARCHAR,
        t_ns BIGINT,
        metric VARCHAR,
        value DOUBLE
    )""",
    """CREATE TABLE IF NOT EXISTS quality (
        arm INTEGER,
        item INTEGER,
        run INTEGER,
        score DOUBLE,
        correct BOOLEAN,
        detail VARCHAR
    )""",
    """CREATE TABLE IF NOT EXISTS verdicts (
        created VARCHAR,
        policy VARCHAR,
        result VARCHAR
    )""",
    """CREATE TABLE IF NOT EXISTS events (
        t_ns BIGINT,
        wall VARCHAR,
        kind VARCHAR,
        arm INTEGER,
        message VARCHAR
    )""",
)

TABLES = (
    "meta",
    "arms",
    "items",
    "requests",
    "chunks",
    "server_timings",
    "telemetry",
    "quality",
    "verdicts",
    "events",
)
