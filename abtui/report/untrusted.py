"""Strings from outside (an endpoint's model names, error messages and output, a spec, a trace, a
session file someone else made) shown as inert text: no terminal control, no markup, no
credentials.

The one sanitiser is :func:`inert`: every control character (C0 but the newline, DEL, C1 —
which includes the escape that starts terminal sequences) and the Unicode bidirectional
overrides become a visible ``\\xNN`` / ``\\uNNNN``, so a string can neither drive the terminal
nor reorder what is shown; and a URL's user info (``http://user:pass@host``) is cut
(:func:`abtui.client.redact.scrub_text`). It is applied where text leaves abtui for a terminal,
whatever the text's path through the code:

- :class:`InertConsole`, the Rich console every report and headless run prints through: each
  text segment Rich renders passes :func:`inert` (Rich's own styles and controls are separate
  segments, untouched);
- the TUI's text widgets (:mod:`abtui.tui.widgets.inert`): each rendered line, the same way;
- plain lines (:func:`inert` on what is printed: the error line, progress lines);
- the documents: Markdown and HTML escape :func:`printable` text (``export.md_escape``,
  ``svg.esc``).

Rich *markup* cannot be neutralised at the sink (once parsed, ``[red]`` is a style): a string
from outside goes into a Rich markup string only through :func:`term`, and into the TUI as
``Text`` or a widget with markup off. A hostile string may make its line longer than the
layout planned (``\\x1b`` takes four cells where the escape took none): shown, never obeyed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType
from rich.markup import escape
from rich.segment import Segment

from abtui.client.redact import scrub_text

_BIDI = "\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")  # printable(): one line
_UNSAFE_LINES = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_BIDI}]")  # inert(): newlines kept


def _visible(m: re.Match) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def inert(text: object) -> str:
    """``text`` safe to write to a terminal: control and bidi characters shown as ``\\xNN``
    (newlines kept), URL user info cut. Idempotent."""
    return scrub_text(_UNSAFE_LINES.sub(_visible, str(text)))


def printable(text: object) -> str:
    """:func:`inert` on one line (newlines and tabs shown as ``\\x0a``, ``\\x09``)."""
    return inert(_UNSAFE.sub(_visible, str(text)))


def term(text: object) -> str:
    """``text`` for a Rich markup string: :func:`printable`, then Rich markup escaped."""
    return escape(printable(text))


def is_inert(text: str) -> bool:
    """Whether :func:`inert` would leave ``text`` as it is (no control, bidi or user info)."""
    return _UNSAFE_LINES.search(text) is None and scrub_text(text) == text


def inert_segments(segments: Iterable[Segment]) -> Iterable[Segment]:
    """Rendered segments with each text segment :func:`inert` (control segments, Rich's own
    cursor and screen commands, pass as they are)."""
    for seg in segments:
        if seg.control or is_inert(seg.text):
            yield seg
        else:
            yield Segment(inert(seg.text), seg.style)


class InertConsole(Console):
    """A Rich console whose output holds no control character but Rich's own: every text
    segment it renders, whatever produced it, passes :func:`inert`. Rich renders nested
    renderables (table cells) through this same method: each level is checked, cheaply."""

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        return inert_segments(super().render(renderable, options))

    def render_str(self, text: str, **kwargs):
        # a string (printed, or a table cell) made inert before it is laid out, so its columns
        # are measured as shown; abtui's own markup holds no control character to change
        return super().render_str(text if is_inert(text) else inert(text), **kwargs)
