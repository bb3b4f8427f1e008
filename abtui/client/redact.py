"""The one scrubber of credentials: nothing that authenticates a request reaches a session file,
a report, a log or the console.

Secrets come from the environment (an arm's ``api_key_env``) and travel only in request
headers. A spec may still hold some (``http://user:pass@host/v1``, ``params.api_key``,
``hf_token``): the run uses them, nothing stores or shows them. Three tools, used by the writer
(:mod:`abtui.store.writer`: every meta value, event and arm), the load generators (every
record's server-supplied strings), the run's observer wrapper (what it prints) and the output
sanitiser (:func:`abtui.report.untrusted.inert`, which applies :func:`scrub_text`):

- by *name*: :func:`scrub_config` drops every dict key that names a credential, at any depth;
  :func:`scrub_url` drops a URL's user info and credential query parameters;
- by *shape*: :func:`scrub_text` cuts the user info of every URL in free text (an error message
  quoting the URL) and the values of credential query parameters;
- by *value*: :class:`Scrubber` knows the run's secret values (:func:`secrets_of`) and replaces
  them in any string — whole, cut short at the string's end (a message truncated inside the
  key), or transformed as servers echo them: upper- or lower-cased, split by separators, or in
  pieces of :data:`MIN_RUN` or more of its letters and digits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from abtui.client.records import RequestRecord

REDACTED = "[redacted]"
_MIN_LEN = 6  # shorter header values ("Bearer") would blank out ordinary words
# A string that ends in the first characters of a key: an error message cut at its length cap
# (300 characters, an 8 KiB body) in the middle of an echoed key, or a server that died while
# sending it. The rest of the key is safe, but its start is not: so a value's last characters
# that begin a key are redacted too, from this many on (fewer give away nothing of a real key).
_MIN_PREFIX = 4
# A transformed echo: a run of this many of a secret's letters and digits, in order, in any
# case, whatever separates them. Shorter runs are common in ordinary text ("Bearer", words of
# a readable key); ten random characters are not.
MIN_RUN = 10
_GRAM = MIN_RUN // 2  # every run of MIN_RUN holds one of the text's GRAM-aligned windows

# A config key names a secret if one of its ``_``-separated words is one of these (after
# lower-casing and mapping ``-`` to ``_``): ``api_key``, ``hf_token``, ``Authorization``,
# ``extra_headers`` are dropped; ``max_tokens``, ``tokenizer`` are kept.
_SECRET_KEY = re.compile(
    r"(^|_)(api_?key|apikey|authorization|auth|token|secret|password|passwd|headers?|"
    r"bearer|credentials?|cookie)($|_)"
)
# the user info of a URL in free text: scheme://USERINFO@ (it cannot hold "/", "?", "#")
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^\s/?#]*@")
# a query parameter in free text: ?NAME=VALUE or &NAME=VALUE
_QUERY_PARAM = re.compile(r"([?&;])([A-Za-z0-9_.\-]+)=([^&#\s'\"<>]*)")


def is_secret_key(key: object) -> bool:
    """Whether a config key names a credential (see ``_SECRET_KEY``); ``api_key_env`` names
    the environment variable that holds one, and is kept."""
    k = str(key).lower().replace("-", "_")
    return not k.endswith("_env") and bool(_SECRET_KEY.search(k))


def scrub_config(obj: Any) -> Any:
    """A copy of ``obj`` without any dict key naming a credential, at any depth."""
    if isinstance(obj, dict):
        return {k: scrub_config(v) for k, v in obj.items() if not is_secret_key(k)}
    if isinstance(obj, list | tuple):
        return [scrub_config(v) for v in obj]
    return obj


def scrub_url(url: str | None) -> str | None:
    """``url`` without user info (``user:pass@``) and without credential query parameters."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return scrub_text(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if not is_secret_key(k)])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _query_value(m: re.Match) -> str:
    return f"{m[1]}{m[2]}={REDACTED}" if is_secret_key(m[2]) and m[3] else m[0]


def scrub_text(text: str) -> str:
    """Free text with every URL's user info cut (``http://[redacted]@host``) and the value of
    every credential query parameter (``?api_key=``) replaced. Idempotent."""
    if "@" in text:
        text = _USERINFO.sub(lambda m: f"{m[1]}{REDACTED}@", text)
    if "=" in text:
        text = _QUERY_PARAM.sub(_query_value, text)
    return text


def secrets_of(
    headers: dict[str, str] | None = None,
    urls: Iterable[str | None] = (),
    configs: Iterable[Any] = (),
) -> list[str]:
    """The credential strings of a request, longest first: each header value and its token
    after a scheme (``Bearer sk-...`` gives both); the user name and password of each URL;
    every string under a credential key of each config (``params``), at any depth."""
    out: set[str] = set()
    for v in (headers or {}).values():
        for s in (v, v.split(None, 1)[-1]):
            out.add(s)
    for url in urls:
        if not url or "@" not in url:
            continue
        try:
            parts = urlsplit(url)
            user, pw = parts.username, parts.password
        except ValueError:
            continue
        userinfo = parts.netloc.rsplit("@", 1)[0]
        out.update(x for x in (userinfo, user, pw, unquote(user or ""), unquote(pw or "")) if x)
        out.update(v for k, v in parse_qsl(parts.query) if is_secret_key(k))
    for cfg in configs:
        out.update(_secret_values(cfg))
    return sorted((s for s in out if len(s) >= _MIN_LEN), key=len, reverse=True)


