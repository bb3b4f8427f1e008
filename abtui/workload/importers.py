"""Importers: traces people have → abtui JSONL records (:mod:`abtui.workload.jsonl`).

- ``sharegpt``: a JSON array (or JSON Lines) of ``{"id", "conversations": [{"from", "value"}]}``.
  Prompt = the first human turn that an assistant turn follows; ``max_tokens`` = that answer's
  length, estimated as characters / 4 (no tokenizer here; the estimate is stated in docs/guide.md).
  No timestamps: give ``--rate`` when running it.
- ``mooncake``: JSON Lines ``{"timestamp" (ms), "input_length", "output_length", "hash_ids"}``;
  ``hash_ids`` are 512-token prefix blocks, kept as ``prefix_ids`` so equal ids → equal text.
- ``azure``: Azure LLM inference trace CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``
  (timestamps like ``2023-11-16 18:15:46.6805900``, or seconds).
- ``burstgpt``: BurstGPT CSV ``Timestamp,Model,Request tokens,Response tokens,...``
  (timestamp in seconds). Rows with 0 response tokens are failed requests in the trace: they
  are left out and counted.

Arrival offsets are relative to the first request of the trace. Each importer yields records
and fills a :class:`~abtui.workload.jsonl.ReadStats`. Two kinds of row are not imported:

- *unusable* rows, well-formed but with nothing to replay, as real dumps have them (a
  conversation with no human turn an assistant turn follows — a lone human turn, no turns; a
  row with 0 prompt or 0 generated tokens): left out by default and counted in the note, as
  every peer's loader does;
- *malformed* rows (wrong types, missing fields, not JSON, a byte that is not UTF-8): a
  :class:`~abtui.errors.WorkloadError` naming where unless ``skip_bad`` — ``FILE:LINE`` for
  lines, ``FILE: entry N (id "X")`` for an entry of a JSON array (N from 0, as ``jq '.[N]'``;
  a dump is often one line, so its line is given only past line 1: :func:`where`).

Files are read a line (or array entry) at a time (:mod:`abtui.workload.importers_io`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

from abtui import limits
from abtui.errors import WorkloadError
from abtui.workload import importers_io
from abtui.workload.importers_io import Entry, _Bad, _Unusable
from abtui.workload.jsonl import ReadStats

FORMATS = ("sharegpt", "mooncake", "azure", "burstgpt")
TIME_COLUMN = {"mooncake": "timestamp", "azure": "TIMESTAMP", "burstgpt": "Timestamp"}
CHARS_PER_TOKEN = 4.0
_HUMAN = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "chatgpt", "bard", "model"}


def _number(field: str, v: object, what: str, per: float = 1.0):
    """``v`` (a JSON number, or a CSV field's text: ``"12.0"`` is fine) divided by ``per``,
    inside the limit table's row ``field``; else ``_Bad`` naming ``what``."""
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise _Bad(f"{what} must be a number, got {v!r}") from None
    if isinstance(v, int | float) and not isinstance(v, bool) and per != 1.0:
        try:
            v = v / per
        except OverflowError:  # an integer too large for a float
            v = math.inf
    try:
        return limits.check(field, v, what)
    except limits.OutOfRange as e:
        raise _Bad(str(e)) from None


def _count(v: object, what: str) -> int:
    return _number("trace.tokens", v, what)


def where(path: Path, at: int | Entry, raw: object) -> str:
    """``FILE:LINE``, or ``FILE: entry N (id "X", line L)`` for a JSON array entry: its index,
    its id if it has one, the line it starts on only past line 1 (a dump written on one line
    has every entry on line 1, which says nothing)."""
    if not isinstance(at, Entry):
        return f"{path}:{at}"
    ident = raw.get("id") if isinstance(raw, dict) else None
    named = [f"id {json.dumps(str(ident), ensure_ascii=False)[:80]}"] if ident is not None else []
    named += [f"line {at.line}"] if at.line > 1 else []
    return f"{path}: entry {at.index}" + (f" ({', '.join(named)})" if named else "")


def _rows(
    path: Path,
    stats: ReadStats,
    skip_bad: bool,
    lines: Iterator[tuple[int | Entry, object]],
    convert: Callable[[object], dict],
    left_out: Counter,
) -> Iterator[tuple[int | Entry, object, dict]]:
    """Run ``convert`` over located raw rows, yielding (where, raw, record): unusable rows
    counted in ``left_out`` (by reason), malformed ones under the bad-row policy."""
    for at, raw in lines:
        stats.lines = at.index + 1 if isinstance(at, Entry) else at
        try:
            rec = convert(raw)
        except _Unusable as e:
            left_out[str(e)] += 1
            continue
        except (_Bad, ValueError, TypeError, KeyError) as e:
            msg = f"missing field {e}" if isinstance(e, KeyError) else str(e)
            loc = where(path, at, raw)
            if not skip_bad:
                hint = "fix the line, or pass --skip-bad to skip and count it"
                if isinstance(at, Entry):
                    hint = (
                        f"see it with `jq '.[{at.index}]' {path}`; fix it, or pass --skip-bad "
                        "to skip and count it"
                    )
                raise WorkloadError(f"{loc}: {msg}", hint) from None
            stats.skip(loc, msg)
            continue
        stats.kept += 1
        yield at, raw, rec


def _raise_bad(raw: object) -> object:
    if isinstance(raw, _Bad):
        raise raw
    return raw


# ---------------------------------------------------------------- ShareGPT


NO_PAIR = "conversations with no human turn followed by an assistant turn"


def _sharegpt(raw: object) -> dict:
    entry = _raise_bad(raw)
    if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
        raise _Bad("expected an object with a 'conversations' list")
    turns = entry["conversations"]
    if not all(isinstance(t, dict) for t in turns):
        raise _Bad("each turn must be an object with 'from' and 'value'")
    for a, b in zip(turns, turns[1:], strict=False):
        if str(a.get("from")).lower() in _HUMAN and str(b.get("from")).lower() in _ASSISTANT:
            prompt, answer = a.get("value"), b.get("value")
            if not isinstance(prompt, str) or not isinstance(answer, str):
                raise _Bad("turn values must be strings")
            if not prompt.strip():
                continue
            est = max(1, round(len(answer) / CHARS_PER_TOKEN))
            rec = {
                "prompt": prompt,
                "max_tokens": _number("item.max_tokens", est, "the answer's length / 4"),
            }
            if entry.get("id") is not None:
                rec = {"id": str(entry["id"]), **rec}
            return rec
    raise _Unusable(NO_PAIR)  # a lone human turn, no turns, empty prompts: nothing to replay


# ---------------------------------------------------------------- Mooncake


def _tokens(n_in: int, n_out: int, what_in: str, what_out: str) -> None:
    """Rows that ask for 0 prompt or 0 generated tokens are in traces (failed or empty
    requests) but are no request to replay: left out, counted."""
    if n_out == 0:
        raise _Unusable(f"rows with 0 response tokens ({what_out}; failed in the trace)")
    if n_in == 0:
        raise _Unusable(f"rows with 0 prompt tokens ({what_in})")


def _mooncake(raw: object) -> dict:
    rec = _raise_bad(raw)
    if not isinstance(rec, dict):
        raise _Bad("expected a JSON object")
    ts = _number("trace.timestamp_ms", rec["timestamp"], "timestamp")
    hash_ids = rec.get("hash_ids", [])
    if not isinstance(hash_ids, list):
        raise _Bad(f"hash_ids must be a list of whole numbers, got {hash_ids!r}")
    for h in hash_ids:
        if isinstance(h, float):
            raise _Bad(f"hash_ids must be a list of whole numbers, got {h!r}")
        _number("item.prefix_id", h, "hash_ids[…]")
    n_in = _count(rec["input_length"], "input_length")
    n_out = _count(rec["output_length"], "output_length")
    _tokens(n_in, n_out, "input_length", "output_length")
    return {
        "arrival_s": ts / 1000.0,
        "input_tokens": n_in,
        "prefix_ids": hash_ids,
        "max_tokens": n_out,
    }


# ---------------------------------------------------------------- CSV traces


def _seconds(v: str, what: str) -> float:
    """A CSV timestamp: seconds, or ``YYYY-MM-DD HH:MM:SS[.fffffff]`` (local time), inside the
    limit table's ``trace.timestamp_s``."""
    v = v.strip()
    try:
        seconds = float(v)
    except ValueError:
        head, _, frac = v.partition(".")
        try:
            dt = datetime.fromisoformat(head)
        except ValueError:
            raise _Bad(f"{what} {v!r} is neither seconds nor 'YYYY-MM-DD HH:MM:SS[.fff]'") from None
        if frac and not frac.isdigit():
            raise _Bad(f"{what} {v!r}: bad fractional seconds") from None
        try:
            seconds = dt.timestamp() + (float("0." + frac) if frac else 0.0)
        except (OverflowError, OSError, ValueError):
            raise _Bad(f"{what} {v!r} is not a time this machine can represent") from None
    return _number("trace.timestamp_s", seconds, what)


def _trace_row(ts: float, n_in: int, n_out: int) -> dict:
    return {"arrival_s": ts, "input_tokens": n_in, "max_tokens": n_out}


def _azure(raw: object) -> dict:
    row = _raise_bad(raw)
    ts = _seconds(row["TIMESTAMP"], "TIMESTAMP")
    n_in = _count(row["ContextTokens"], "ContextTokens")
    n_out = _count(row["GeneratedTokens"], "GeneratedTokens")
    _tokens(n_in, n_out, "ContextTokens", "GeneratedTokens")
    return _trace_row(ts, n_in, n_out)


def _burstgpt(raw: object) -> dict:
    row = _raise_bad(raw)
    ts = _seconds(row["Timestamp"], "Timestamp")
    n_in = _count(row["Request tokens"], "Request tokens")
    n_out = _count(row["Response tokens"], "Response tokens")
    _tokens(n_in, n_out, "Request tokens", "Response tokens")
    return _trace_row(ts, n_in, n_out)


# ---------------------------------------------------------------- entry point


class TraceImport:
    """A trace file streamed to abtui records, in the file's order.

    Memory does not grow with the file: it is read twice, the first pass (:meth:`scan`)
    checking every row and finding the earliest request (offsets are from it),
    the second (:meth:`records`) yielding each record as it is read. abtui sorts a workload by
    arrival when it reads it, so the output need not be sorted. A bad row raises
    :class:`~abtui.errors.WorkloadError` naming where in the first pass (before any output),
    unless ``skip_bad``; :attr:`stats` says what was skipped, :attr:`left_out` (reason → rows)
    and :attr:`note` what was left out as unusable."""

    def __init__(self, fmt: str, path: str | Path, *, skip_bad: bool = False) -> None:
        if fmt not in FORMATS:
            raise WorkloadError(f"unknown trace format {fmt!r}", f"use one of {', '.join(FORMATS)}")
        self.fmt, self.path, self.skip_bad = fmt, Path(path), skip_bad
        self.stats = ReadStats()
        self.left_out: Counter[str] = Counter()
        self.t0: float | None = None
        self._scanned = False

    @property
    def note(self) -> str:
        """What was left out as unusable: ``"2 conversations with no human turn … left out"``."""
        return "; ".join(f"{n} {why} left out" for why, n in self.left_out.items())

    def _raw(
        self, stats: ReadStats, left_out: Counter
    ) -> Iterator[tuple[int | Entry, object, dict]]:
        p, fmt = self.path, self.fmt
        if fmt == "sharegpt":
            pieces = importers_io.json_array_or_lines(p)
            convert = _sharegpt
        elif fmt == "mooncake":
            pieces, convert = importers_io.json_lines(p), _mooncake
        elif fmt == "azure":
            pieces = importers_io.csv_rows(p, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"))
            convert = _azure
        else:
            pieces = importers_io.csv_rows(p, ("Timestamp", "Request tokens", "Response tokens"))
            convert = _burstgpt
        return _rows(p, stats, self.skip_bad, pieces, convert, left_out)

    def scan(self) -> None:
        """The first pass: every row checked, the earliest arrival found."""
        if self._scanned:
            return
        t0 = t1 = None  # the earliest and latest arrival (where the latest is)
        n, last = 0, None
        left_out: Counter[str] = Counter()
        for at, raw, r in self._raw(ReadStats(), left_out):
            n += 1
            a = r.get("arrival_s")
            if a is not None and (t0 is None or a < t0):
                t0 = a
            if a is not None and (t1 is None or a > t1):
                t1, last = a, (at, raw)
        if n == 0:
            self.left_out = left_out
            why = f" ({self.note})" if left_out else ""
            raise WorkloadError(f"{self.path}: no usable requests in this {self.fmt} file{why}")
        if t0 is not None and t1 - t0 > limits.LIMITS["item.arrival_s"].high:
            try:
                limits.check(
                    "item.arrival_s",
                    t1 - t0,
                    f"{TIME_COLUMN[self.fmt]}'s offset from the first request",
                )
            except limits.OutOfRange as e:
                raise WorkloadError(
                    f"{where(self.path, *last)}: {e}",
                    "a trace spans at most that long; cut it, or check its time unit",
                ) from None
        self.t0, self._scanned = t0, True

    def records(self) -> Iterator[dict]:
        """The records, one at a time, offsets from the trace's first request."""
        self.scan()
        self.stats = ReadStats()
        self.left_out = Counter()
        t0 = self.t0
        for i, (_, _, r) in enumerate(self._raw(self.stats, self.left_out)):
            if t0 is not None and "arrival_s" in r:
                r["arrival_s"] = round(r["arrival_s"] - t0, 6)
            r.setdefault("id", f"{self.fmt}{i}")
            yield r


def import_trace(
    fmt: str, path: str | Path, *, skip_bad: bool = False
) -> tuple[list[dict], ReadStats, str]:
    """Records of ``path`` in format ``fmt`` sorted by arrival, the read stats, and a note on
    what was left out. Holds every record: ``abtui workload import`` streams
    (:class:`TraceImport`) instead."""
    imp = TraceImport(fmt, path, skip_bad=skip_bad)
    recs = list(imp.records())
    recs.sort(key=lambda r: r.get("arrival_s", 0.0))  # traces are not always in order
    return recs, imp.stats, imp.note
