"""Operator and kernel classes: every name a trace holds falls in one class, by pattern.

The built-in table (:data:`BUILTIN`: case-insensitive regular expressions searched anywhere in
the name, checked in the table's order, the first match wins):

- ``gemm``: GEMM and GEMV (cuBLAS, CUTLASS, Marlin, MoE experts, oneDNN, ``aten::mm``…),
  and convolutions (cuDNN's are implicit GEMMs);
- ``attention``: attention kernels and the KV-cache writes that go with them;
- ``norm_elementwise``: norms, activations, rotary embeddings, activation quantisation,
  pointwise and reduction kernels;
- ``sampling``: softmax over the logits, top-k/top-p, sorting, sampling, penalties;
- ``communication``: collectives and point-to-point (NCCL, custom all-reduce, gloo, shm);
- ``memcpy``: copies and fills (every memcpy/memset activity, and copy kernels and operators);
- ``other``: everything else, and MoE routing (gating top-k, token sorting: neither the
  experts' GEMMs nor sampling).

``idle`` is no pattern's: it is the time in a step that no activity covers (launch gaps, host
overhead), computed from the timeline (:mod:`abtui.profile.analyse`).

A user's table (:func:`load_class_table`: the ``[profile.classes]`` section of a TOML file,
``class = ["pattern", …]``) is checked before the built-in one, so it can move a kernel to
another class or add a class of its own.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from abtui.profile.model import ProfileError

IDLE = "idle"
OTHER = "other"

_W = r"(?<![a-z0-9])"  # a name's word start (an underscore counts as a separator)
_E = r"(?![a-z0-9])"

# (class, patterns) in the order they are checked; a class may come back (sampling's sure names
# go before attention's, whose "flash" would take FlashInfer's samplers; its loose ones after)
BUILTIN: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "communication",
        (
            r"nccl",
            r"all_?reduce",
            r"all_?gather",
            r"reduce_?scatter",
            r"all_?to_?all",
            r"cross_device_reduce",
            r"custom_?ar",
            r"c10d",
            r"gloo",
            r"shm_(?:all|gather|reduce)",
            rf"{_W}(?:send|recv|sendrecv|broadcast){_E}",
        ),
    ),
    (
        "memcpy",
        (
            r"memcpy",
            r"memset",
            r"direct_copy",
            r"copy_kernel",
            r"aten::(?:copy_|_to_copy|to|clone|contiguous)$",
            r"copybuffer",  # ROCm's __amd_rocclr_copyBuffer
            rf"{_W}(?:dtoh|htod|dtod|d2h|h2d){_E}",
        ),
    ),
    # MoE routing (gating top-k, token sorting) is neither the experts' GEMMs nor sampling
    ("other", (r"moe_?align", r"moe_?sort", r"grouped_topk", r"topk_?gating", r"moe_?rout")),
    (
        "sampling",
        (
            r"sampl",
            r"multinomial",
            r"argmax",
            r"gumbel",
            r"penalt",
            r"top_?k_?top_?p",
            r"temperature",
            r"philox",
            r"exponential",
        ),
    ),
    (
        "attention",
        (
            r"attn",
            r"attention",
            r"flash",
            r"fmha",
            r"sdpa",
            r"scaled_dot_product",
            r"xformers",
            r"paged",
            r"_and_cache",
            r"kv_cache_update",  # vLLM's custom op around the KV-cache write
            rf"{_W}(?:mha|mla|gqa){_E}",
            r"_fwd_kernel",
        ),
    ),
    (
        "gemm",
        (
            r"gemm",
            r"gemv",
            r"cijk_",  # ROCm Tensile's GEMMs
            r"matmul",
            r"cublas",
            r"cutlass",
            r"nvjet",
            r"xmma",
            r"splitk",
            r"marlin",
            r"machete",
            r"scaled_mm",
            r"moe",
            r"onednn",
            r"mkldnn",
            r"dnnl",
            r"cudnn",  # cuDNN's convolutions are implicit GEMMs
            rf"{_W}conv(?:olution|1d|2d|3d)?{_E}",
            rf"{_W}(?:mm|bmm|addmm|baddbmm|mv|addmv|linear|dot){_E}",
        ),
    ),
    ("sampling", (r"softmax", r"sort", r"top_?[kp]", r"min_?p", r"logit", r"cumsum")),
    (
        "norm_elementwise",
        (
            r"norm",
            rf"{_W}rms",
            r"elementwise",
            r"vectorized",
            r"unrolled",
            r"silu",
            r"gelu",
            r"relu",
            r"swiglu",
            r"act_and_mul",
            r"activation",
            r"rotary",
            rf"{_W}rope{_E}",
            r"triton_(?:poi|red|per)_",
            r"reduce_kernel",
            r"catarray",
            r"fused_add",
            r"quant",
            rf"{_W}(?:add|mul|sub|div|neg|exp|pow|rsqrt|sqrt|tanh|sigmoid|where|fill|cat|mean"
            rf"|sum|clamp|abs|embedding|index|index_select|gather|scatter)_?{_E}",
        ),
    ),
)

LABELS = {
    "gemm": "GEMM/GEMV",
    "attention": "attention",
    "norm_elementwise": "norm + elementwise",
    "sampling": "sampling",
    "communication": "communication",
    "memcpy": "memcpy / memset",
    OTHER: "other",
    IDLE: "idle / launch gaps",
}
# the order reports show the classes in (the table's own order is the matching order)
BUILTIN_KEYS = ("gemm", "attention", "norm_elementwise", "sampling", "communication", "memcpy")
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


@dataclass(frozen=True)
class ClassTable:
    """Patterns in the order they are checked: ``(class, compiled pattern)``."""

    rules: tuple[tuple[str, re.Pattern[str]], ...]
    order: tuple[str, ...]  # every class, in the order reports show them (``other`` last)

    def label(self, key: str) -> str:
        return LABELS.get(key, key)


def _compile(pattern: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as e:
        raise ProfileError(
            f"{where}: the pattern {pattern!r} is not a regular expression ({e})",
            "patterns are Python regular expressions, searched in the name, case-insensitive",
        ) from None


def class_table(extra: dict[str, list[str]] | None = None, where: str = "classes") -> ClassTable:
    """The built-in table, after ``extra`` (class → patterns) when given."""
    rules: list[tuple[str, re.Pattern[str]]] = []
    user: list[str] = []
    for key, patterns in (extra or {}).items():
        user.append(key)
        rules += [(key, _compile(p, f"{where}.{key}")) for p in patterns]
    for key, patterns in BUILTIN:
        rules += [(key, re.compile(p, re.IGNORECASE)) for p in patterns]
    known = [*BUILTIN_KEYS, *(k for k in user if k not in BUILTIN_KEYS)]
    return ClassTable(tuple(rules), (*dict.fromkeys(known), OTHER))


DEFAULT = class_table()


class Classifier:
    """``classify(name, kind)`` with a cache: a trace names the same kernels many times."""

    def __init__(self, table: ClassTable = DEFAULT) -> None:
        self.table = table
        self._cache: dict[tuple[str, str], str] = {}

    def classify_activity(self, name: str, kind: str, parents: tuple[str, ...] = ()) -> str:
        """An operator no pattern names (``other``) takes its nearest enclosing operator's
        class: ``aten::t`` and ``aten::copy_`` inside ``aten::linear`` are GEMM time, the
        checks inside ``aten::multinomial`` sampling time."""
        cls = self.classify(name, kind)
        for parent in parents if cls == OTHER else ():
            up = self.classify(parent, "op")
            if up != OTHER:
                return up
        return cls

    def classify(self, name: str, kind: str = "kernel") -> str:
        key = (name, kind)
        found = self._cache.get(key)
        if found is None:
            found = self._match(name, kind)
            self._cache[key] = found
        return found

    def _match(self, name: str, kind: str) -> str:
        for cls, pattern in self.table.rules:
            if pattern.search(name):
                return cls
        return "memcpy" if kind in ("memcpy", "memset") else OTHER


def load_class_table(path: str | Path) -> ClassTable:
    """The ``[profile.classes]`` section of a TOML file (a spec file, or a file of its own):
    each key a class name (``[a-z][a-z0-9_]*``), each value a list of patterns."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ProfileError(f"{p}: cannot read the class table ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{p}: the class table is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{p}: not valid TOML ({e})") from None
    section = data.get("profile", {})
    classes = section.get("classes") if isinstance(section, dict) else None
    if not isinstance(classes, dict):
        raise ProfileError(
            f"{p}: no [profile.classes] table",
            'e.g. [profile.classes] then gemm = ["my_fp4_kernel"]',
        )
    return table_from_dict(classes, f"{p}: profile.classes")


def table_from_dict(classes: dict, where: str) -> ClassTable:
    """The class table of a ``[profile.classes]`` table already read (class → patterns),
    checked: ``where`` names it in every message."""
    extra: dict[str, list[str]] = {}
    for key, patterns in classes.items():
        at = f"{where}.{key}"
        if not isinstance(key, str) or not _NAME.fullmatch(key) or key == IDLE:
            raise ProfileError(
                f"{at}: a class name is lower-case letters, digits and _ (not 'idle')"
            )
        if not isinstance(patterns, list) or not all(isinstance(x, str) for x in patterns):
            raise ProfileError(f"{at}: give a list of patterns (strings)")
        extra[key] = patterns
    return class_table(extra, where)
