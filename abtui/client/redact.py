"""Credentials never leave the request: a server that echoes the caller's key (in an error
message, or in generated text) must not get it into the session file, reports or logs."""

from __future__ import annotations

from abtui.client.records import RequestRecord

REDACTED = "[redacted]"
_MIN_LEN = 6  # shorter header values ("Bearer") would blank out ordinary words


def secrets_of(headers: dict[str, str]) -> list[str]:
    """The credential strings in request headers: each value, and its token after a scheme
    (``Bearer sk-...`` gives both), longest first."""
    out: set[str] = set()
    for v in headers.values():
        for s in (v, v.split(None, 1)[-1]):
            if len(s) >= _MIN_LEN:
                out.add(s)
    return sorted(out, key=len, reverse=True)


def redact(rec: RequestRecord, secrets: list[str]) -> None:
    """Replace every secret in the record's server-supplied strings."""
    for field in ("error_message", "text"):
        value = getattr(rec, field)
        if value:
            for s in secrets:
                if s in value:
                    value = value.replace(s, REDACTED)
            setattr(rec, field, value)
