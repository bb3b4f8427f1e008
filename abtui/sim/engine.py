"""The simulator's timing model and generated text, separate from its HTTP face.

The server (:mod:`abtui.sim.server`) parses a request into a :class:`SimRequest` and asks an
*engine* when each chunk of the answer is due. The interface is one method::

    engine.schedule(req: SimRequest) -> Iterator[tuple[int, int]]

yielding ``(deadline_ns, n_tokens)`` per chunk: an absolute ``time.perf_counter_ns()`` deadline
and how many tokens the chunk carries (more than one emulates speculative decoding). Contract:

- the ``n_tokens`` sum to ``req.max_tokens`` (the sim always generates exactly that many, as
  with ``ignore_eos``); deadlines never decrease;
- the server pulls the next chunk only once the previous one is due and handled, so an engine
  may compute deadlines lazily from its current state (a batching engine can see who else is
  running);
- the server calls ``close()`` on the iterator when the request ends, finished or not (the
  client went away), so a generator-based engine can free the request's slot in ``finally``.

:class:`FixedDelayEngine` is the simple model: first chunk at ``arrival + ttft`` (plus
``vision_us_per_token`` per vision token of the prompt's images), then one every ``itl``, with
optional seeded uniform jitter. The text is independent of the engine: see
:func:`text_base` and :func:`words`.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from abtui.errors import UsageError
from abtui.sim.engine_stats import EngineStats
from abtui.sim.faults import FaultConfig


@dataclass(slots=True)
class SimConfig:
    """Settings of one simulated endpoint (``abtui sim serve`` / ``python -m abtui.sim``)."""

    host: str = "127.0.0.1"  # address to listen on
    port: int = 8000  # TCP port; 0 = pick a free port
    model: str = "sim-model"  # the model name served by /v1/models and echoed in responses
    ttft_ms: float = 40.0  # time from the full request to the first token chunk
    itl_ms: float = 8.0  # time between token chunks
    jitter_ms: float = 0.0  # uniform ±jitter added to each delay (seeded; never below 0)
    tokens_per_chunk: int = 1  # tokens per SSE chunk; >1 emulates speculative decoding
    seed: int = 0  # seeds the generated text and the jitter
    chunk_log: str | None = None  # path of a JSONL log of chunk send times (None = no log)
    usage: bool = True  # honour stream_options.include_usage
    default_max_tokens: int = 16  # tokens generated when a request gives no max_tokens
    faults: FaultConfig = field(default_factory=FaultConfig)  # injected faults (off by default)
    preset: Any = None  # PresetOptions (abtui.sim.preset_cli): the batching engine; None = fixed
    logprobs: bool = True  # serve logprobs/echo on non-streamed completions (abtui.sim.logprobs)
    profiler: Any = None  # ProfilerConfig (abtui.sim.profiler): /start_profile; None = no route
    # a reasoning model: a chat stream's first N tokens are ``delta.reasoning_content`` (part of
    # max_tokens, counted in usage.completion_tokens_details.reasoning_tokens), then the answer
    reasoning_tokens: int = 0
    # the fixed-delay engine's charge for a prompt's images: their vision tokens
    # (abtui.sim.vision) delay the first chunk by this much each (the encoder and the prefill
    # of the image tokens); the batching engine prefills them as prompt tokens instead
    vision_us_per_token: float = 25.0

    def validate(self) -> None:
        """Raise :class:`~abtui.errors.UsageError` naming the option with a bad value."""

        def bad(option: str, value: Any, what: str) -> UsageError:
            return UsageError(f"{option} {value!r} is invalid: {what}", f"give {option} {what}")

        for option, value in (
            ("--ttft-ms", self.ttft_ms),
            ("--itl-ms", self.itl_ms),
            ("--jitter-ms", self.jitter_ms),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise bad(option, value, "a number of milliseconds")
            if not math.isfinite(value) or value < 0:
                raise bad(option, value, "a finite number of milliseconds >= 0")
        us = self.vision_us_per_token
        if isinstance(us, bool) or not isinstance(us, int | float) or not 0 <= us < math.inf:
            raise bad("--vision-us-per-token", us, "a finite number of microseconds >= 0")
        for option, value, low in (
            ("--port", self.port, 0),
            ("--tokens-per-chunk", self.tokens_per_chunk, 1),
            ("--default-max-tokens", self.default_max_tokens, 1),
            ("--reasoning-tokens", self.reasoning_tokens, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise bad(option, value, f"an integer >= {low}")
        if self.port > 65535:
            raise bad("--port", self.port, "an integer in 0..65535 (0 = any free port)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise bad("--seed", self.seed, "an integer")
        if not isinstance(self.model, str) or not self.model.strip():
            raise bad("--model", self.model, "a non-empty model name")
        if not isinstance(self.host, str) or not self.host:
            raise bad("--host", self.host, "an address such as 127.0.0.1")
        self.faults.validate()
        if self.preset is not None:
            self.preset.validate()
        if self.profiler is not None and self.preset is None:
            raise UsageError(
                "--profiler-config needs --preset: the trace is the batching engine's steps",
                "give e.g. --preset h100:llama-3-8b:bf16",
            )


@dataclass(slots=True)
class SimRequest:
    """One accepted generation request, as the engine sees it."""

    req_id: int  # the server's request number (1, 2, ...), as in the chunk log
    chat: bool  # /v1/chat/completions (True) or /v1/completions (False)
    prompt: str  # the prompt text (chat: all message contents joined by newlines)
    prompt_tokens: int  # whitespace-separated words of the prompt (or the token ids given)
    max_tokens: int  # tokens to generate, >= 1
    arrival_ns: int  # perf_counter_ns() when the full request body had been received
    stream: bool = False
    include_usage: bool = False  # send the usage-only chunk before [DONE]
    key: Any = None  # the body's "abtui_key" field, echoed into the chunk log
    ignore_eos: bool = False  # the body's "ignore_eos": generate max_tokens whatever the text
    answer: tuple[str, ...] | None = None  # the quality face's answer tokens (None: filler)
    finish_reason: str = "length"  # "stop" when the quality face's answer ends the response
    logprobs: int | None = None  # /v1/completions "logprobs": top-k asked (None: not asked)
    echo: bool = False  # /v1/completions "echo": the prompt's tokens first
    scored: Any = None  # abtui.sim.logprobs.Scored when served with logprobs/echo
    # the prompt's images: how many, and their vision tokens (part of prompt_tokens)
    images: int = 0
    image_tokens: int = 0
    usage_claim: int | None = None  # completion tokens the usage says (a fault), else the real


class Engine(Protocol):
    """What the server needs from a timing model (see the module docstring)."""

    def schedule(self, req: SimRequest) -> Iterator[tuple[int, int]]: ...


class FixedDelayEngine:
    """First chunk at ``arrival + ttft``, then every ``itl``; independent of load.

    Deadlines are absolute and computed from the previous *deadline*, not from when the
    previous chunk was actually written, so a late timer does not shift later chunks.
    """

    def __init__(self, config: SimConfig) -> None:
        self._ttft_ns = round(config.ttft_ms * 1e6)
        self._itl_ns = round(config.itl_ms * 1e6)
        self._jitter_ns = round(config.jitter_ms * 1e6)
        self._per_chunk = config.tokens_per_chunk
        self._seed = config.seed
        self._vision_ns = config.vision_us_per_token * 1e3
        # what /metrics can honestly say of a fixed-delay endpoint (tokens count when planned)
        self._running = self._prompt_total = self._generated_total = self._finished = 0

    def schedule(self, req: SimRequest) -> Iterator[tuple[int, int]]:
        jitter = self._jitter_ns
        rng = random.Random(f"{self._seed}:{req.req_id}") if jitter else None
        t = req.arrival_ns
        delay = self._ttft_ns + round(req.image_tokens * self._vision_ns)
        left = req.max_tokens
        self._running += 1
        self._prompt_total += req.prompt_tokens
        try:
            while left > 0:
                if rng is not None:
                    t += max(0, delay + round(rng.uniform(-jitter, jitter)))
                else:
                    t += delay
                n = min(self._per_chunk, left)
                left -= n
                self._generated_total += n
                self._finished += left == 0
                yield t, n
                delay = self._itl_ns
        finally:
            self._running -= 1

    def stats(self) -> EngineStats:
        """Requests in progress and token / request counters; no KV cache, no GPU."""
        return EngineStats(
            running=self._running,
            prompt_tokens_total=self._prompt_total,
            generation_tokens_total=self._generated_total,
            requests_finished_total=self._finished,
        )


# The generated text: words from a small vocabulary of plain ASCII words (no JSON escaping is
# ever needed), each token being " word", chosen by a hash of (seed, prompt, position).
VOCAB = (
    "the of and to in is was for on that with as by at from it be this are an or which "
    "not have has but one were their all can more time model token data value first new "
    "other state system two high light water world sound river stone cloud paper music "
    "garden signal bridge forest window number silver engine market circle letter"
).split()
assert len(VOCAB) == 64 and all(w.isascii() and w.isalpha() for w in VOCAB)

_M64 = (1 << 64) - 1


def text_base(seed: int, prompt: str) -> int:
    """The 64-bit hash of (seed, prompt) from which every position's word is derived."""
    data = f"{seed}\x00{prompt}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def words(base: int, start: int, count: int) -> str:
    """Tokens ``start .. start+count-1`` of the text for ``base``: ``" w1 w2 ..."``."""
    out = []
    for pos in range(start, start + count):
        # splitmix64 finaliser of (base + pos * golden ratio)
        z = (base + (pos + 1) * 0x9E3779B97F4A7C15) & _M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        out.append(VOCAB[(z ^ (z >> 31)) & 63])
    return " " + " ".join(out) if out else ""


def count_prompt_tokens(text: str) -> int:
    """The sim's tokenizer: whitespace-separated words."""
    return len(text.split())
