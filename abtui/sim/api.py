"""The OpenAI-compatible wire format of the simulator: request validation and response shapes.

The shapes follow vLLM's: ``text_completion`` chunks for ``/v1/completions``, a role prelude
then ``chat.completion.chunk`` deltas for ``/v1/chat/completions``, the last token chunk with
``finish_reason: "length"`` (``"stop"`` after a quality-face answer, see
:mod:`abtui.sim.quality_face`), then an optional usage-only chunk and ``data: [DONE]``.
Streaming events are built by string concatenation from prefixes made once per request: the
generated words are plain ASCII (see :data:`abtui.sim.engine.VOCAB`), so need no escaping.
"""

from __future__ import annotations

import json
from typing import Any

from abtui.sim.engine import SimRequest, count_prompt_tokens
from abtui.sim.vision import image_words


class BadRequest(Exception):
    """The request cannot be served; becomes an OpenAI-style JSON error response."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def error_body(message: str, status: int = 400) -> bytes:
    kind = "invalid_request_error" if status < 500 else "internal_error"
    if status == 404:
        kind = "not_found_error"
    err = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return json.dumps(err).encode()


def models_body(model: str, created: int, meta: dict | None = None) -> bytes:
    entry = {"id": model, "object": "model", "created": created, "owned_by": "abtui-sim"}
    if meta:
        entry["max_model_len"] = meta.pop("max_model_len", None)
        entry["metadata"] = meta
    return json.dumps({"object": "list", "data": [entry]}).encode()


def _text_of_content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _prompt_of(obj: dict) -> tuple[str, int]:
    """(prompt text, prompt tokens) of a /v1/completions body."""
    prompt = obj.get("prompt")
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return " ".join(map(str, prompt)), len(prompt)  # token ids
        prompt = prompt[0]  # a batch of prompts: the sim answers the first
        if isinstance(prompt, list) and all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt
        ):
            return " ".join(map(str, prompt)), len(prompt)
    if not isinstance(prompt, str):
        raise BadRequest("'prompt' must be a string, a list of strings or a list of token ids")
    return prompt, count_prompt_tokens(prompt)


def _image_words(content: Any, i: int) -> list[list[str]]:
    """The words of each image part of message ``i``'s ``content`` (abtui.sim.vision)."""
    out = []
    for j, p in enumerate(content if isinstance(content, list) else ()):
        if isinstance(p, dict) and p.get("type") == "image_url":
            iu = p.get("image_url")
            url = iu.get("url") if isinstance(iu, dict) else iu  # (a bare string: older clients)
            try:
                out.append(image_words(url, f"messages[{i}].content[{j}].image_url.url"))
            except ValueError as e:
                raise BadRequest(str(e)) from None
    return out


def _messages_of(obj: dict) -> tuple[str, int, int, int]:
    """(prompt text, prompt tokens, images, their vision tokens) of a /v1/chat/completions
    body: an image is its vision tokens' words after the message's text."""
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list of message objects")
    texts = []
    images = image_tokens = 0
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BadRequest(f"'messages[{i}]' must be an object with 'role' and 'content'")
        content = m.get("content")
        text = _text_of_content(content)
        for words in _image_words(content, i):
            images, image_tokens = images + 1, image_tokens + len(words)
            text += " " + " ".join(words)
        texts.append(text)
    text = "\n".join(texts)
    return text, count_prompt_tokens(text), images, image_tokens


