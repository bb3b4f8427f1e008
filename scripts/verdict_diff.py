#!/usr/bin/env python3
"""Did a change move any number of a verdict? Dump whole verdict documents, then compare two
dumps leaf by leaf (docs/reliability.md).

    PYTHONPATH=/path/to/before python scripts/verdict_diff.py dump before.json S1.duckdb S2.duckdb
    PYTHONPATH=/path/to/after  python scripts/verdict_diff.py dump after.json S1.duckdb S2.duckdb
    python scripts/verdict_diff.py compare before.json after.json

``dump`` writes ``SessionVerdict.to_dict()`` of each file (``store=False``: the files are not
changed; ``created`` left out) with whichever abtui is first on the path; ``--recompute``
computes each verdict even where the file stores one the tree would reuse (the same abtui
version: two trees of one version would otherwise both print the stored one). ``compare`` counts the
leaves, lists every one that differs (floats with their relative difference, largest first;
anything else as a change of value) and exits 1 when a non-float leaf differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter


def dump(out: str, paths: list[str], recompute: bool = False) -> None:
    try:
        from abtui.verdict.saved import session_verdict
    except ImportError:  # a tree whose module still has its old name
        from abtui.verdict.session import session_verdict
    if recompute:
        import abtui.verdict.stored

        abtui.verdict.stored.reusable = lambda *a, **k: None  # looked up at each call

    docs = {}
    for path in paths:
        d = session_verdict(path, store=False).to_dict()
        d.pop("created", None)
        docs[path] = d
    with open(out, "w") as f:
        json.dump(docs, f, indent=1, sort_keys=True)


def _leaves(x, path: str = ""):
    if isinstance(x, dict):
        for k in sorted(x):
            yield from _leaves(x[k], f"{path}/{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, x


def compare(a_path: str, b_path: str, show: int) -> int:
    a, b = (dict(_leaves(json.load(open(p)))) for p in (a_path, b_path))
    floats, others = [], []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key, "<missing>"), b.get(key, "<missing>")
        if x == y:
            continue
        if isinstance(x, float) and isinstance(y, float):
            floats.append((abs(x - y) / max(abs(x), abs(y)), key, x, y))
        else:
            others.append((key, x, y))
    print(
        f"{len(a)} leaves, {len(floats) + len(others)} differ: {len(others)} not floats, "
        f"{len(floats)} floats"
    )
    for key, x, y in others[:show]:
        print(f"  {key}: {x!r} -> {y!r}")
    if floats:
        floats.sort(reverse=True)
        fields = Counter(k.rsplit("/", 1)[-1] for _, k, _, _ in floats)
        print(
            f"  floats: largest relative difference {floats[0][0]:.2e}; by field "
            + ", ".join(f"{f} {n}" for f, n in fields.most_common())
        )
        for r, key, x, y in floats[:show]:
            print(f"  {r:.1e}  {key}: {x!r} -> {y!r}")
    return 1 if others else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="write the verdict documents of session files")
    d.add_argument("out")
    d.add_argument("paths", nargs="+")
    d.add_argument(
        "--recompute", action="store_true", help="never reuse a verdict stored in the file"
    )
    c = sub.add_parser("compare", help="compare two dumps leaf by leaf")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--show", type=int, default=10, help="differences listed (default 10)")
    args = ap.parse_args()
    if args.cmd == "dump":
        dump(args.out, args.paths, args.recompute)
        return 0
    return compare(args.a, args.b, args.show)


if __name__ == "__main__":
    sys.exit(main())
