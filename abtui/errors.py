"""Errors a user can act on.

Every error abtui reports to a user is an :class:`AbtuiError`: a one-line message saying what
went wrong (naming the file, line, field or endpoint) and a hint saying what to do. The CLI
prints both and exits with code 2; a traceback is a bug.
"""

from __future__ import annotations


class AbtuiError(Exception):
    """Base class: ``message`` says what went wrong, ``hint`` what to do about it."""

    title = "error"
    exit_code = 2
    default_hint: str | None = None  # used when the raiser gives no hint of its own

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint or self.default_hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} (hint: {self.hint})"


class SpecError(AbtuiError):
    """The experiment spec (TOML file or flags) is invalid: names the file/field."""

    title = "invalid spec"
    default_hint = "the spec format is in docs/guide.md (Spec files) and `abtui run --help`"


class UsageError(AbtuiError):
    """A command-line option has a bad value."""

    title = "invalid option"
    default_hint = "see `abtui --help`"


class EndpointError(AbtuiError):
    """An endpoint cannot be used (unreachable, wrong URL, no model)."""

    title = "endpoint"


class WorkloadError(AbtuiError):
    """A workload file or generator setting is invalid: names the file/line/field."""

    title = "invalid workload"


class StoreError(AbtuiError):
    """A session file cannot be created, written or read."""

    title = "session file"


class StoreWriteError(StoreError):
    """The session file could not be written while running (disk full, an I/O error): not bad
    input, so not exit code 2. The writer records the session as ``write_failed`` first."""

    exit_code = 5
