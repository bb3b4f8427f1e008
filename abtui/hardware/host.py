"""The machine abtui runs on, as benchmark headers and session files name it."""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata
from pathlib import Path

VERSIONS_OF = ("abtui", "httpx", "duckdb", "numpy", "scipy")  # the packages a session names


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


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def host_fingerprint() -> dict:
    """Where a session ran, as ``meta.host`` stores it and the report's overview reads it:
    host name, platform, machine, Python, the CPU count and model, and the versions of the
    packages that matter."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu": cpu_model(),
        "versions": {d: _version(d) for d in VERSIONS_OF},
    }
