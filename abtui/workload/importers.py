"""Importers: traces people have → abtui JSONL records (:mod:`abtui.workload.jsonl`).

- ``sharegpt``: a JSON array (or JSON Lines) of ``{"id", "conversations": [{"from", "value"}]}``.
  Prompt = the first human turn that an assistant turn follows; ``max_tokens`` = that answer's
  length, estimated as characters / 4 (no tokenizer here; the estimate is stated in the README).
  No timestamps: give ``--rate`` when running it.
- ``mooncake``: JSON Lines ``{"timestamp" (ms), "input_length", "output_length", "hash_ids"}``;
  ``hash_ids`` are 512-token prefix blocks, kept as ``prefix_ids`` so equal ids → equal text.
- ``azure``: Azure LLM inference trace CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``
  (timestamps like ``2023-11-16 18:15:46.6805900``, or seconds).
- ``burstgpt``: BurstGPT CSV ``Timestamp,Model,Request tokens,Response tokens,...``
  (timestamp in seconds). Rows with 0 response tokens are failed requests in the trace: they
  are left out and counted.

Arrival offsets are relative to the first request of the trace. Each importer yields records
and fills a :class:`~abtui.workload.jsonl.ReadStats`; a bad row raises
:class:`~abtui.errors.WorkloadError` naming ``FILE:LINE`` unless ``skip_bad``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

from abtui.errors import WorkloadError
from abtui.workload.jsonl import ReadStats

FORMATS = ("sharegpt", "mooncake", "azure", "burstgpt")
CHARS_PER_TOKEN = 4.0
_HUMAN = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "chatgpt", "bard", "model"}


class _Bad(ValueError):
    pass


def _open(path: Path):
    try:
        return path.open(encoding="utf-8", newline="")
    except OSError as e:
        raise WorkloadError(f"cannot read {path}: {e.strerror or e}") from None


def _count(v: object, what: str, low: int = 0) -> int:
    try:
        f = float(v)  # CSV gives strings; "12.0" is fine
    except (TypeError, ValueError):
        raise _Bad(f"{what} must be a number, got {v!r}") from None
    if f != int(f) or f < low:
        raise _Bad(f"{what} must be a whole number ≥ {low}, got {v!r}")
    return int(f)


def _rows(path: Path, stats: ReadStats, skip_bad: bool, lines: Iterator[tuple[int, object]],
          convert: Callable[[object], dict | None]) -> Iterator[dict]:  # fmt: skip
    """Run ``convert`` over numbered raw rows with the bad-line policy."""
    for n, raw in lines:
        stats.lines = n
        try:
            rec = convert(raw)
        except (_Bad, ValueError, TypeError, KeyError) as e:
            msg = f"missing field {e}" if isinstance(e, KeyError) else str(e)
            if not skip_bad:
                raise WorkloadError(
                    f"{path}:{n}: {msg}", "fix the line, or pass --skip-bad to skip and count it"
                ) from None
            stats.skip(f"{path}:{n}", msg)
            continue
        if rec is not None:
            stats.kept += 1
            yield rec


def _json_lines(path: Path) -> Iterator[tuple[int, object]]:
    with _open(path) as fh:
        for n, text in enumerate(fh, 1):
            if text.strip():
                try:
                    yield n, json.loads(text)
                except json.JSONDecodeError as e:
                    yield n, _Bad(f"not JSON: {e.msg} (column {e.colno})")
                except RecursionError:
                    yield n, _Bad("JSON nested too deeply to decode")


def _raise_bad(raw: object) -> object:
    if isinstance(raw, _Bad):
        raise raw
    return raw


# ---------------------------------------------------------------- ShareGPT


def _sharegpt_entries(path: Path) -> Iterator[tuple[int, object]]:
    """(line, entry): a JSON array (entries numbered by the line they start on) or JSON Lines."""
    with _open(path) as fh:
        text = fh.read()
    if not text.lstrip().startswith("["):
        yield from _json_lines(path)
        return
    dec = json.JSONDecoder()
    pos = text.index("[") + 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return
        line = text.count("\n", 0, pos) + 1
        try:
            obj, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            # the rest of the array cannot be framed: report and stop
            raise WorkloadError(
                f"{path}:{e.lineno}: not JSON: {e.msg} (column {e.colno})"
            ) from None
        except RecursionError:
            raise WorkloadError(f"{path}:{line}: JSON nested too deeply to decode") from None
        yield line, obj


def _sharegpt(raw: object) -> dict | None:
    entry = _raise_bad(raw)
    if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
        raise _Bad("expected an object with a 'conversations' list")
    turns = entry["conversations"]
    for a, b in zip(turns, turns[1:], strict=False):
        if not (isinstance(a, dict) and isinstance(b, dict)):
            raise _Bad("each turn must be an object with 'from' and 'value'")
        if str(a.get("from")).lower() in _HUMAN and str(b.get("from")).lower() in _ASSISTANT:
            prompt, answer = a.get("value"), b.get("value")
            if not isinstance(prompt, str) or not isinstance(answer, str):
                raise _Bad("turn values must be strings")
            if not prompt.strip():
                continue
            rec = {"prompt": prompt, "max_tokens": max(1, round(len(answer) / CHARS_PER_TOKEN))}
            if entry.get("id") is not None:
                rec = {"id": str(entry["id"]), **rec}
            return rec
    raise _Bad("no human turn followed by an assistant turn")


# ---------------------------------------------------------------- Mooncake


def _mooncake(raw: object) -> dict:
    rec = _raise_bad(raw)
    if not isinstance(rec, dict):
        raise _Bad("expected a JSON object")
    ts = rec["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, int | float) or ts < 0:
        raise _Bad(f"timestamp must be milliseconds ≥ 0, got {ts!r}")
    hash_ids = rec.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in hash_ids
    ):
        raise _Bad(f"hash_ids must be a list of whole numbers, got {hash_ids!r}")
    return {
        "arrival_s": ts / 1000.0,
        "input_tokens": _count(rec["input_length"], "input_length", 1),
        "prefix_ids": hash_ids,
        "max_tokens": _count(rec["output_length"], "output_length", 1),
    }


# ---------------------------------------------------------------- CSV traces


def _csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, object]]:
    with _open(path) as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in required if c not in header]
        if missing:
            raise WorkloadError(
                f"{path}:1: header lacks column {missing[0]!r} (has: {', '.join(header) or 'nothing'})",
                f"expected columns: {', '.join(required)}",
            )
        reader.fieldnames = header
        for row in reader:
            if None in row or any(row.get(c) is None for c in required):
                yield reader.line_num, _Bad(f"expected {len(header)} columns")
            else:
                yield reader.line_num, row


def _seconds(v: str) -> float:
    v = v.strip()
    try:
        return float(v)
    except ValueError:
        pass
    head, _, frac = v.partition(".")
    try:
        dt = datetime.fromisoformat(head)
    except ValueError:
        raise _Bad(f"timestamp {v!r} is neither seconds nor 'YYYY-MM-DD HH:MM:SS[.fff]'") from None
    if frac and not frac.isdigit():
        raise _Bad(f"timestamp {v!r}: bad fractional seconds")
    return dt.timestamp() + (float("0." + frac) if frac else 0.0)


def _trace_row(ts: float, n_in: int, n_out: int) -> dict:
    return {"arrival_s": ts, "input_tokens": n_in, "max_tokens": n_out}


def _azure(raw: object) -> dict:
    row = _raise_bad(raw)
    return _trace_row(
        _seconds(row["TIMESTAMP"]),
        _count(row["ContextTokens"], "ContextTokens", 1),
        _count(row["GeneratedTokens"], "GeneratedTokens", 1),
    )


def _burstgpt(raw: object, failed: list) -> dict | None:
    row = _raise_bad(raw)
    ts = _seconds(row["Timestamp"])
    n_in = _count(row["Request tokens"], "Request tokens", 1)
    n_out = _count(row["Response tokens"], "Response tokens", 0)
    if n_out == 0:  # a failed request in the trace: not a workload item
        failed[0] += 1
        return None
    return _trace_row(ts, n_in, n_out)


# ---------------------------------------------------------------- entry point


def import_trace(
    fmt: str, path: str | Path, *, skip_bad: bool = False
) -> tuple[list[dict], ReadStats, str]:
    """Records of ``path`` in format ``fmt``, the read stats, and a note on what was left out."""
    p = Path(path)
    stats = ReadStats()
    note = ""
    if fmt == "sharegpt":
        recs = list(_rows(p, stats, skip_bad, _sharegpt_entries(p), _sharegpt))
    elif fmt == "mooncake":
        recs = list(_rows(p, stats, skip_bad, _json_lines(p), _mooncake))
    elif fmt == "azure":
        cols = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
        recs = list(_rows(p, stats, skip_bad, _csv_rows(p, cols), _azure))
    elif fmt == "burstgpt":
        failed = [0]
        cols = ("Timestamp", "Request tokens", "Response tokens")
        rows = _csv_rows(p, cols)
        recs = list(_rows(p, stats, skip_bad, rows, lambda r: _burstgpt(r, failed)))
        if failed[0]:
            note = f"{failed[0]} rows with 0 response tokens (failed in the trace) left out"
    else:
        raise WorkloadError(f"unknown trace format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    if not recs:
        raise WorkloadError(f"{p}: no usable requests in this {fmt} file")
    recs.sort(key=lambda r: r.get("arrival_s", 0.0))  # traces are not always in order
    if "arrival_s" in recs[0]:  # offsets from the trace's first request
        t0 = recs[0]["arrival_s"]
        for r in recs:
            r["arrival_s"] = round(r["arrival_s"] - t0, 6)
    for i, r in enumerate(recs):
        r.setdefault("id", f"{fmt}{i}")
    return recs, stats, note
