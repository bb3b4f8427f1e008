"""What a process loads at its start, checked in a fresh interpreter: every module imported
costs CPU before the first request (a load generator process) or before the run starts (the
command line). The figures are in docs/reliability.md (scripts/bench_run_edges.py)."""

from __future__ import annotations

import subprocess
import sys


def _loaded(code: str, names: tuple[str, ...]) -> list[str]:
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {names!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return [m for m in out.stdout.strip().split(",") if m]


def test_a_load_generator_does_not_import_httpx():
    """The generator's default client is the fast one: httpx (with the rich and click its
    command line imports) only on ``request.http = "httpx"``."""
    code = "import abtui.runner.generator, abtui.runner.schedule, abtui.client.preconnect"
    assert _loaded(code, ("httpx", "httpcore", "rich", "click", "abtui.client.stream")) == []
