"""A production install: every feature from the runtime dependencies alone, `check --deploy` clean, no start
without the shared secret key, static files hashed, compressed and cached for a year under gunicorn, and the
connect process (gunicorn with uvicorn's workers, as deploy/systemd/gridlane-connect.service runs it) up."""

from __future__ import annotations

import ast
import json
import re
import sys
from importlib import metadata

import pytest
from django.db import connection
from packaging.requirements import Requirement

from tests.connect.client import call
from tests.deploy.helpers import ROOT, database_url, free_port, get, gunicorn, manage, production_env

SHIPPED = ("portal", "scheduler", "fabrics", "gridlane_cli")


def runtime_closure(name: str = "gridlane") -> set[str]:
    """The distributions a plain `pip install gridlane` brings, without any extra."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        dist = metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue  # an extra's (dev) or another platform's
            todo.append(requirement.name)
    return seen


def imported_modules() -> set[str]:
    names: set[str] = set()
    for package in SHIPPED:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names.add(node.module.split(".")[0])
    return names


def test_a_plain_install_brings_everything_the_shipped_code_imports_and_runs():
    closure = runtime_closure()
    providers = metadata.packages_distributions()
    missing = {}
    for module in imported_modules() - set(SHIPPED) - set(sys.stdlib_module_names):
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        if not dists & closure:
            missing[module] = sorted(dists)
    assert missing == {}
    # Run, not imported: the production server, and the Jupyter server a local notebook starts (python -m).
    assert {"gunicorn", "jupyter-server", "jupyterlab"} <= closure


def test_check_deploy_is_clean_outside_demo_mode(tmp_path):
    env = production_env(database_url(connection.settings_dict), tmp_path)
    result = manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.parametrize("argv", [["-c", "import portal.wsgi"], ["manage.py", "gridlane_worker"]])
def test_the_web_and_the_worker_refuse_to_start_without_the_secret_key(tmp_path, argv):
    import subprocess

    env = production_env(database_url(connection.settings_dict), tmp_path)
    del env["GRIDLANE_SECRET_KEY"]
    result = subprocess.run([sys.executable, *argv], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "GRIDLANE_SECRET_KEY is not set" in result.stderr
    assert not (tmp_path / "secret_key").exists()  # no key made up for this host


@pytest.mark.django_db(transaction=True)
def test_static_files_are_hashed_compressed_and_cached_for_a_year(tmp_path):
    env = production_env(database_url(connection.settings_dict), tmp_path)
    result = manage(env, "collectstatic", "--no-input")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "static" / "staticfiles.json").read_text())["paths"]
    plotly = manifest["vendor/plotly.min.js"]  # the dashboards' charts, served from here (no CDN)
    assert re.fullmatch(r"vendor/plotly\.min\.[0-9a-f]{12}\.js", plotly)

    port = free_port()
    proxied = {"X-Forwarded-Proto": "https", "Host": "gridlane.test"}  # as the front proxy asks: over TLS
    with gunicorn(env, port, tmp_path / "web.log"):
        base = f"http://127.0.0.1:{port}"
        status, headers, body = get(f"{base}/static/{plotly}", proxied | {"Accept-Encoding": "gzip"})
        assert status == 200
        assert headers["Content-Encoding"] == "gzip"
        assert len(body) < 2_000_000  # about 4.8 MB before compression
        assert "max-age=315360000" in headers["Cache-Control"]
        assert "immutable" in headers["Cache-Control"]
        status, headers, _ = get(f"{base}/static/vendor/plotly.min.js", proxied)
        assert status == 200
        assert "immutable" not in headers["Cache-Control"]  # a name that can change is not kept long

        # Pages name the hashed files.
        status, _, page = get(f"{base}/accounts/signed-out/", proxied)
        assert status == 200, page[:500]
        names = re.findall(rb'/static/([^"\']+)', page)
        assert names
        assert all(re.search(rb"\.[0-9a-f]{12}\.", name) for name in names), names


def test_the_connect_process_serves_the_connect_path_behind_its_sign_in(tmp_path):
    import configparser
    import uuid

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((ROOT / "deploy" / "systemd" / "gridlane-connect.service").read_text())
    settings = dict(part.split("=", 1) for part in unit["Service"]["Environment"].split())
    app = unit["Service"]["ExecStart"].split()[-1]
    env = production_env(database_url(connection.settings_dict), tmp_path)
    port = free_port()
    proxied = {"X_Forwarded_Proto": "https", "Host": "gridlane.test", "Accept": "text/html"}
    with gunicorn(env, port, tmp_path / "connect.log", app=app,
                  GRIDLANE_WEB_WORKER_CLASS=settings["GRIDLANE_WEB_WORKER_CLASS"]):  # fmt: skip
        answer = call(f"http://127.0.0.1:{port}", "GET", f"/connect/{uuid.uuid4()}/lab", None, **proxied)
        assert answer.status == 302  # signed out: to the sign-in page, and back
        assert answer.headers["Location"].startswith("/accounts/login/?next=%2Fconnect%2F")
        assert "uvicorn" in (tmp_path / "connect.log").read_text().lower()
