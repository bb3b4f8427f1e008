"""The simulated GPU's gauges: activity averaged over a window, power and energy.

:class:`SimulatedGpu` is told each step's bytes, FLOPs and times by the batching engine and
answers what a DCGM exporter would show, all *simulated*. Per step (simulated seconds):

- DRAM activity = step bytes / (peak bandwidth × step time) — the step's MBU; tensor activity =
  step FLOPs / (peak matmul FLOP/s × step time) — its MFU; SM activity = kernel time / step
  time (the rest is launch and scheduling overhead);
- power = idle + (TDP − idle) × max(DRAM activity, tensor activity), per GPU.

A gauge is what DCGM reports: the average over its sampling window, not the step in flight.
The window is the last :data:`GAUGE_WINDOW_S` seconds of the endpoint's clock (the scrape
interval of abtui and of a typical dcgm-exporter setup is 1 s or more): each step contributes
its activity × the part of it inside the window, idle time contributes 0 (idle power), so a
scrape that lands in one long prefill chunk of a decode-dominated run shows the run's DRAM
activity (tens of percent), not that chunk's few percent. When the engine clock lags the
event loop (due steps not yet run), the window ends where the engine is, not at the loop's
time, so the lag does not read as idle.

- energy = Σ power × simulated step time, plus idle power over the simulated idle time;
- memory used = weights + activation reserve + the KV cache in use (vLLM preallocates the whole
  pool, so a real DCGM shows it constant; the sim shows what is in use).
"""

from __future__ import annotations

from collections import deque

from abtui.hardware import roofline
from abtui.sim.presets import Preset

GAUGE_WINDOW_S = 1.0  # endpoint seconds the activity and power gauges average over
_SPANS_PER_WINDOW = 50  # consecutive steps merge into spans of >= window / 50 (bounded memory)


class SimulatedGpu:
    """One GPU of a replica (every tensor-parallel rank behaves alike).

    Time arguments (``start``, ``now``) are the engine clock, endpoint seconds; step times
    (``t``, ``kernels``) are simulated seconds (endpoint seconds × time scale).
    """

    def __init__(
        self,
        preset: Preset,
        time_scale: float,
        fixed_bytes: float,
        window_s: float = GAUGE_WINDOW_S,
    ) -> None:
        g = preset.gpu
        self.gpu = g
        self.tp = preset.tp
        self._peak_flops = g.flops_for(roofline.matmul_dtype(g, preset.weight_dtype))
        self._scale = time_scale
        self.window_s = window_s
        self.fixed_bytes = fixed_bytes  # weights + activation reserve, per GPU
        self.step = (0.0, 0.0, 0.0, 0.0)  # bytes, FLOPs, time (s), kernel time of the step
        self._span = (0.0, 0.0)  # engine-clock start and end of the step planned last
        self._inflight = False  # planned and not yet done
        # finished steps, merged while contiguous: [start, end, bytes, FLOPs, kernel s, energy J]
        self._spans: deque[list[float]] = deque()
        self.energy_j = 0.0  # over simulated busy time
        self.busy_s = 0.0  # simulated seconds spent in steps
        self.t0 = 0.0  # engine clock at start

    def activity(self) -> tuple[float, float, float]:
        """(DRAM, tensor, SM) activity of the latest planned step (not a gauge: see
        :meth:`gauges`)."""
        nbytes, flops, t, kernels = self.step
        if t <= 0:
            return 0.0, 0.0, 0.0
        dram = min(1.0, nbytes / (self.gpu.mem_bw * t))
        return dram, min(1.0, flops / (self._peak_flops * t)), min(1.0, kernels / t)

    def power(self, dram: float, tensor: float) -> float:
        g = self.gpu
        return g.idle_w + (g.tdp_w - g.idle_w) * max(dram, tensor)

    def plan(self, start: float, duration: float, step: tuple[float, float, float, float]) -> None:
        """A step of ``(bytes, FLOPs, time, kernel time)`` runs from ``start`` for
        ``duration`` (engine clock)."""
        self.step = step
        self._span = (start, start + duration)
        self._inflight = True

    def step_done(self, t_sim: float) -> None:
        dram, tensor, _ = self.activity()
        energy = self.power(dram, tensor) * t_sim
        self.energy_j += energy
        self.busy_s += t_sim
        self._inflight = False
        nbytes, flops, _, kernels = self.step
        start, end = self._span
        spans = self._spans
        last = spans[-1] if spans else None
        if (
            last is not None
            and abs(last[1] - start) <= 1e-9
            and last[1] - last[0] < self.window_s / _SPANS_PER_WINDOW
        ):
            last[1] = end
            last[2] += nbytes
            last[3] += flops
            last[4] += kernels
            last[5] += energy
        else:
            spans.append([start, end, nbytes, flops, kernels, energy])
        while spans and spans[0][1] < end - 2 * self.window_s:
            spans.popleft()

    def window(self, busy: bool, now: float) -> tuple[float, float, float, float]:
        """(DRAM, tensor, SM activity, power) averaged over the window ending at ``now``."""
        end = now
        parts = list(self._spans)
        if self._inflight:
            start, stop = self._span
            end = min(now, stop)
            nbytes, flops, t, kernels = self.step
            dram, tensor, _ = self.activity()
            parts.append([start, stop, nbytes, flops, kernels, self.power(dram, tensor) * t])
        elif busy and parts:  # between steps that are due: the engine is at the last end
            end = min(now, parts[-1][1])
        lo = max(end - self.window_s, self.t0)
        width = end - lo
        if width <= 0:
            return 0.0, 0.0, 0.0, self.gpu.idle_w
        nbytes = flops = kernels = energy = busy_sim = 0.0
        for start, stop, b, f, k, e in parts:
            overlap = min(stop, end) - max(start, lo)
            if overlap <= 0:
                continue
            frac = overlap / (stop - start)
            nbytes, flops, kernels, energy = (
                nbytes + frac * b,
                flops + frac * f,
                kernels + frac * k,
                energy + frac * e,
            )
            busy_sim += overlap * self._scale
        t = width * self._scale  # simulated seconds of the window
        g = self.gpu
        power = (energy + g.idle_w * max(0.0, t - busy_sim)) / t
        return (
            min(1.0, nbytes / (g.mem_bw * t)),
            min(1.0, flops / (self._peak_flops * t)),
            min(1.0, kernels / t),
            power,
        )

    def gauges(self, busy: bool, now: float, kv_bytes_used: float) -> dict:
        """The EngineStats GPU fields at engine time ``now`` (``busy``: the engine has steps
        to run, so a gap after the last one is lag, not idle time)."""
        dram, tensor, sm, power = self.window(busy, now)
        idle = max(0.0, (now - self.t0) * self._scale - self.busy_s)
        return {
            "gpu_count": self.tp,
            "gpu_memory_used_bytes": int(self.fixed_bytes + kv_bytes_used),
            "gpu_memory_total_bytes": self.gpu.memory_bytes,
            "dram_active": dram,
            "tensor_active": tensor,
            "sm_active": sm,
            "power_w": power,
            "energy_j_total": self.energy_j + self.gpu.idle_w * idle,
        }
