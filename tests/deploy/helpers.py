"""Starting Gridlane's own processes the way deploy/ runs them: production settings, gunicorn, the worker."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SECRET = "a-production-secret-for-tests-only-0123456789-abcdefghijklmnopqrstuvwxyz"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def production_env(database_url: str, var_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a production install (no demo mode, no test settings), as deploy/gridlane.env sets it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRIDLANE_", "DJANGO_"))}
    env |= {
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": database_url,
        "GRIDLANE_SECRET_KEY": SECRET,
        "GRIDLANE_VAR_DIR": str(var_dir),
        "GRIDLANE_ALLOWED_HOSTS": "127.0.0.1,localhost,gridlane.test",
        "GRIDLANE_CSRF_TRUSTED_ORIGINS": "https://gridlane.test",
        "GRIDLANE_BEHIND_TLS_PROXY": "1",
        "PYTHONPATH": str(ROOT),
    }
    return env | extra


def database_url(settings_dict: Mapping[str, Any], name: str | None = None, port: int | None = None) -> str:
    db = settings_dict
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{port or db['PORT'] or 5432}/{name or db['NAME']}"


def manage(env: Mapping[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def get(url: str, headers: Mapping[str, str] | None = None, timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def wait_for(check: Any, what: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


@contextmanager
def gunicorn(
    env: Mapping[str, str], port: int, log: Path, app: str = "portal.wsgi", **more: str
) -> Iterator[subprocess.Popen[bytes]]:
    """One web process as deploy/systemd/gridlane-web.service starts it (or, with app="portal.asgi:application"
    and uvicorn's worker class, gridlane-connect.service), on 127.0.0.1:port."""
    env = {**env, "GRIDLANE_BIND": f"127.0.0.1:{port}", "GRIDLANE_WEB_WORKERS": "1", **more}
    argv = [str(VENV_BIN / "gunicorn"), "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), app]
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(
            lambda: proc.poll() is None and get(f"http://127.0.0.1:{port}/healthz", timeout=5)[0] == 200, "gunicorn"
        )
        yield proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
