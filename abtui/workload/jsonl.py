"""abtui's own workload format: JSON Lines, one request per line.

Fields of a line (docs/guide.md, "Workloads"):

- ``id`` (string, default ``l<line>``), ``arrival_s`` (seconds from the start, default 0),
- the prompt, one of: ``prompt`` (text), ``messages`` (chat messages), or ``input_tokens``
  (a length: abtui synthesises a prompt of that many tokens, seeded by the id),
- ``prefix_ids`` (with ``input_tokens``): ids of shared prefix blocks of ``block_tokens``
  tokens each (default 512). Items naming the same ids start with the same text, so a
  server's prefix cache behaves as it did in production (Mooncake traces),
- ``max_tokens`` (default: the run's ``--output-tokens``), ``expected``, ``suite``, ``tags``.

A message's ``content`` may be a list of OpenAI content parts; an ``image_url`` part must carry
a ``data:image/…;base64,…`` URL of a PNG, JPEG, GIF or WebP image (checked as the line is read:
a bad one stops the read with the field that holds it; its format, pixel size and bytes go with
the item, :attr:`abtui.client.items.Item.images`).

A bad line (not JSON, not UTF-8, a bad field) stops the read with ``FILE:LINE: what is wrong``;
with ``skip_bad`` it is skipped and counted (:class:`ReadStats`), never dropped silently. The
file is read a line at a time (:func:`read_workload`), never whole.
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from abtui import limits
from abtui.client.items import _WORDS, Item
from abtui.errors import WorkloadError

BLOCK_TOKENS = 512  # Mooncake's prefix block size
KNOWN_KEYS = frozenset(
    "id arrival_s prompt messages input_tokens prefix_ids block_tokens max_tokens expected "
    "suite tags".split()
)
MAX_BAD_SHOWN = 5
MAX_LINE_BYTES = 64 << 20  # one request per line: a longer line is an error, not read whole


@dataclass
class ReadStats:
    """What a read kept and what it skipped (and why, for the first few)."""

    lines: int = 0
    kept: int = 0
    skipped: int = 0
    examples: list[str] = field(default_factory=list)

    def skip(self, where: str, why: str) -> None:
        self.skipped += 1
        if len(self.examples) < MAX_BAD_SHOWN:
            self.examples.append(f"{where}: {why}")

    def describe(self, used: int | None = None) -> str:
        s = f"{self.kept} items read"
        if used is not None and used < self.kept:
            s += f", the first {used} used"
        if self.skipped:
            s += f", {self.skipped} bad lines skipped (" + "; ".join(self.examples)
            s += ", …)" if self.skipped > len(self.examples) else ")"
        return s


@dataclass
class Workload:
    """Items in arrival order, with each one's shared prefix blocks (for ``inspect``)."""

    items: list[Item]
    prefix_ids: list[list[int]]
    block_tokens: list[int]
    stats: ReadStats
    has_arrivals: bool  # some item has a non-zero arrival offset (replayable)


def words(rng: random.Random, n: int) -> str:
    """``n`` common words (about ``n`` tokens), from ``rng``."""
    return " ".join(rng.choices(_WORDS, k=max(0, n)))


