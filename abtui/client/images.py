"""Images sent in chat prompts: made locally (PNG, deterministic from a seed) and read back
(format and pixel size from the bytes' header) — no imaging library.

An image goes to the server as an OpenAI content part, ``{"type": "image_url", "image_url":
{"url": "data:image/png;base64,…"}}``, in the user turn after its text. A made image is
``width × height`` 8-bit RGB: its first :data:`HEAD_ROWS` rows seeded noise (so no two images
of a workload are the same pixels, and a server's image or prefix cache cannot reuse one) and
the rest a pattern of coloured cells shared by every image of that size, compressed once and
kept (:func:`png_bytes` then compresses only the head: ~0.5 ms for 512×512 instead of ~15 ms,
which would hold the load generator's event loop). A 512×512 image is ~33 kB.

The bytes themselves are never stored or printed: a session keeps each image's format, pixel
size, byte count and a digest (:func:`describe`), and the stored messages carry a stand-in
for each data URL (:func:`elide`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
import zlib
from functools import lru_cache

import numpy as np

HEAD_ROWS = 16  # rows of seeded noise at the top of a made image: its own pixels
CELL = 16  # side of the shared pattern's cells, pixels
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_ADLER = 65521
MAX_SIDE = 16384  # pixels: a made image's largest side (the spec's limit)


class NotAnImage(ValueError):
    """Bytes or a URL that are not an image abtui can read (the message says why)."""


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _raw_rows(pixels: np.ndarray) -> bytes:
    """PNG scanlines of an ``h × w × 3`` uint8 array: each row after a 0 (no filter) byte."""
    h = pixels.shape[0]
    out = np.zeros((h, 1 + pixels.shape[1] * 3), dtype=np.uint8)
    out[:, 1:] = pixels.reshape(h, pixels.shape[1] * 3)
    return out.tobytes()


def _adler_combine(a1: int, a2: int, len2: int) -> int:
    """The Adler-32 of ``x + y`` from that of ``x`` (a1), of ``y`` (a2) and ``len(y)``."""
    rem = len2 % _ADLER
    s1a, s2a = a1 & 0xFFFF, a1 >> 16
    s1b, s2b = a2 & 0xFFFF, a2 >> 16
    s1 = (s1a + s1b - 1) % _ADLER
    s2 = (s2a + s2b + rem * s1a - rem) % _ADLER
    return (s2 << 16) | s1


@lru_cache(maxsize=16)
def _body(width: int, height: int) -> tuple[bytes, int, int]:
    """The shared rows below the head of a ``width × height`` image: their raw deflate stream
    (final block), Adler-32 and length uncompressed."""
    rows = max(0, height - HEAD_ROWS)
    rng = np.random.default_rng([width, height])
    cells = rng.integers(0, 256, (-(-rows // CELL), -(-width // CELL), 3), dtype=np.uint8)
    pixels = np.repeat(np.repeat(cells, CELL, axis=0), CELL, axis=1)[:rows, :width]
    raw = _raw_rows(pixels)
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(raw) + c.flush(zlib.Z_FINISH), zlib.adler32(raw), len(raw)


def png_bytes(width: int, height: int, seed: int) -> bytes:
    """A ``width × height`` RGB PNG, the same bytes for the same arguments (module doc)."""
    head_rows = min(HEAD_ROWS, height)
    rng = np.random.default_rng([seed & (2**63 - 1), width, height])
    head = _raw_rows(rng.integers(0, 256, (head_rows, width, 3), dtype=np.uint8))
    rest, rest_adler, rest_len = _body(width, height)
    c = zlib.compressobj(0, zlib.DEFLATED, -15)  # stored: noise does not compress
    if rest_len:  # the head's blocks, byte-aligned and not the last, then the shared rows
        first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
        adler = _adler_combine(zlib.adler32(head), rest_adler, rest_len)
    else:  # the image is all head
        first, rest = c.compress(head) + c.flush(zlib.Z_FINISH), b""
        adler = zlib.adler32(head)
    stream = b"\x78\x01" + first + rest + struct.pack(">I", adler)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return PNG_MAGIC + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", stream) + _chunk(b"IEND", b"")


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def image_part(url: str) -> dict:
    """An OpenAI chat content part carrying the image at ``url``."""
    return {"type": "image_url", "image_url": {"url": url}}


def decode_data_url(url: str) -> bytes:
    """The bytes of a ``data:image/…;base64,…`` URL; :class:`NotAnImage` says what is wrong
    (without quoting the data)."""
    if not isinstance(url, str):
        raise NotAnImage("the image URL is not a string")
    if not url.startswith("data:"):
        raise NotAnImage(
            "only data: URLs are sent (data:image/png;base64,…); abtui fetches no image URLs"
        )
    head, sep, payload = url.partition(",")
    if not sep or not head.endswith(";base64"):
        raise NotAnImage("the data URL is not base64 (data:image/png;base64,…)")
    if not head[5:].startswith("image/"):
        raise NotAnImage(f"the data URL's type {head[5:-7][:40]!r} is not image/…")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise NotAnImage("the data URL's payload is not valid base64") from None


def _jpeg_size(data: bytes) -> tuple[int, int]:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            raise NotAnImage("the JPEG's markers are damaged")
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        seg = struct.unpack(">H", data[i + 2 : i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return w, h
        i += 2 + seg
    raise NotAnImage("the JPEG has no frame header")


def image_size(data: bytes) -> tuple[str, int, int]:
    """``(format, width, height)`` of PNG, JPEG, GIF or WebP bytes, from their header."""
    if data.startswith(PNG_MAGIC) and len(data) >= 24 and data[12:16] == b"IHDR":
        w, h = struct.unpack(">II", data[16:24])
        fmt = "png"
    elif data.startswith(b"\xff\xd8"):
        (w, h), fmt = _jpeg_size(data), "jpeg"
    elif data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        w, h = struct.unpack("<HH", data[6:10])
        fmt = "gif"
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        kind = data[12:16]
        if kind == b"VP8X":
            w = 1 + int.from_bytes(data[24:27], "little")
            h = 1 + int.from_bytes(data[27:30], "little")
        elif kind == b"VP8 ":
            w, h = (x & 0x3FFF for x in struct.unpack("<HH", data[26:30]))
        elif kind == b"VP8L":
            bits = int.from_bytes(data[21:25], "little")
            w, h = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        else:
            raise NotAnImage("the WebP has no frame header it knows")
        fmt = "webp"
    else:
        raise NotAnImage("the bytes are not a PNG, JPEG, GIF or WebP image")
    if not (w > 0 and h > 0):
        raise NotAnImage(f"the {fmt.upper()} says it is {w}×{h} pixels")
    return fmt, w, h


def describe(data: bytes) -> dict:
    """What a session stores of an image: format, pixel size, bytes and a short digest."""
    fmt, w, h = image_size(data)
    digest = hashlib.blake2b(data, digest_size=8).hexdigest()
    return {"format": fmt, "width": w, "height": h, "bytes": len(data), "digest": digest}


def parse_size(text: str) -> tuple[int, int]:
    """``"512x512"`` → ``(512, 512)``; ValueError when it is not ``WxH`` with sides 1 … 16384."""
    w, sep, h = str(text).strip().lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit():
        raise ValueError(f"{text!r} is not WIDTHxHEIGHT (e.g. 512x512)")
    if not (1 <= int(w) <= MAX_SIDE and 1 <= int(h) <= MAX_SIDE):
        raise ValueError(f"{text!r}: each side must be 1 … {MAX_SIDE} pixels")
    return int(w), int(h)


def _is_image(p: object) -> bool:
    return isinstance(p, dict) and p.get("type") == "image_url"


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """``"256x256,512x512"`` → ``[(256, 256), (512, 512)]`` (:func:`parse_size` each)."""
    sizes = [parse_size(p) for p in str(text).split(",") if p.strip()]
    if not sizes:
        raise ValueError("no size given (e.g. 512x512)")
    return sizes


def made_images(seed: int, index: int, count: int, sizes: list[tuple[int, int]]) -> list[dict]:
    """The ``count`` images item ``index`` of a workload seeded ``seed`` sends: each one's
    :func:`describe` and its own ``seed`` (:func:`png_bytes` makes it again from these), its
    size drawn from ``sizes``."""
    rng = np.random.default_rng([seed & (2**63 - 1), index, 0x1A6E])
    out = []
    for _ in range(count):
        w, h = sizes[int(rng.integers(len(sizes)))] if len(sizes) > 1 else sizes[0]
        s = int(rng.integers(2**62))
        out.append({**describe(png_bytes(w, h, s)), "seed": s})
    return out


def made_parts(images: list[dict]) -> list[dict]:
    """The content parts of made images (:func:`made_images`): each one's PNG as a data URL."""
    return [image_part(data_url(png_bytes(d["width"], d["height"], d["seed"]))) for d in images]


