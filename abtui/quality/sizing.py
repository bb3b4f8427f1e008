"""How the quality items go to these endpoints, and how long they may take.

Before the items are built, :func:`probe` asks every arm (all arms at once, as the items will be
sent, so a CPU the arms share is timed shared):

1. **Chat or completion** (``quality.api``): ``chat`` sends every item as chat messages through
   the server's chat template, ``completions`` as a plain prompt that starts the answer (for a
   base model). ``auto`` (the default) asks each arm: an arm whose ``api`` is ``chat`` is a chat
   endpoint; else a llama.cpp server's ``/props`` says whether the model has a chat template of
   its own (llama.cpp shows a built-in ChatML fallback for a model without one: that is a base
   model); else one chat request with one token says whether the endpoint serves chat at all
   (vLLM refuses chat for a model without a template). Chat when every arm says chat; else
   completions, so that every arm gets the same text.
2. **Context**: the arm's ``max_model_len`` (``/v1/models``), else llama.cpp's context per slot
   (``/props``).
3. **Speed**: three requests of one token each (a few words, ~256 words and ~2,048 tokens of the
   suites' filler, on the chosen path) give the time to the first token ``t(n)`` at three prompt
   lengths ``n`` (the server's own token count) and the tokenizer's tokens per filler word; a warm-up
   request with up to 8 tokens gives the time per generated token. ``t(n) = a + b n + c n²``
   (prefill is linear in the prompt plus attention, quadratic) is fitted through the three
   points (``b``, ``c`` ≥ 0). The slowest arm's figures count.

:func:`plan` then sizes the grid and the timeouts from the measured speed:

- an item of ``L`` tokens is expected to take ``est(L) = t(L) + max_tokens × decode``, and at
  most ``concurrency`` items are in flight per arm, which a CPU server answers one after the
  other, so an item may wait for ``concurrency − 1`` others: its timeout (the longest silence
  allowed while it is answered) is ``4 × concurrency × est(L)``, and never less than the arm's
  own read timeout;
- the lengths of the retrieval grid are kept, shortest first, while the whole quality phase is
  expected to end within ``quality.budget_s`` (``Σ est`` over the items: items answered one
  after the other; less where the server answers several at once); the shortest length is
  always kept. The estimate and what was left out are said before the items are sent.

When an arm cannot be timed (an error, no usage), nothing is sized: the lengths that fit the
context are all kept, the timeouts stay the arm's, and the reason is said.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import httpx

from abtui.client import records
from abtui.client.fast import FastClient, fast_stream_request
from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.client.target import Target, build_body
from abtui.quality import builtin
from abtui.quality.config import API_SETTINGS  # noqa: F401 (this module's setting, defined there)
from abtui.quality.items import QualityItem
from abtui.quality.prompts import filler

DEFAULT_BUDGET_S = 600.0
SAFETY = 4.0  # timeout = SAFETY × in flight × the expected time
PROBE_WORDS = 256  # the middle timing request's filler words
PROBE_TOKENS = 2048  # the long timing request's target tokens (less when the context is smaller)
PROBE_TIMEOUT_S = 600.0
# llama.cpp's built-in template for a model without one (common/chat.cpp), whitespace removed
_LLAMACPP_FALLBACK = (
    "{%-formessageinmessages-%}{{-'<|im_start|>'+message.role+''+message.content+'<|im_end|>'-}}"
    "{%-endfor-%}{%-ifadd_generation_prompt-%}{{-'<|im_start|>assistant'-}}{%-endif-%}"
)


@dataclass(frozen=True, slots=True)
class Cost:
    """Seconds to the first token of a prompt of ``n`` tokens, ``a + b n + c n²``, and seconds
    per generated token."""

    a: float
    b: float
    c: float
    decode: float

    def first_token_s(self, n: float) -> float:
        return self.a + self.b * n + self.c * n * n

    def item_s(self, n: float, max_tokens: int) -> float:
        return self.first_token_s(n) + max_tokens * self.decode

    def prefill_rate(self, n: float) -> float:
        """Prompt tokens a second at ``n`` tokens (for the message)."""
        t = self.first_token_s(n) - self.a
        return n / t if t > 0 else math.inf


@dataclass
class Profile:
    """What :func:`probe` found, all arms together."""

    api: str  # "chat" | "completions"
    api_why: str
    context: int | None = None  # smallest known context of the arms
    tokens_per_word: float | None = None  # the suites' filler, on the endpoint's tokenizer
    cost: Cost | None = None  # the slowest arm's
    notes: list[str] = field(default_factory=list)  # what could not be measured, and why

    def to_dict(self) -> dict:
        """The ``meta.quality_plan`` keys of the probe."""
        c = self.cost
        return {
            "api": self.api,
            "api_why": self.api_why,
            "context": self.context,
            "tokens_per_word": self.tokens_per_word,
            "cost": None if c is None else dataclasses.asdict(c),
            "notes": list(self.notes),
        }


# -- chat or completion ------------------------------------------------------------------------


def _root(base_url: str) -> str:
    u = urlsplit(base_url)
    path = re.sub(r"/v1/?$", "", u.path.rstrip("/"))
    return urlunsplit((u.scheme, u.netloc, path, "", ""))


def _props(client: httpx.Client, t: Target) -> dict | None:
    """llama.cpp's ``/props`` (None from any other server)."""
    try:
        r = client.get(_root(t.base_url) + "/props", headers=t.headers)
        body = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return body if isinstance(body, dict) and "default_generation_settings" in body else None


