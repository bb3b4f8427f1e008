"""The house rules of docs/architecture.md, checked on the code as it is:

- the import contracts in pyproject.toml ([tool.importlinter]: the package ladder, the worlds
  the core never imports, Textual only in the TUI) hold — what ``lint-imports`` in .ci/run checks,
  here too so that a plain ``pytest`` catches a broken ladder;
- no import cycle at any level: between the top-level packages, between the sub-packages and
  modules of every package (a "file circle": a.py imports b.py, which imports a.py), counted
  with grimp over every import, also those inside functions and under TYPE_CHECKING;
- the code is as ``ruff format`` writes it, and every function stays under the McCabe
  complexity limit in pyproject.toml ([tool.ruff.lint.mccabe]): a function reads on one screen.
  A module's length alone is no rule;
- a result one part of abtui hands another is a record, not a dict: a function that returns a
  bare ``dict`` (or a list of them) builds a JSON or store document, and says so by its name
  (``to_dict``, ``…_doc``, ``…_json``), by its module (the session file, the workload files,
  the wire, the worlds) or in :data:`DOCUMENTS` with the document it builds.
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import abtui

grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the test extra)")

ROOT = Path(abtui.__file__).parent


def _graph():
    return grimp.build_graph("abtui", include_external_packages=False)


def _cycles(adj: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in adj:
        if root in index:
            continue
        work = [(root, iter(adj[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(adj.get(w, ()))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _child_of(package: str, module: str) -> str | None:
    """The direct child of ``package`` that ``module`` is or lies in (None: outside it, or the
    package's own ``__init__``)."""
    if not module.startswith(package + "."):
        return None
    return package + "." + module[len(package) + 1 :].split(".")[0]


def _cycles_by_package(graph) -> dict[str, list[list[str]]]:
    """For every package, the cycles among its direct children (sub-packages squashed)."""
    packages = {m for m in graph.modules if (ROOT.parent / m.replace(".", "/")).is_dir()}
    found = {}
    for pkg in sorted(packages):
        adj: dict[str, set[str]] = defaultdict(set)
        for m in graph.modules:
            a = _child_of(pkg, m)
            if a is None:
                continue
            adj.setdefault(a, set())
            for d in graph.find_modules_directly_imported_by(m):
                b = _child_of(pkg, d)
                if b is not None and b != a:
                    adj[a].add(b)
        cycles = _cycles(dict(adj))
        if cycles:
            found[pkg] = cycles
    return found


def test_import_contracts_hold():
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "importlinter.cli"]
    out = subprocess.run(
        [*cmd, "--no-cache"], capture_output=True, text=True, timeout=300, cwd=ROOT.parent
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "broken" not in out.stdout.lower().split("contracts:")[-1].split("kept")[0]


def test_no_import_cycle_at_any_level():
    found = _cycles_by_package(_graph())
    assert not found, "\n".join(f"{p}: {' ↔ '.join(c)}" for p, cs in found.items() for c in cs)


def test_the_cycle_finder_finds_cycles():
    # a -> b -> c -> a and d -> e -> d: two cycles; f alone is none
    adj = {"a": {"b"}, "b": {"c"}, "c": {"a", "f"}, "d": {"e"}, "e": {"d"}, "f": set()}
    assert sorted(_cycles(adj)) == [["a", "b", "c"], ["d", "e"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _ruff(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("ruff")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ruff"]
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, timeout=300, cwd=ROOT.parent
    )


def test_code_is_formatted():
    out = _ruff("format", "--check", "abtui", "tests", "scripts")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_every_function_reads_on_one_screen():
    out = _ruff("check", "--select", "C901", "--output-format", "concise", "abtui")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_test_modules_have_distinct_names():
    """The test folders have no ``__init__.py``, so pytest imports each module by its file name:
    two folders with the same name stop the whole collection ("import file mismatch")."""
    seen: dict[str, list[str]] = defaultdict(list)
    for p in (ROOT.parent / "tests").rglob("test_*.py"):
        seen[p.name].append(str(p.parent.name))
    assert {n: d for n, d in seen.items() if len(d) > 1} == {}


# Modules whose dicts are a file's or the wire's own format: the session file (store), the
# workload, trace and conversation files (workload), request bodies and messages (client), and
# the worlds that play or drive a server (sim, engine).
DOCUMENT_MODULES = (
    "abtui/store/",
    "abtui/workload/",
    "abtui/client/",
    "abtui/sim/",
    "abtui/engine/",
)
DOCUMENT_NAMES = ("to_dict", "as_dict", "to_json", "json_ready", "__getstate__")
DOCUMENT_SUFFIXES = ("_doc", "_json", "_dict")
# Elsewhere, every function that returns a bare dict, and the document it builds.
DOCUMENTS = {
    "abtui/cli/run.py:verdict_overrides": "the spec's policy overrides from the flags (spec JSON)",
    "abtui/demo.py:_hardware": "an arm's hardware entry in meta.arms",
    "abtui/hardware/host.py:host_fingerprint": "meta.host",
    "abtui/profile/stored.py:_roofline": "the roofline rows of meta.profile",
    "abtui/profile/stored.py:analyse_session": "meta.profile",
    "abtui/profile/writer.py:chrome_trace": "a Chrome trace file",
    "abtui/profile/writer.py:_x": "one event of a Chrome trace file",
    "abtui/quality/logprobs.py:collect": "meta.quality_logprobs",
    "abtui/quality/run.py:row": "a row of the quality table",
    "abtui/quality/run.py:_arm": "rows of the quality table",
    "abtui/quality/run.py:run_items": "rows of the quality table",
    "abtui/quality/run.py:main": "rows of the quality table",
    "abtui/quality/seqgate.py:_detail": "a quality row's stored detail, parsed",
    "abtui/quality/sizing.py:_props": "llama.cpp's /props answer",
    "abtui/quality/synthetic.py:rows": "rows of the quality table (test data)",
    "abtui/report/document.py:report_data": "the report's JSON document",
    "abtui/report/profile.py:_blocks": "the report JSON's profile blocks, one per sweep level",
    "abtui/runner/profiling.py:_analysed": "a window's analysed profile (meta.profiles)",
    "abtui/runner/profiling.py:_level_start": "an entry of meta.segments (the conductor's log)",
    "abtui/runner/ray/actor.py:where": "meta.ray's node entry",
    "abtui/runner/ray/clocks.py:per_node": "meta.ray's clock offsets",
    "abtui/runner/ray/fleet.py:meta": "meta.ray",
    "abtui/verdict/ablation.py:_flat": "a record's JSON (its to_dict)",
    "abtui/verdict/saved.py:_apply_overrides": "the spec's JSON with a report's overrides",
    "abtui/verdict/stored.py:reusable": "a stored verdict's JSON",
}


def _returns_bare_dicts(fn) -> bool:
    import ast
    import re

    ann = ast.unparse(fn.returns).replace(" ", "") if fn.returns else ""
    if ann:  # dict, dict | None, list[dict], tuple[..., dict], dict[K, dict]: a dict of no type
        return bool(re.search(r"(^|[\[,|])dict(\]|\||,|$)", ann))
    returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
    return any(isinstance(v, ast.Dict | ast.DictComp) for v in returns)


def _dict_returners() -> set[str]:
    import ast

    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).as_posix()
        if rel.startswith(DOCUMENT_MODULES):
            continue
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if fn.name in DOCUMENT_NAMES or fn.name.endswith(DOCUMENT_SUFFIXES):
                continue
            if _returns_bare_dicts(fn):
                found.add(f"{rel}:{fn.name}")
    return found


def test_results_are_records_and_dicts_are_documents():
    found = _dict_returners()
    new = sorted(found - set(DOCUMENTS))
    assert not new, (
        "these return a bare dict: return a frozen dataclass (a record), or name the document "
        f"they build (to_dict, …_doc, …_json) or list it in DOCUMENTS: {new}"
    )
    gone = sorted(set(DOCUMENTS) - found)
    assert not gone, f"DOCUMENTS lists functions that no longer return dicts: {gone}"


def test_the_dict_check_sees_a_dict_returned(tmp_path, monkeypatch):
    import ast

    src = (
        "def a() -> dict: ...\n"
        "def b() -> list[dict] | None: ...\n"
        "def c(): return {'x': 1}\n"
        "def d() -> dict[str, float]: ...\n"
        "def e() -> tuple[int, dict]: ...\n"
        "def f() -> dict[int, dict]: ...\n"
    )
    got = {f.name: _returns_bare_dicts(f) for f in ast.parse(src).body}
    assert got == {"a": True, "b": True, "c": True, "d": False, "e": True, "f": True}
