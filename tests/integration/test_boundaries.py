"""The core never loads the UI at run time, checked in a fresh interpreter. That no module outside
abtui/tui imports Textual at all, even inside a function, is an import contract
(pyproject.toml [tool.importlinter], checked by lint-imports and tests/unit/test_architecture.py)."""

import pkgutil
import subprocess
import sys

import abtui


def _core_modules() -> list[str]:
    mods = []
    for m in pkgutil.walk_packages(abtui.__path__, "abtui."):
        if m.name.startswith("abtui.tui") or m.name.endswith("__main__"):
            continue  # the UI itself; entry points that run on import
        if m.name == "abtui.runner.ray.actor":
            continue  # the Ray actor class: needs Ray (the `ray` extra); tests/integration/test_ray_boundary.py
        mods.append(m.name)
    return mods


def test_core_modules_do_not_load_textual():
    mods = _core_modules()
    assert "abtui.client.stream" in mods and "abtui.store.writer" in mods  # the walk found them
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(k for k in sys.modules if k == 'textual' or k.startswith('textual.'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"core modules loaded textual: {out.stdout}"


def test_package_init_is_lazy():
    code = "import sys, abtui; print(len([k for k in sys.modules if k.startswith('abtui.')]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "0"