def is_fallback_template(template: str) -> bool:
    """Whether ``template`` is llama.cpp's stand-in for a model without a chat template."""
    return re.sub(r"\s+", "", template) == _LLAMACPP_FALLBACK


def arm_api(client: httpx.Client, t: Target, props: dict | None) -> tuple[str | None, str]:
    """What one arm says about itself: ``("chat" | "completions" | None, why)``."""
    if t.api == "chat":
        return "chat", "its api is chat"
    if props is not None and isinstance(props.get("chat_template"), str):
        tmpl = props["chat_template"]
        if not tmpl.strip() or is_fallback_template(tmpl):
            return "completions", "its model has no chat template (llama.cpp /props)"
        return "chat", "its model has a chat template (llama.cpp /props)"
    body = {
        "model": t.model,
        "messages": [{"role": "user", "content": "Say OK."}],
        "max_tokens": 1,
        "temperature": 0.0,
        "stream": False,
    }
    try:
        r = client.post(t.base_url + "/chat/completions", json=body, headers=t.headers)
    except httpx.HTTPError as e:
        return None, f"the chat request failed ({type(e).__name__})"
    if 200 <= r.status_code < 300:
        return "chat", "it answers chat requests"
    if r.status_code in (400, 404, 405, 422, 501):
        return "completions", f"it refuses chat requests (HTTP {r.status_code})"
    return None, f"the chat request got HTTP {r.status_code}"


def choose_api(
    setting: str, votes: list[tuple[str, str | None, str]], fallback: str
) -> tuple[str, str]:
    """The path every arm's items take: ``setting`` unless ``auto``; else chat when every arm
    (``(name, api, why)``) says chat, completions when one says completions (named), else
    ``fallback`` (the baseline's ``api``)."""
    if setting != "auto":
        return setting, f"quality.api = {setting!r}"
    no = [(n, why) for n, api, why in votes if api == "completions"]
    if no:
        return "completions", f"{no[0][0]}: {no[0][1]}"
    unknown = [(n, why) for n, api, why in votes if api is None]
    if unknown:
        return fallback, f"{unknown[0][0]}: {unknown[0][1]}; the arm's api ({fallback})"
    whys = sorted({why for _, _, why in votes})
    return "chat", "every arm: " + "; ".join(whys)


def arm_context(t: Target, props: dict | None) -> int | None:
    from abtui.workload.context import max_model_len

    n = max_model_len(t.base_url, t.model, t.headers, verify=t.tls)
    if n is None and props is not None:
        gen = props.get("default_generation_settings")
        v = gen.get("n_ctx") if isinstance(gen, dict) else None
        n = v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
    return n


# -- speed -------------------------------------------------------------------------------------


def _probe_text(seed: int, words: int) -> str:
    body = " ".join(filler(random.Random(f"probe:{seed}"), words))
    return f"{body}\n\nWhich of these sentences is the longest?"


async def _one(client: FastClient, t: Target, text: str, max_tokens: int) -> RequestRecord:
    item = Item(index=0, id="probe", prompt=text, max_tokens=max_tokens)
    rec = RequestRecord(arm=0, item=0)
    await fast_stream_request(client, t, item, build_body(t, item), rec, store_text=False)
    return rec


