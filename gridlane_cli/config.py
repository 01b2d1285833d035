"""Where the server URL and token come from: flags, then GRIDLANE_URL / GRIDLANE_TOKEN, then
~/.config/gridlane/config.toml (`url = "..."` and `token = "..."`)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gridlane" / "config.toml"


def resolve(url: str | None, token: str | None) -> tuple[str | None, str | None]:
    """The server URL and token; either is None when no source gives it."""
    stored: dict[str, Any] = {}
    path = config_path()
    if path.is_file():
        with open(path, "rb") as f:
            stored = tomllib.load(f)
    url = url or os.environ.get("GRIDLANE_URL") or stored.get("url")
    token = token or os.environ.get("GRIDLANE_TOKEN") or stored.get("token")
    return (str(url) if url else None), (str(token) if token else None)
