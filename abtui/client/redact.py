"""Credentials never leave the request: a server that echoes the caller's key (in an error
message, or in generated text) must not get it into the session file, reports or logs."""

from __future__ import annotations

from abtui.client.records import RequestRecord

REDACTED = "[redacted]"
_MIN_LEN = 6  # shorter header values ("Bearer") would blank out ordinary words
# A string that ends in the first characters of a key: an error message cut at its length cap
# (300 characters, an 8 KiB body) in the middle of an echoed key, or a server that died while
# sending it. The rest of the key is safe, but its start is not: so a value's last characters
# that begin a key are redacted too, from this many on (fewer give away nothing of a real key).
_MIN_PREFIX = 4


def secrets_of(headers: dict[str, str]) -> list[str]:
    """The credential strings in request headers: each value, and its token after a scheme
    (``Bearer sk-...`` gives both), longest first."""
    out: set[str] = set()
    for v in headers.values():
        for s in (v, v.split(None, 1)[-1]):
            if len(s) >= _MIN_LEN:
                out.add(s)
    return sorted(out, key=len, reverse=True)


def redact_text(value: str, secrets: list[str]) -> str:
    """``value`` with every secret replaced, and a secret's start that ends it (cut short)."""
    for s in secrets:
        if s in value:
            value = value.replace(s, REDACTED)
    for s in secrets:
        if " " in s:  # "Bearer sk-…": its token is a secret of its own, matched alone
            continue
        for k in range(min(len(s) - 1, len(value)), _MIN_PREFIX - 1, -1):
            if value.endswith(s[:k]):
                return value[:-k] + REDACTED
    return value


def redact(rec: RequestRecord, secrets: list[str]) -> None:
    """Replace every secret in the record's server-supplied strings."""
    for field in ("error_message", "text"):
        value = getattr(rec, field)
        if value:
            setattr(rec, field, redact_text(value, secrets))
