"""Build llama.cpp's C++ server (``llama-server``) and ``llama-quantize`` once, into the cache.

The source is the llama.cpp tree that the ``llama-cpp-python`` sdist vendors
(``vendor/llama.cpp``), fetched with pip from the package index the user already trusts, so no
binary and no source comes from anywhere else. It is compiled for a portable target (x86-64:
AVX2, FMA, F16C; no AVX-512, no AMX), not ``-march=native``: a native build made on one CPU
crashed on another (docs/engine.md), and a cached binary must survive a move to a new VM.

The binaries land in ``<cache>/abtui/engine/<key>/bin``, where the key names the source package
version, the target and a hash of every CMake flag, so a different flag set is a different
folder and a cached build is never reused for flags it was not made with. A finished build is
moved into place in one rename; a build that fails or is interrupted leaves no half folder.

``ABTUI_LLAMA_SERVER=/path/to/llama-server`` uses a binary of the user's own instead (a CUDA
build on a GPU box); ``llama-quantize`` is then looked for next to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from abtui.errors import AbtuiError

SOURCE_PACKAGE = "llama-cpp-python"
SOURCE_VERSION = "0.3.36"
# llama-perplexity: the prompt-perplexity path for llama.cpp arms (llama-server scores no prompt)
TARGETS = ("llama-server", "llama-quantize", "llama-perplexity")
ENV_SERVER = "ABTUI_LLAMA_SERVER"

# Everything off that needs the network or is not needed: the web UI (its prebuilt assets would
# be fetched from a model hub), HTTPS (loopback only), tests, examples.
_COMMON_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
    "-DGGML_CCACHE=OFF",
    "-DGGML_NATIVE=OFF",
)
_X86_FLAGS = (
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_AVX512=OFF",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
)


class BuildError(AbtuiError):
    """The engine could not be found or built."""


@dataclass(frozen=True, slots=True)
class Build:
    """Where one build's binaries are (or will be), and what made them."""

    folder: Path
    target: str
    flags: tuple[str, ...]

    @property
    def server(self) -> Path:
        return self.folder / "bin" / "llama-server"

    @property
    def quantize(self) -> Path:
        return self.folder / "bin" / "llama-quantize"

    @property
    def ready(self) -> bool:
        return all(os.access(self.folder / "bin" / t, os.X_OK) for t in TARGETS)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "abtui" / "engine"


def target_flags(machine: str | None = None) -> tuple[str, tuple[str, ...]]:
    """(target name, CMake flags) for this machine's architecture."""
    machine = (machine or platform.machine()).lower()
    if machine in ("x86_64", "amd64"):
        return "x86-64-avx2", _COMMON_FLAGS + _X86_FLAGS
    return f"{machine}-generic", _COMMON_FLAGS


def planned(extra_flags: tuple[str, ...] = (), machine: str | None = None) -> Build:
    """The build for these flags: its folder is keyed by source version, target and flags."""
    target, flags = target_flags(machine)
    flags = flags + tuple(extra_flags)
    digest = hashlib.sha256("\n".join(flags).encode()).hexdigest()[:10]
    key = f"llama.cpp-{SOURCE_PACKAGE}-{SOURCE_VERSION}-{target}-{digest}"
    return Build(cache_root() / key, target, flags)


def _user_binary() -> Path | None:
    raw = os.environ.get(ENV_SERVER, "").strip()
    if not raw:
        return None
    path = Path(raw).expanduser()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BuildError(
            f"{ENV_SERVER}={raw} is not an executable file",
            "point it at a llama-server binary, or unset it to use abtui's own build "
            "(abtui engine build)",
        )
    return path


def server_binary(extra_flags: tuple[str, ...] = ()) -> Path | None:
    """The llama-server to run: the user's (``ABTUI_LLAMA_SERVER``), else the cached build,
    else None (call :func:`build`)."""
    user = _user_binary()
    if user is not None:
        return user
    b = planned(extra_flags)
    return b.server if b.ready else None


def tool_binary(name: str) -> Path | None:
    """A llama.cpp tool (``llama-quantize``, ``llama-perplexity``) next to the user's server,
    else the cached build's, else None."""
    user = _user_binary()
    if user is not None:
        q = user.with_name(name)
        return q if q.is_file() and os.access(q, os.X_OK) else None
    b = planned()
    return b.folder / "bin" / name if b.ready else None


def quantize_binary() -> Path | None:
    """``llama-quantize`` next to the user's server, else the cached build's, else None."""
    return tool_binary("llama-quantize")


def require_server() -> Path:
    path = server_binary()
    if path is None:
        raise BuildError(
            "llama.cpp's llama-server is not built yet",
            f"run `abtui engine build` once (about 10-15 min on 2 cores), or set {ENV_SERVER}",
        )
    return path


