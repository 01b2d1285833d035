"""The README and docs/ as the tests read them: which documents there are, their fenced blocks and links."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

from portal.docs import render

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # where its fence opens, counted from 1
    info: str  # the word after the fence: bash, shell, text, ...
    text: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def tokens(path: Path) -> list:
    return MarkdownIt("commonmark").enable("table").parse(path.read_text(encoding="utf-8"))


def blocks(path: Path) -> list[Block]:
    """Its fenced blocks, in order."""
    return [
        Block(path, t.map[0] + 1, t.info.strip().split(" ")[0], t.content)
        for t in tokens(path)
        if t.type == "fence" and t.map
    ]


def links(path: Path) -> Iterator[tuple[str, int]]:
    """Every link's and image's target, with its line."""
    for token in tokens(path):
        for child in token.children or []:
            if child.type == "link_open":
                yield str(child.attrGet("href")), (token.map or [0])[0] + 1
            elif child.type == "image":
                yield str(child.attrGet("src")), (token.map or [0])[0] + 1


def anchors(path: Path) -> set[str]:
    """The anchors of its headings, as the portal makes them (GitHub's, see portal.docs.render.slug)."""
    html = render.render(path.read_text(encoding="utf-8"), "/docs/").html
    return set(re.findall(r'<h[1-6] id="([^"]+)"', html))
