"""A tiny Llama-architecture GGUF with seeded random weights, and its quantized copies.

No weights can be downloaded where abtui's CI runs, so the model is made: 2 layers, 128 hidden,
4 query heads sharing 2 KV heads, a byte-fallback SentencePiece-style vocabulary (``<unk>``,
``<s>``, ``</s>``, the 256 byte tokens, then the word pieces of abtui's synthetic prompts and
their prefixes, so the prompts tokenize to whole words). The text it generates is meaningless,
but quantization damage is real: Q8_0 and Q4_0 copies made with llama.cpp's own quantize API
change greedy continuations, Q4_0 more than Q8_0.

The output rows of ``<unk>``, ``<s>`` and ``</s>`` are zero while every other logit is drawn
with a spread of a few units, so greedy decoding never ends early: every request generates
exactly ``max_tokens`` tokens (llama.cpp has no ``ignore_eos``), which lets a test check token
counts although the server reports no usage in its stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from abtui.errors import AbtuiError

SPACE = "\u2581"  # SentencePiece's word-boundary mark
UNK, BOS, EOS = 0, 1, 2
N_BYTES = 256
# Pieces that are more than one UTF-8 byte, so generated text holds multi-byte characters.
_EXTRA = ("é", "ü", "ß", "→", "€", "中", "文", f"{SPACE}café", f"{SPACE}naïve")


@dataclass(frozen=True, slots=True)
class TinyConfig:
    """Shape of the model; the defaults give a ~2 MB FP32 file."""

    n_layer: int = 2
    d_model: int = 128
    n_head: int = 4
    n_head_kv: int = 2
    d_ff: int = 256
    n_ctx: int = 8192  # training context: llama-server caps each slot at it
    seed: int = 0
    logit_scale: float = 0.25  # std of the output weights: logits spread ~ scale·√d_model
    draft_layers: int = 0  # layers past this many are scaled by tail_scale (0: none)
    tail_scale: float = 1.0


class EngineError(AbtuiError):
    """The engine (llama-server, llama-quantize, gguf) is missing or failed."""


def _require(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise EngineError(
            f"the Python package providing {module!r} is not installed",
            "install abtui with its engine extra: pip install -e '.[engine]'",
        ) from None


def vocabulary() -> tuple[list[bytes], list[float], list[int]]:
    """Tokens, scores and token types of the byte-fallback SentencePiece-style vocabulary."""
    from abtui.client.items import _WORDS

    toks: list[bytes] = [b"<unk>", b"<s>", b"</s>"]
    types = [2, 3, 3]  # UNKNOWN, CONTROL, CONTROL (gguf.TokenType)
    scores = [0.0, 0.0, 0.0]
    for b in range(N_BYTES):
        toks.append(f"<0x{b:02X}>".encode())
        types.append(6)  # BYTE
        scores.append(0.0)
    pieces: dict[str, None] = {SPACE: None}
    for c in "abcdefghijklmnopqrstuvwxyz0123456789":
        pieces[c] = None
    for w in (*_WORDS, *(str(i) for i in range(10))):
        full = SPACE + w
        for k in range(2, len(full) + 1):  # every prefix: SentencePiece merges pairwise
            pieces[full[:k]] = None
    for p in _EXTRA:
        for k in range(1, len(p) + 1):
            pieces[p[:k]] = None
    for p in pieces:
        toks.append(p.encode())
        types.append(1)  # NORMAL
        scores.append(float(len(p)))  # longer merges first
    return toks, scores, types


def _weights(cfg: TinyConfig, n_vocab: int) -> dict[str, np.ndarray]:
    """Every tensor, deterministic given ``cfg.seed``. Each layer draws from its own stream
    (seed, layer), so a model cut to its first k layers holds exactly the bigger model's first
    k layers: that is how the draft model shares the target's weights and vocabulary."""
    d, d_head = cfg.d_model, cfg.d_model // cfg.n_head
    kv = cfg.n_head_kv * d_head

    def stream(tag: int) -> np.random.Generator:
        return np.random.default_rng([cfg.seed, tag])

    def w(rng: np.random.Generator, rows: int, cols: int, std: float | None = None) -> np.ndarray:
        s = (1.0 / np.sqrt(cols)) if std is None else std
        return (rng.standard_normal((rows, cols)) * s).astype(np.float32)

    out: dict[str, np.ndarray] = {"token_embd.weight": w(stream(1_000_000), n_vocab, d, 1.0)}
    for i in range(cfg.n_layer):
        rng, p = stream(i), f"blk.{i}."
        # layers past ``draft_layers`` write to the residual stream at ``tail_scale``: the
        # draft (the first layers alone) then predicts most of the target's greedy tokens
        tail = cfg.tail_scale if i >= cfg.draft_layers else 1.0
        out[p + "attn_norm.weight"] = np.ones(d, np.float32)
        out[p + "attn_q.weight"] = w(rng, d, d)
        out[p + "attn_k.weight"] = w(rng, kv, d)
        out[p + "attn_v.weight"] = w(rng, kv, d)
        out[p + "attn_output.weight"] = w(rng, d, d) * np.float32(tail)
        out[p + "ffn_norm.weight"] = np.ones(d, np.float32)
        out[p + "ffn_gate.weight"] = w(rng, cfg.d_ff, d)
        out[p + "ffn_up.weight"] = w(rng, cfg.d_ff, d)
        out[p + "ffn_down.weight"] = w(rng, d, cfg.d_ff) * np.float32(tail)
    out["output_norm.weight"] = np.ones(d, np.float32)
    head = w(stream(1_000_001), n_vocab, d, cfg.logit_scale)
    head[[UNK, BOS, EOS]] = 0.0  # never the greedy choice: no early end of a request
    out["output.weight"] = head
    return out


