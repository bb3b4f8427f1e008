"""The simulator's quality face: prompt formats, recogniser, accuracy function, answers."""

from __future__ import annotations

import math
import re

import pytest

from abtui.quality.prompts import (
    CAPITALS,
    LABELS,
    capital_prompt,
    copy_prompt,
    keys_prompt,
    needle_prompt,
    recognise,
)
from abtui.sim.engine import SimRequest, count_prompt_tokens
from abtui.sim.quality_face import QualityFace, Variant, accuracy, answer

BF16, FP8, INT4 = Variant("bf16", "bf16"), Variant("fp8", "bf16"), Variant("int4", "bf16")
INT4_KV8, FP8_KV8 = Variant("int4", "fp8"), Variant("fp8", "fp8")


_STATEMENT = r"The [a-z]+ [a-z]+ is \d+\."


@pytest.mark.parametrize("tokens", [300, 2000, 16000])
def test_retrieval_generators_length_leaks_and_determinism(tokens):
    for seed in range(5):
        for item in (needle_prompt(seed, tokens), keys_prompt(seed, tokens, n_keys=5)):
            assert item == (needle_prompt if item.task == "niah" else keys_prompt)(
                seed, tokens, *(() if item.task == "niah" else (5,))
            )
            n = count_prompt_tokens(item.prompt)
            assert n == item.context_tokens
            assert abs(n - tokens) <= max(10, 0.01 * tokens)  # within 1% of the asked length
            # the answer appears once, in its statement; the filler holds no digits at all
            for text in (item.prompt, item.text):  # completion and chat renderings
                assert text.count(item.answer) == 1
                assert len(re.findall(_STATEMENT, text)) == (1 if item.task == "niah" else 5)
                rest = re.sub(_STATEMENT, "", text)
                assert not re.search(r"\d", rest)
                body = rest.split("\n\n")[1]  # intro, filler, question
                assert not any(label in body for label in LABELS) and "\n" not in body
                task = recognise(text)
                assert task is not None and (task.task, task.answer) == (item.task, item.answer)
            # the chat rendering is one user message that asks for the number; the completion
            # rendering starts the answer
            assert len(item.messages) == 1 and item.messages[0]["role"] == "user"
            assert item.text.endswith("? Answer with the number only.")
            assert item.prompt.endswith(" is") and "\nA: The " in item.prompt
    assert needle_prompt(1, 500).prompt != needle_prompt(2, 500).prompt


def test_needle_depth_and_confusable_keys():
    for depth in (0.0, 0.5, 1.0):
        p = needle_prompt(3, 4000, depth=depth).prompt
        body = p.split("\n\n")[1]
        at = body.index("The pass key is") / len(body)
        assert abs(at - depth) < 0.05
    item = keys_prompt(4, 1000, n_keys=4)
    keys = re.findall(r"The ([a-z]+ [a-z]+) is \d+\.", item.prompt)
    assert len(set(keys)) == 4 and set(keys) <= set(LABELS)  # four labels, one kind of value
    asked = re.search(r"What is the ([a-z]+ [a-z]+)\?", item.prompt).group(1)
    assert f"is the {asked}, a five-digit number" in item.prompt  # named up front
    assert len(item.distractors) == 3 and item.answer not in item.distractors
    assert {item.answer, *item.distractors} == set(re.findall(r"is (\d+)\.", item.prompt))
    # the same haystack asked about another key: same text and values, another answer
    other = keys_prompt(4, 1000, n_keys=4, asked=keys.index(asked) + 1)
    assert other.answer in item.distractors and other.answer != item.answer
    assert other.prompt.split("\n\n")[1] == item.prompt.split("\n\n")[1]


def test_exact_answer_generators():
    countries = set()
    for seed in range(30):
        c = copy_prompt(seed)
        assert re.fullmatch(r"[A-Z]{3}-[0-9]{3}", c.answer)
        assert c.messages[-1] == {
            "role": "user",
            "content": f"Repeat this code exactly: {c.answer}",
        }
        assert [m["role"] for m in c.messages] == ["user", "assistant"] * 2 + ["user"]
        assert c.prompt.endswith(f"Q: Repeat this code exactly: {c.answer}\nA:")
        k = capital_prompt(seed)
        assert k.answer == CAPITALS[re.search(r"capital of ([A-Za-z ]+)\?", k.text).group(1)]
        assert len(k.messages) == 1  # the chat rendering asks with no examples
        assert k.prompt.count("Q: ") == 3  # the completion rendering has two
        countries.add(k.answer)
        for it in (c, k):
            for text in (it.prompt, it.text):
                assert recognise(text).answer == it.answer
    assert len(countries) > 10
    assert capital_prompt(0, "Peru").answer == "Lima"
    # embedded in a chat with a system message they are still recognised
    chat = "You are a helpful assistant.\n" + copy_prompt(1).text
    assert recognise(chat).task == "copy"


