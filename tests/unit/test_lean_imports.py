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


def test_the_command_line_module_loads_no_run_modules():
    """A load generator started from the ``abtui`` script runs the script again (spawn), which
    imports ``abtui.cli``: that import loads no numpy, Rich, DuckDB or run command; each
    generator paid ~0.15 s of CPU for them."""
    names = ("numpy", "rich", "duckdb", "httpx", "abtui.cli.run", "abtui.spec", "abtui.store")
    assert _loaded("import abtui.cli", names) == []


def test_a_prestarted_generator_with_a_shipped_plan_loads_no_workload_builders(tmp_path):
    """A small workload's plan is shipped whole (abtui.runner.schedule): the generator that
    unpickles it (a prestarted one, abtui.runner.prestart) imports neither numpy nor the spec,
    nor the schedule that would rebuild it."""
    import pickle

    from abtui.client.items import Item
    from abtui.client.target import Target
    from abtui.runner.generator import ArmPlan
    from abtui.workload.segments import Segment

    items = [Item(index=k, id=str(k), prompt=f"p{k}", max_tokens=4) for k in range(8)]
    plan = ArmPlan(
        arm=0,
        target=Target(base_url="http://127.0.0.1:1/v1", model="m"),
        items=[],
        warmup_items=items[:2],
        mode="closed",
        concurrency=2,
        segments=[Segment(items, "closed", 2)],
    )
    (tmp_path / "plan.pickle").write_bytes(pickle.dumps(plan))
    code = (
        "import pickle, abtui.runner.prestart\n"
        "from abtui.runner import generator\n"
        "generator.preload()\n"
        f"plan = pickle.loads(open({str(tmp_path / 'plan.pickle')!r}, 'rb').read())\n"
        "assert plan.segments[0].items[3].prompt == 'p3'"
    )
    names = ("numpy", "abtui.spec", "abtui.runner.schedule", "abtui.workload.synthetic", "duckdb")
    assert _loaded(code, names) == []


def test_the_run_path_loads_no_profiler_and_no_quality_suites():
    """Without ``--profile`` and quality suites, the run's modules load neither the profile
    analysis nor the suites' scorers and clients (imported when used)."""
    code = (
        "import abtui.headless, abtui.runner.session, abtui.report.console\n"
        "from abtui.spec import spec_from_dict, validate\n"
        "arms = [{'name': n, 'url': 'http://127.0.0.1:9/v1'} for n in ('a', 'b')]\n"
        "validate(spec_from_dict({'arms': arms, 'load': {'concurrency': 2}}, 't.toml'), 't')"
    )
    names = ("abtui.profile.stored", "abtui.quality.run", "abtui.quality.sizing")
    assert _loaded(code, names) == []
