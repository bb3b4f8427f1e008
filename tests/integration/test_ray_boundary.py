"""Without ``--ray`` nothing of Ray is imported: not by the core's modules, not by a
whole local run, its summary and its verdict. Runs with or without Ray installed."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import abtui
from abtui.sim.process import SimProcess

ROOT = Path(abtui.__file__).parent


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield node, [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node, [node.module]


def test_only_the_ray_package_imports_ray_and_only_launch_imports_its_actors():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        in_ray = rel.parts[:2] == ("runner", "ray")
        for node, names in _imports(path):
            for name in names:
                if name.split(".")[0] == "ray" and not in_ray:
                    bad.append(f"{rel}:{node.lineno}: {name}")
                if name in ("abtui.runner.ray.actor", "abtui.runner.ray.fleet") and not (
                    in_ray or str(rel) == "runner/launch.py"
                ):
                    bad.append(f"{rel}:{node.lineno}: {name}")
    assert not bad, bad


def test_a_local_run_its_summary_and_verdict_load_no_ray(tmp_path):
    with SimProcess(ttft_ms=2, itl_ms=1, seed=1) as a, SimProcess(ttft_ms=2, itl_ms=1, seed=2) as b:
        code = (
            "import sys\n"
            "from abtui.cli import main\n"
            f"rc = main(['run', '--baseline', {a.url!r}, '--candidate', {b.url!r}, "
            "'--requests', '6', '--rate', '20', '--input-tokens', '16', '--output-tokens', '4', "
            f"'--warmup', '1', '--name', 'noray', '--sessions-dir', {str(tmp_path)!r}, "
            "'--headless'])\n"
            "main(['report', " + repr(str(tmp_path / "noray.duckdb")) + ", '--format', 'md'])\n"
            "bad = sorted(k for k in sys.modules if k == 'ray' or k.startswith('ray.') "
            "or k.startswith('abtui.runner.ray.a') or k.startswith('abtui.runner.ray.f'))\n"
            "print('RAY:' + ','.join(bad))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
    assert "RAY:" in out.stdout, out.stderr[-2000:]
    assert out.stdout.rsplit("RAY:", 1)[1].strip() == "", out.stdout[-500:]
    assert (tmp_path / "noray.duckdb").exists()
