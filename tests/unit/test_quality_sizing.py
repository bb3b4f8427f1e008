"""How the quality items are sent and sized: the chat/completion choice, the endpoint's measured
speed and tokenizer, the grid kept within the budget and the per-item timeouts
(abtui/quality/sizing.py), against servers over loopback."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from loopback import LoopbackServer

from abtui.client.fast import FastClient
from abtui.client.stream import Target
from abtui.quality import builtin, sizing
from abtui.quality import run as qrun
from abtui.quality.prompts import recognise

# llama.cpp's /props for a model without a chat template (what llama-server shows for Gemma 3
# 270M), and for one with its own (SmolLM2's opening)
FALLBACK = (
    "{%- for message in messages -%}\n  {{- '<|im_start|>' + message.role + '\n' + message.content"
    " + '<|im_end|>\n' -}}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n  {{- "
    "'<|im_start|>assistant\n' -}}\n{%- endif -%}"
)
OWN = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
)


def _response(status: int, ctype: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


class StubServer(LoopbackServer):
    """An OpenAI-compatible endpoint that counts ``tokens_per_word`` tokens a word (+ 10 for
    the template), takes ``per_token_s`` a prompt token before its first token, answers a
    built-in quality prompt right and anything else "OK", and records every request."""

    def __init__(
        self,
        *,
        chat: bool = True,
        props: dict | None = None,
        tokens_per_word: float = 1.3,
        per_token_s: float = 0.0,
    ) -> None:
        self.chat, self.props = chat, props
        self.tpw, self.per_token_s = tokens_per_word, per_token_s
        self.requests: list[tuple[str, dict | None]] = []
        super().__init__()

    async def _handle(self, reader, writer) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            raw = await reader.readexactly(length)
            method, path = head.split(b"\r\n")[0].decode().split()[:2]
            body = json.loads(raw) if raw else None
            self.requests.append((path, body))
            writer.write(await self._answer(method, path, body))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, method: str, path: str, body: dict | None) -> bytes:
        if path == "/v1/models":
            return _response(200, "application/json", b'{"object":"list","data":[{"id":"m"}]}')
        if path == "/props":
            if self.props is None:
                return _response(404, "application/json", b'{"error":"no"}')
            return _response(200, "application/json", json.dumps(self.props).encode())
        chat = path == "/v1/chat/completions"
        if chat and not self.chat:
            return _response(404, "application/json", b'{"error":{"message":"no chat"}}')
        text = "\n".join(m["content"] for m in body["messages"]) if chat else body["prompt"]
        n = round(len(text.split()) * self.tpw) + 10
        await asyncio.sleep(n * self.per_token_s)
        task = recognise(text)
        out = f" {task.answer}" if task else " OK"
        piece = {"delta": {"content": out}} if chat else {"text": out}
        usage = {"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1}
        events = [
            {"choices": [{"index": 0, **piece, "finish_reason": "stop"}]},
            {"choices": [], "usage": usage},
        ]
        if not body.get("stream"):
            msg = {"message": {"role": "assistant", "content": out}} if chat else {"text": out}
            return _response(
                200, "application/json", json.dumps({"choices": [msg], "usage": usage}).encode()
            )
        sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return _response(200, "text/event-stream", sse.encode())


def _props(template: str, n_ctx: int = 4096) -> dict:
    return {
        "default_generation_settings": {"n_ctx": n_ctx},
        "total_slots": 1,
        "chat_template": template,
    }


# -- chat or completion ------------------------------------------------------------------------


def test_the_fallback_template_is_told_from_a_models_own():
    assert sizing.is_fallback_template(FALLBACK)
    assert not sizing.is_fallback_template(OWN)
    assert not sizing.is_fallback_template("")


@pytest.mark.parametrize(
    ("server", "arm_api", "want", "why"),
    [
        ({"chat": True}, "completions", "chat", "it answers chat requests"),
        ({"chat": False}, "completions", "completions", "refuses chat requests (HTTP 404)"),
        ({"props": _props(FALLBACK)}, "completions", "completions", "has no chat template"),
        ({"props": _props(OWN)}, "completions", "chat", "has a chat template"),
        ({"chat": False}, "chat", "chat", "its api is chat"),  # the arm says so: no request
    ],
)
def test_auto_asks_each_endpoint(server, arm_api, want, why):
    with StubServer(**server) as srv:
        prof = sizing.probe(
            [Target(base_url=srv.url, model="m", api=arm_api)], ["a"], "auto", timed=False
        )
    assert prof.api == want and why in prof.api_why, prof.api_why
    chat_sent = [p for p, _ in srv.requests if p == "/v1/chat/completions"]
    assert len(chat_sent) == (1 if "props" not in server and arm_api != "chat" else 0)
    if "props" in server:
        assert prof.context == 4096  # llama.cpp's context per slot, from /props


def test_every_arm_gets_the_same_path_and_a_setting_overrides_the_endpoints():
    with StubServer(chat=True) as a, StubServer(chat=False) as b:
        ta, tb = Target(base_url=a.url, model="m"), Target(base_url=b.url, model="m")
        prof = sizing.probe([ta, tb], ["base", "cand"], "auto", timed=False)
        assert prof.api == "completions" and prof.api_why.startswith("cand: it refuses chat")
        prof = sizing.probe([ta, tb], ["base", "cand"], "chat", timed=False)
        assert (prof.api, prof.api_why) == ("chat", "quality.api = 'chat'")
        assert [p for p, _ in a.requests + b.requests if "chat" in p] == [
            "/v1/chat/completions"
        ] * 2


def test_an_item_goes_as_chat_messages_or_as_a_prompt_that_starts_the_answer():
    item = builtin.niah(0, [300], 1)[0]
    with StubServer() as srv:
        t = Target(base_url=srv.url, model="m", api="completions")
        rows = []
        for api in ("chat", "completions"):
            it = sizing.with_timeouts(
                [item], sizing.Profile(api, "test"), api=api, max_tokens=32, concurrency=1
            )[0]

            async def go(it=it):
                async with FastClient() as c:
                    return await qrun.send(c, t, 0, 0, it, 32)

            rows.append(qrun.row(0, 0, it, asyncio.run(go())))
    (p1, chat), (p2, comp) = [r for r in srv.requests if "completions" in r[0]]
    assert p1 == "/v1/chat/completions" and "stop" not in chat
    assert chat["messages"] == [dict(m) for m in item.messages]
    assert chat["messages"][0]["content"].endswith(
        "What is the pass key? Answer with the number only."
    )
    assert p2 == "/v1/completions" and comp["stop"] == ["\nQ:", "\n\n"]
    assert comp["prompt"].endswith("\nQ: What is the pass key?\nA: The pass key is")
    assert all(r["correct"] for r in rows)
    assert [r["detail"]["api"] for r in rows] == ["chat", "completions"]


# -- speed, grid and timeouts ------------------------------------------------------------------


def test_the_probe_measures_the_tokenizer_and_the_prefill_speed():
    with StubServer(tokens_per_word=1.3, per_token_s=0.001) as srv:  # 1,000 prompt tokens/s
        t0 = time.perf_counter()
        prof = sizing.probe([Target(base_url=srv.url, model="m")], ["a"], "auto")
        took = time.perf_counter() - t0
    assert prof.notes == [] and prof.api == "chat"
    assert prof.tokens_per_word == pytest.approx(1.3, rel=0.02)
    # the slope of the first token's time: 1 ms a token, whatever the loopback adds
    assert prof.cost.b + 2048 * prof.cost.c == pytest.approx(0.001, rel=0.3)
    assert 700 < prof.cost.prefill_rate(2048) < 1300
    sent = [b for p, b in srv.requests if p == "/v1/chat/completions" and b.get("stream")]
    assert len(sent) == 4 and [b["max_tokens"] for b in sent] == [8, 1, 1, 1]
    # the long request is sized to ~2,048 of the endpoint's tokens from the first two
    long_words = len(sent[-1]["messages"][0]["content"].split())
    assert long_words * 1.3 == pytest.approx(sizing.PROBE_TOKENS, rel=0.03)
    assert took < 20  # ~2.9 s of the stub's prefill


def test_an_endpoint_that_gives_no_usage_is_not_sized_and_says_why():
    class NoUsage(StubServer):
        async def _answer(self, method, path, body):
            raw = await super()._answer(method, path, body)
            return raw.replace(b'"usage": {', b'"nousage": {')

    with NoUsage() as srv:
        prof = sizing.probe([Target(base_url=srv.url, model="m")], ["base"], "auto")
    assert prof.cost is None and prof.tokens_per_word is None
    assert prof.notes == [
        "base could not be timed (the endpoint reports no prompt token count (usage))"
    ]
    pl = sizing.plan(
        prof, ["niah"], per_cell=1, max_tokens=32, max_length=None, budget_s=1, context=20000
    )
    assert pl.lengths == [1024, 2048, 4096, 8192, 16384] and pl.estimate_s is None


def test_fit_cost_recovers_the_prefill_curve():
    a, b, c = 0.2, 1e-3, 2e-7
    pts = [(n, a + b * n + c * n * n) for n in (20, 300, 2048)]
    got = sizing.fit_cost(pts, 0.02)
    assert (got.a, got.b, got.c) == pytest.approx((a, b, c), rel=1e-6)
    assert got.item_s(4096, 32) == pytest.approx(a + b * 4096 + c * 4096**2 + 32 * 0.02)
    # a negative curvature (noise) is dropped, not extrapolated
    flat = sizing.fit_cost([(20, 0.2), (300, 0.6), (2048, 2.0)], 0.0)
    assert flat.c == 0 and flat.b > 0


def _cost_profile(b: float = 1e-3) -> sizing.Profile:  # 1,000 prompt tokens/s
    return sizing.Profile("chat", "test", tokens_per_word=1.0, cost=sizing.Cost(0.5, b, 0.0, 0.02))


def test_the_grid_keeps_the_lengths_the_budget_holds_shortest_first():
    prof = _cost_profile()
    # 15 retrieval items a length (niah 3 depths + keys 2 questions, 3 haystacks), each
    # 0.5 + L/1000 + 32 × 0.02 s; exact: 24 items of 1.24 s. 1k-8k ≈ 329 s, 16k adds 263 s
    kw = dict(per_cell=3, max_tokens=32, max_length=None, context=40000)
    pl = sizing.plan(prof, ["niah", "keys", "exact"], budget_s=350, **kw)
    assert pl.lengths == [1024, 2048, 4096, 8192] and pl.left_out == [16384, 32768]
    assert pl.estimate_s == pytest.approx(24 * 1.24 + 15 * (4 * 1.14 + 15.36), rel=1e-6)
    assert pl.estimate_s <= 350 < pl.estimate_s + 15 * (1.14 + 16.384)
    msg = sizing.message(prof, pl, 99, 350, 4)
    assert "lengths 1k–8k" in msg and "16k–32k left out (they would add ~12.9 min" in msg
    assert "quality.budget_s = 350 s: raise it" in msg
    assert "expected to take about 5.5 min" in msg and "1,000 prompt tokens/s" in msg
    # the shortest length is kept whatever the budget; a larger budget keeps every length
    assert sizing.plan(prof, ["niah"], budget_s=1, **kw).lengths == [1024]
    assert sizing.plan(prof, ["keys"], budget_s=10**6, **kw).left_out == []
    assert sizing.plan(prof, ["exact"], budget_s=1, **kw).lengths is None


def test_timeouts_follow_the_expected_time_and_never_shorten_the_arms():
    prof = _cost_profile(b=0.01)  # 100 prompt tokens/s: a CPU
    items = builtin.build(
        ["niah", "exact"], seed=0, max_context=9000, max_tokens=32, per_cell=1, tokens_per_word=1.0
    )
    timed = sizing.with_timeouts(items, prof, api="completions", max_tokens=32, concurrency=4)
    by = {it.bucket: it.timeout_s for it in timed}
    # 4 × 4 in flight × (0.5 + L / 100 + 0.64) s
    assert by["4k"] == pytest.approx(16 * (0.5 + 40.96 + 0.64), abs=0.1)
    assert by["1k"] == pytest.approx(16 * (0.5 + 10.24 + 0.64), abs=0.1)
    assert all(it.api == "completions" for it in timed)
    t = Target(base_url="http://127.0.0.1:1/v1", model="m", read_timeout_s=120, timeout_s=600)
    long = qrun.item_target(t, next(i for i in timed if i.bucket == "4k"))
    assert long.read_timeout_s == by["4k"] and long.timeout_s == 2 * by["4k"]
    assert long.api == "completions"
    short = qrun.item_target(t, next(i for i in timed if i.bucket == "short"))
    assert short.read_timeout_s == 120 and short.timeout_s == 600  # the arm's, not less
    # untimed: the arm's own timeouts
    assert (
        sizing.with_timeouts(
            items, sizing.Profile("chat", "x"), api="chat", max_tokens=32, concurrency=4
        )[0].timeout_s
        is None
    )
