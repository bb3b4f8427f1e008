"""The built-in suites, generated locally from a seed (no downloads).

The prompt formats are :mod:`abtui.quality.prompts` (the one definition): its generators make
every prompt, and the simulator's quality face reads them back, so it answers exactly these items.

``niah``
    Needle in a haystack over a grid of context lengths × needle depths. Lengths are powers of
    two from 1k tokens up to what the endpoint's context holds (``max_context`` − the answer cap,
    less :data:`TOKENIZER_SLACK` for real tokenizers, which count a filler word as a bit more
    than one token). Each haystack (one seed, one length) is asked at every depth: the same
    text with the needle moved, so its items share a cluster. Scorer: ``contains``.
``keys``
    Multi-key retrieval with :data:`N_KEYS` confusable keys (same stem, 2-digit suffixes) per
    haystack; :data:`QUESTIONS_PER_HAYSTACK` of them are asked, one per item (the haystack is
    the cluster). Scorer: ``contains``.
``exact``
    Exact-answer tasks: arithmetic (``numeric``) and following an output format (``exact``,
    case-sensitive); each item its own cluster, bucket ``short``.

The length bucket of a retrieval item is its target length (``1k``, ``2k``, … ``32k``).
"""

from __future__ import annotations

import re

from abtui.errors import UsageError
from abtui.quality import prompts as qf
from abtui.quality.items import QualityItem

SUITES = ("niah", "keys", "exact")
LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
DEPTHS = (0.1, 0.5, 0.9)
N_KEYS = 4
QUESTIONS_PER_HAYSTACK = 2
TOKENIZER_SLACK = 0.85  # a filler word is ~1.1 tokens in Llama-3-style tokenizers
_QUESTION = "Question: what is the pass key for {key}? Answer with the pass key only."
_FACT = re.compile(r"The pass key for (\S+) is (\d+)\.")


def bucket_of(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens >= 1024 else str(tokens)


def lengths_for(max_context: int, max_tokens: int, max_length: int | None = None) -> list[int]:
    """The grid's lengths that fit ``max_context`` (and ``max_length``, when given)."""
    room = int((max_context - max_tokens) * TOKENIZER_SLACK)
    cap = min(room, max_length) if max_length else room
    out = [n for n in LENGTHS if n <= cap]
    if not out:
        raise UsageError(
            f"the endpoint's context ({max_context} tokens) is too small for the retrieval "
            f"suites (the shortest haystack is {LENGTHS[0]} tokens + {max_tokens} to answer)",
            "leave out niah and keys (--quality exact), or lower quality.max_tokens",
        )
    return out


def _seed(seed: int, *parts: int) -> int:
    s = seed
    for p in parts:
        s = s * 1_000_003 + p
    return s


def niah(seed: int, lengths: list[int], per_length: int) -> list[QualityItem]:
    out = []
    for li, n in enumerate(lengths):
        for s in range(per_length):
            sd = _seed(seed, 1, li, s)
            for depth in DEPTHS:
                g = qf.needle_prompt(sd, n, depth)
                out.append(QualityItem(
                    id=f"niah-{bucket_of(n)}-d{round(depth * 100)}-s{s}", suite="niah",
                    cluster=f"niah-{bucket_of(n)}-s{s}", scorer="contains",
                    references=(g.answer,), prompt=g.prompt, bucket=bucket_of(n),
                    context_tokens=g.context_tokens,
                ))  # fmt: skip
    return out


def keys(seed: int, lengths: list[int], per_length: int) -> list[QualityItem]:
    out = []
    for li, n in enumerate(lengths):
        for s in range(per_length):
            g = qf.keys_prompt(_seed(seed, 2, li, s), n, N_KEYS)
            body, _, _ = g.prompt.rpartition("\n")
            facts = _FACT.findall(body)
            asked = [kv for kv in facts if kv[1] == g.answer]
            others = [kv for kv in facts if kv[1] != g.answer]
            for q, (key, value) in enumerate((asked + others)[:QUESTIONS_PER_HAYSTACK]):
                prompt = body + "\n" + _QUESTION.format(key=key)
                out.append(QualityItem(
                    id=f"keys-{bucket_of(n)}-s{s}-q{q}", suite="keys",
                    cluster=f"keys-{bucket_of(n)}-s{s}", scorer="contains", references=(value,),
                    prompt=prompt, bucket=bucket_of(n), context_tokens=len(prompt.split()),
                ))  # fmt: skip
    return out


def exact(seed: int, n: int) -> list[QualityItem]:
    out = []
    for s in range(n):
        for gen, scorer in ((qf.arithmetic_prompt, "numeric"), (qf.format_prompt, "exact")):
            g = gen(_seed(seed, 3, s))
            out.append(QualityItem(
                id=f"{g.task}-s{s}", suite="exact", cluster=f"{g.task}-s{s}", scorer=scorer,
                references=(g.answer,), prompt=g.prompt, bucket="short",
                context_tokens=g.context_tokens,
            ))  # fmt: skip
    return out


def build(
    suites: list[str],
    *,
    seed: int,
    max_context: int,
    max_tokens: int,
    per_cell: int,
    max_length: int | None = None,
) -> list[QualityItem]:
    """The items of the named built-in ``suites`` (ids unique across them)."""
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise UsageError(
            f"--quality: unknown suite {unknown[0]!r}", f"built-in suites: {', '.join(SUITES)}"
        )
    items: list[QualityItem] = []
    lengths = None
    for name in suites:
        if name in ("niah", "keys") and lengths is None:
            lengths = lengths_for(max_context, max_tokens, max_length)
        if name == "niah":
            items += niah(seed, lengths, per_cell)
        elif name == "keys":
            items += keys(seed, lengths, per_cell)
        else:
            items += exact(seed, per_cell * 4)
    return items
