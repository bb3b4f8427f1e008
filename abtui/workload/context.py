"""Items an endpoint's context window cannot hold, found before the run.

vLLM (and abtui's simulator) list ``max_model_len`` with each model at ``GET /v1/models``;
an item whose prompt plus ``max_tokens`` exceeds it will be refused or truncated by the server.
abtui warns (and records an event) before sending anything; it does not drop the items, so
the run still measures what the server does with them. Servers that do not say are skipped.
"""

from __future__ import annotations

import httpx

from abtui.client.items import Item


def max_model_len(
    base_url: str, model: str, headers: dict, timeout_s: float = 5.0, verify=True
) -> int | None:
    """The ``max_model_len`` the endpoint lists for ``model``; None when it does not say.
    ``verify``: the arm's TLS context (``Target.tls``)."""
    try:
        with httpx.Client(trust_env=False, timeout=timeout_s, verify=verify) as c:
            data = c.get(f"{base_url}/models", headers=headers).json().get("data", [])
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    for m in data if isinstance(data, list) else []:
        if isinstance(m, dict) and m.get("id") == model:
            v = m.get("max_model_len")
            return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
    return None


def too_long(items: list[Item], window: int) -> list[Item]:
    """Items whose prompt (its known length, else its word count) + max_tokens exceed ``window``."""
    out = []
    for it in items:
        n_in = it.n_input if it.n_input is not None else len((it.prompt or "").split())
        if n_in + it.max_tokens > window:
            out.append(it)
    return out


def check_context(targets, names: list[str], items: list[Item], writer, obs) -> None:
    """Warn (message + event) per arm about items its context window cannot hold."""
    check = ContextCheck(targets, names)
    check.add(items)
    check.report(writer, obs)


class ContextCheck:
    """:func:`check_context` a batch of items at a time (a session streams its items): each
    arm's window is asked once, the items too long for it counted and the first five named."""

    SHOWN = 5

    def __init__(self, targets, names: list[str]) -> None:
        self.windows: dict[str, int] = {}
        for name, t in zip(names, targets, strict=True):
            window = max_model_len(t.base_url, t.model, t.headers, verify=t.tls)
            if window is not None:
                self.windows[name] = window
        self.n = 0
        self.bad = dict.fromkeys(self.windows, 0)
        self.ids: dict[str, list[str]] = {name: [] for name in self.windows}

    def add(self, items: list[Item]) -> None:
        self.n += len(items)
        for name, window in self.windows.items():
            bad = too_long(items, window)
            self.bad[name] += len(bad)
            ids = self.ids[name]
            ids.extend(it.id for it in bad[: max(0, self.SHOWN - len(ids))])

    def report(self, writer, obs) -> None:
        for name, window in self.windows.items():
            if not self.bad[name]:
                continue
            shown = ", ".join(self.ids[name]) + (", …" if self.bad[name] > self.SHOWN else "")
            msg = (
                f"{self.bad[name]} of {self.n} requests need more than {name}'s {window}-token "
                f"context window (prompt + max_tokens): {shown}"
            )
            writer.event("context_window", msg)
            obs.message(f"warning: {msg}; the server will refuse or truncate them")
