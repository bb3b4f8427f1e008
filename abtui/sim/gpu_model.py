"""The simulated GPU's gauges: activity of the step in flight, power and energy.

:class:`SimulatedGpu` is told each step's bytes, FLOPs and times by the batching engine and
answers what a DCGM exporter would show, all *simulated*:

- DRAM activity = step bytes / (peak bandwidth × step time); tensor activity = step FLOPs /
  (peak matmul FLOP/s × step time); SM activity = kernel time / step time (the rest is launch
  and scheduling overhead); all of the step in flight, 0 when the engine is idle;
- power = idle + (TDP − idle) × max(DRAM activity, tensor activity), per GPU;
- energy = Σ power × simulated step time, plus idle power over the simulated idle time;
- memory used = weights + activation reserve + the KV cache in use (vLLM preallocates the whole
  pool, so a real DCGM shows it constant; the sim shows what is in use).
"""

from __future__ import annotations

from abtui.hardware import roofline as rl
from abtui.sim.presets import Preset


class SimulatedGpu:
    """One GPU of a replica (every tensor-parallel rank behaves alike)."""

    def __init__(self, preset: Preset, time_scale: float, fixed_bytes: float) -> None:
        g = preset.gpu
        self.gpu = g
        self.tp = preset.tp
        self._peak_flops = g.flops_for(rl.matmul_dtype(g, preset.weight_dtype))
        self._scale = time_scale
        self.fixed_bytes = fixed_bytes  # weights + activation reserve, per GPU
        self.step = (0.0, 0.0, 0.0, 0.0)  # bytes, FLOPs, time (s), kernel time of the step
        self.energy_j = 0.0  # over simulated busy time
        self.busy_s = 0.0  # simulated seconds spent in steps
        self.t0 = 0.0  # engine clock at start

    def activity(self) -> tuple[float, float, float]:
        """(DRAM, tensor, SM) activity of the latest planned step."""
        nbytes, flops, t, kernels = self.step
        if t <= 0:
            return 0.0, 0.0, 0.0
        dram = min(1.0, nbytes / (self.gpu.mem_bw * t))
        return dram, min(1.0, flops / (self._peak_flops * t)), min(1.0, kernels / t)

    def power(self, dram: float, tensor: float) -> float:
        g = self.gpu
        return g.idle_w + (g.tdp_w - g.idle_w) * max(dram, tensor)

    def step_done(self, t_sim: float) -> None:
        dram, tensor, _ = self.activity()
        self.energy_j += self.power(dram, tensor) * t_sim
        self.busy_s += t_sim

    def gauges(self, busy: bool, now: float, kv_bytes_used: float) -> dict:
        """The EngineStats GPU fields at engine time ``now``."""
        dram, tensor, sm = self.activity() if busy else (0.0, 0.0, 0.0)
        idle = max(0.0, (now - self.t0) * self._scale - self.busy_s)
        return {
            "gpu_count": self.tp,
            "gpu_memory_used_bytes": int(self.fixed_bytes + kv_bytes_used),
            "gpu_memory_total_bytes": self.gpu.memory_bytes,
            "dram_active": dram,
            "sm_active": sm,
            "power_w": self.power(dram, tensor),
            "energy_j_total": self.energy_j + self.gpu.idle_w * idle,
        }
