"""User suites from JSONL: one item per line.

Fields: ``prompt`` (str) or ``messages`` (a list of ``{"role", "content"}``); ``reference`` (str)
or ``references`` (a non-empty list of str); ``scorer`` (``exact`` | ``contains`` | ``regex`` |
``numeric`` | ``choice`` | ``number`` | ``word``, default ``exact``: abtui.quality.scorers);
optional ``id`` (default ``line N``), ``cluster`` (items sharing a context; default: the item
alone), ``bucket`` (a group of the paired statistics; default ``all``), ``tolerance`` (numeric,
≥ 0), ``max_tokens`` (> 0), ``echoes`` and ``distractors`` (``number``: lists of the question's
own numbers, passed over, and of the context's other values, never right). Blank lines and
lines starting with ``#`` are skipped. The suite's name is the file's stem. A bad line raises a
:class:`~abtui.errors.WorkloadError` naming the file, the line and the field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from abtui.errors import WorkloadError
from abtui.quality.items import SCORERS, QualityItem

_FIELDS = {
    "id",
    "prompt",
    "messages",
    "reference",
    "references",
    "scorer",
    "cluster",
    "bucket",
    "tolerance",
    "max_tokens",
    "tags",
    "echoes",
    "distractors",
}


def _bad(where: str, what: str, hint: str | None = None) -> WorkloadError:
    return WorkloadError(f"{where}: {what}", hint or "see `abtui run --help` (--quality-file)")


def _item(obj: object, where: str, line: int, suite: str) -> QualityItem:
    if not isinstance(obj, dict):
        raise _bad(where, "each line must be a JSON object")
    extra = sorted(set(obj) - _FIELDS)
    if extra:
        raise _bad(where, f"unknown field {extra[0]!r}", f"fields: {', '.join(sorted(_FIELDS))}")
    prompt, messages = _prompt(obj, where)
    refs = _references(obj, where)
    scorer = obj.get("scorer", "exact")
    if scorer not in SCORERS:
        raise _bad(
            where, f"field 'scorer': unknown scorer {scorer!r}", f"scorers: {', '.join(SCORERS)}"
        )
    _check_references(refs, scorer, where)
    lists = {}
    for key in ("echoes", "distractors"):
        v = obj.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise _bad(where, f"field {key!r} must be a list of strings")
        lists[key] = tuple(v)
    if scorer == "number":
        from abtui.quality.scorers import whole_numbers

        if any(len(whole_numbers(r.strip())) != 1 for r in refs):
            raise _bad(where, "field 'references': a number reference is one whole number")
    tol = obj.get("tolerance", 0.0)
    if isinstance(tol, bool) or not isinstance(tol, int | float) or tol < 0:
        raise _bad(where, "field 'tolerance' must be a number ≥ 0")
    mt = obj.get("max_tokens")
    if mt is not None and (isinstance(mt, bool) or not isinstance(mt, int) or mt <= 0):
        raise _bad(where, "field 'max_tokens' must be an integer > 0")
    for key in ("id", "cluster", "bucket"):
        if key in obj and not isinstance(obj[key], str | int):
            raise _bad(where, f"field {key!r} must be a string")
    item_id = str(obj.get("id", f"line {line}"))
    return QualityItem(
        id=item_id,
        suite=suite,
        cluster=str(obj.get("cluster", item_id)),
        scorer=scorer,
        references=tuple(refs),
        prompt=prompt,
        messages=tuple(messages) if messages is not None else None,
        bucket=str(obj.get("bucket", "all")),
        tolerance=float(tol),
        max_tokens=mt,
        echoes=lists["echoes"],
        distractors=lists["distractors"],
    )


def _prompt(obj: dict, where: str) -> tuple[str | None, list | None]:
    """The line's ``prompt`` or ``messages`` (exactly one of them), checked."""
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if (prompt is None) == (messages is None):
        raise _bad(where, "give exactly one of 'prompt' and 'messages'")
    if prompt is not None and not isinstance(prompt, str):
        raise _bad(where, "field 'prompt' must be a string")
    if messages is not None:
        ok = (
            isinstance(messages, list)
            and messages
            and all(
                isinstance(m, dict)
                and isinstance(m.get("role"), str)
                and isinstance(m.get("content"), str)
                for m in messages
            )
        )
        if not ok:
            raise _bad(
                where, "field 'messages' must be a non-empty list of {role, content} strings"
            )
    return prompt, messages


def _references(obj: dict, where: str) -> list:
    """The line's ``reference`` or ``references``, as a non-empty list of strings."""
    if "reference" in obj and "references" in obj:
        raise _bad(where, "give 'reference' or 'references', not both")
    refs = obj.get("references", [obj["reference"]] if "reference" in obj else None)
    if not isinstance(refs, list) or not refs or not all(isinstance(r, str) for r in refs):
        raise _bad(
            where,
            "field 'reference' (a string) or 'references' (a non-empty list of strings) is required",
        )
    return refs


def _check_references(refs: list, scorer: str, where: str) -> None:
    """What the ``regex``, ``choice`` and ``numeric`` scorers need of a reference."""
    if scorer == "regex":
        for r in refs:
            try:
                re.compile(r)
            except re.error as e:
                raise _bad(
                    where, f"field 'references': bad regular expression {r!r} ({e})"
                ) from None
    if scorer == "choice" and not all(
        r.strip().upper() in "ABCDE" and len(r.strip()) == 1 for r in refs
    ):
        raise _bad(where, "field 'references': a choice reference is one letter A–E")
    if scorer == "numeric":
        from abtui.quality.scorers import first_number

        if any(first_number(r) is None for r in refs):
            raise _bad(where, "field 'references': a numeric reference must be a number")


def load(path: str | Path) -> list[QualityItem]:
    """The items of the JSONL suite at ``path``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise WorkloadError(
            f"{path}: cannot read the quality suite ({e.strerror})",
            "check the path given to --quality-file",
        ) from None
    except UnicodeDecodeError:
        raise WorkloadError(f"{path}: not UTF-8 text", "a quality suite is JSON Lines") from None
    items: list[QualityItem] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(s)
        except json.JSONDecodeError as e:
            raise _bad(where, f"not valid JSON ({e.msg} at column {e.colno})") from None
        it = _item(obj, where, n, path.stem)
        if it.id in seen:
            raise _bad(where, f"id {it.id!r} repeats line {seen[it.id]}")
        seen[it.id] = n
        items.append(it)
    if not items:
        raise WorkloadError(f"{path}: no items", "one JSON object per line")
    return items
