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
and fills a :class:`~abtui.workload.jsonl.ReadStats`; a bad row (a byte that is not UTF-8
included) raises :class:`~abtui.errors.WorkloadError` naming ``FILE:LINE`` unless ``skip_bad``.
Files are read a line (or array entry) at a time (:mod:`abtui.workload.importers_io`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

from abtui.errors import WorkloadError
from abtui.workload import importers_io as io
from abtui.workload.importers_io import _Bad
from abtui.workload.jsonl import ReadStats

FORMATS = ("sharegpt", "mooncake", "azure", "burstgpt")
CHARS_PER_TOKEN = 4.0
_HUMAN = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "chatgpt", "bard", "model"}


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


def _raise_bad(raw: object) -> object:
    if isinstance(raw, _Bad):
        raise raw
    return raw


# ---------------------------------------------------------------- ShareGPT


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


class TraceImport:
    """A trace file streamed to abtui records, in the file's order.

    Memory does not grow with the file: it is read twice, the first pass (:meth:`scan`)
    checking every row and finding the earliest request (offsets are from it),
    the second (:meth:`records`) yielding each record as it is read. abtui sorts a workload by
    arrival when it reads it, so the output need not be sorted. A bad row raises
    :class:`~abtui.errors.WorkloadError` naming ``FILE:LINE`` in the first pass (before any
    output), unless ``skip_bad``; :attr:`stats` and :attr:`note` say what was left out."""

    def __init__(self, fmt: str, path: str | Path, *, skip_bad: bool = False) -> None:
        if fmt not in FORMATS:
            raise WorkloadError(f"unknown trace format {fmt!r}", f"use one of {', '.join(FORMATS)}")
        self.fmt, self.path, self.skip_bad = fmt, Path(path), skip_bad
        self.stats = ReadStats()
        self.note = ""
        self.t0: float | None = None
        self._scanned = False

    def _raw(self, stats: ReadStats) -> Iterator[dict]:
        p, fmt = self.path, self.fmt
        if fmt == "sharegpt":
            return _rows(p, stats, self.skip_bad, io.json_array_or_lines(p), _sharegpt)
        if fmt == "mooncake":
            return _rows(p, stats, self.skip_bad, io.json_lines(p), _mooncake)
        if fmt == "azure":
            rows = io.csv_rows(p, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"))
            return _rows(p, stats, self.skip_bad, rows, _azure)
        failed = self._failed = [0]
        rows = io.csv_rows(p, ("Timestamp", "Request tokens", "Response tokens"))
        return _rows(p, stats, self.skip_bad, rows, lambda r: _burstgpt(r, failed))

    def scan(self) -> None:
        """The first pass: every row checked, the earliest arrival found."""
        if self._scanned:
            return
        t0, n = None, 0
        for r in self._raw(ReadStats()):
            n += 1
            a = r.get("arrival_s")
            if a is not None and (t0 is None or a < t0):
                t0 = a
        if n == 0:
            raise WorkloadError(f"{self.path}: no usable requests in this {self.fmt} file")
        self.t0, self._scanned = t0, True

    def records(self) -> Iterator[dict]:
        """The records, one at a time, offsets from the trace's first request."""
        self.scan()
        self.stats = ReadStats()
        t0 = self.t0
        for i, r in enumerate(self._raw(self.stats)):
            if t0 is not None and "arrival_s" in r:
                r["arrival_s"] = round(r["arrival_s"] - t0, 6)
            r.setdefault("id", f"{self.fmt}{i}")
            yield r
        failed = getattr(self, "_failed", [0])[0]
        if failed:
            self.note = f"{failed} rows with 0 response tokens (failed in the trace) left out"


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