@pytest.mark.parametrize(
    "prompt",
    [
        "What is the capital of France?",  # not the suite's question
        "What is the capital of Atlantis? Answer with the city only.",
        "the pass key for nothing",
        "The pass key is 12345.\nWhat is the door code?",  # the asked key is not in the context
        "Repeat this code exactly: abc-123",
        "",
    ],
)
def test_free_form_prompts_are_not_tasks(prompt):
    assert recognise(prompt) is None
    assert answer(prompt, 100, BF16, 0) is None


def test_accuracy_function_shape():
    for task in ("niah", "keys", "copy", "capital"):
        for n in (512, 4096, 32768, 131072):
            assert accuracy(task, BF16, n) >= accuracy(task, FP8, n) >= accuracy(task, INT4, n)
            assert accuracy(task, FP8, n) >= accuracy(task, FP8_KV8, n)
            assert 0.02 <= accuracy(task, INT4_KV8, n) <= 1
    # no long-context loss up to 4k; then it grows per doubling, more for confusable keys
    assert accuracy("niah", INT4_KV8, 4096) == accuracy("niah", INT4_KV8, 1000)
    assert accuracy("niah", INT4_KV8, 32768) < accuracy("niah", INT4_KV8, 8192) - 0.05
    loss = lambda t, v: accuracy(t, BF16, 4096) - accuracy(t, v, 32768)  # noqa: E731
    assert loss("keys", INT4_KV8) > 1.8 * loss("niah", INT4_KV8)
    # exact-answer tasks do not depend on the context length
    assert accuracy("copy", INT4, 100) == accuracy("copy", INT4, 100_000)
    # the documented formula, one case by hand: int4 weights, fp8 KV, keys at 32k
    assert accuracy("keys", INT4_KV8, 32768) == pytest.approx(0.98 - 0.02 - 3 * 0.045 * 2)


def test_answers_follow_the_accuracy_and_are_plausible_when_wrong():
    n, ctx = 1500, 32768
    items = [keys_prompt(s, 120, n_keys=4) for s in range(n)]  # short text, long context claimed
    for variant in (BF16, FP8_KV8, INT4_KV8):
        p = accuracy("keys", variant, ctx)
        got = [answer(it.prompt, ctx, variant, seed=7) for it in items]
        right = sum(g == it.answer for g, it in zip(got, items, strict=True))
        sd = math.sqrt(n * p * (1 - p))
        assert abs(right - n * p) <= 4 * sd + 1, (variant, right / n, p)
        for g, it in zip(got, items, strict=True):
            if g != it.answer:  # another key's value: present in the context
                assert re.search(rf"The [a-z]+ [a-z]+ is {g}\.", it.prompt)
                assert g in it.distractors
    # one draw per (seed, prompt): the weaker variant fails a superset of the stronger's items
    fails = {
        v: {i for i, it in enumerate(items) if answer(it.prompt, ctx, v, 7) != it.answer}
        for v in (BF16, INT4_KV8)
    }
    assert fails[BF16] <= fails[INT4_KV8] and len(fails[INT4_KV8]) > len(fails[BF16])
    # another seed draws differently
    assert [answer(it.prompt, ctx, INT4_KV8, 8) for it in items] != [
        answer(it.prompt, ctx, INT4_KV8, 7) for it in items
    ]


def test_wrong_answers_of_needle_copy_capital():
    floor = Variant("int4", "fp8")
    ctx = 10**9  # accuracy at its floor: nearly every answer is wrong
    for s in range(40):
        it = needle_prompt(s, 80)
        g = answer(it.prompt, ctx, floor, 0)
        if g != it.answer:
            assert len(g) == 5 and sum(a != b for a, b in zip(g, it.answer, strict=True)) == 1
    wrong = 0
    for s in range(300):
        it = copy_prompt(s)
        g = answer(it.prompt, 50, INT4, 0)
        if g != it.answer:
            wrong += 1
            assert len(g) == len(it.answer) and g[:-1] == it.answer[:-1]  # a near miss
        it = capital_prompt(s)
        g = answer(it.text, 50, INT4, 0)
        assert g == it.answer or g in CAPITALS.values()
    assert 0 < wrong < 30  # 3% expected


def _req(prompt: str, max_tokens: int, ignore_eos: bool = False) -> SimRequest:
    return SimRequest(
        req_id=1,
        chat=False,
        prompt=prompt,
        prompt_tokens=count_prompt_tokens(prompt),
        max_tokens=max_tokens,
        arrival_ns=0,
        ignore_eos=ignore_eos,
    )