def parse_request(
    body: bytes, *, chat: bool, req_id: int, arrival_ns: int, default_max_tokens: int
) -> SimRequest:
    """Validate a generation request body; raise :class:`BadRequest` saying what is wrong."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadRequest("request body must be a JSON object")
    if chat:
        prompt, prompt_tokens, images, image_tokens = _messages_of(obj)
    else:
        (prompt, prompt_tokens), images, image_tokens = _prompt_of(obj), 0, 0
    max_tokens = obj.get("max_tokens")
    if max_tokens is None and chat:
        max_tokens = obj.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = default_max_tokens
    elif isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest(f"'max_tokens' must be a positive integer, got {max_tokens!r}")
    stream = obj.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise BadRequest(f"'stream' must be true or false, got {stream!r}")
    options = obj.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object")
    include_usage = bool(options and options.get("include_usage") is True)
    logprobs, echo = (None, False) if chat else _logprob_options(obj)
    return SimRequest(
        req_id=req_id,
        chat=chat,
        prompt=prompt,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        arrival_ns=arrival_ns,
        stream=stream,
        include_usage=include_usage,
        key=obj.get("abtui_key"),
        ignore_eos=obj.get("ignore_eos") is True,
        logprobs=logprobs,
        echo=echo,
        images=images,
        image_tokens=image_tokens,
    )


def _logprob_options(obj: dict) -> tuple[int | None, bool]:
    """``logprobs`` (top-k, ≤ 20) and ``echo`` of a /v1/completions body."""
    k, echo = obj.get("logprobs"), obj.get("echo", False)
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 20):
        raise BadRequest(f"'logprobs' must be an integer from 0 to 20, got {k!r}")
    if echo is None:
        echo = False
    if not isinstance(echo, bool):
        raise BadRequest(f"'echo' must be true or false, got {echo!r}")
    return k, echo


def _usage(
    prompt_tokens: int,
    completion_tokens: int,
    reasoning: int | None = None,
    cached: int | None = None,
) -> str:
    """The usage object; ``cached``: ``prompt_tokens_details.cached_tokens`` (vLLM's and
    OpenAI's name), from an engine that models a prefix cache."""
    details = (
        ""
        if reasoning is None
        else f',"completion_tokens_details":{{"reasoning_tokens":{reasoning}}}'
    )
    if cached is not None:
        details += f',"prompt_tokens_details":{{"cached_tokens":{cached}}}'
    return (
        f'{{"prompt_tokens":{prompt_tokens},"completion_tokens":{completion_tokens},'
        f'"total_tokens":{prompt_tokens + completion_tokens}{details}}}'
    )


class Formatter:
    """Builds the response bodies of one request (SSE events as ``str``)."""

    __slots__ = (
        "_head",
        "_pre",
        "_pre_r",
        "_mid",
        "_end",
        "_req",
        "_id",
        "_model",
        "_created",
        "_think",
        "_thought",
    )

    def __init__(
        self, req: SimRequest, *, model: str, resp_id: str, created: int, reasoning: int = 0
    ) -> None:
        """``reasoning``: a chat stream's first tokens that are reasoning, not answer (a
        chunk that starts among them is reasoning)."""
        self._req = req
        self._think = reasoning if req.chat else 0
        self._thought = 0  # reasoning tokens sent so far
        self._id = resp_id
        self._model = json.dumps(model)
        self._created = created
        obj = "chat.completion.chunk" if req.chat else "text_completion"
        self._head = (
            f'data: {{"id":"{resp_id}","object":"{obj}","created":{created},'
            f'"model":{self._model},"choices":'
        )
        if req.chat:
            self._pre = self._head + '[{"index":0,"delta":{"content":"'
            self._pre_r = self._head + '[{"index":0,"delta":{"reasoning_content":"'
            tail = '"},"logprobs":null,"finish_reason":'
        else:
            self._pre = self._pre_r = self._head + '[{"index":0,"text":"'
            tail = '","logprobs":null,"finish_reason":'
        self._mid = tail + "null}]}\n\n"
        self._end = tail + f'"{req.finish_reason}"}}]}}\n\n'

    def prelude(self) -> str:
        """The chat role prelude (empty for completions): sent as soon as the request is in."""
        if not self._req.chat:
            return ""
        return (
            self._head + '[{"index":0,"delta":{"role":"assistant","content":""},'
            '"logprobs":null,"finish_reason":null}]}\n\n'
        )

    def token_event(self, text: str, last: bool, at: int = 0, n: int = 1) -> str:
        """The event of ``n`` tokens ``text``, the first of them the ``at``-th of the response:
        reasoning while ``at`` is under the request's reasoning tokens."""
        if at < self._think:
            self._thought += n
            return self._pre_r + text + (self._end if last else self._mid)
        return self._pre + text + (self._end if last else self._mid)

    def tail(self, completion_tokens: int, cached: int | None = None) -> str:
        """Everything after the last token chunk: the usage chunk if asked, then [DONE]
        (``cached``: the prompt tokens served from the prefix cache, None: not modelled)."""
        out = ""
        if self._req.include_usage:
            reasoning = self._thought if self._think else None
            out = self._head + '[],"usage":'
            out += _usage(self._req.prompt_tokens, completion_tokens, reasoning, cached)
            out += "}\n\n"
        return out + "data: [DONE]\n\n"

    def full(self, text: str, completion_tokens: int, cached: int | None = None) -> bytes:
        """The non-streaming response body (``cached`` as in :meth:`tail`)."""
        if self._req.chat:
            obj = "chat.completion"
            choice = (
                '{"index":0,"message":{"role":"assistant","content":"' + text + '"},'
                f'"logprobs":null,"finish_reason":"{self._req.finish_reason}"}}'
            )
        else:
            obj = "text_completion"
            scored = self._req.scored  # logprobs / echo (abtui.sim.logprobs), or None
            text, lp = scored.render(text) if scored is not None else (text, "null")
            choice = (
                '{"index":0,"text":"' + text + '","logprobs":' + lp + ","
                f'"finish_reason":"{self._req.finish_reason}"}}'
            )
        return (
            f'{{"id":"{self._id}","object":"{obj}","created":{self._created},'
            f'"model":{self._model},"choices":[{choice}],'
            f'"usage":{_usage(self._req.prompt_tokens, completion_tokens, None, cached)}}}'
        ).encode()
