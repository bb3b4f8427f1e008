"""What a ``llama-server`` itself said over an A/B run: its ``/metrics`` counters before and after,
gauge peaks polled every 0.2 s, and its process's CPU time (:mod:`abtui.engine.experiments`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from abtui.engine.server import LlamaCppServer
from abtui.telemetry.promtext import parse as parse_prom


@dataclass(slots=True)
class ServerCounters:
    """What a server's own ``/metrics`` said over the run: counter deltas, gauge peaks."""

    before: dict[str, float] = field(default_factory=dict)
    after: dict[str, float] = field(default_factory=dict)
    peak: dict[str, float] = field(default_factory=dict)
    cpu_s: float = float("nan")  # the server process's CPU time over the run (/proc)

    def delta(self, name: str) -> float:
        return self.after.get(name, float("nan")) - self.before.get(name, 0.0)

    @property
    def cpu_ms_per_token(self) -> float:
        """Server CPU time per generated token (prefill included), ms."""
        n = self.delta("llamacpp:tokens_predicted_total")
        return self.cpu_s / n * 1e3 if n > 0 else float("nan")

    @property
    def drafted_share(self) -> float:
        """Accepted draft tokens / tokens generated: the share of the output that came from
        drafts (nan without speculative decoding)."""
        n = self.delta("llamacpp:tokens_predicted_total")
        a = self.delta("llamacpp:spec_decode_num_accepted_tokens_total")
        return a / n if n > 0 and a == a else float("nan")

    @property
    def acceptance(self) -> float:
        """Draft tokens accepted / draft tokens generated (nan without speculative decoding)."""
        n = self.delta("llamacpp:spec_decode_num_draft_tokens_total")
        return (
            self.delta("llamacpp:spec_decode_num_accepted_tokens_total") / n
            if n > 0
            else float("nan")
        )


def scalars(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in parse_prom(text).samples:
        if not s.labels:
            out[s.name] = s.value
    return out


class Poller:
    """Reads each server's ``/metrics`` every 0.2 s during the run, keeping gauge peaks (the
    scrape abtui itself does is every second; a queue of 3 that lasts 300 ms needs finer)."""

    def __init__(self, servers: dict[str, LlamaCppServer], counters: dict[str, ServerCounters]):
        self.servers, self.counters = servers, counters
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True, name="metrics-poller")

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            for name, srv in self.servers.items():
                try:
                    vals = scalars(srv.metrics_text())
                except Exception:  # noqa: BLE001 - a dying server is the run's business
                    continue
                pk = self.counters[name].peak
                for k in ("llamacpp:requests_deferred", "llamacpp:requests_processing"):
                    if k in vals:
                        pk[k] = max(pk.get(k, 0.0), vals[k])

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(5)
