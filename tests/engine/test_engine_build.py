"""``abtui engine build``: the cache key, the cached fast path, the user's own binary, and the
messages when a tool or the source is missing. None of these compile anything; the compile
itself is exercised by .ci/run (which calls ``abtui engine build``) and tests/test_engine_real.py.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from abtui.cli import main
from abtui.engine import build


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(build.ENV_SERVER, raising=False)
    return tmp_path / "cache"


def _exe(path: Path, body: str = "echo 'version: 1 (test)'") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_cache_key_names_version_target_and_flags(cache):
    a = build.planned(machine="x86_64")
    assert a.folder.parent == cache / "abtui" / "engine"
    assert build.SOURCE_VERSION in a.folder.name and "x86-64-avx2" in a.folder.name
    assert "-DGGML_NATIVE=OFF" in a.flags and "-DGGML_AMX_INT8=OFF" in a.flags
    assert "-DLLAMA_USE_PREBUILT_UI=OFF" in a.flags  # nothing fetched at build time
    b = build.planned(("-DGGML_CUDA=ON",), machine="x86_64")
    assert b.folder != a.folder  # other flags, another build: never a stale reuse
    assert build.planned(machine="aarch64").target == "aarch64-generic"


def test_a_cached_build_is_instant_and_prints_its_path_last(cache, capsys, monkeypatch):
    b = build.planned()
    for t in build.TARGETS:
        _exe(b.folder / "bin" / t)
    (b.folder / "build-info.json").write_text(json.dumps({"version": "version: 1 (test)"}))
    monkeypatch.setenv("PATH", str(cache / "empty"))  # no cmake, no compiler: not needed
    assert main(["engine", "build"]) == 0
    out = capsys.readouterr()
    assert out.out.strip().splitlines()[-1] == str(b.server)
    assert build.server_binary() == b.server and build.quantize_binary() == b.quantize


def test_a_half_build_is_not_taken_for_a_cached_one(cache):
    b = build.planned()
    _exe(b.folder / "bin" / "llama-server")  # llama-quantize missing
    assert not b.ready and build.server_binary() is None
    with pytest.raises(build.BuildError, match="not built yet"):
        build.require_server()


def test_missing_cmake_or_compiler_is_named(cache, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(cache / "empty"))
    assert main(["engine", "build"]) != 0
    err = capsys.readouterr().err
    assert "cmake" in err and "C++17 compiler" in err and "apt install cmake g++" in err


def test_the_users_own_binary_wins(cache, tmp_path, capsys, monkeypatch):
    user = _exe(tmp_path / "gpu" / "llama-server")
    monkeypatch.setenv(build.ENV_SERVER, str(user))
    assert build.server_binary() == user
    assert build.quantize_binary() is None  # none next to it
    with pytest.raises(build.BuildError, match="llama-quantize"):
        build.require_quantize()
    _exe(user.with_name("llama-quantize"))
    assert build.quantize_binary() == user.with_name("llama-quantize")
    assert main(["engine", "build"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(user)


def test_a_bad_user_binary_is_named(cache, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(build.ENV_SERVER, str(tmp_path / "nope"))
    assert main(["engine", "build"]) == 2
    assert (
        f"{build.ENV_SERVER}={tmp_path / 'nope'} is not an executable file"
        in capsys.readouterr().err
    )


def test_a_source_without_the_server_is_refused(cache, tmp_path, capsys):
    src = tmp_path / "not-llama"
    src.mkdir()
    assert main(["engine", "build", "--source", str(src)]) != 0
    assert "holds no llama.cpp server source" in capsys.readouterr().err
    assert not build.planned().folder.exists()


def test_a_failed_compile_leaves_no_half_folder(cache, tmp_path, capsys):
    src = tmp_path / "broken"
    (src / "tools" / "server").mkdir(parents=True)
    (src / "tools" / "server" / "CMakeLists.txt").write_text("")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.14)\nproject(x)\n"
        'message(FATAL_ERROR "deliberately broken")\n'
    )
    assert main(["engine", "build", "--source", str(src)]) != 0
    err = capsys.readouterr().err
    assert "failed with exit code" in err and "deliberately broken" in err
    root = build.planned().folder.parent
    assert not build.planned().folder.exists()
    assert [p.name for p in root.iterdir()] == []  # the temporary build folder is gone too
    assert os.access(root, os.W_OK)


def test_models_into_a_folder_that_cannot_be_written_is_a_message_not_a_traceback(cache, capsys):
    assert main(["engine", "models", "/proc/abtui-no-such-folder"]) != 0
    err = capsys.readouterr().err
    assert "cannot write the models into /proc/abtui-no-such-folder" in err
    assert "Traceback" not in err


def test_a_server_that_exits_or_never_answers_is_named_with_its_log(tmp_path):
    """The start-up wait both engine servers share: a process that exits is reported with its
    exit code and log, one that never answers /health with the time it was given; neither is
    left running."""
    from abtui.engine.server import LlamaCppServer
    from abtui.engine.tinymodel import EngineError

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    dies = _exe(tmp_path / "dies", "echo 'bad model file' >&2; exit 3")
    srv = LlamaCppServer(model, binary=dies)
    with pytest.raises(
        EngineError, match=r"llama-server for m.gguf exited with code 3: .*bad model"
    ):
        srv.start()
    assert srv.proc.poll() == 3 and srv._log is None  # closed: log released

    mute = _exe(tmp_path / "mute", "echo loading; exec sleep 30")
    srv = LlamaCppServer(model, binary=mute, startup_timeout=0.3)
    with pytest.raises(EngineError, match=r"did not become healthy within 0.3 s"):
        srv.start()
    assert srv.proc.poll() is not None  # stopped, not left behind
