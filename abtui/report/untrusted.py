"""Strings from outside (an endpoint's model names, error messages and output, a session file
someone else made) shown as inert text: no terminal control, no markup.

:func:`printable` replaces every control character (C0, DEL, C1 — which includes the escape
that starts terminal sequences) and the Unicode bidirectional overrides with a visible
``\\xNN`` / ``\\uNNNN``, so a string can neither drive the terminal nor reorder what is shown.
:func:`term` also escapes Rich markup, for text passed to a Rich console.
"""

from __future__ import annotations

import re

from rich.markup import escape

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(m: re.Match) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: object) -> str:
    """``text`` as one line of inert characters (newlines and tabs shown as ``\\x0a``, ``\\x09``)."""
    return _UNSAFE.sub(_visible, str(text))


def term(text: object) -> str:
    """``text`` for a Rich console: :func:`printable`, then Rich markup escaped."""
    return escape(printable(text))
