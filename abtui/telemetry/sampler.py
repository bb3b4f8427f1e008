"""Background telemetry for a run: one thread per source, in the main process, at 1 Hz.

The load generators run in their own processes (docs/architecture.md), so these threads never share an
event loop with a measured request; what they cost is measured by ``scripts/bench_telemetry.py``.
Sources:

- one :class:`~abtui.telemetry.scraper.PromScraper` per arm whose ``/metrics`` is scraped
  (the arm's ``metrics_url``, default derived from its endpoint; ``"off"`` to skip);
- one NVML source for the local GPUs named by the arms' ``gpu_index`` (several indices per arm
  for tensor parallelism: memory, power and energy add up, activities average, the hottest
  temperature and any throttling count).

:meth:`TelemetryHub.drain` hands the rows ``(arm, source, t_ns, metric, value)`` and the
messages ``(kind, text, arm)`` gathered since the last call to the session writer. Times are
``time.perf_counter_ns()``, the clock of every other row in the session file.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from abtui.client.tls import verify_for
from abtui.telemetry.nvml import Nvml
from abtui.telemetry.scraper import DeltaTracker, PromScraper, Row, metrics_url_for

Message = tuple[str, str, int | None]  # (event kind, text, arm)
_SUM = {"gpu.mem_used_bytes", "gpu.mem_total_bytes", "gpu.power_w", "gpu.energy_j"}
_MAX = {"gpu.temp_c", "gpu.throttled"}


@dataclass
class ArmTelemetry:
    """What to sample for one arm."""

    arm: int
    name: str
    metrics_url: str | None = None  # None: not scraped
    gpu_indices: list[int] = field(default_factory=list)  # local GPUs (NVML)
    verify: Any = True  # TLS of the scrape: the arm's context (abtui.client.tls)


def parse_gpu_index(value: object, where: str) -> list[int]:
    """``0``, ``"0"`` or ``"0,1"`` → [0] / [0, 1]; ValueError naming ``where`` else."""
    if value is None or value == "":
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        parts = [value]
    elif isinstance(value, str):
        try:
            parts = [int(p) for p in value.split(",") if p.strip()]
        except ValueError:
            parts = [-1]
    else:
        parts = [-1]
    if not parts or any(p < 0 for p in parts):
        raise ValueError(f"{where} must be a GPU index or a list like '0,1', got {value!r}")
    return parts


def arms_from_spec(spec) -> list[ArmTelemetry]:
    """The sampling plan of a validated :class:`~abtui.spec.Spec`."""
    tel = getattr(spec, "telemetry", None)
    scrape = getattr(tel, "scrape", True)
    out = []
    for i, a in enumerate(spec.arms):
        url = getattr(a, "metrics_url", None)
        if url is None:
            url = metrics_url_for(a.url) if scrape else None
        elif url.strip().lower() in ("off", "none", ""):
            url = None
        gpus = parse_gpu_index(getattr(a, "gpu_index", None), f"arm {a.name!r}: gpu_index")
        verify = verify_for(url or "", getattr(a, "insecure", False), getattr(a, "ca_bundle", None))
        out.append(ArmTelemetry(i, a.name, url, gpus, verify))
    return out


class _NvmlSource:
    def __init__(self, nvml: Nvml, arms: list[ArmTelemetry]) -> None:
        self.nvml = nvml
        self.arms = [a for a in arms if a.gpu_indices]
        self.energy = DeltaTracker()
        self._told_lost = False

    def poll(self, t_ns: int) -> tuple[list[Row], list[Message]]:
        if self.nvml.lost:
            if self._told_lost:
                return [], []
            self._told_lost = True
            return [], [("telemetry", self.nvml.status or "NVML stopped", None)]
        indices = sorted({i for a in self.arms for i in a.gpu_indices})  # each GPU read once
        samples = {i: self.nvml.sample(i) for i in indices}
        rows: list[Row] = []
        for a in self.arms:
            per = [samples[i] for i in a.gpu_indices]
            keys = set().union(*per)
            for key in sorted(keys):
                vals = [s[key] for s in per if key in s]
                if key in _SUM:
                    if len(vals) < len(per):
                        continue  # a sum over part of the GPUs would mislead
                    v = sum(vals)
                elif key in _MAX:
                    v = max(vals)
                else:
                    v = sum(vals) / len(vals)
                if key == "gpu.energy_j":
                    d = self.energy.update(f"{a.arm}", v, t_ns)
                    if d is not None:
                        rows.append((a.arm, "nvml", t_ns, "gpu.energy_j.delta", d[0]))
                    continue
                rows.append((a.arm, "nvml", t_ns, key, v))
        return rows, []

    def close(self) -> None:
        self.nvml.close()


class _ScrapeSource:
    def __init__(self, scraper: PromScraper, name: str) -> None:
        self.s = scraper
        self.name = name
        self._failing = False
        self._told_unknown = False

    def poll(self, t_ns: int) -> tuple[list[Row], list[Message]]:
        rows = self.s.poll(t_ns)
        msgs: list[Message] = []
        arm = self.s.arm
        if self.s.last_error and not self._failing:
            self._failing = True
            msgs.append(("telemetry", f"{self.name}: no server metrics ({self.s.last_error})", arm))
        elif not self.s.last_error and self._failing:
            self._failing = False
            msgs.append(("telemetry", f"{self.name}: server metrics back at {self.s.url}", arm))
        if self.s.n_ok == 1 and not self.s.last_error and not self._told_unknown:
            self._told_unknown = True
            if not self.s.engines:
                msgs.append(
                    (
                        "telemetry",
                        f"{self.name}: {self.s.url} has no vLLM, SGLang, TGI, "
                        "llama.cpp or DCGM metric this version of abtui knows",
                        arm,
                    )
                )
        return rows, msgs

    def close(self) -> None:
        self.s.close()


class TelemetryHub:
    """Runs the sources of a plan in background threads; see the module docstring."""

    def __init__(
        self,
        arms: list[ArmTelemetry],
        interval_s: float = 1.0,
        *,
        nvml: bool = True,
        clock: Callable[[], int] = time.perf_counter_ns,
        timeout_s: float | None = None,
    ) -> None:
        self.arms = arms
        self.interval_s = interval_s
        self.use_nvml = nvml
        self.clock = clock
        self.timeout_s = timeout_s if timeout_s is not None else max(0.2, min(2.0, interval_s))
        self.sources: list = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._rows: list[Row] = []
        self._msgs: list[Message] = []
        self.cpu_s = 0.0  # CPU time the sampling threads used (all of them, summed)
        self.polls = 0
        self.say: Callable[[str], None] | None = None  # where drain_into reports messages

    def start(self) -> list[Message]:
        """Set the sources up and start the threads; returns the messages about the setup."""
        msgs: list[Message] = []
        for a in self.arms:
            if a.metrics_url:
                sc = PromScraper(
                    a.arm,
                    a.metrics_url,
                    gpus=_gpu_labels(a),
                    timeout_s=self.timeout_s,
                    verify=a.verify,
                )
                self.sources.append(_ScrapeSource(sc, a.name))
        wanted = [a for a in self.arms if a.gpu_indices]
        if wanted and self.use_nvml:
            nv = Nvml()
            if nv.start():
                bad = nv.check_indices(sorted({i for a in wanted for i in a.gpu_indices}))
                if bad:
                    msgs.append(("telemetry", f"no GPU telemetry: {bad}", None))
                    nv.close()
                else:
                    self.sources.append(_NvmlSource(nv, wanted))
                    indices = sorted({i for a in wanted for i in a.gpu_indices})
                    for i in indices:
                        nv.sample(i)  # opens the handle, names the GPU, primes GPM
                    names = ", ".join(f"{i} ({nv.names.get(i, '?')})" for i in indices)
                    msgs.append(("telemetry", f"NVML sampling GPU {names}", None))
                    for i in indices:
                        users = [a.name for a in wanted if i in a.gpu_indices]
                        if len(users) > 1:
                            msgs.append(
                                (
                                    "telemetry",
                                    f"GPU {i} serves {', '.join(users)}: its "
                                    "power, energy and activity are theirs together, not "
                                    "each arm's",
                                    None,
                                )
                            )
            else:
                msgs.append(("telemetry", nv.status or "no GPU telemetry", None))
        for src in self.sources:
            t = threading.Thread(
                target=self._loop, args=(src,), name="abtui-telemetry", daemon=True
            )
            self._threads.append(t)
            t.start()
        return msgs

    def _loop(self, src) -> None:
        cpu0 = time.thread_time()
        nxt = time.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    rows, msgs = src.poll(self.clock())
                except Exception as e:  # a bug in a source must not take the run down
                    rows, msgs = [], [("telemetry", f"telemetry source failed: {e!r}", None)]
                    self._stop.wait(self.interval_s)
                with self._lock:
                    self._rows.extend(rows)
                    self._msgs.extend(msgs)
                    self.polls += 1
                nxt += self.interval_s
                delay = nxt - time.monotonic()
                if delay < 0:  # fell behind (a slow scrape): skip, don't burst
                    nxt, delay = time.monotonic(), 0.0
                if self._stop.wait(delay):
                    break
        finally:
            with self._lock:
                self.cpu_s += time.thread_time() - cpu0

    def drain(self) -> tuple[list[Row], list[Message]]:
        with self._lock:
            rows, msgs = self._rows, self._msgs
            self._rows, self._msgs = [], []
        return rows, msgs

    def stop(self, last_scrape: bool = False) -> None:
        """Stop the threads; ``last_scrape``: one more server sample first, so the counters
        cover the run up to its end."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self.timeout_s + 1.0)
        if last_scrape:
            for src in self.sources:
                if isinstance(src, _ScrapeSource):
                    rows, _ = src.poll(self.clock())
                    with self._lock:
                        self._rows.extend(rows)
        for src in self.sources:
            try:
                src.close()
            except Exception:
                pass


