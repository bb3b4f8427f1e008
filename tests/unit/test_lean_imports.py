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


def test_the_run_command_loads_neither_world_nor_the_ui():
    """``abtui run --headless``: the command line builds only the run command's parser (the
    others import the simulator's and the engine's options), and the run's modules load no
    Textual and no scipy.stats."""
    code = (
        "import abtui.cli\n"
        "args = abtui.cli.build_parser('run').parse_args(\n"
        "    ['run', '--baseline', 'http://127.0.0.1:1/v1', '--headless', '--concurrency', '4'])\n"
        "assert args.func is abtui.cli.cmd_run\n"
        "import abtui.headless, abtui.runner.session, abtui.report.console, abtui.verdict.saved"
    )
    names = ("abtui.sim", "abtui.engine", "abtui.demo", "textual", "scipy.stats")
    assert _loaded(code, names) == []
