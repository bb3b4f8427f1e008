"""The built-in suites, generated locally from a seed (no downloads).

The prompt formats are :mod:`abtui.quality.prompts` (the one definition): its generators make
every prompt in both renderings (chat messages and a completion prompt; which one is sent is
the run's choice, :mod:`abtui.quality.sizing`), and the simulator's quality face reads them back,
so it answers exactly these items.

``niah``
    Needle in a haystack over a grid of context lengths × needle depths. Lengths are powers of
    two from 1k tokens up to what the endpoint's context holds (:func:`lengths_for`). When the
    endpoint's tokenizer was measured (``tokens_per_word``), a length is in its tokens; else in
    filler words, fitted with :data:`TOKENIZER_SLACK`. Each haystack (one seed, one length) is
    asked at every depth: the same text with the needle moved, so its items share a cluster.
    Scorer: ``number``.
``keys``
    Multi-key retrieval with :data:`N_KEYS` labelled five-digit numbers (the pass key, the door
    code, …) per haystack; :data:`QUESTIONS_PER_HAYSTACK` of them are asked, one per item (the
    haystack is the cluster). Scorer: ``number``, the other keys' values as distractors.
``exact``
    Short exact-answer tasks: copying a code (``copy``) and recalling a capital city
    (``capital``), scorer ``word``; each item its own cluster, bucket ``short``. They are what
    a 135M-parameter chat model answers reliably and what damage to the weights breaks first:
    exact token copying and stored facts (arithmetic and output-format tasks sit near 0-50 % on
    such a model, docs/methods.md §4).

The length bucket of a retrieval item is its target length (``1k``, ``2k``, … ``32k``).
"""

from __future__ import annotations

import random

from abtui.errors import UsageError
from abtui.quality import prompts
from abtui.quality.items import QualityItem

SUITES = ("niah", "keys", "exact")
LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
DEPTHS = (0.1, 0.5, 0.9)
N_KEYS = 4
QUESTIONS_PER_HAYSTACK = 2
EXACT_PER_CELL = 4  # exact items of each task per quality.per_cell
TOKENIZER_SLACK = 0.85  # unmeasured tokenizer: a filler word is taken as ~1.18 tokens
MEASURED_SLACK = 1.05  # measured tokenizer: room for the ratio to vary between texts
OVERHEAD_TOKENS = 64  # chat template and instructions around a haystack


