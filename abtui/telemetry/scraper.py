"""Scrape an arm's Prometheus ``/metrics``: gauges as they are, counters as per-interval deltas.

One :class:`PromScraper` per arm. Each :meth:`PromScraper.poll` fetches the text (a short
timeout: a slow server must not hold the sampler), parses it (:mod:`~abtui.telemetry.promtext`),
maps the engine's names to abtui's (:mod:`~abtui.telemetry.engines`) and returns telemetry rows
``(arm, source, t_ns, metric, value)``:

- a gauge ``x`` → one row ``x``;
- a counter ``x`` → ``x.delta`` (increase since the previous scrape) and ``x.rate`` (per second);
- a histogram ``x`` → ``x.sum.delta`` and ``x.count.delta`` (their ratio is the mean over the
  interval; the buckets are coarse and not kept: quantiles come from the client's samples).

A counter that went *down* was reset (the server restarted): the interval's delta is then the new
value (Prometheus' ``rate()`` rule); :attr:`PromScraper.resets` counts the series reset and
:attr:`PromScraper.restarts` the scrapes where any was (server restarts). The first scrape
only sets the baseline. Once a scrape shows llama.cpp's names, the server's ``/props`` (same host)
is read once for what ``/metrics`` lacks: ``slots_total`` (``--parallel``) and ``slot_ctx`` (context
per slot), rows of source ``llamacpp`` repeated with every scrape (so each measured window has
them); a server without ``/props`` gives none. Each poll also adds ``scrape.ok`` (1 or 0), ``scrape.duration_s`` and,
when lines were malformed, ``scrape.skipped_lines`` (source ``scrape``). A failed scrape is a
row and a message, never an exception.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import httpx

from abtui.telemetry.engines import extract
from abtui.telemetry.promtext import parse

Row = tuple[int | None, str, int, str, float]


def metrics_url_for(endpoint: str) -> str:
    """The ``/metrics`` URL of an OpenAI-compatible endpoint: same scheme, host and port, path
    ``/metrics`` (where vLLM, SGLang and TGI serve it)."""
    parts = urlsplit(endpoint)
    return urlunsplit((parts.scheme or "http", parts.netloc, "/metrics", "", ""))


def _not_bucket(name: str) -> bool:
    return not name.endswith("_bucket")


@dataclass
class DeltaTracker:
    """Cumulative values → increases between successive observations, resets handled."""

    last: dict[str, tuple[float, int]] = field(default_factory=dict)
    resets: int = 0

    def update(self, key: str, value: float, t_ns: int) -> tuple[float, float] | None:
        """(delta, seconds since the previous value) or ``None`` for the first value."""
        prev = self.last.get(key)
        self.last[key] = (value, t_ns)
        if prev is None:
            return None
        delta = value - prev[0]
        if delta < 0:  # reset: the counter restarted from zero
            self.resets += 1
            delta = value
        return delta, (t_ns - prev[1]) / 1e9


class PromScraper:
    """Scrapes one arm's ``/metrics`` (see the module docstring)."""

    def __init__(
        self,
        arm: int,
        url: str,
        *,
        gpus: set[str] | None = None,
        timeout_s: float = 2.0,
        client: httpx.Client | None = None,
        verify=True,
    ) -> None:
        self.arm = arm
        self.verify = verify  # the arm's TLS context (abtui.client.tls)
        self.url = url
        self.gpus = gpus
        self.timeout_s = timeout_s
        self._client = client
        self._own_client = client is None
        self.tracker = DeltaTracker()
        self.engines: set[str] = set()
        self.last_error: str | None = None
        self.n_ok = 0
        self.n_failed = 0
        self.restarts = 0  # scrapes in which some counter went down (the server restarted)
        self.props: dict | None = None  # llama-server's /props, read once (``{}``: none)

    @property
    def resets(self) -> int:
        return self.tracker.resets

    def fetch(self) -> str:
        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout_s, trust_env=False, verify=self.verify)
        r = self._client.get(self.url, headers={"Accept": "text/plain"})
        if r.status_code != 200:
            raise httpx.HTTPStatusError(f"HTTP {r.status_code}", request=r.request, response=r)
        return r.text

    def poll(self, t_ns: int | None = None) -> list[Row]:
        """Fetch, parse and convert one scrape; a failure gives ``scrape.ok = 0``."""
        t0 = time.perf_counter_ns()
        try:
            text = self.fetch()
        except (httpx.HTTPError, OSError) as e:
            self.n_failed += 1
            self.last_error = f"{self.url}: {type(e).__name__}: {e}"
            return [(self.arm, "scrape", t_ns or t0, "scrape.ok", 0.0)]
        t = t_ns if t_ns is not None else (t0 + time.perf_counter_ns()) // 2
        rows = self.rows_from_text(text, t)
        if "llamacpp" in self.engines and self.props is None:
            self._read_llamacpp_props()
        for metric, v in (self.props or {}).items():  # each scrape: in every window
            rows.append((self.arm, "llamacpp", t, metric, float(v)))
        rows.append(
            (self.arm, "scrape", t, "scrape.duration_s", (time.perf_counter_ns() - t0) / 1e9)
        )
        return rows

    def _read_llamacpp_props(self) -> None:
        """llama-server's slot count and context per slot, from its ``/props`` (once)."""
        parts = urlsplit(self.url)
        self.props = {}
        try:
            r = self._client.get(urlunsplit((parts.scheme, parts.netloc, "/props", "", "")))
            doc = r.json() if r.status_code == 200 else {}
        except (httpx.HTTPError, OSError, ValueError):
            return
        if not isinstance(doc, dict):
            return
        gen = doc.get("default_generation_settings")
        found = {
            "slots_total": doc.get("total_slots"),
            "slot_ctx": gen.get("n_ctx") if isinstance(gen, dict) else None,
        }
        for metric, v in found.items():
            if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**31:
                self.props[metric] = v

    def rows_from_text(self, text: str, t_ns: int) -> list[Row]:
        """Telemetry rows of one exposition ``text`` scraped at ``t_ns``."""
        scrape = parse(text, _not_bucket)
        ex = extract(scrape, self.gpus)
        self.engines |= ex.engines
        self.n_ok += 1
        self.last_error = None
        arm = self.arm
        rows: list[Row] = [(arm, "scrape", t_ns, "scrape.ok", 1.0)]
        resets_before = self.tracker.resets
        if scrape.skipped:
            rows.append((arm, "scrape", t_ns, "scrape.skipped_lines", float(scrape.skipped)))
        for metric, (engine, value) in ex.gauges.items():
            rows.append((arm, engine, t_ns, metric, value))
        for key, (engine, value) in ex.cumulative.items():
            d = self.tracker.update(key, value, t_ns)
            if d is None:
                continue
            delta, dt = d
            rows.append((arm, engine, t_ns, key + ".delta", delta))
            if not key.endswith((".sum", ".count")) and dt > 0:
                rows.append((arm, engine, t_ns, key + ".rate", delta / dt))
        if self.tracker.resets > resets_before:
            self.restarts += 1
        return rows

    def close(self) -> None:
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None