def test_face_prepares_answer_stop_and_text_source():
    face = QualityFace(seed=0, variant=BF16)
    it = copy_prompt(5)
    req = _req(it.prompt, 64)
    face.prepare(req)
    assert (req.answer, req.max_tokens, req.finish_reason) == ((" " + it.answer,), 1, "stop")
    assert face.text_source(req)(0, 1) == " " + it.answer
    # ignore_eos: the answer, then filler up to max_tokens; finish_reason stays "length"
    req = _req(it.prompt, 5, ignore_eos=True)
    face.prepare(req)
    text = face.text_source(req)
    assert (req.max_tokens, req.finish_reason) == (5, "length")
    full = text(0, 2) + text(2, 3)
    assert full.startswith(" " + it.answer + " ") and len(full.split()) == 5
    # free-form: untouched, the usual filler
    req = _req("tell me a story", 4)
    face.prepare(req)
    assert req.answer is None and req.max_tokens == 4 and req.finish_reason == "length"
    assert len(face.text_source(req)(0, 4).split()) == 4
    assert face.describe()["simulated"] is True


# -- over HTTP ---------------------------------------------------------------------------------


async def _post_all(config, bodies: list[tuple[str, dict]], engine=None) -> tuple[list, dict]:
    import httpx

    from abtui.sim.server import start_server

    sim = await start_server(config, engine)
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=30) as c:
            out = []
            for path, body in bodies:
                r = await c.post(sim.url + path, json=body)
                if body.get("stream"):
                    out.append([ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ")])
                else:
                    assert r.status_code == 200, r.text
                    out.append(r.json())
            models = (await c.get(sim.url + "/models")).json()
    finally:
        await sim.close()
    return out, models


def test_fixed_endpoint_answers_quality_prompts_and_stops():
    import asyncio
    import json

    from abtui.sim.engine import SimConfig

    it = copy_prompt(11)
    needle = needle_prompt(2, 300)
    chat = [{"role": "system", "content": "Be exact."}, *it.messages]
    bodies = [
        ("/completions", {"prompt": needle.prompt, "max_tokens": 32}),
        ("/chat/completions", {"messages": chat, "max_tokens": 32}),
        ("/completions", {"prompt": it.prompt, "max_tokens": 6, "ignore_eos": True}),
        ("/completions", {"prompt": "once upon a time", "max_tokens": 6}),
        (
            "/completions",
            {
                "prompt": it.prompt,
                "max_tokens": 32,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ),
    ]
    out, models = asyncio.run(_post_all(SimConfig(port=0, ttft_ms=1, itl_ms=1), bodies))
    (c0,), (c1,) = out[0]["choices"], out[1]["choices"]
    assert (c0["text"], c0["finish_reason"]) == (" " + needle.answer, "stop")
    assert out[0]["usage"]["completion_tokens"] == 1
    assert (c1["message"]["content"], c1["finish_reason"]) == (" " + it.answer, "stop")
    # ignore_eos: the answer, then filler to max_tokens, like a model forced past its end
    c2 = out[2]["choices"][0]
    assert c2["text"].split()[0] == it.answer and len(c2["text"].split()) == 6
    assert c2["finish_reason"] == "length"
    # free-form: the usual filler, max_tokens of it
    assert len(out[3]["choices"][0]["text"].split()) == 6
    events = [json.loads(e) for e in out[4] if e != "[DONE]"]
    tokens = [e["choices"][0] for e in events if e["choices"]]
    assert [t["text"] for t in tokens] == [" " + it.answer] and tokens[-1][
        "finish_reason"
    ] == "stop"
    assert events[-1]["usage"]["completion_tokens"] == 1 and out[4][-1] == "[DONE]"
    face = models["data"][0]["metadata"]["quality_face"]
    assert face["simulated"] is True and (face["weight_dtype"], face["kv_dtype"]) == (
        "bf16",
        "bf16",
    )


def test_preset_variant_loses_long_context_retrieval_over_http():
    import asyncio

    from abtui.sim.engine import SimConfig
    from abtui.sim.preset_cli import PresetOptions

    items = [keys_prompt(s, 24000, n_keys=4) for s in range(24)]
    bodies = [("/completions", {"prompt": it.prompt, "max_tokens": 16}) for it in items]
    right = {}
    for preset in ("qwen2.5-7b:bf16", "qwen2.5-7b:int4:kv=fp8"):
        po = PresetOptions("h100:" + preset, time_scale=200)
        out, models = asyncio.run(_post_all(SimConfig(port=0, seed=5, preset=po), bodies))
        assert models["data"][0]["metadata"]["quality_face"]["weight_dtype"] == preset.split(":")[1]
        got = [o["choices"][0]["text"].strip() for o in out]
        right[preset] = {
            i for i, (g, it) in enumerate(zip(got, items, strict=True)) if g == it.answer
        }
        for g, it in zip(got, items, strict=True):  # wrong answers are confusable keys' values
            assert g == it.answer or g in it.distractors
    # at 24k tokens int4 weights + fp8 KV lose retrieval (p ≈ 0.73 vs 0.955), on the same items
    assert right["qwen2.5-7b:int4:kv=fp8"] < right["qwen2.5-7b:bf16"]
    assert len(right["qwen2.5-7b:bf16"]) - len(right["qwen2.5-7b:int4:kv=fp8"]) >= 2