def _gpu_labels(a: ArmTelemetry) -> set[str] | None:
    return {str(i) for i in a.gpu_indices} if a.gpu_indices else None


def start_for_session(spec, writer, say: Callable[[str], None]) -> TelemetryHub | None:
    """Start the telemetry of a run (``None`` when there is nothing to sample); the setup
    messages go to ``say`` (the observer) and into the session's events."""
    tel = getattr(spec, "telemetry", None)
    hub = TelemetryHub(
        arms_from_spec(spec),
        getattr(tel, "interval_s", 1.0),
        nvml=getattr(tel, "nvml", True),
    )
    if not any(a.metrics_url or a.gpu_indices for a in hub.arms):
        return None
    for kind, text, arm in hub.start():
        writer.event(kind, text, arm=arm)
        say(text)
    hub.say = say
    return hub


def drain_into(hub: TelemetryHub | None, writer, live: list | None = None) -> None:
    """Move what the sampling threads gathered into the session writer's buffers; ``live``:
    the observer's per-arm progress, whose ``gauge(key, value)`` gets each reading (the
    latest gauges and their short history)."""
    if hub is None:
        return
    rows, msgs = hub.drain()
    if rows:
        writer.add_telemetry(rows)
    if live is not None:
        for arm, source, _, metric, value in rows:
            if arm is not None and 0 <= arm < len(live) and not metric.endswith(".delta"):
                live[arm].gauge(f"{source}:{metric}", value)
    for kind, text, arm in msgs:
        writer.event(kind, text, arm=arm)
        if hub.say is not None:
            hub.say(text)


def finish(hub: TelemetryHub | None, writer) -> None:
    """Stop sampling, store the last rows and what the sampler cost (meta ``telemetry``);
    ``writer`` None (the file can no longer be written): only stop."""
    if hub is None:
        return
    hub.stop(last_scrape=writer is not None)
    if writer is None:
        return
    drain_into(hub, writer)
    engines, resets = {}, {}
    for src in hub.sources:
        if isinstance(src, _ScrapeSource):
            engines[str(src.s.arm)] = sorted(src.s.engines)
            resets[str(src.s.arm)] = src.s.restarts
    writer.write_meta(
        telemetry={
            "interval_s": hub.interval_s,
            "cpu_s": round(hub.cpu_s, 4),
            "polls": hub.polls,
            "engines": engines,
            "counter_resets": resets,  # per arm: a server restarted during the run
            "nvml": any(isinstance(s, _NvmlSource) for s in hub.sources),
        }
    )
