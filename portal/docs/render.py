"""The guides in docs/ (and the README) as safe HTML, rendered here so an air-gapped site serves them itself.

Rules:
- Markdown is CommonMark with tables; raw HTML in a document is shown as text, never passed through, and
  links keep only the schemes markdown-it allows (no `javascript:`, `vbscript:`, `file:`, `data:`).
- Headings get GitHub's anchors (`slug`), so `guide.md#a-section` works on a forge and in the portal alike.
- A relative link to another document (`user-guide.md#x`, `docs/user-guide.md`, `../README.md`) becomes its
  page under /docs/; an image in docs/images/ is served beside the pages. Anything else relative stays as written
  (the link checker in tests/docs/ refuses such links, so there are none).
- A document is served only if its name is in the allowlist `DOC_NAME` and its file exists in docs/.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from django.conf import settings
from markdown_it import MarkdownIt

DOCS_DIR = Path(settings.BASE_DIR) / "docs"
README = Path(settings.BASE_DIR) / "README.md"
DOC_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
IMAGE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}\.png")
# The guides first, in the order a newcomer reads them; any other document in docs/ follows by name.
ORDER = ("user-guide", "lead-guide", "it-guide", "reference")


@dataclass(frozen=True)
class Doc:
    name: str  # the file's stem, and the page's path under /docs/
    title: str  # its first heading


@dataclass(frozen=True)
class Page:
    title: str
    html: str
    sections: list[tuple[str, str]]  # (anchor, heading text) of its second-level headings


def slug(text: str, seen: dict[str, int]) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens; repeats get -1, -2, ..."""
    base = "".join(c for c in text.strip().lower() if c in " -_" or unicodedata.category(c)[0] in "LN").replace(
        " ", "-"
    )
    count = seen.get(base, 0)
    seen[base] = count + 1
    return base if count == 0 else f"{base}-{count}"


def documents() -> list[Doc]:
    """Every document in docs/ that may be served, guides first."""
    names = sorted(p.stem for p in DOCS_DIR.glob("*.md") if DOC_NAME.fullmatch(p.stem))
    ordered = [n for n in ORDER if n in names] + [n for n in names if n not in ORDER]
    return [Doc(name, title_of(DOCS_DIR / f"{name}.md")) for name in ordered]


def title_of(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem


def source(name: str | None) -> Path | None:
    """The file behind a page: None is the README (the index); None back when there is no such document."""
    if name is None:
        return README
    if not DOC_NAME.fullmatch(name):
        return None
    path = DOCS_DIR / f"{name}.md"
    return path if path.is_file() else None


def image(name: str) -> Path | None:
    """An image of docs/images/ by name, or None (names outside the allowlist included)."""
    if not IMAGE_NAME.fullmatch(name):
        return None
    path = DOCS_DIR / "images" / name
    return path if path.is_file() else None


def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False}).enable("table")


def served_href(href: str, prefix: str) -> str:
    """Where a link of a document leads in the portal (`prefix` is /docs/)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", href, re.IGNORECASE) or href.startswith(("#", "/")):
        return href
    path, _, anchor = href.partition("#")
    fragment = f"#{anchor}" if anchor else ""
    stem = path.rsplit("/", 1)[-1]
    if path.endswith(".md"):
        if stem == "README.md":
            return f"{prefix}{fragment}"
        return f"{prefix}{stem[:-3]}/{fragment}"
    if path.endswith(".png") and "images/" in path:
        return f"{prefix}images/{stem}"
    return href


def render(text: str, prefix: str) -> Page:
    """The document's HTML, title and sections; links rewritten for the portal (see the module's rules)."""
    md = _parser()
    tokens = md.parse(text)
    seen: dict[str, int] = {}
    title, sections = "", []
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            inline = tokens[i + 1]
            words = "".join(c.content for c in inline.children or [] if c.type in {"text", "code_inline"})
            anchor = slug(words, seen)
            token.attrSet("id", anchor)
            if token.tag == "h1" and not title:
                title = words
            elif token.tag == "h2":
                sections.append((anchor, words))
        for child in token.children or []:
            _rewrite(child, prefix)
    env: dict[str, Any] = {}
    return Page(title=title, html=md.renderer.render(tokens, md.options, env), sections=sections)


def _rewrite(token: Any, prefix: str) -> None:
    if token.type == "link_open":
        token.attrSet("href", served_href(str(token.attrGet("href") or ""), prefix))
    elif token.type == "image":
        token.attrSet("src", served_href(str(token.attrGet("src") or ""), prefix))
        token.attrSet("loading", "lazy")


@cache
def _cached(path: Path, mtime: float, prefix: str) -> Page:
    return render(path.read_text(encoding="utf-8"), prefix)


def page(path: Path, prefix: str) -> Page:
    """The rendered page, kept until its file changes."""
    return _cached(path, path.stat().st_mtime, prefix)
