"""The core never imports the UI (STYLE.md practice 1), checked in a fresh interpreter."""

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
            continue  # the Ray actor class: needs Ray (the `ray` extra); tests/test_ray_boundary.py
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


def test_no_module_outside_the_tui_imports_textual_even_lazily():
    """The fresh-interpreter check above sees only what loads at import time; an import inside
    a function (abtui/cli.py's --web server used to import textual_serve) escapes it. Every
    import statement outside abtui/tui/, at any depth, is read here: none may name textual or
    textual_serve (launching the UI goes through abtui.tui's own modules)."""
    import ast
    from pathlib import Path

    root = Path(abtui.__file__).parent
    bad, files = [], 0
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == "tui":
            continue
        files += 1
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in ("textual", "textual_serve"):
                    bad.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
    assert files > 50  # the walk found the core
    assert not bad, bad
