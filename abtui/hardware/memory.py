"""How the process's two allocators keep memory a run has freed (docs/reliability.md, Memory).

A run's main process writes the session file through DuckDB, then reads it back for the
summary and the verdict. Two allocators hold on to memory it no longer uses, and at 100,000
requests per arm each cost it over 10 MB of its peak:

- **DuckDB's jemalloc** (statically linked on Linux) keeps freed pages for 10 s before it
  gives them back (its default ``dirty_decay_ms``), so the blocks of one flush or one read
  were still resident under the next. :func:`quiet_duckdb_allocator` asks it to give them back
  at once. jemalloc reads its settings when DuckDB loads, so this must run before the first
  ``import duckdb`` of the process (``abtui.cli.main`` does it for ``run`` and ``demo`` right
  after parsing the command line); later it changes nothing, and says so. The price is CPU
  wherever DuckDB frees a lot: +0.7 s (4.9 → 5.6 s) in the verdict of 10⁶ requests per arm,
  whose aim is 5 s, so ``abtui report`` and the other commands leave jemalloc as it is.
- **glibc's malloc** raises its mmap threshold to the size of each large block freed (up to
  32 MB), so after the first array of a request column was freed every later one came from
  the heap, and the holes they left (~40 MB after a verdict: ``malloc_trim`` gave it back)
  were counted in the peak. :func:`big_arrays_to_the_os` fixes the threshold, so arrays of
  :data:`MMAP_THRESHOLD` bytes and more are mapped on their own and given back when freed
  (the price: their pages are faulted in afresh, ~0.5 s of CPU in a 100,000-request verdict),
  set by the run's process only (``abtui.cli.run.run_and_report``).

Both are a no-op where they do not apply (another platform, another libc) and never raise.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

DUCKDB_MALLOC_CONF = "dirty_decay_ms:0,muzzy_decay_ms:0"  # freed pages back to the OS at once
MMAP_THRESHOLD = 600 * 1024  # arrays of 75,000+ float64 (one per request at 100k: 0.76 MB)
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def quiet_duckdb_allocator() -> bool:
    """Ask DuckDB's jemalloc to return freed pages at once (``DUCKDB_JE_MALLOC_CONF``, unless
    the user set it); whether it takes effect: False once DuckDB is loaded in this process."""
    os.environ.setdefault("DUCKDB_JE_MALLOC_CONF", DUCKDB_MALLOC_CONF)
    return "duckdb" not in sys.modules and "_duckdb" not in sys.modules


def big_arrays_to_the_os(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes (module docstring); whether it was
    set (False on another libc or platform)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, int(threshold)) == 1
