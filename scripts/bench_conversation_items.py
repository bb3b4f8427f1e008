#!/usr/bin/env python3
"""What a conversation workload's ``items`` cost in a session file: the turns of a conversation
file written through the store (in batches of 256, as a run streams them), then read back
(:meth:`abtui.store.reader.SessionReader.items`, every whole prompt rebuilt): the message text
stored, the time to write and to read, the reader's peak Python memory (tracemalloc) and the
file's size. The prompts read back are checked against the ones sent.

    abtui workload conversations synthetic -o big.jsonl --conversations 200 --turns 8 \\
        --system-tokens 256 --think 0.01:0.5 --rate 50
    python scripts/bench_conversation_items.py big.jsonl --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path


def once(items, folder: Path, k: int) -> tuple[float, float, float, int, int]:
    from abtui.store.reader import SessionReader
    from abtui.store.writer import SessionWriter

    path = folder / f"items-{k}.duckdb"
    t0 = time.perf_counter()
    with SessionWriter(path) as w:
        w.write_arms([{"arm": 0, "name": "a", "role": "baseline", "url": "u", "model": "m"}])
        for i in range(0, len(items), 256):
            w.write_items(items[i : i + 256])
    write_s = time.perf_counter() - t0
    tracemalloc.start()
    t0 = time.perf_counter()
    with SessionReader(path) as r:
        got = r.items()
        (chars,) = r.query("SELECT sum(strlen(messages)) FROM items")[0]
    read_s = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    if [it.messages for it in got] != [it.messages for it in items]:
        raise SystemExit("the prompts read back are not the ones sent")
    return write_s, read_s, peak / 2**20, int(chars), path.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("conversations", help="an abtui conversation file (JSON Lines)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from abtui.workload.conversations import read_conversations, turn_items

    convs, _ = read_conversations(args.conversations)
    items = turn_items(convs)
    with tempfile.TemporaryDirectory() as tmp:
        runs = [once(items, Path(tmp), k) for k in range(args.repeat)]
    w, r, peak = (statistics.median(x[j] for x in runs) for j in range(3))
    chars, size = runs[0][3], runs[0][4]
    print(
        f"{len(convs)} conversations, {len(items)} turns: {chars:,} characters of messages "
        f"stored; write {w:.2f} s, read {r:.2f} s (peak {peak:.0f} MiB); "
        f"file {size / 2**20:.2f} MiB (medians of {args.repeat})"
    )


if __name__ == "__main__":
    main()
