"""The docs are self-contained: nothing cites a document the repository does not hold, and every
relative link in README.md and docs/*.md reaches a file that exists — and, for an ``#anchor``
into one of our Markdown files, a heading that exists (GitHub's slugs)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The team's notes outside the repository, by name (spelled in pieces so this file does not
# cite them itself).
_METHODS, _DESIGN, _STYLE = "METH" + "ODS", "DES" + "IGN", "STY" + "LE"
OUTSIDE = re.compile(rf"\b{_METHODS}\b|\b(?:{_DESIGN}|{_STYLE})\.md\b")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".yaml", ".yml", ".tcss", ".cfg", ".ini", ""}


def tracked_files() -> list[Path]:
    """The repository's files: git's list where there is one, else the folders CI reads."""
    try:
        out = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
        files = [ROOT / f for f in out]
    except (OSError, subprocess.CalledProcessError):
        files = [
            p for d in ("abtui", "tests", "scripts", "docs", ".ci") for p in (ROOT / d).rglob("*")
        ]
        files += [ROOT / "README.md", ROOT / "pyproject.toml"]
    return [f for f in files if f.is_file() and f.suffix in TEXT_SUFFIXES]


def test_no_file_cites_a_document_outside_the_repository():
    found = []
    for path in tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not found, "cite a docs/ page instead:\n" + "\n".join(found)


# ------------------------------------------------------------------------------ links

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"(?<!!)\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`+[^`]*`+")


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text (markup gone) lower-cased, every character
    but letters, digits, ``_``, ``-`` and spaces dropped, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"\\(.)", r"\1", text)  # backslash escapes
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 … for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = github_slug(m.group(1))
        k = seen.get(slug, 0)
        out.add(slug if k == 0 else f"{slug}-{k}")
        seen[slug] = k + 1
    return out


def test_slugs_follow_github():
    assert github_slug("7. The generator rule, in proportion (`abtui.stats.lagguard`)") == (
        "7-the-generator-rule-in-proportion-abtuistatslagguard"
    )
    assert github_slug("5. Tails: the small-sample rule, and what δ_tail hides") == (
        "5-tails-the-small-sample-rule-and-what-δ_tail-hides"
    )
    assert github_slug("Capacity goodput λ\\* (load sweeps)") == "capacity-goodput-λ-load-sweeps"
    assert github_slug("Memory of a large run (issue 19.2: measured, partly fixed)") == (
        "memory-of-a-large-run-issue-192-measured-partly-fixed"
    )


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(doc):
    broken = []
    for n, line in prose_lines(doc.read_text(encoding="utf-8")):
        line = CODE_SPAN.sub("", line)
        for target in LINK.findall(line) + IMAGE.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            if not dest.exists():
                broken.append(f"{doc.name}:{n}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{doc.name}:{n}: {target} (no heading #{anchor} in {dest.name})")
    assert not broken, "\n".join(broken)


def test_the_docs_index_lists_every_page():
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages <= listed, f"docs/README.md does not list {sorted(pages - listed)}"


def test_every_reason_code_is_in_the_verdict_docs():
    """docs/verdict.md's table of reason codes lists each :class:`abtui.stats.reasons.Code`
    once, and nothing else: a JSON consumer reads what a code means there."""
    from abtui.stats.reasons import Code

    text = (ROOT / "docs" / "verdict.md").read_text(encoding="utf-8")
    section = text.split("## 12. Reason codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M)
    assert len(rows) == len(set(rows)) and set(rows) == {c.value for c in Code}
