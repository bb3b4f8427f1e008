"""Every commit since the project adopted the rule has a one-line subject of at most 72
characters (the detail goes in the body), so that ``git log --oneline`` reads.

    python scripts/check_commit_subjects.py [--since COMMIT]

Exit 1 naming each commit whose subject is longer; exit 0 with a note where the history does
not reach the start commit (a shallow clone), since there is nothing to check then."""

from __future__ import annotations

import argparse
import subprocess
import sys

# The first commit made under the rule (ruff format, the complexity limit); older subjects stay.
RULE_SINCE = "623f5df"
MAX_SUBJECT = 72


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True)


def long_subjects(since: str) -> list[str] | None:
    """``hash subject`` of every commit after ``since`` (merges included) whose subject is over
    :data:`MAX_SUBJECT` characters; ``None`` when ``since`` is not in this clone's history."""
    if _git("cat-file", "-e", f"{since}^{{commit}}").returncode != 0:
        return None
    out = _git("log", "--format=%h%x00%s", f"{since}..HEAD")
    if out.returncode != 0:
        return None
    rows = (line.split("\0", 1) for line in out.stdout.splitlines() if "\0" in line)
    return [f"{h} ({len(s)} chars) {s}" for h, s in rows if len(s) > MAX_SUBJECT]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--since", default=RULE_SINCE, help="check commits after this one")
    args = ap.parse_args(argv)
    bad = long_subjects(args.since)
    if bad is None:
        print(f"commit subjects: {args.since} is not in this clone's history; nothing checked")
        return 0
    for line in bad:
        print(f"commit subject over {MAX_SUBJECT} characters: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
