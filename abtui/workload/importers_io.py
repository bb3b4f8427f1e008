"""Reading trace files a piece at a time, for :mod:`abtui.workload.importers`.

Every reader here holds one line (or one JSON array entry) at a time, so a trace of any size
is imported in memory that does not grow with it. A line or entry over ``MAX_PIECE_BYTES`` and
a byte that is not UTF-8 are reported with the file and line (``_Bad`` for a row the
``--skip-bad`` policy may skip, :class:`~abtui.errors.WorkloadError` where the file cannot be
framed any further).
"""

from __future__ import annotations

import codecs
import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from abtui.errors import WorkloadError

MAX_PIECE_BYTES = 64 << 20  # one request per line / array entry
_CHUNK = 256 << 10  # JSON array reads (doubling while an entry is cut by the read)


class _Bad(ValueError):
    """A malformed row: an error (or, with ``--skip-bad``, skipped and counted)."""


class _Unusable(Exception):  # noqa: N818 - a verdict on a row, not an error
    """A well-formed row with nothing to replay (a conversation with no answered human turn, a
    request that generated no tokens): left out and counted, never an error. The message is
    the reason, phrased for the count ("conversations with …")."""


@dataclass(frozen=True, slots=True)
class Entry:
    """Where a JSON array entry is: its index in the array (0-based, as ``jq '.[N]'``) and
    the line it starts on (a real line, but a dump on one line has every entry on line 1)."""

    index: int
    line: int


def _open(path: Path):
    try:
        return path.open("rb")
    except OSError as e:
        raise WorkloadError(f"cannot read {path}: {e.strerror or e}") from None


def _too_long(path: Path, n: int) -> WorkloadError:
    return WorkloadError(
        f"{path}:{n}: a line or entry longer than {MAX_PIECE_BYTES >> 20} MiB",
        "is this a trace of the format named? one request per line (or array entry)",
    )


def raw_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """Numbered raw lines of ``path``, one at a time."""
    with _open(path) as fh:
        n = 0
        while raw := fh.readline(MAX_PIECE_BYTES + 1):
            n += 1
            if len(raw) > MAX_PIECE_BYTES:
                raise _too_long(path, n)
            yield n, raw


def utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _Bad(f"not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1})") from None


def _loads(text: str) -> object:
    """The decoded line (``NaN`` and ``Infinity`` decode to floats: the importers' field checks
    refuse them by name) or a ``_Bad`` saying why not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        return _Bad(f"not JSON: {e.msg} (column {e.colno})")
    except ValueError as e:  # an integer of more digits than Python converts (4,300)
        return _Bad(f"not JSON this reader takes: {e}")
    except RecursionError:
        return _Bad("JSON nested too deeply to decode")


def json_lines(path: Path) -> Iterator[tuple[int, object]]:
    """(line, decoded value or a ``_Bad`` saying why not) for each non-blank line."""
    for n, raw in raw_lines(path):
        if raw.strip():
            try:
                yield n, _loads(utf8(raw))
            except _Bad as e:
                yield n, e


def csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, object]]:
    """(line, row dict or ``_Bad``) of a CSV file with a header naming ``required``."""
    bad_lines: dict[int, str] = {}

    def text() -> Iterator[str]:
        for n, raw in raw_lines(path):
            try:
                yield utf8(raw)
            except _Bad as e:  # the row still frames: its fields are replaced, then reported
                bad_lines[n] = str(e)
                yield raw.decode("utf-8", "replace")

    reader = csv.DictReader(text())
    try:
        header = [h.strip() for h in (reader.fieldnames or [])]
    except csv.Error as e:  # a binary file: its first "line" is no CSV header
        raise WorkloadError(f"{path}:1: not CSV: {e}", "is this a CSV trace?") from None
    if 1 in bad_lines:
        raise WorkloadError(f"{path}:1: header is {bad_lines[1]}")
    missing = [c for c in required if c not in header]
    if missing:
        raise WorkloadError(
            f"{path}:1: header lacks column {missing[0]!r} (has: {', '.join(header) or 'nothing'})",
            f"expected columns: {', '.join(required)}",
        )
    reader.fieldnames = header
    try:
        for row in reader:
            n = reader.line_num
            if n in bad_lines:
                yield n, _Bad(bad_lines.pop(n))
            elif None in row or any(row.get(c) is None for c in required):
                yield n, _Bad(f"expected {len(header)} columns")
            else:
                yield n, row
    except csv.Error as e:
        raise WorkloadError(f"{path}:{reader.line_num}: not CSV: {e}") from None


def json_array_or_lines(path: Path) -> Iterator[tuple[int | Entry, object]]:
    """A JSON array's entries (each with its :class:`Entry`), read a piece at a time, or
    JSON Lines (each with its line) when the file does not start with ``[``."""
    with _open(path) as fh:
        head = fh.read(4096)
    if not head.lstrip().startswith(b"["):
        yield from json_lines(path)
        return
    yield from _array_entries(path)


def _array_entries(path: Path) -> Iterator[tuple[Entry, object]]:
    dec = json.JSONDecoder()  # (as _loads: NaN decodes, the field checks refuse it)
    utf = codecs.getincrementaldecoder("utf-8")()
    buf, pos, line, eof = "", 0, 1, False  # line: the line buf[pos] is on
    with _open(path) as fh:

        def more(n: int) -> bool:
            nonlocal buf, pos, eof
            if eof:
                return False
            raw = fh.read(n)
            try:
                text = utf.decode(raw, final=not raw)
            except UnicodeDecodeError as e:
                at = line + buf.count("\n", pos) + raw[: e.start].count(b"\n")
                raise WorkloadError(
                    f"{path}:{at}: not UTF-8 text (byte 0x{raw[e.start]:02x})"
                ) from None
            buf, pos, eof = buf[pos:] + text, 0, not raw
            return True

        def skip(chars: str) -> None:
            nonlocal pos, line
            while True:
                while pos < len(buf) and buf[pos] in chars:
                    line += buf[pos] == "\n"
                    pos += 1
                if pos < len(buf) or not more(_CHUNK):
                    return

        skip(" \t\r\n")
        pos += 1  # the "["
        index = 0
        while True:
            skip(" \t\r\n,")
            if pos >= len(buf) or buf[pos] == "]":
                return
            want = _CHUNK
            while True:
                try:
                    obj, end = dec.raw_decode(buf, pos)
                    break
                except json.JSONDecodeError as e:
                    # an entry cut by the read: read more, unless the file ended or it is too big
                    if len(buf) - pos > MAX_PIECE_BYTES:
                        raise _too_long(path, line) from None
                    if not more(want):
                        at = line + buf.count("\n", pos, e.pos)
                        raise WorkloadError(f"{path}:{at}: not JSON: {e.msg}") from None
                    want = min(2 * want, MAX_PIECE_BYTES)
                except RecursionError:
                    raise WorkloadError(
                        f"{path}:{line}: JSON nested too deeply to decode"
                    ) from None
                except ValueError as e:  # an integer of more digits than Python converts
                    raise WorkloadError(f"{path}:{line}: not JSON this reader takes: {e}") from None
            yield Entry(index, line), obj
            index += 1
            line += buf.count("\n", pos, end)
            pos = end
