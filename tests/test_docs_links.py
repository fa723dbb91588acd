"""Every relative link of the documentation points at a file that exists, and every `#anchor` at a
heading of its target (GitHub's heading slugs), so moving a page or renaming a section cannot leave
a dead link behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "benchmarks" / "results").glob("*/README.md")),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _outside_code(text: str) -> list[str]:
    """The lines of a markdown text that are not inside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped (not - or _), spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings; a repeated heading gets -1, -2, ... as on GitHub."""
    found, counts = set(), {}
    for line in _outside_code(page.read_text()):
        match = re.match(r"#{1,6} (.*)", line)
        if match:
            base = slug(match.group(1))
            found.add(f"{base}-{counts[base]}" if base in counts else base)
            counts[base] = counts.get(base, 0) + 1
    return found


def links(page: Path) -> list[str]:
    found = []
    for line in _outside_code(page.read_text()):
        line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
        found += LINK.findall(line)
    return [target for target in found if not re.match(r"[a-z]+:", target)]  # http(s):, mailto:


def test_slug_matches_github():
    assert slug('The GPT-style family (`model_type="hflm_gpt"`)') == "the-gpt-style-family-model_typehflm_gpt"
    assert slug("nanoGPT's Shakespeare recipe") == "nanogpts-shakespeare-recipe"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
