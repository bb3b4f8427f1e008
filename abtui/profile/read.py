"""Open a profile file and hand it to its reader: by its first bytes, then its name.

- gzip (``.json.gz``, vLLM's ``*.pt.trace.json.gz``) → decompressed, then as below;
- SQLite (``SQLite format 3``) → Nsight Systems' export (:mod:`abtui.profile.nsys`);
- JSON (``{`` or ``[``) → Chrome trace (:mod:`abtui.profile.chrome`);
- CSV with a ``Kernel Name`` column → Nsight Compute (:mod:`abtui.profile.ncu`); with
  ``Total Time``/``Instances``/``Name`` → ``cuda_gpu_kern_sum`` (:mod:`abtui.profile.nsys`).

A report in a profiler's own binary format (``.nsys-rep``, ``.qdrep``, ``.ncu-rep``) is
refused with the command that exports it.
"""

from __future__ import annotations

import csv
import gzip
import io
import zlib
from pathlib import Path

from abtui.profile.chrome import read_chrome
from abtui.profile.model import ProfileError, Trace
from abtui.profile.ncu import ncu_header, read_ncu_csv
from abtui.profile.nsys import kern_sum_header, read_kern_sum, read_nsys_sqlite

# a trace larger than this (decompressed) is refused rather than read into memory whole
MAX_BYTES = 2 << 30

_EXPORT = {
    ".nsys-rep": "nsys export --type sqlite FILE (or nsys stats --report cuda_gpu_kern_sum "
    "--format csv FILE)",
    ".qdrep": "nsys export --type sqlite FILE",
    ".ncu-rep": "ncu --import FILE --csv > FILE.csv",
}


def _gunzip(raw: bytes, where: str) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
            out = f.read(MAX_BYTES + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise ProfileError(f"{where}: a damaged gzip file ({e or 'cut short'})") from None
    if len(out) > MAX_BYTES:
        raise ProfileError(f"{where}: over {MAX_BYTES >> 30} GiB once decompressed")
    return out


def _sniff_csv(text: str, where: str) -> Trace:
    head = list(csv.reader(io.StringIO("\n".join(text.splitlines()[:200]))))
    for row in head:
        if ncu_header(row):
            return read_ncu_csv(text, where)
        if kern_sum_header(row):
            return read_kern_sum(text, where)
    raise ProfileError(
        f"{where}: not a profile abtui reads (no Chrome trace, SQLite export or known CSV header)",
        "docs/profile.md lists the formats",
    )


def read_trace(path: str | Path) -> Trace:
    """The profile in ``path``, whatever its format; a :class:`ProfileError` naming the file
    (and line or field) when it cannot be read."""
    p = Path(path)
    where = str(p)
    if p.suffix.lower() in _EXPORT:
        raise ProfileError(
            f"{where}: a profiler's own report format; abtui reads its export",
            _EXPORT[p.suffix.lower()],
        )
    try:
        with p.open("rb") as f:
            magic = f.read(16)
        if magic == b"SQLite format 3\x00":  # read row by row: no size limit
            return read_nsys_sqlite(p, where)
        if p.stat().st_size > MAX_BYTES:
            raise ProfileError(f"{where}: over {MAX_BYTES >> 30} GiB")
        raw = p.read_bytes()
    except OSError as e:
        raise ProfileError(f"{where}: cannot read it ({e.strerror or e})") from None
    if raw[:2] == b"\x1f\x8b":
        raw = _gunzip(raw, where)
    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark
    start = raw[: 1 << 16].lstrip()[:1]
    if start in (b"{", b"["):
        return read_chrome(raw, where)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ProfileError(
            f"{where}: byte {e.start}: not UTF-8 text nor a known binary format"
        ) from None
    return _sniff_csv(text, where)