def write_fp32(path: Path, cfg: TinyConfig = TinyConfig(), n_layer: int | None = None) -> Path:
    """Write the FP32 model to ``path`` (deterministic given ``cfg.seed``); ``n_layer`` cuts
    it to its first layers (the draft model)."""
    gguf = _require("gguf")
    toks, scores, types = vocabulary()
    n_vocab, d = len(toks), cfg.d_model
    layers = cfg.n_layer if n_layer is None else n_layer
    tensors = _weights(cfg, n_vocab)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    wr = gguf.GGUFWriter(str(path), "llama")
    wr.add_name(f"abtui-tiny-seed{cfg.seed}-L{layers}")
    wr.add_context_length(cfg.n_ctx)
    wr.add_embedding_length(d)
    wr.add_block_count(layers)
    wr.add_feed_forward_length(cfg.d_ff)
    wr.add_head_count(cfg.n_head)
    wr.add_head_count_kv(cfg.n_head_kv)
    wr.add_layer_norm_rms_eps(1e-5)
    wr.add_rope_dimension_count(d // cfg.n_head)
    wr.add_rope_freq_base(10000.0)
    wr.add_vocab_size(n_vocab)
    wr.add_file_type(0)  # ALL_F32
    wr.add_tokenizer_model("llama")
    wr.add_token_list(toks)
    wr.add_token_scores(scores)
    wr.add_token_types(types)
    wr.add_unk_token_id(UNK)
    wr.add_bos_token_id(BOS)
    wr.add_eos_token_id(EOS)
    wr.add_add_bos_token(True)
    wr.add_add_space_prefix(True)
    for name, t in tensors.items():
        if name.startswith("blk.") and int(name.split(".")[1]) >= layers:
            continue
        wr.add_tensor(name, t)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return path


FORMATS = ("Q8_0", "Q4_0")
# a real model's already quantised weights quantised again, coarser (--allow-requantize)
REQUANT_FORMATS = ("Q8_0", "Q4_0", "Q3_K_M", "Q3_K_S", "Q2_K")


def quantize(src: Path, dst: Path, fmt: str, threads: int = 1, *, requant: bool = False) -> Path:
    """Quantize ``src`` to ``fmt`` (``Q8_0`` / ``Q4_0``) with llama.cpp's own ``llama-quantize``
    (built by ``abtui engine build``); ``requant``: ``src`` is quantised already (a real model):
    one of :data:`REQUANT_FORMATS`, with ``--allow-requantize``."""
    import subprocess

    from abtui.engine.build import require_quantize

    known = REQUANT_FORMATS if requant else FORMATS
    if fmt not in known:
        raise EngineError(f"unknown quantization {fmt!r}", f"use one of {', '.join(known)}")
    tool = require_quantize()
    flag = ["--allow-requantize"] if requant else []
    proc = subprocess.run(
        [str(tool), *flag, str(src), str(dst), fmt, str(threads)],
        capture_output=True,
        text=True,
        errors="replace",
    )
    if proc.returncode != 0 or not Path(dst).exists():
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-10:])
        raise EngineError(
            f"llama-quantize could not quantize {src} to {fmt} (exit code {proc.returncode}): {tail}",
            f"run it by hand: {tool} {src} {dst} {fmt}",
        )
    return Path(dst)


