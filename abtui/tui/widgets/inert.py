"""The TUI's text widgets, inert: whatever text they are given (an arm's name, a model name an
endpoint returned, an error message, a line of a session file someone else made), what they
draw holds no control character and no markup of its.

Every line a widget renders passes :func:`abtui.report.untrusted.inert` (the one sanitiser,
also behind the reports' console), so a string from outside can neither move the cursor, set
the terminal's title nor clear the screen, whichever screen shows it and however it got there.
Strings are never parsed as markup: :class:`Static` has markup off, and :class:`DataTable`
takes a ``str`` cell as plain text. Every screen imports these instead of Textual's own
(``tests/unit/test_architecture.py`` checks it).
"""

from __future__ import annotations

from rich.text import Text
from textual.strip import Strip
from textual.widgets import DataTable as _DataTable
from textual.widgets import Static as _Static

from abtui.report.untrusted import inert_segments, is_inert


def inert_strip(strip: Strip) -> Strip:
    """``strip`` with its text made inert, cut to its width (the layout measured it with the
    raw text: a shown ``\\x1b`` takes four cells where the escape took none)."""
    if is_inert(strip.text):
        return strip
    return Strip(list(inert_segments(strip))).crop(0, strip.cell_length)


class Static(_Static):
    """Textual's Static, markup off by default, each line inert."""

    def __init__(self, content="", *, markup: bool = False, **kwargs) -> None:
        super().__init__(content, markup=markup, **kwargs)

    def render_line(self, y: int) -> Strip:
        return inert_strip(super().render_line(y))


class DataTable(_DataTable):
    """Textual's DataTable, a ``str`` cell shown as plain text (not markup), each line inert."""

    def add_row(self, *cells, **kwargs):
        return super().add_row(*(Text(c) if isinstance(c, str) else c for c in cells), **kwargs)

    def render_line(self, y: int) -> Strip:
        return inert_strip(super().render_line(y))
