"""Serve plotly.js from the plotly package itself, as static/vendor/plotly.min.js: no CDN, no copy in git.

A staticfiles finder rather than a STATICFILES_DIRS entry, so that only this one file is collected (the
package's folder also holds a 4.9 MB widget bundle and sample data sets that the portal never serves).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PACKAGE_DATA = Path(plotly.__file__).resolve().parent / "package_data"
NAME = "plotly.min.js"
PREFIX = "vendor"
PATH = f"{PREFIX}/{NAME}"


class PlotlyFinder(BaseFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=PACKAGE_DATA)
        self.storage.prefix = PREFIX  # type: ignore[attr-defined]  # collectstatic reads it

    def check(self, **kwargs: Any) -> list[Any]:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:  # str or list[str], as find_all says
        if path != PATH:
            return [] if (find_all or kwargs.get("all")) else ""
        found = str(PACKAGE_DATA / NAME)
        return [found] if (find_all or kwargs.get("all")) else found

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, FileSystemStorage]]:
        yield NAME, self.storage
