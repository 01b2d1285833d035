"""Serve plotly.js as static/vendor/plotly.min.js from an installed package: no CDN, no copy in git.

The dashboards draw scatter and bar charts only, which plotly.js's basic bundle holds: a quarter of the full
bundle's 4.8 MB, and a quarter of its parse time, which is most of a cold-cache draw (`make bench
BENCH=draw`). `make` installs it with npm (portal/dashboards/vendor/package.json, pinned to the plotly.js of
the plotly package); where it is not installed (no npm), the plotly Python package's full bundle serves.

A staticfiles finder rather than a STATICFILES_DIRS entry, so that only this one file is collected (the
package's folder also holds a 4.9 MB widget bundle and sample data sets that the portal never serves).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plotly
from django.conf import settings
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PACKAGE_DATA = Path(plotly.__file__).resolve().parent / "package_data"
BASIC = Path(__file__).resolve().parent / "vendor" / "node_modules" / "plotly.js-basic-dist-min" / "plotly-basic.min.js"
NAME = "plotly.min.js"
PREFIX = "vendor"
PATH = f"{PREFIX}/{NAME}"


def bundle() -> Path:
    """The file served as vendor/plotly.min.js: the basic bundle where installed, unless a site asks for the
    full one (GRIDLANE_PLOTLY_BUNDLE=full, e.g. for chart types of its own); else the full one."""
    if settings.GRIDLANE_PLOTLY_BUNDLE != "full" and BASIC.is_file():
        return BASIC
    return PACKAGE_DATA / NAME


class _Renamed(FileSystemStorage):
    """The one bundle file under the name pages ask for."""

    def path(self, name: str) -> str:
        return str(bundle()) if name == NAME else super().path(name)


class PlotlyFinder(BaseFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = _Renamed(location=bundle().parent)
        self.storage.prefix = PREFIX  # type: ignore[attr-defined]  # collectstatic reads it

    def check(self, **kwargs: Any) -> list[Any]:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:  # str or list[str], as find_all says
        if path != PATH:
            return [] if (find_all or kwargs.get("all")) else ""
        found = str(bundle())
        return [found] if (find_all or kwargs.get("all")) else found

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, FileSystemStorage]]:
        yield NAME, self.storage
