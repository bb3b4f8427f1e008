"""Two simulated H100s for the ``abtui run --profile`` tests: BF16 (the baseline) and FP8
weights, time-scaled ×8, each with its profiler on, writing its traces under
``folder/traces/bf16`` and ``folder/traces/fp8``."""

from __future__ import annotations

from pathlib import Path

from abtui.sim.engine import SimConfig
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.profiler import ProfilerConfig

BF16, FP8 = "h100:llama-3-8b:bf16", "h100:llama-3-8b:fp8"


def profiled_sim_configs(folder: Path) -> list[SimConfig]:
    """The BF16 and FP8 simulators' configurations, in that order."""
    return [
        SimConfig(
            preset=PresetOptions(p, time_scale=8.0),
            profiler=ProfilerConfig(str(folder / "traces" / name), detailed=True),
        )
        for p, name in ((BF16, "bf16"), (FP8, "fp8"))
    ]