def _once(path: Path, make) -> Path:
    if not path.exists():
        tmp = path.with_name(path.name + ".tmp")
        make(tmp)
        tmp.rename(path)
    return path


def build_models(folder: Path, cfg: TinyConfig = TinyConfig()) -> dict[str, Path]:
    """FP32, Q8_0 and Q4_0 files in ``folder`` (made once; reused when already there)."""
    folder = Path(folder)
    fp32 = _once(folder / f"tiny-s{cfg.seed}-f32.gguf", lambda t: write_fp32(t, cfg))
    out = {"FP32": fp32}
    for fmt in FORMATS:
        out[fmt] = _once(
            folder / f"tiny-s{cfg.seed}-{fmt.lower()}.gguf", lambda t, f=fmt: quantize(fp32, t, f)
        )
    return out


# The speculative-decoding pair: a 12-layer target whose layers past the first barely move the
# residual stream (tail_scale 0.01), and its draft, the target's first layer alone (same
# vocabulary, ~1/12 of the work per token), so the draft's greedy tokens are mostly the target's.
# Sharper logits (logit_scale 1) make greedy choices less fragile. On the 2-core VM (another
# process busy) llama-server accepted 82 % of drafted tokens at --draft-max 8, and decoded at
# 2.3 ms/token against 4.2 ms/token without the draft (concurrency 1).
SPEC = TinyConfig(
    n_layer=12,
    d_model=256,
    n_head=8,
    n_head_kv=4,
    d_ff=768,
    seed=7,
    logit_scale=1.0,
    draft_layers=1,
    tail_scale=0.01,
)


def build_spec_models(folder: Path, cfg: TinyConfig = SPEC) -> dict[str, Path]:
    """The target (FP32 and Q8_0) and its draft (first ``cfg.draft_layers`` layers, FP32)."""
    folder = Path(folder)
    tag = f"spec-s{cfg.seed}-L{cfg.n_layer}-d{cfg.d_model}"
    target = _once(folder / f"{tag}-target-f32.gguf", lambda t: write_fp32(t, cfg))
    draft = _once(
        folder / f"{tag}-draft{cfg.draft_layers}-f32.gguf",
        lambda t: write_fp32(t, cfg, n_layer=cfg.draft_layers),
    )
    return {"target": target, "draft": draft}


def write_hf_tokenizer(folder: Path) -> Path:
    """The tiny vocabulary as a Hugging Face tokenizer folder (``tokenizer.json`` and
    ``tokenizer_config.json``), for peers that need a local tokenizer (GuideLLM, AIPerf).

    A byte-fallback BPE shaped like Llama 2's: a ``▁`` is prepended and spaces become ``▁``;
    every word piece is reachable by merging its prefix with its last character, as llama.cpp's
    SentencePiece tokenizer reaches it (its scores prefer longer pieces). It counts the same
    tokens as the server for the synthetic prompts; for generated text it can differ where the
    server decoded a byte token to nothing (docs/peer-check.md).
    """
    import json

    toks, _, types = vocabulary()
    text = [t.decode("utf-8") for t in toks]
    vocab = {t: i for i, t in enumerate(text)}
    merges = []
    for t, ty in zip(text, types, strict=True):
        if ty == 1 and len(t) >= 2 and t[:-1] in vocab and t[-1] in vocab:
            merges.append((len(t), f"{t[:-1]} {t[-1]}"))
    specials = [
        {
            "id": i,
            "content": text[i],
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i in (UNK, BOS, EOS)
    ]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": specials,
        "normalizer": {
            "type": "Sequence",
            "normalizers": [
                {"type": "Prepend", "prepend": SPACE},
                {"type": "Replace", "pattern": {"String": " "}, "content": SPACE},
            ],
        },
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "<s>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": "<s>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [BOS], "tokens": ["<s>"]}},
        },
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "<unk>",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "vocab": vocab,
            "merges": [m for _, m in sorted(merges, key=lambda x: x[0])],
        },
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "model_max_length": TinyConfig().n_ctx,
    }
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return folder
