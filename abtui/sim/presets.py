"""Preset strings: which GPU, model and variant the simulator models.

Grammar (fields separated by ``:``, case-insensitive)::

    GPU:MODEL:WEIGHTS[:kv=KV][:tp=N][:spec=kKaA]

- ``GPU``: a name from :mod:`abtui.hardware.gpus` (``h100``, ``h200``, ``a100``, ``l40s``,
  ``l4``, ``b200``, …);
- ``MODEL``: a name from :mod:`abtui.hardware.models` (``llama-3-8b``, ``llama-3-70b``,
  ``mistral-7b``, ``qwen2.5-7b``, …), or any label when ``--model-config config.json`` gives
  the shape;
- ``WEIGHTS``: ``bf16`` | ``fp8`` | ``int4`` (weight-only, group-128 scales);
- ``kv=bf16|fp8``: KV-cache dtype (default bf16);
- ``tp=N``: tensor-parallel degree, 1, 2, 4 or 8 (default 1);
- ``spec=kKaA``: speculative decoding with draft length K and per-token acceptance rate A,
  e.g. ``spec=k4a0.7``.

Examples: ``h100:llama-3-8b:fp8``, ``h200:llama-3-70b:bf16:tp=4``,
``h100:llama-3-8b:bf16:spec=k4a0.7``, ``l40s:mistral-7b:int4:kv=fp8``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from abtui.errors import UsageError
from abtui.hardware.gpus import GpuSpec, get_gpu
from abtui.hardware.models import ModelConfig, get_model, load_hf_config

WEIGHT_DTYPES = ("bf16", "fp8", "int4")
KV_DTYPES = ("bf16", "fp8")
TP_DEGREES = (1, 2, 4, 8)
GRAMMAR = "GPU:MODEL:WEIGHTS[:kv=bf16|fp8][:tp=1|2|4|8][:spec=kKaA]"
_SPEC = re.compile(r"k(\d+)a(0(?:\.\d+)?|1(?:\.0*)?|\.\d+)")


@dataclass(frozen=True)
class Preset:
    """One simulated deployment: a GPU, a model and the variant that is served."""

    gpu: GpuSpec
    model: ModelConfig
    weight_dtype: str  # "bf16" | "fp8" | "int4"
    kv_dtype: str  # "bf16" | "fp8"
    tp: int = 1
    spec_k: int = 0  # draft tokens per step; 0 = no speculative decoding
    spec_alpha: float = 0.0  # probability that each draft token is accepted

    @property
    def name(self) -> str:
        """The canonical preset string (parses back to an equal preset)."""
        out = f"{self.gpu.name}:{self.model.name}:{self.weight_dtype}"
        if self.kv_dtype != "bf16":
            out += f":kv={self.kv_dtype}"
        if self.tp != 1:
            out += f":tp={self.tp}"
        if self.spec_k:
            out += f":spec=k{self.spec_k}a{self.spec_alpha:g}"
        return out


def _bad(text: str, what: str, hint: str) -> UsageError:
    return UsageError(f"--preset {text!r}: {what}", f"{hint}; the grammar is {GRAMMAR}")


def parse_preset(text: str, model_config: str | None = None) -> Preset:
    """The :class:`Preset` of ``text``; ``model_config`` (a config.json path) gives the model's
    shape, the MODEL field then only names it. Raises ``UsageError`` naming what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise _bad(str(text), "empty", "give e.g. h100:llama-3-8b:fp8")
    parts = [p.strip() for p in text.strip().lower().split(":")]
    if len(parts) < 3:
        raise _bad(text, "needs at least GPU:MODEL:WEIGHTS", "give e.g. h100:llama-3-8b:bf16")
    try:
        gpu = get_gpu(parts[0])
        if model_config:
            model = load_hf_config(model_config, name=parts[1] or None)
        else:
            model = get_model(parts[1])
    except UsageError as exc:
        raise UsageError(f"--preset {text!r}: {exc.message}", exc.hint) from None
    weights = parts[2]
    if weights not in WEIGHT_DTYPES:
        raise _bad(text, f"unknown weight dtype {weights!r}", f"choose {'/'.join(WEIGHT_DTYPES)}")
    kv, tp, spec_k, spec_alpha = "bf16", 1, 0, 0.0
    seen: set[str] = set()
    for part in parts[3:]:
        key, eq, value = part.partition("=")
        if not eq or key in seen:
            why = f"repeated option {key!r}" if eq else f"option {part!r} is not KEY=VALUE"
            raise _bad(text, why, "give each of kv=, tp=, spec= at most once")
        seen.add(key)
        if key == "kv":
            if value not in KV_DTYPES:
                raise _bad(text, f"unknown KV dtype {value!r}", f"choose {'/'.join(KV_DTYPES)}")
            kv = value
        elif key == "tp":
            if not value.isdigit() or int(value) not in TP_DEGREES:
                raise _bad(text, f"tp={value!r} is invalid", "choose tp=1, 2, 4 or 8")
            tp = int(value)
        elif key == "spec":
            m = _SPEC.fullmatch(value)
            if not m or not 1 <= int(m.group(1)) <= 16:
                raise _bad(
                    text,
                    f"spec={value!r} is invalid",
                    "give spec=kKaA with draft length K in 1..16 and acceptance A in 0..1",
                )
            spec_k, spec_alpha = int(m.group(1)), float(m.group(2))
        else:
            raise _bad(text, f"unknown option {key!r}", "the options are kv=, tp= and spec=")
    if model.heads % tp:
        raise _bad(
            text,
            f"tp={tp} does not divide the model's {model.heads} attention heads",
            "choose a smaller tp",
        )
    return Preset(gpu, model, weights, kv, tp, spec_k, spec_alpha)
