"""An endpoint as the clients need it (:class:`Target`) and the request body both clients send
(:func:`build_body`).

Apart from :mod:`abtui.client.stream` so that the fast client and the load generator, which
never use httpx unless ``request.http = "httpx"``, do not import it: httpx (and the rich and
click its command line pulls in) took ~0.1 s of CPU at the start of every generator process.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field

from abtui.client.items import Item
from abtui.client.tls import verify_for


@dataclass(slots=True)
class Target:
    """A resolved endpoint as the client needs it. Holds headers (and so credentials):
    it is never written to a session file."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1 (no trailing slash)
    model: str
    api: str = "completions"  # "completions" | "chat"
    headers: dict[str, str] = field(default_factory=dict)
    params: dict = field(default_factory=dict)  # extra body fields: temperature, seed, ignore_eos…
    include_usage: bool = True
    timeout_s: float = 600.0  # whole request
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 120.0  # longest silence between two reads
    insecure: bool = False  # https without certificate checks (--insecure; abtui.client.tls)
    ca_bundle: str | None = None  # a private CA's PEM file, trusted on top of the system's
    # a conversation's id: the fast client sends its turns on one connection where it can
    # (FastClient.stream); None: any pooled connection
    affinity: str | None = None

    @property
    def tls(self) -> ssl.SSLContext | bool:
        """The TLS context of this endpoint (verification on unless ``insecure``); False for a
        plain http one (:func:`abtui.client.tls.verify_for`)."""
        return verify_for(self.base_url, self.insecure, self.ca_bundle)

    @property
    def url(self) -> str:
        return (
            f"{self.base_url}/chat/completions"
            if self.api == "chat"
            else f"{self.base_url}/completions"
        )


def build_body(target: Target, item: Item, extra: dict | None = None) -> bytes:
    """The request body for ``item``, serialised once, before its send time comes."""
    body: dict = {"model": target.model}
    if target.api == "chat":
        body["messages"] = item.chat_messages()
    else:
        body["prompt"] = item.prompt if item.prompt is not None else _flatten(item.chat_messages())
    body["max_tokens"] = item.max_tokens
    body["stream"] = True
    if target.include_usage:
        body["stream_options"] = {"include_usage": True}
    body.update(target.params)
    if extra:
        body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()


def _flatten(messages: list[dict]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)
