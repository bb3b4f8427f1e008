"""What every child process abtui starts (the simulator, llama-server) runs before it execs:
die with its parent, optionally pinned to one CPU.

Used as ``preexec_fn`` by :class:`abtui.sim.process.SimProcess` and
:class:`abtui.engine.server.LlamaCppServer`, so that a killed test or benchmark never leaves an
endpoint serving behind it.
"""

from __future__ import annotations

import os
import signal
import sys


def child_setup(parent_pid: int, cpu: int | None) -> None:  # pragma: no cover - in the child
    """Ask the kernel to SIGTERM this (child) process when ``parent_pid`` dies, and pin it to
    ``cpu`` when given (Linux; elsewhere only the pin, where the OS has it)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the parent
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
