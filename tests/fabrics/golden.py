"""Golden files: rendered scripts compared whole. GRIDLANE_UPDATE_GOLDEN=1 rewrites them (then read the diff)."""

from __future__ import annotations

import os
from pathlib import Path


def assert_golden(path: Path, text: str) -> None:
    if os.environ.get("GRIDLANE_UPDATE_GOLDEN") == "1" or not path.exists():
        if os.environ.get("CI") and not path.exists():
            raise AssertionError(f"golden file {path.name} is missing")
        path.write_text(text)
    assert text == path.read_text(), f"{path.name} differs; GRIDLANE_UPDATE_GOLDEN=1 rewrites it"