def image_urls(messages: list[dict] | None) -> list[object]:
    """The URL of every image part of ``messages``, in order (None where a part has none)."""
    out = []
    for m in messages or ():
        content = m.get("content") if isinstance(m, dict) else None
        for p in content if isinstance(content, list) else ():
            if _is_image(p):
                iu = p.get("image_url")
                out.append(iu.get("url") if isinstance(iu, dict) else None)
    return out


def stand_in(k: int, d: dict) -> str:
    """What a stored message says instead of image ``k``'s data URL."""
    return f"<image {k}: {d['format']} {d['width']}x{d['height']}, {d['bytes']:,} bytes>"


def elide(messages: list[dict] | None, images: list[dict] | None) -> list[dict] | None:
    """``messages`` with each image part's data URL replaced by its :func:`stand_in` (from
    ``images``, the :func:`describe` of each, in order): what a session file stores. The same
    list when it holds no image (nothing is copied)."""
    if not images or not messages:
        return messages
    out, k = [], 0
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list) or not any(_is_image(p) for p in content):
            out.append(m)
            continue
        parts = []
        for p in content:
            if _is_image(p):
                d = images[k] if k < len(images) else None
                parts.append(image_part(stand_in(k, d) if d else f"<image {k}>"))
                k += 1
            else:
                parts.append(p)
        out.append({**m, "content": parts})
    return out