def _ttft_s(rec: RequestRecord) -> float | None:
    if rec.status != records.OK or not rec.chunk_ns:
        return None
    return (rec.chunk_ns[0] - rec.dispatched_ns) / 1e9


def fit_cost(points: list[tuple[float, float]], decode: float) -> Cost:
    """``t = a + b n + c n²`` through ``(n, t)`` points (least squares), ``b, c ≥ 0``."""
    import numpy as np

    n = np.array([p[0] for p in points], float)
    t = np.array([p[1] for p in points], float)
    for cols in ((1, 1, 1), (1, 1, 0), (1, 0, 0)):  # drop c, then b, while one comes out < 0
        x = np.stack([n**k if on else np.zeros_like(n) for k, on in enumerate(cols)], axis=1)
        coef, *_ = np.linalg.lstsq(x, t, rcond=None)
        a, b, c = (float(v) for v in coef)
        if b >= 0 and c >= 0:
            break
    return Cost(max(0.0, a), max(0.0, b), max(0.0, c), max(0.0, decode))


async def _time_arm(t: Target, context: int | None, seed: int) -> tuple[Cost, float] | str:
    """One arm's cost and tokens per filler word, or why it could not be measured."""
    async with FastClient() as client:
        warm = await _one(client, t, "Write one short sentence about the sea.", 8)
        if warm.status != records.OK:
            return f"{warm.error_class}: {warm.error_message}"
        first, decode = _ttft_s(warm), 0.0
        if first is not None and warm.done_ns and (warm.n_output or 0) >= 2:
            decode = (warm.done_ns - warm.chunk_ns[0]) / 1e9 / (warm.n_output - 1)
        points: list[tuple[float, float]] = []
        words: list[tuple[int, int]] = []
        plan = [8, PROBE_WORDS, None]  # None: sized from the tokenizer, after the first two
        for k, w in enumerate(plan):
            if w is None:
                tpw = _tokens_per_word(words)
                if tpw is None:
                    break
                room = PROBE_TOKENS if context is None else min(PROBE_TOKENS, context // 2)
                w = int(room / tpw)
                if w <= PROBE_WORDS * 2:
                    break
            text = _probe_text(seed * 3 + k, w)
            w = len(text.split())  # the filler ends on a whole sentence: a few words more
            rec = await _one(client, t, text, 1)
            secs = _ttft_s(rec)
            if secs is None:
                return f"{rec.error_class}: {rec.error_message}"
            if rec.n_input is None:
                return "the endpoint reports no prompt token count (usage)"
            points.append((float(rec.n_input), secs))
            words.append((w, rec.n_input))
    tpw = _tokens_per_word(words)
    if tpw is None:
        return "too few timing points"
    return fit_cost(points, decode), tpw


def _tokens_per_word(words: list[tuple[int, int]]) -> float | None:
    """Tokens per filler word from ``(words, tokens)`` of two requests or more (the slope:
    the fixed part, template and question, drops out)."""
    if len(words) < 2:
        return None
    (w0, n0), (w1, n1) = words[0], words[-1]
    return (n1 - n0) / (w1 - w0) if w1 > w0 and n1 > n0 else None


async def _time_all(targets: list[Target], contexts: list[int | None], seed: int) -> list:
    return await asyncio.gather(
        *(_time_arm(t, c, seed) for t, c in zip(targets, contexts, strict=True))
    )


def probe(
    targets: list[Target],
    names: list[str],
    setting: str = "auto",
    seed: int = 0,
    timed: bool = True,
) -> Profile:
    """Ask every arm (module docstring): the path, the context, the speed."""
    props, votes = [], []
    for name, t in zip(names, targets, strict=True):
        with httpx.Client(trust_env=False, timeout=60.0, verify=t.tls) as client:
            props.append(_props(client, t))
            if setting == "auto":
                votes.append((name, *arm_api(client, t, props[-1])))
    api, why = choose_api(setting, votes, targets[0].api)
    contexts = [arm_context(t, p) for t, p in zip(targets, props, strict=True)]
    known = [c for c in contexts if c]
    prof = Profile(api=api, api_why=why, context=min(known) if known else None)
    if not timed:
        return prof
    on_path = [
        dataclasses.replace(
            t,
            api=api,
            params={**t.params, "temperature": 0.0},
            read_timeout_s=max(t.read_timeout_s, PROBE_TIMEOUT_S),
            timeout_s=max(t.timeout_s, PROBE_TIMEOUT_S),
        )
        for t in targets
    ]
    results = asyncio.run(_time_all(on_path, contexts, seed))
    costs, ratios = [], []
    for name, res in zip(names, results, strict=True):
        if isinstance(res, str):
            prof.notes.append(f"{name} could not be timed ({res})")
        else:
            costs.append(res[0])
            ratios.append(res[1])
    if costs and not prof.notes:
        prof.cost = max(costs, key=lambda c: c.item_s(PROBE_TOKENS, 32))
        prof.tokens_per_word = max(ratios)
    return prof


# -- the plan ----------------------------------------------------------------------------------


@dataclass
class Plan:
    """The grid and the time it is expected to take."""

    lengths: list[int] | None  # the retrieval grid (None: no retrieval suite)
    left_out: list[int]  # lengths that fit the context but not the budget
    estimate_s: float | None  # the whole quality phase, Σ est over the items (None: untimed)
    left_out_s: float  # what the lengths left out would have added

    def to_dict(self) -> dict:
        """The ``meta.quality_plan`` keys of the plan."""
        return dataclasses.asdict(self)


def item_s(prof: Profile, tokens: int, max_tokens: int) -> float | None:
    return None if prof.cost is None else prof.cost.item_s(tokens, max_tokens)


def plan(
    prof: Profile,
    suites: list[str],
    *,
    per_cell: int,
    max_tokens: int,
    max_length: int | None,
    budget_s: float,
    context: int,
) -> Plan:
    """The lengths to run and the expected time (module docstring)."""
    retrieval = [s for s in suites if s in ("niah", "keys")]
    short = builtin.EXACT_PER_CELL * per_cell * 2 if "exact" in suites else 0
    fixed = 0.0 if prof.cost is None else short * prof.cost.item_s(100, max_tokens)
    if not retrieval:
        return Plan(None, [], fixed if prof.cost else None, 0.0)
    fit = builtin.lengths_for(context, max_tokens, max_length, prof.tokens_per_word)
    if prof.cost is None:
        return Plan(fit, [], None, 0.0)
    per_length = builtin.items_at_length(suites, per_cell)
    total, kept, left, left_s = fixed, [], [], 0.0
    for n in fit:
        t = per_length * prof.cost.item_s(n, max_tokens)
        if kept and (left or total + t > budget_s):
            left.append(n)
            left_s += t
        else:
            kept.append(n)
            total += t
    return Plan(kept, left, total, left_s)


def with_timeouts(
    items: list[QualityItem], prof: Profile, *, api: str, max_tokens: int, concurrency: int
) -> list[QualityItem]:
    """The items with the chosen path and, when the endpoint was timed, their timeouts."""
    out = []
    for it in items:
        timeout = None
        if prof.cost is not None:
            n = it.context_tokens or len((it.prompt or "").split())
            est = prof.cost.item_s(n, it.max_tokens or max_tokens)
            timeout = round(SAFETY * max(1, concurrency) * est, 1)
        out.append(dataclasses.replace(it, api=api, timeout_s=timeout))
    return out


def _minutes(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def message(prof: Profile, pl: Plan, n_items: int, budget_s: float, concurrency: int) -> str:
    """What the quality phase will do, said before it starts."""
    parts = [f"{n_items} items per arm, {prof.api} ({prof.api_why})"]
    if pl.lengths:
        lo, hi = builtin.bucket_of(pl.lengths[0]), builtin.bucket_of(pl.lengths[-1])
        parts.append(f"lengths {lo}" + (f"–{hi}" if hi != lo else ""))
    if prof.cost is not None and pl.estimate_s is not None:
        rate = prof.cost.prefill_rate(pl.lengths[-1] if pl.lengths else 1024)
        speed = f"{rate:,.0f} prompt tokens/s on the slowest arm, " if math.isfinite(rate) else ""
        parts.append(
            f"expected to take about {_minutes(pl.estimate_s)} ({speed}{concurrency} in flight)"
        )
    if pl.left_out:
        lo, hi = builtin.bucket_of(pl.left_out[0]), builtin.bucket_of(pl.left_out[-1])
        parts.append(
            f"{lo}" + (f"–{hi}" if hi != lo else "") + " left out (they would add ~"
            f"{_minutes(pl.left_out_s)} to quality.budget_s = {budget_s:g} s: raise it "
            "to run them)"
        )
    parts += prof.notes
    return "; ".join(parts)
