"""The batching engine (in progress): see :mod:`abtui.sim.engine_stats` for its stats."""

from __future__ import annotations

from abtui.sim.engine_stats import EngineStats, Histogram

__all__ = ["EngineStats", "Histogram"]