def bucket_of(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens >= 1024 else str(tokens)


def fits(
    length: int, max_context: int, max_tokens: int, tokens_per_word: float | None = None
) -> bool:
    """Whether a haystack of ``length`` (tokens when ``tokens_per_word`` is known, else words)
    and its answer fit ``max_context``."""
    if tokens_per_word is None:
        return length <= int((max_context - max_tokens) * TOKENIZER_SLACK)
    return length * MEASURED_SLACK + OVERHEAD_TOKENS + max_tokens <= max_context


def lengths_for(
    max_context: int,
    max_tokens: int,
    max_length: int | None = None,
    tokens_per_word: float | None = None,
) -> list[int]:
    """The grid's lengths that fit ``max_context`` (and ``max_length``, when given)."""
    out = [
        n
        for n in LENGTHS
        if fits(n, max_context, max_tokens, tokens_per_word) and (not max_length or n <= max_length)
    ]
    if not out:
        raise UsageError(
            f"the endpoint's context ({max_context} tokens) is too small for the retrieval "
            f"suites (the shortest haystack is {LENGTHS[0]} tokens + {max_tokens} to answer)",
            "leave out niah and keys (--quality exact), or lower quality.max_tokens",
        )
    return out


def items_at_length(suites: list[str], per_cell: int) -> int:
    """How many retrieval items one grid length adds (niah and keys)."""
    return per_cell * (
        (len(DEPTHS) if "niah" in suites else 0)
        + (QUESTIONS_PER_HAYSTACK if "keys" in suites else 0)
    )


def _seed(seed: int, *parts: int) -> int:
    s = seed
    for p in parts:
        s = s * 1_000_003 + p
    return s


def _words(length: int, tokens_per_word: float | None) -> int:
    return length if tokens_per_word is None else max(1, round(length / tokens_per_word))


def _item(
    g: prompts.GeneratedPrompt,
    *,
    id: str,
    suite: str,
    cluster: str,
    scorer: str,
    bucket: str,
    context_tokens: int,
) -> QualityItem:
    return QualityItem(
        id=id,
        suite=suite,
        cluster=cluster,
        scorer=scorer,
        references=(g.answer,),
        prompt=g.prompt,
        messages=g.messages,
        bucket=bucket,
        context_tokens=context_tokens,
        distractors=g.distractors,
        stop=prompts.STOPS,
    )


def niah(
    seed: int,
    lengths: list[int],
    per_length: int,
    tokens_per_word: float | None = None,
    start: int = 0,
) -> list[QualityItem]:
    """Haystacks ``start`` … ``start + per_length − 1`` of each length, each at every depth
    (haystack ``s`` has its own seed: a later round's items are new draws)."""
    out = []
    for li, n in enumerate(lengths):
        for s in range(start, start + per_length):
            sd = _seed(seed, 1, li, s)
            for depth in DEPTHS:
                g = prompts.needle_prompt(sd, _words(n, tokens_per_word), depth)
                out.append(
                    _item(
                        g,
                        id=f"niah-{bucket_of(n)}-d{round(depth * 100)}-s{s}",
                        suite="niah",
                        cluster=f"niah-{bucket_of(n)}-s{s}",
                        scorer="number",
                        bucket=bucket_of(n),
                        context_tokens=n,
                    )
                )
    return out


def keys(
    seed: int,
    lengths: list[int],
    per_length: int,
    tokens_per_word: float | None = None,
    start: int = 0,
) -> list[QualityItem]:
    out = []
    for li, n in enumerate(lengths):
        for s in range(start, start + per_length):
            sd = _seed(seed, 2, li, s)
            first = random.Random(f"keys-asked:{sd}").randrange(N_KEYS)
            for q in range(QUESTIONS_PER_HAYSTACK):
                g = prompts.keys_prompt(sd, _words(n, tokens_per_word), N_KEYS, asked=first + q)
                out.append(
                    _item(
                        g,
                        id=f"keys-{bucket_of(n)}-s{s}-q{q}",
                        suite="keys",
                        cluster=f"keys-{bucket_of(n)}-s{s}",
                        scorer="number",
                        bucket=bucket_of(n),
                        context_tokens=n,
                    )
                )
    return out


def exact(seed: int, n: int, start: int = 0) -> list[QualityItem]:
    """``n`` items of each exact task (from the ``start``-th); the capitals are drawn without
    repeats while they last."""
    countries = sorted(prompts.CAPITALS)
    random.Random(f"capitals:{seed}").shuffle(countries)
    out = []
    for s in range(start, start + n):
        for g in (
            prompts.copy_prompt(_seed(seed, 3, s)),
            prompts.capital_prompt(s, countries[s % len(countries)]),
        ):
            out.append(
                _item(
                    g,
                    id=f"{g.task}-s{s}",
                    suite="exact",
                    cluster=f"{g.task}-s{s}",
                    scorer="word",
                    bucket="short",
                    context_tokens=g.context_tokens,
                )
            )
    return out


def build(
    suites: list[str],
    *,
    seed: int,
    max_context: int,
    max_tokens: int,
    per_cell: int,
    max_length: int | None = None,
    tokens_per_word: float | None = None,
    lengths: list[int] | None = None,
    start: int = 0,
) -> list[QualityItem]:
    """The items of the named built-in ``suites`` (ids unique across them). ``lengths``: the
    retrieval grid when already chosen (:mod:`abtui.quality.sizing`), else every length that
    fits. ``start``: the first cell index (a later round of a run ``--until-decided`` builds
    cells ``start`` … ``start + per_cell − 1``, new items)."""
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise UsageError(
            f"--quality: unknown suite {unknown[0]!r}", f"built-in suites: {', '.join(SUITES)}"
        )
    items: list[QualityItem] = []
    for name in suites:
        if name in ("niah", "keys") and lengths is None:
            lengths = lengths_for(max_context, max_tokens, max_length, tokens_per_word)
        if name == "niah":
            items += niah(seed, lengths, per_cell, tokens_per_word, start)
        elif name == "keys":
            items += keys(seed, lengths, per_cell, tokens_per_word, start)
        else:
            items += exact(seed, per_cell * EXACT_PER_CELL, start * EXACT_PER_CELL)
    return items