class PromptSynth:
    """Synthesises prompts from lengths; the same prefix block id gives the same text."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._blocks: dict[tuple[int, int], list[str]] = {}

    def block(self, block_id: int, size: int) -> list[str]:
        key = (block_id, size)
        if key not in self._blocks:
            rng = random.Random(f"block:{self.seed}:{block_id}")
            # its id first: two different blocks never start alike by chance
            self._blocks[key] = [f"b{block_id}", *rng.choices(_WORDS, k=size - 1)]
        return self._blocks[key]

    def prompt(self, item_id: str, n_tokens: int, prefix_ids=(), block_tokens=BLOCK_TOKENS) -> str:
        out: list[str] = []
        for b in prefix_ids:
            if len(out) >= n_tokens:
                break
            out.extend(self.block(b, block_tokens))
        out = out[:n_tokens]
        rest = n_tokens - len(out)
        if rest > 0:  # the item's own text, its id first (no accidental sharing)
            rng = random.Random(f"item:{self.seed}:{item_id}")
            out.append(f"{item_id}")
            out.extend(rng.choices(_WORDS, k=rest - 1))
        return " ".join(out)


def _int(rec: dict, key: str, default=None):
    """``rec[key]`` (or ``default``) inside its row of the limit table (``item.<key>``); a
    float, even a whole one, is not a count here (JSON writes counts as integers)."""
    v = rec.get(key, default)
    if v is None:
        return None
    if isinstance(v, float):
        raise ValueError(f"{key} must be a whole number, got {v!r}")
    return limits.check(f"item.{key}", v, key)


def _parse(rec: object, line: int, default_max_tokens: int) -> tuple[Item, list[int], int]:
    """One decoded line → (item, prefix ids, block tokens); ValueError says what is wrong."""
    if not isinstance(rec, dict):
        raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
    unknown = sorted(set(rec) - KNOWN_KEYS)
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(KNOWN_KEYS))})")
    item_id = rec.get("id", f"l{line}")
    if not isinstance(item_id, str | int) or isinstance(item_id, bool):
        raise ValueError(f"id must be a string, got {item_id!r}")
    arrival = limits.check("item.arrival_s", rec.get("arrival_s", 0.0), "arrival_s")
    prompt, messages = rec.get("prompt"), rec.get("messages")
    n_in = _int(rec, "input_tokens")
    if sum(x is not None for x in (prompt, messages, n_in)) != 1:
        raise ValueError("give exactly one of prompt, messages, input_tokens")
    if prompt is not None and not isinstance(prompt, str):
        raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
    if messages is not None and not (
        isinstance(messages, list)
        and messages
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
    ):
        raise ValueError("messages must be a non-empty list of {role, content} objects")
    images = _images(messages)
    prefix = rec.get("prefix_ids", [])
    if not isinstance(prefix, list) or not all(
        isinstance(b, int) and not isinstance(b, bool) for b in prefix
    ):
        raise ValueError(f"prefix_ids must be a list of whole numbers, got {prefix!r}")
    for b in prefix:
        limits.check("item.prefix_id", b, "prefix_ids[…]")
    if prefix and n_in is None:
        raise ValueError("prefix_ids needs input_tokens (the prompt is synthesised)")
    block = _int(rec, "block_tokens", BLOCK_TOKENS)
    max_tokens = _int(rec, "max_tokens", default_max_tokens)
    tags = rec.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ValueError(f"tags must be a list of strings, got {tags!r}")
    for key in ("expected", "suite"):
        if rec.get(key) is not None and not isinstance(rec[key], str):
            raise ValueError(f"{key} must be a string")
    limits.finite_json(rec, "the line")  # NaN or Infinity anywhere else: sent, stored as bad JSON
    item = Item(
        index=0,
        id=str(item_id),
        arrival_s=float(arrival),
        prompt=prompt,
        messages=messages,
        max_tokens=max_tokens,
        n_input=n_in,  # a prompt's word count is taken once the item is kept (read_workload)
        expected=rec.get("expected"),
        suite=rec.get("suite"),
        tags=list(tags),
        images=images,
    )
    return item, list(prefix), block


def _images(messages: list[dict] | None) -> list[dict] | None:
    """The :func:`abtui.client.images.describe` of every image part of ``messages`` (None
    without any); ValueError names the field of one that is not a data URL of an image."""
    from abtui.client.images import NotAnImage, decode_data_url, describe

    out = []
    for i, m in enumerate(messages or ()):
        content = m.get("content")
        for j, p in enumerate(content if isinstance(content, list) else ()):
            if not (isinstance(p, dict) and p.get("type") == "image_url"):
                continue
            where = f"messages[{i}].content[{j}].image_url"
            iu = p.get("image_url")
            if not isinstance(iu, dict) or "url" not in iu:
                raise ValueError(f"{where} must be an object with a 'url'")
            try:
                out.append(describe(decode_data_url(iu["url"])))
            except NotAnImage as e:
                raise ValueError(f"{where}.url: {e}") from None
    return out or None


def _lines(fh, p: Path) -> Iterator[tuple[int, bytes]]:
    """Numbered raw lines, one at a time; a line over ``MAX_LINE_BYTES`` stops the read (a file
    without newlines is never read whole)."""
    n = 0
    while raw := fh.readline(MAX_LINE_BYTES + 1):
        n += 1
        if len(raw) > MAX_LINE_BYTES:
            raise WorkloadError(
                f"{p}:{n}: line longer than {MAX_LINE_BYTES >> 20} MiB",
                "one request per line; a prompt this long fits no model's context window",
            )
        yield n, raw


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
        ) from None


def read_workload(
    path: str | Path,
    *,
    skip_bad: bool = False,
    default_max_tokens: int = 128,
    seed: int = 0,
    limit: int | None = None,
) -> Workload:
    """Read an abtui JSONL workload; items come back sorted by arrival (stable), re-indexed,
    with synthesised prompts where the line gave a length.

    The file is streamed: every line is read and checked, but with ``limit`` only the ``limit``
    earliest items (by arrival, then line) are held, so the first N requests of a trace of any
    size take memory for N items."""
    p = Path(path)
    stats = ReadStats()
    # with a limit: a heap of the earliest items so far, the latest on top (keys negated)
    rows: list[tuple[float, int, tuple[Item, list[int], int]]] = []
    has_arrivals = False
    try:
        fh = p.open("rb")
    except OSError as e:
        raise WorkloadError(f"cannot read workload file {p}: {e.strerror or e}") from None
    with fh:
        for n, raw in _lines(fh, p):
            stats.lines = n
            if not raw.strip():
                continue
            try:
                row = _parse(json.loads(_decode(raw)), n, default_max_tokens)
            # JSONDecodeError is a ValueError; RecursionError: nested too deeply to decode
            except (ValueError, TypeError, RecursionError) as e:
                if not skip_bad:
                    raise WorkloadError(
                        f"{p}:{n}: {e}",
                        "fix the line, or pass --skip-bad to skip and count bad lines",
                    ) from None
                stats.skip(f"{p}:{n}", str(e))
                continue
            stats.kept += 1
            arrival = row[0].arrival_s
            has_arrivals = has_arrivals or arrival > 0
            if limit is None:
                rows.append((arrival, n, row))
            elif len(rows) < limit:
                heapq.heappush(rows, (-arrival, -n, row))
            elif (-arrival, -n) > rows[0][:2]:  # earlier than the latest held: replace it
                heapq.heapreplace(rows, (-arrival, -n, row))
    if not rows:
        raise WorkloadError(
            f"{p}: no usable items", "abtui's JSONL format is in docs/guide.md (Workloads)"
        )
    if limit is None:
        rows.sort(key=lambda r: r[0])  # stable: equal arrivals keep the file's order
    else:
        rows.sort(key=lambda r: (-r[0], -r[1]))
    synth = PromptSynth(seed)
    for i, (_, _, (item, prefix, block)) in enumerate(rows):
        item.index = i
        if item.n_input is None and item.prompt:
            item.n_input = len(item.prompt.split())
        if item.prompt is None and item.messages is None:
            item.prompt = synth.prompt(item.id, item.n_input, prefix, block)
    return Workload(
        items=[r[2][0] for r in rows],
        prefix_ids=[r[2][1] for r in rows],
        block_tokens=[r[2][2] for r in rows],
        stats=stats,
        has_arrivals=has_arrivals,
    )


def write_jsonl(path: str | Path, records: Iterable[dict]) -> int:
    """Write records (dicts with the fields above) one per line; returns how many."""
    n = 0
    p = Path(path)
    try:
        with p.open("w", encoding="utf-8") as fh:
            for rec in records:
                # allow_nan=False: a NaN that got this far is a bug, never a line of bad JSON
                line = json.dumps(rec, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
                fh.write(line + "\n")
                n += 1
    except OSError as e:
        raise WorkloadError(f"cannot write {p}: {e.strerror or e}") from None
    return n


def item_records(items: Iterable[Item]) -> Iterator[dict]:
    """Items as JSONL records (what ``abtui workload`` writes for a synthetic workload); an
    item with made images (:attr:`Item.images`) becomes its chat message, text then images."""
    for it in items:
        rec: dict = {"id": it.id, "arrival_s": round(it.arrival_s, 6)}
        if it.messages is not None or it.images:
            # made images: the chat message the run sends, its images as data URLs
            rec["messages"] = it.chat_messages()
        else:
            rec["prompt"] = it.prompt
        rec["max_tokens"] = it.max_tokens
        for key in ("expected", "suite"):
            if getattr(it, key) is not None:
                rec[key] = getattr(it, key)
        if it.tags:
            rec["tags"] = it.tags
        yield rec
