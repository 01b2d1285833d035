"""Every link of the README and docs/ resolves, as files (what a forge shows) and as pages under /docs/."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.docs.markdown import DOCUMENTS, ROOT, anchors, links

SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def problems(path: Path) -> list[str]:
    found = []
    here = path.parent
    for href, line in links(path):
        where = f"{os.path.relpath(path, ROOT)}:{line}: {href}"
        if SCHEME.match(href):
            if not href.startswith("https://"):
                found.append(f"{where}: only https links leave the guides")
            continue
        target, _, anchor = href.partition("#")
        file = (path.parent / target).resolve() if target else path
        if target and not (target.endswith(".md") or re.fullmatch(r"(docs/)?images/[a-z0-9-]+\.png", target)):
            found.append(f"{where}: a guide links to a guide or to docs/images/ (name code in backticks)")
        elif not file.is_file():
            found.append(f"{where}: no such file")
        elif anchor and anchor not in anchors(file):
            found.append(f"{where}: no heading #{anchor} in {os.path.relpath(file, here)}")
    return found


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves_to_a_file_and_heading(path):
    assert problems(path) == []


def test_the_checker_finds_a_missing_file_a_missing_heading_and_a_link_into_the_code(tmp_path):
    doc = tmp_path / "doc.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Here\n")
    doc.write_text(
        "# Doc\n\n[a](other.md#here) [b](missing.md) [c](other.md#there) [d](#doc) [e](#nowhere)"
        " [f](../portal/settings.py) [g](http://example.org/)\n"
    )
    found = [p.split(": ", 2)[2] for p in problems(doc)]
    assert found == [
        "no such file",
        "no heading #there in other.md",
        "no heading #nowhere in doc.md",
        "a guide links to a guide or to docs/images/ (name code in backticks)",
        "only https links leave the guides",
    ]