def require_tool(name: str) -> Path:
    path = tool_binary(name)
    if path is None:
        where = "next to $" + ENV_SERVER if os.environ.get(ENV_SERVER) else "in the cache"
        raise BuildError(
            f"llama.cpp's {name} is not found {where}",
            f"run `abtui engine build` once (it builds {', '.join(TARGETS)})",
        )
    return path


def require_quantize() -> Path:
    return require_tool("llama-quantize")


def _tools_missing() -> list[str]:
    missing = []
    if shutil.which("cmake") is None:
        missing.append("cmake")
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        missing.append("a C++17 compiler (g++ or clang++)")
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        missing.append("a C compiler (gcc or clang)")
    return missing


def _run(argv: list[str], log: Callable[[str], None], cwd: Path | None = None) -> None:
    log("$ " + " ".join(argv))
    proc = subprocess.run(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise BuildError(
            f"`{' '.join(argv[:3])} …` failed with exit code {proc.returncode}:\n{tail}",
            "the full command is printed above; fix what it says and run `abtui engine build` again",
        )


def _fetch_source(work: Path, source: Path | None, log: Callable[[str], None]) -> Path:
    """The vendored llama.cpp folder, from ``source`` (an sdist .tar.gz or an unpacked tree)
    or from the package index through pip."""
    if source is None:
        dl = work / "sdist"
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"{SOURCE_PACKAGE}=={SOURCE_VERSION}",
                "-d",
                str(dl),
            ],
            log,
        )
        found = sorted(dl.glob("*.tar.gz"))
        if not found:
            raise BuildError(
                f"pip downloaded no sdist of {SOURCE_PACKAGE}=={SOURCE_VERSION}",
                "check that pip can reach your package index",
            )
        source = found[0]
    source = Path(source)
    if source.is_dir():
        tree = source / "vendor" / "llama.cpp" if (source / "vendor").is_dir() else source
    else:
        log(f"unpacking {source.name}")
        with tarfile.open(source) as tf:
            tf.extractall(work / "src", filter="data")
        roots = [p for p in (work / "src").iterdir() if p.is_dir()]
        if len(roots) != 1:
            raise BuildError(f"{source} is not a {SOURCE_PACKAGE} sdist", "pass its .tar.gz")
        tree = roots[0] / "vendor" / "llama.cpp"
    if not (tree / "tools" / "server" / "CMakeLists.txt").is_file():
        raise BuildError(
            f"{tree} holds no llama.cpp server source (tools/server)",
            f"pass a {SOURCE_PACKAGE} sdist or a llama.cpp checkout",
        )
    return tree


def build(
    *,
    extra_flags: tuple[str, ...] = (),
    source: Path | None = None,
    jobs: int | None = None,
    force: bool = False,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> Build:
    """Build (or find cached) llama-server and llama-quantize; returns the :class:`Build`."""
    b = planned(extra_flags)
    if b.ready and not force:
        return b
    missing = _tools_missing()
    if missing:
        raise BuildError(
            f"building llama.cpp needs {', '.join(missing)}, not found on PATH",
            "install them (Debian/Ubuntu: apt install cmake g++; Fedora: dnf install cmake gcc-c++; "
            "macOS: xcode-select --install && brew install cmake)",
        )
    b.folder.parent.mkdir(parents=True, exist_ok=True)
    jobs = jobs or max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".build-", dir=b.folder.parent) as tmp:
        work = Path(tmp)
        tree = _fetch_source(work, source, log)
        bdir = work / "build"
        _run(["cmake", "-S", str(tree), "-B", str(bdir), *b.flags], log)
        _run(["cmake", "--build", str(bdir), "--target", *TARGETS, "-j", str(jobs)], log)
        stage = work / "out"
        (stage / "bin").mkdir(parents=True)
        for t in TARGETS:
            shutil.copy2(bdir / "bin" / t, stage / "bin" / t)
        version = subprocess.run(
            [str(stage / "bin" / "llama-server"), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        info = {
            "source": f"{SOURCE_PACKAGE}=={SOURCE_VERSION} (vendor/llama.cpp)",
            "target": b.target,
            "flags": list(b.flags),
            "version": (version.stdout + version.stderr).strip(),
            "built_s": round(time.monotonic() - t0, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (stage / "build-info.json").write_text(json.dumps(info, indent=1) + "\n")
        if b.folder.exists():  # a forced rebuild, or a broken earlier one
            shutil.rmtree(b.folder)
        stage.rename(b.folder)
    log(f"built llama-server in {time.monotonic() - t0:.0f} s")
    return b


def build_info(b: Build) -> dict:
    try:
        return json.loads((b.folder / "build-info.json").read_text())
    except (OSError, ValueError):
        return {}
