"""How the command line's help reads: one formatter for every parser, and the examples epilog.

Every option says its default once, in its own help (``(default 200)``), never through
argparse's ``ArgumentDefaultsHelpFormatter``, which appends a second one. Every command ends on
two or three examples (``tests/unit/test_cli_help.py`` parses each of them).
"""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that a text with line breaks of its own (the examples, a
    hand-wrapped description) is kept as written; a one-paragraph text is wrapped as usual."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def examples(*lines: str) -> str:
    """The epilog of a command: ``examples:`` and one line per example (a line may continue on
    the next with a trailing backslash; a ``#`` starts a comment)."""
    return "examples:\n" + "\n".join("  " + row for line in lines for row in line.split("\n"))
