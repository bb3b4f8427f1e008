"""A GGUF file's key/value header, read without the ``gguf`` package.

:func:`gguf_info` scans the key/value section forward and returns the architecture, context
length and whether a chat template is present. The ``gguf`` package's reader parses every
vocabulary string into numpy views (19 s for Gemma 3's 262,144-token vocabulary on a 2-core VM);
this scan skips arrays by their length (~0.1 s).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

from abtui.errors import AbtuiError

# value type → struct format of the GGUF key/value section (8: string, 9: array)
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_MAX_STRING = 64 << 20  # a longer key or value means the header is broken


class GGUFError(AbtuiError):
    """A file is not a readable GGUF."""

    title = "gguf"


@dataclass(frozen=True, slots=True)
class GGUFInfo:
    """What a GGUF's header says about the model (arrays are given by their length)."""

    architecture: str
    context_length: int | None
    chat_template: bool
    name: str | None
    values: dict[str, object] = field(repr=False)

    def summary(self) -> dict:
        return {
            "architecture": self.architecture,
            "context_length": self.context_length,
            "chat_template": self.chat_template,
            "name": self.name,
        }


def gguf_info(path: str | Path) -> GGUFInfo:
    """Read a GGUF's key/value header: architecture, context length, chat template (or not)."""
    path = Path(path)
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            values = _read_kv(buf, path)
    except (OSError, ValueError) as e:  # ValueError: an empty file cannot be mapped
        raise GGUFError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    arch = values.get("general.architecture")
    if not isinstance(arch, str):
        raise GGUFError(f"{path} has no general.architecture", "is it a model GGUF?")
    ctx = values.get(f"{arch}.context_length")
    name = values.get("general.name")
    return GGUFInfo(
        architecture=arch,
        context_length=int(ctx) if isinstance(ctx, int) else None,
        chat_template=isinstance(values.get("tokenizer.chat_template"), str),
        name=name if isinstance(name, str) else None,
        values=values,
    )


def _read_kv(buf, path: Path) -> dict[str, object]:
    end = len(buf)
    pos = 0

    def take(fmt: str):
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > end:
            raise GGUFError(f"{path} ends inside its header", "the file is truncated")
        (v,) = struct.unpack_from(fmt, buf, pos)
        pos += size
        return v

    def string_span() -> tuple[int, int]:
        nonlocal pos
        n = take("<Q")
        if n > _MAX_STRING or pos + n > end:
            raise GGUFError(f"{path} has a broken string in its header", "the file is damaged")
        start, pos = pos, pos + n
        return start, n

    def string() -> str:
        start, n = string_span()
        return bytes(buf[start : start + n]).decode("utf-8", "replace")

    if end < 24 or buf[:4] != b"GGUF":
        raise GGUFError(f"{path} is not a GGUF file (no GGUF magic)", "give a .gguf model")
    pos = 4
    version = take("<I")
    if version not in (2, 3):
        raise GGUFError(f"{path} is GGUF version {version}; versions 2 and 3 are read")
    take("<Q")  # tensor count
    n_kv = take("<Q")
    values: dict[str, object] = {}
    for _ in range(n_kv):
        key = string()
        vtype = take("<I")
        if vtype == 8:
            values[key] = string()
        elif vtype in _SCALARS:
            values[key] = take(_SCALARS[vtype])
        elif vtype == 9:
            etype, count = take("<I"), take("<Q")
            if etype == 8:
                for _ in range(count):
                    string_span()
            elif etype in _SCALARS:
                pos += count * struct.calcsize(_SCALARS[etype])
                if pos > end:
                    raise GGUFError(f"{path} ends inside its header", "the file is truncated")
            else:
                raise GGUFError(f"{path}: {key} is an array of unknown type {etype}")
            values[key] = count
        else:
            raise GGUFError(f"{path}: {key} has unknown value type {vtype}")
    return values
