"""The simulator's vision encoder: how many tokens an image of a prompt becomes.

The count is Qwen2-VL's (a common open vision-language model, served by vLLM and SGLang): the
image is resized so each side is a multiple of 28 pixels (patches of 14, merged 2 × 2), keeping
its aspect ratio and its pixel count within [:data:`MIN_PIXELS`, :data:`MAX_PIXELS`], and each
28 × 28 square becomes one token after the merge: ``(w' / 14) · (h' / 14) / 4``. A 512 × 512
image is 324 tokens, 1024 × 768 is 999, 256 × 256 is 81.

Those tokens join the prompt (its ``prompt_tokens``, as vLLM's usage counts them): the batching
engine prefills them with the text, and each stands for its image in the prompt's cache blocks
(a word made of the image's digest and its position, so the same image at the same place hits
the prefix cache and another image does not). The fixed-delay engine adds
``vision_us_per_token`` per token to its first chunk (:class:`abtui.sim.engine.SimConfig`).
"""

from __future__ import annotations

import hashlib
import math

from abtui.client.images import NotAnImage, decode_data_url, image_size

PATCH = 14
MERGE = 2
FACTOR = PATCH * MERGE  # 28: a side's multiple
MIN_PIXELS = 56 * 56
MAX_PIXELS = 16384 * FACTOR * FACTOR


def vision_tokens(width: int, height: int) -> int:
    """Tokens of a ``width × height`` image after the patch merge (module doc)."""
    h = max(FACTOR, round(height / FACTOR) * FACTOR)
    w = max(FACTOR, round(width / FACTOR) * FACTOR)
    if h * w > MAX_PIXELS:
        beta = math.sqrt(height * width / MAX_PIXELS)
        h = max(FACTOR, math.floor(height / beta / FACTOR) * FACTOR)
        w = max(FACTOR, math.floor(width / beta / FACTOR) * FACTOR)
    elif h * w < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (height * width))
        h = math.ceil(height * beta / FACTOR) * FACTOR
        w = math.ceil(width * beta / FACTOR) * FACTOR
    return (h // PATCH) * (w // PATCH) // (MERGE * MERGE)


def image_words(url: object, where: str) -> list[str]:
    """The prompt words an image part's ``url`` stands for (one per vision token); ValueError
    says why it is no image the sim can read (naming ``where``, never quoting the data)."""
    try:
        data = decode_data_url(url)  # type: ignore[arg-type]
        _, w, h = image_size(data)
    except NotAnImage as e:
        raise ValueError(f"{where}: {e}") from None
    tag = hashlib.blake2b(data, digest_size=6).hexdigest()
    return [f"<img{tag}:{k}>" for k in range(vision_tokens(w, h))]
