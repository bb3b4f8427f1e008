"""Model configs (decoder-only transformers with GQA and a gated MLP) and their parameter counts.

:class:`ModelConfig` holds what the roofline needs; :func:`get_model` looks a preset up by name
or alias; :func:`load_hf_config` reads a local Hugging Face ``config.json``. Parameter counts are
derived from the config (:meth:`ModelConfig.param_count`) and the presets carry the published
total (``known_params``) so a test can check the derivation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from abtui.errors import UsageError


class ModelConfigError(UsageError):
    """A model config file cannot be used: names the file and the field."""

    title = "invalid model config"


@dataclass(frozen=True, slots=True)
class ModelConfig:
    name: str
    layers: int  # L
    hidden: int  # d_model
    heads: int  # query heads
    kv_heads: int  # key/value heads (GQA); = heads for MHA
    head_dim: int
    ffn: int  # intermediate size of the gated MLP (gate, up, down projections)
    vocab: int
    tied_embeddings: bool = False  # lm_head shares the embedding matrix
    max_context: int = 8192
    qkv_bias: bool = False  # Qwen2-style biases on q, k, v projections
    known_params: int | None = None  # published total, for checking param_count()
    aliases: tuple[str, ...] = ()

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    def layer_params(self) -> int:
        """Parameters of one decoder layer (attention + MLP + two RMSNorms)."""
        kv = self.kv_heads * self.head_dim
        attn = self.hidden * (self.q_dim + 2 * kv) + self.q_dim * self.hidden
        if self.qkv_bias:
            attn += self.q_dim + 2 * kv
        return attn + 3 * self.hidden * self.ffn + 2 * self.hidden

    def linear_params(self) -> int:
        """Parameters of every layer's matmuls and norms (quantised by fp8/int4 checkpoints)."""
        return self.layers * self.layer_params() + self.hidden  # + final norm

    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    def lm_head_params(self) -> int:
        """The output projection: shares storage with the embedding when tied."""
        return self.vocab * self.hidden

    def param_count(self) -> int:
        """Total parameters, counting a tied embedding once."""
        head = 0 if self.tied_embeddings else self.lm_head_params()
        return self.linear_params() + self.embedding_params() + head


MODELS: tuple[ModelConfig, ...] = (
    ModelConfig(
        "llama-3-8b",
        32,
        4096,
        32,
        8,
        128,
        14336,
        128256,
        False,
        8192,
        known_params=8_030_261_248,
        aliases=("llama3-8b", "meta-llama-3-8b"),
    ),
    ModelConfig(
        "llama-3.1-8b",
        32,
        4096,
        32,
        8,
        128,
        14336,
        128256,
        False,
        131072,
        known_params=8_030_261_248,
        aliases=("llama3.1-8b",),
    ),
    ModelConfig(
        "llama-3-70b",
        80,
        8192,
        64,
        8,
        128,
        28672,
        128256,
        False,
        8192,
        known_params=70_553_706_496,
        aliases=("llama3-70b", "meta-llama-3-70b"),
    ),
    ModelConfig(
        "llama-3.1-70b",
        80,
        8192,
        64,
        8,
        128,
        28672,
        128256,
        False,
        131072,
        known_params=70_553_706_496,
        aliases=("llama3.1-70b",),
    ),
    ModelConfig(
        "llama-3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, True, 131072, known_params=1_235_814_400
    ),
    ModelConfig(
        "llama-3.2-3b", 28, 3072, 24, 8, 128, 8192, 128256, True, 131072, known_params=3_212_749_824
    ),
    ModelConfig(
        "mistral-7b",
        32,
        4096,
        32,
        8,
        128,
        14336,
        32768,
        False,
        32768,
        known_params=7_248_023_552,
        aliases=("mistral-7b-v0.3",),
    ),
    ModelConfig(
        "qwen2.5-7b",
        28,
        3584,
        28,
        4,
        128,
        18944,
        152064,
        False,
        32768,
        qkv_bias=True,
        known_params=7_615_616_512,
        aliases=("qwen-2.5-7b",),
    ),
)

_BY_NAME = {key: m for m in MODELS for key in (m.name, *m.aliases)}


def model_names() -> list[str]:
    return [m.name for m in MODELS]


def get_model(name: str) -> ModelConfig:
    """The preset model called ``name`` (case-insensitive, aliases allowed); UsageError else."""
    model = _BY_NAME.get(name.strip().lower().replace("_", "-"))
    if model is None:
        raise UsageError(
            f"unknown model {name!r}",
            f"choose one of {', '.join(model_names())}, or give --model-config config.json",
        )
    return model


def load_hf_config(path: str | Path, name: str | None = None) -> ModelConfig:
    """A :class:`ModelConfig` from a Hugging Face ``config.json`` (Llama/Mistral/Qwen2 style).

    Required: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
    ``intermediate_size``, ``vocab_size``. Optional: ``num_key_value_heads`` (default: the
    attention heads), ``head_dim`` (default hidden / heads), ``tie_word_embeddings`` (False),
    ``max_position_embeddings`` (8192), ``attention_bias`` (True for ``model_type`` qwen2).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelConfigError(
            f"cannot read the model config {str(p)!r}: {exc.strerror or exc}",
            "give --model-config the path of a Hugging Face config.json",
        ) from None
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ModelConfigError(
            f"{p}: not valid JSON ({exc})", "give a Hugging Face config.json"
        ) from None
    if not isinstance(obj, dict):
        raise ModelConfigError(f"{p}: must be a JSON object", "give a Hugging Face config.json")
    if isinstance(obj.get("text_config"), dict):  # multimodal wrappers keep the LM inside
        obj = {**obj, **obj["text_config"]}

    def num(key: str, default: int | None = None) -> int:
        value = obj.get(key, default)
        if value is None:
            raise ModelConfigError(
                f"{p}: field {key!r} is missing",
                "the simulator needs num_hidden_layers, hidden_size, num_attention_heads, "
                "intermediate_size and vocab_size",
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ModelConfigError(
                f"{p}: field {key!r} must be a positive integer, got {value!r}",
                "fix the config file",
            )
        return value

    layers, hidden = num("num_hidden_layers"), num("hidden_size")
    heads, ffn, vocab = num("num_attention_heads"), num("intermediate_size"), num("vocab_size")
    kv_heads = num("num_key_value_heads", heads)
    head_dim = num("head_dim", hidden // heads if hidden % heads == 0 else None)
    if heads % kv_heads:
        raise ModelConfigError(
            f"{p}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}",
            "fix the config file",
        )
    bias = obj.get("attention_bias", obj.get("model_type") == "qwen2")
    return ModelConfig(
        name=name or str(obj.get("_name_or_path") or p.parent.name or "custom"),
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=ffn,
        vocab=vocab,
        tied_embeddings=bool(obj.get("tie_word_embeddings", False)),
        max_context=num("max_position_embeddings", 8192),
        qkv_bias=bool(bias),
    )
