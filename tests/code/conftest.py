from __future__ import annotations

import hashlib
from typing import Any

import pytest

from tests.fabrics.travel.helpers import archive


@pytest.fixture(autouse=True)
def code_dir(settings: Any, tmp_path: Any) -> Any:
    """Each test keeps its bundles in its own folder."""
    settings.GRIDLANE_CODE_DIR = tmp_path / "bundles"
    return settings.GRIDLANE_CODE_DIR


@pytest.fixture
def project() -> tuple[bytes, str]:
    """A small bundle and its sha256."""
    body = archive([("helpers", "dir", ""), ("helpers/__init__.py", "file", "VALUE = 7\n")])
    return body, hashlib.sha256(body).hexdigest()
