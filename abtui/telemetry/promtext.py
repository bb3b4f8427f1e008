"""Parse the Prometheus text exposition format (0.0.4, and OpenMetrics' common subset).

Robust by design: a scrape is evidence, not input to trust. Comments and ``# HELP`` lines are
skipped, ``# TYPE`` lines are remembered, label values may hold escaped ``\\``, ``"`` and ``\\n``
(and commas, braces, spaces), values may be ``NaN``, ``+Inf``, ``-Inf``, an optional integer
timestamp (ms) may follow, an OpenMetrics exemplar (`` # {trace_id="…"} 0.1``) is dropped, and
``# EOF`` ends the text. A malformed line is skipped and counted
(:attr:`Scrape.skipped`), never raised: one bad line from a server must not lose the rest.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SPECIAL = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    timestamp_ms: int | None = None


@dataclass
class Scrape:
    """The samples of one exposition text, the declared types, and the lines skipped."""

    samples: list[Sample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)  # family name -> counter|gauge|...
    skipped: int = 0
    first_error: str | None = None  # "line N: why", for a log line

    def names(self) -> set[str]:
        return {s.name for s in self.samples}


def parse_value(text: str) -> float:
    """A sample value: a Go/Python float, or NaN / +Inf / -Inf (any case). ValueError else."""
    special = _SPECIAL.get(text.lower())
    if special is not None:
        return special
    return float(text)


def _labels(line: str, i: int) -> tuple[dict[str, str], int]:
    """Parse ``{a="x",b="y"}`` starting at ``line[i] == "{"``; returns (labels, index after)."""
    labels: dict[str, str] = {}
    i += 1
    n = len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == "}":
            return labels, i + 1
        m = _LABEL_NAME.match(line, i)
        if not m:
            raise ValueError("bad label name")
        key = m.group(0)
        i = m.end()
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != "=":
            raise ValueError(f"label {key!r} has no '='")
        i += 1
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != '"':
            raise ValueError(f"label {key!r} value is not quoted")
        i += 1
        out: list[str] = []
        while True:
            if i >= n:
                raise ValueError(f"label {key!r} value is not closed")
            c = line[i]
            if c == "\\":
                if i + 1 >= n:
                    raise ValueError("dangling escape")
                nxt = line[i + 1]
                out.append(_UNESCAPE.get(nxt, "\\" + nxt))
                i += 2
            elif c == '"':
                i += 1
                break
            else:
                out.append(c)
                i += 1
        if key in labels:
            raise ValueError(f"label {key!r} repeated")
        labels[key] = "".join(out)
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == ",":
            i += 1
            continue
        if i < n and line[i] == "}":
            return labels, i + 1
        raise ValueError("expected ',' or '}' after a label")


def parse_line(line: str) -> Sample:
    """One sample line (no comment); ValueError when it is malformed."""
    m = _NAME.match(line)
    if not m:
        raise ValueError("no metric name")
    name, i = m.group(0), m.end()
    labels: dict[str, str] = {}
    if i < len(line) and line[i] == "{":
        labels, i = _labels(line, i)
    rest = line[i:]
    if " # " in rest:  # an OpenMetrics exemplar after the value: not part of the sample
        rest = rest.split(" # ", 1)[0]
    rest = rest.split()
    if not rest or (i < len(line) and line[i] not in " \t"):
        raise ValueError("no value")
    if len(rest) > 2:
        raise ValueError("trailing text after the timestamp")
    value = parse_value(rest[0])
    ts = None
    if len(rest) == 2:
        try:
            ts = int(float(rest[1])) if "." in rest[1] or "e" in rest[1].lower() else int(rest[1])
        except OverflowError:  # "1e999" is a float, but no timestamp
            raise ValueError("timestamp out of range") from None
    return Sample(name, labels, value, ts)


def parse(text: str, want: Callable[[str], bool] | None = None) -> Scrape:
    """Every well-formed sample of ``text``; malformed lines are counted in ``skipped``.

    ``want``: a filter on the metric name, applied before the rest of the line is parsed (the
    scraper skips histogram buckets, most of a vLLM scrape, this way)."""
    out = Scrape()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 2 and parts[1] == "EOF":
                break
            if len(parts) >= 4 and parts[1] == "TYPE":
                out.types[parts[2]] = parts[3].strip().lower()
            continue
        if want is not None:
            m = _NAME.match(line)
            if m and not want(m.group(0)):
                continue
        try:
            out.samples.append(parse_line(line))
        except ValueError as e:
            out.skipped += 1
            if out.first_error is None:
                out.first_error = f"line {lineno}: {e}: {line[:80]!r}"
    return out
