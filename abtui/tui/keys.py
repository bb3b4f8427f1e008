"""The keys of each screen, for its help overlay (``?``): each screen lists its own keys and the
few that work everywhere, never another screen's (a list of every screen's keys would
have the start screen's help talk about replay speeds). A screen's ``HELP`` names its
list; ``tests/tui/test_tui_help.py`` checks that every key a screen binds is in its list."""

from __future__ import annotations

Keys = tuple[tuple[str, str], ...]

EVERYWHERE: Keys = (
    ("?", "this list of keys (of this screen)"),
    (
        "ctrl+p",
        "the command palette: this screen's actions by name, and Textual's own (theme, quit)",
    ),
    ("ctrl+q", "quit abtui from any screen (asks first while a session runs)"),
)

START: Keys = (
    ("Enter", "open the selected session (its replay, then its verdict)"),
    ("/", "filter the list (name, arms, status, verdict, date); Enter keeps it, Esc clears it"),
    ("c", "compare two sessions: c marks the selected one, c on another compares them"),
    ("x / Delete", "delete the selected session file (asks first; only files of this folder)"),
    ("d", "run the demo"),
    ("r", "run an experiment from a spec file (Esc cancels)"),
    ("Esc", "close the spec prompt, clear the filter, or forget the marked session"),
    ("up / down", "move in the list"),
    ("q", "quit"),
)

LIVE: Keys = (
    ("v", "show the verdict (once the run has finished)"),
    (
        "c",
        "compare view: every arm's TTFT and TPOT CDFs overlaid in one chart, a table of"
        " the arms (c again: the panes)",
    ),
    (
        "[ / ]",
        "more arms than fit: the previous / next page of candidates (the baseline"
        " stays in the first column)",
    ),
    (
        "q",
        "quit (asks first while a session runs; the samples so far are kept); a session"
        " started or opened from the start screen: back to the list",
    ),
    ("Esc", "a session started or opened from the start screen: back to the list"),
)

OPEN: Keys = (
    (
        "space",
        "play / pause the replay (from the end: from the start; played to the end,"
        " the verdict comes up)",
    ),
    ("+ / > / =", "replay faster (×2, up to 64×)"),
    ("- / <", "replay slower (÷2, down to 1×)"),
    ("left / right", "seek back / forward 5% of the run"),
    ("Home / End", "the start / the end state of the run"),
    *LIVE,
)

VERDICT: Keys = (
    ("m", "write the Markdown report next to the session file"),
    ("h", "write the HTML report next to the session file"),
    ("a", "a factorial ablation: the next metric in the ablation view"),
    ("l / v / Esc", "back to the live panes"),
    ("up / down / PgUp / PgDn", "scroll"),
    ("q", "quit; a session started or opened from the start screen: back to the list"),
)

COMPARE: Keys = (
    ("Esc / q", "back to the list"),
    ("up / down / PgUp / PgDn", "scroll"),
)


QUESTION: Keys = (
    ("y", "yes"),
    ("n / Esc", "no: nothing is changed"),
)


def keys_of(screen) -> tuple[str, Keys]:
    """(title, keys) of ``screen``'s help: its own ``HELP`` list, then the keys of everywhere."""
    title = getattr(screen, "HELP_TITLE", "")
    return title, tuple(getattr(screen, "HELP", ())) + EVERYWHERE
