"""The portal as production serves it, for tests that need the connect proxy: uvicorn running portal.asgi in a
process of its own, on the test database (and its own public URL, so the links it makes lead back to it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.test import Client

from tests.conftest import wait_until
from tests.deploy.helpers import database_url, free_port

ROOT = Path(__file__).resolve().parents[2]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="session")
def _asgi_portal(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """uvicorn serving portal.asgi on the test database; (base URL, its pid)."""
    port = free_port()
    env = dict(os.environ)
    env |= {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(settings.DATABASES["default"]),
        "GRIDLANE_CONNECT_ANSWER_S": "3",
        "GRIDLANE_CONNECT_DECISION_S": "0",  # each request decided afresh: tests change access between requests
        "GRIDLANE_CONNECT_TIMEOUT_S": "3",
        "GRIDLANE_PUBLIC_URL": f"http://127.0.0.1:{port}",
        # Every test job's server runs on this machine, whatever its fabric: IT lists loopback for them, as a
        # site lists its compute network (which addresses pass on whose word: tests/connect/test_reach.py).
        "GRIDLANE_CONNECT_NETWORKS": "127.0.0.0/8",
        "PYTHONPATH": str(ROOT),
    }
    log = (tmp_path_factory.mktemp("asgi") / "uvicorn.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--no-access-log", "--timeout-graceful-shutdown", "5"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: process.poll() is not None or answers(f"{base}/healthz"), timeout=90, every=0.2)
        assert process.poll() is None, "uvicorn ended at start (see its log)"
        yield base, process.pid
    finally:
        stop(process)


@pytest.fixture
def asgi_portal(_asgi_portal: tuple[str, int], transactional_db: None) -> str:
    """The portal's base URL, sharing the database with the test."""
    return _asgi_portal[0]


@pytest.fixture
def asgi_portal_pid(_asgi_portal: tuple[str, int]) -> int:
    return _asgi_portal[1]


def session_cookie(user: Any) -> str:
    """`Cookie:` header of a signed-in session of the user (stored in the database the portal reads)."""
    client = Client()
    client.force_login(user)
    assert client.session[SESSION_KEY] == str(user.pk)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
