"""The machine abtui runs on, as benchmark headers and session files name it."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (Linux: ``/proc/cpuinfo``), else what ``platform`` says, else "?".
    Timing figures depend on it (an AMX-capable Xeon crashed a llama.cpp build an EPYC ran)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"