def _secret_values(obj: Any, secret: bool = False) -> Iterable[str]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _secret_values(v, secret or is_secret_key(k))
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _secret_values(v, secret)
    elif secret and isinstance(obj, str | int) and not isinstance(obj, bool):
        yield str(obj)


_ALNUM = re.compile(r"[0-9A-Za-z]")
_NOT_ALNUM_BYTES = bytes(b for b in range(256) if not chr(b).isascii() or not chr(b).isalnum())


def _norm(text: str) -> str:
    """``text``'s ASCII letters and digits, lower-cased (keys are ASCII)."""
    return text.encode("ascii", "ignore").translate(None, _NOT_ALNUM_BYTES).decode().lower()


def _hit(norm: str, grams: set[str]) -> bool:
    """Whether one of ``norm``'s GRAM-aligned windows is in ``grams``: true of every text that
    holds a run of MIN_RUN of a secret whose grams they are (false hits are checked after)."""
    return any(norm[i : i + _GRAM] in grams for i in range(0, len(norm), _GRAM))


class _Fuzzy:
    """Finds runs of at least :data:`MIN_RUN` of a secret's letters and digits in a text, in
    any case and whatever separates them."""

    def __init__(self, secret: str) -> None:
        self.norm = _norm(secret)
        self.grams = {self.norm[i : i + _GRAM] for i in range(len(self.norm) - _GRAM + 1)}

    def usable(self) -> bool:
        return len(self.norm) >= MIN_RUN

    def spans(self, text: str, norm: str) -> list[tuple[int, int]]:
        """Where in ``text`` (whose :func:`_norm` is ``norm``) runs of the secret are."""
        if not _hit(norm, self.grams):
            return []
        pos = [m.start() for m in _ALNUM.finditer(text)]
        spans, i = [], 0
        while i < len(norm):
            n = self._run_at(norm, i)
            if n >= MIN_RUN:
                spans.append((pos[i], pos[i + n - 1] + 1))
                i += n
            else:
                i += 1
        return spans

    def _run_at(self, norm: str, i: int) -> int:
        """The longest stretch of ``norm`` from ``i`` that is a substring of the secret."""
        lo, hi = 0, min(len(norm) - i, len(self.norm))
        while lo < hi:  # a substring's prefixes are substrings: binary search on the length
            mid = (lo + hi + 1) // 2
            if norm[i : i + mid] in self.norm:
                lo = mid
            else:
                hi = mid - 1
        return lo


class Scrubber:
    """The secret values of a run (:func:`secrets_of`) and every way :mod:`this module
    <abtui.client.redact>` has to keep them out of a string; picklable (sent to the load
    generators)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = sorted(set(secrets), key=len, reverse=True)
        self._fuzzy: list[_Fuzzy] | None = None

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def __getstate__(self) -> dict:
        return {"secrets": self.secrets}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["secrets"])

    def text(self, value: str) -> str:
        """``value`` with every known secret replaced (whole, cut short, transformed) and URL
        user info cut."""
        if self.secrets and value:
            fuzzy = self._fuzzies()
            if fuzzy and not _hit(_norm(value), self._grams):
                fuzzy = []  # the usual case, found in one pass for all the secrets
            value = redact_text(value, self.secrets, fuzzy)
        return scrub_text(value) if value else value

    def _fuzzies(self) -> list[_Fuzzy]:
        if self._fuzzy is None:
            self._fuzzy = [f for f in map(_Fuzzy, self.secrets) if f.usable()]
            self._grams = set().union(*(f.grams for f in self._fuzzy))
        return self._fuzzy

    def __call__(self, obj: Any, keys: bool = True) -> Any:
        """A copy of ``obj`` (JSON-like) with every string :meth:`text`-scrubbed and, with
        ``keys`` (a config: a spec, an arm's settings), every credential key dropped, at any
        depth. Data whose keys are not names (a model's tokens, keyed by their text: ``token``
        is one) keep theirs: ``keys=False``."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {k: self(v, keys) for k, v in obj.items() if not (keys and is_secret_key(k))}
        if isinstance(obj, list | tuple):
            return [self(v, keys) for v in obj]
        return obj


def redact_text(value: str, secrets: list[str], fuzzy: list[_Fuzzy] | None = None) -> str:
    """``value`` with every secret replaced, a secret's start that ends it (cut short), and
    (with ``fuzzy``) every transformed run of a secret."""
    for s in secrets:
        if s in value:
            value = value.replace(s, REDACTED)
    for f in fuzzy or ():
        for a, b in reversed(f.spans(value, _norm(value))):
            value = value[:a] + REDACTED + value[b:]
    for s in secrets:
        if " " in s:  # "Bearer sk-…": its token is a secret of its own, matched alone
            continue
        for k in range(min(len(s) - 1, len(value)), _MIN_PREFIX - 1, -1):
            if value.endswith(s[:k]):
                return value[:-k] + REDACTED
    return value


def redact(rec: RequestRecord, scrubber: Scrubber) -> None:
    """Replace every secret in the record's server-supplied strings."""
    for field in ("error_message", "text"):
        value = getattr(rec, field)
        if value:
            setattr(rec, field, scrubber.text(value))
