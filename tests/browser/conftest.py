"""Browser tests: Debian's headless Chromium driven by Playwright, against a live Gridlane on a fixed
127.0.0.1 port that the test provider (tests/idp) has registered as a redirect URI (8765-8774: one free
port per test process, so `pytest -n 2` works)."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connections
from playwright.sync_api import sync_playwright
from pytest_django.live_server_helper import LiveServer

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "var" / "test-output" / "browser"
REGISTERED_PORTS = range(8765, 8775)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture(scope="session")
def _gridlane_server(django_db_setup: None) -> Iterator[LiveServer]:
    # Depends on the test database so that it stops before the database is dropped.
    for port in REGISTERED_PORTS:
        try:
            server = LiveServer(f"127.0.0.1:{port}")
        except OSError:
            continue  # taken by another test process
        yield server
        server.stop()
        return
    pytest.fail(f"none of the registered ports {REGISTERED_PORTS.start}-{REGISTERED_PORTS.stop - 1} is free")


@pytest.fixture
def gridlane(_gridlane_server: LiveServer, transactional_db: None) -> Iterator[str]:
    """The live server's base URL, with the database shared between it and the test."""
    _gridlane_server._live_server_modified_settings.enable()
    yield _gridlane_server.url
    _gridlane_server._live_server_modified_settings.disable()


@pytest.fixture
def browser_page(gridlane: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A Chromium page of its own (started and stopped with the test), that never leaves 127.0.0.1.

    Requests elsewhere are refused; those made by Gridlane's own pages are noted in `gridlane_external`.
    """
    # Playwright's sync API runs an event loop in this thread while it lives; the ORM calls the test
    # makes meanwhile are still plain synchronous ones. Starting Playwright here, not per session, keeps
    # that loop (and this setting) out of every other test.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        # Playwright cannot download its own browser here; Debian's works (tests/services/chromium/up.sh).
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context()
        page = context.new_page()
        external: list[str] = []
        setattr(page, "gridlane_external", external)  # noqa: B010 (read by the tests)

        def route(route: Any) -> None:
            if route.request.url.startswith("http://127.0.0.1:"):
                route.continue_()
                return
            if route.request.frame.url.startswith(gridlane):
                external.append(route.request.url)
            route.abort()

        page.route("**/*", route)
        try:
            yield page
        finally:
            context.close()
            browser.close()
            connections.close_all()  # those the test opened while Playwright ran (see the setting above)


def directory(login: str, groups: list[str]) -> None:
    """Tell the test provider which groups `login` has from now on."""
    request = urllib.request.Request(
        f"{settings.GRIDLANE_OIDC['ISSUER']}/test/accounts/{login}",
        data=json.dumps({"groups": groups}).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 204


# The screenshots the guides show (docs/images/NAME.png), by the name a test gives its screenshot. They are
# written again when GRIDLANE_DOCS_SCREENSHOTS=1 is set (then commit them); the viewport only, to stay small.
DOCS_IMAGES = {
    "my-workloads": "my-workloads",
    "new-training-run-guide": "new-training-run",
    "dashboard-vision-lead": "team-dashboard",
    "queue-editor": "queue-editor",
}


def screenshot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    if name in DOCS_IMAGES and os.environ.get("GRIDLANE_DOCS_SCREENSHOTS") == "1":
        page.screenshot(path=str(ROOT / "docs" / "images" / f"{DOCS_IMAGES[name]}.png"))
