"""Notebooks on a batch cluster: the script's launcher, rendered and run here with a stand-in Jupyter and portal.

The launcher (fabrics.ssh.notebook) is bash plus python3, run by the job on its node; here a local bash
runs it, with a tiny HTTP server for Jupyter and another for the portal's callback.
"""

from __future__ import annotations

import http.server
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabrics.base import JobSpec, Resources
from fabrics.pbs.render import Options as PbsOptions
from fabrics.pbs.render import render as pbs_render
from fabrics.slurm.render import Options, render
from fabrics.ssh import notebook
from fabrics.ssh.notebook import ENDPOINT_SECRET_ENV, ENDPOINT_URL_ENV, MASKED
from tests.conftest import wait_until
from tests.fabrics.golden import assert_golden

GOLDEN = Path(__file__).parent / "golden"
WORKLOAD = uuid.UUID("3f2a9c0d-1e4b-4c57-9a6e-0123456789ab")
HOSTILE = "it's $(touch {p}) `touch {p}`\n#SBATCH --partition=nope"
SECRET = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
URL = f"https://gridlane.example.org/api/v1/workloads/{WORKLOAD}/endpoint/"


def notebook_spec(**overrides: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "workload_id": WORKLOAD,
        "name": "explore",
        "kind": "notebook",
        "owner": "alice",
        "group": "vision",
        "queue": "hpc-notebooks",
        "command": "",
        "per_node": Resources(1000, 4000, 16384),
        "runtime_limit_s": 8 * 3600,
        "env": {ENDPOINT_URL_ENV: URL, ENDPOINT_SECRET_ENV: SECRET},
    }
    return JobSpec(**(fields | overrides))


def test_a_notebook_script_matches_its_golden_file_and_keeps_the_secret_out_of_the_record(tmp_path):
    spec = notebook_spec(name=HOSTILE.format(p=tmp_path / "pwned"))
    recorded = render("", spec, Options(partition="cpu", gpu_partition="gpu"))
    assert_golden(GOLDEN / "notebook.sbatch", recorded.replace(str(tmp_path), "TMP"))
    assert SECRET not in recorded
    assert f"export {ENDPOINT_SECRET_ENV}='{MASKED}'" in recorded
    sent = render("", spec, Options(partition="cpu", gpu_partition="gpu"), reveal=True)
    assert sent == recorded.replace(f"'{MASKED}'", SECRET)  # the one difference
    assert "gridlane_notebook jupyter lab" in sent


def test_the_pbs_script_of_a_notebook_has_the_launcher_and_masks_the_secret_too():
    recorded = pbs_render("", notebook_spec(), PbsOptions(flavor="torque"))
    assert "gridlane_notebook() {" in recorded
    assert recorded.rstrip().endswith("gridlane_notebook jupyter lab")
    assert SECRET not in recorded
    assert SECRET in pbs_render("", notebook_spec(), PbsOptions(flavor="torque"), reveal=True)


def test_other_kinds_get_no_launcher_and_no_endpoint():
    script = render("", notebook_spec(kind="batch", env={}, command="true"), Options())
    assert "gridlane_notebook" not in script
    assert ENDPOINT_SECRET_ENV not in script


def test_hostile_environment_values_reach_the_job_as_data(tmp_path):
    pwned = tmp_path / "pwned"
    hostile = HOSTILE.format(p=pwned)
    spec = notebook_spec(env={ENDPOINT_URL_ENV: hostile, ENDPOINT_SECRET_ENV: hostile + "'\"\\"})
    template = f'#!/bin/bash\nprintf "%s|%s" "$${ENDPOINT_URL_ENV}" "$${ENDPOINT_SECRET_ENV}"\n'
    sent = render(template, spec, Options(), reveal=True)
    shown = subprocess.run(["bash", "-c", sent], capture_output=True, text=True, check=True).stdout
    assert shown == f"{hostile}|{hostile}'\"\\"
    assert not pwned.exists()


@pytest.mark.parametrize("via", ["tunnel", 1, "SSH"])
def test_connect_via_is_direct_or_ssh(via):
    with pytest.raises(ValueError, match="connect_via"):
        notebook.check_connect_via({"connect_via": via})
    notebook.check_connect_via({"connect_via": "ssh"})
    notebook.check_connect_via({})


# The launcher, run here ------------------------------------------------------------------------------
FAKE_JUPYTER = r"""
import http.server, os, sys
port = int(next(a for a in sys.argv if a.startswith("--port=")).split("=")[1])
if os.environ.get("GRIDLANE_ENDPOINT_SECRET") or not os.environ.get("JUPYTER_TOKEN"):
    sys.exit("the secret must not reach the server, and the token must")
if "--no-browser" not in sys.argv or "--ServerApp.port_retries=0" not in sys.argv:
    sys.exit("options missing")
settings = os.path.join(os.environ.get("JUPYTERLAB_SETTINGS_DIR", "/nowhere"),
                        "@jupyterlab", "apputils-extension", "notification.jupyterlab-settings")
if '"fetchNews": "false"' not in open(settings).read() or not os.path.isdir(os.environ["JUPYTERLAB_WORKSPACES_DIR"]):
    sys.exit("the session's own JupyterLab settings (news off) and workspaces are missing")
base = next(a for a in sys.argv if a.startswith("--ServerApp.base_url=")).split("=")[1]
class Api(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == base + "api" else 404)
        self.end_headers()
        self.wfile.write(b'{"version": "fake"}')
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Api).serve_forever()
"""


@pytest.fixture
def portal() -> Iterator[dict[str, Any]]:
    """A stand-in for the portal's callback: records what was POSTed."""
    seen: dict[str, Any] = {}

    class Callback(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.update(path=self.path, authorization=self.headers["Authorization"], body=json.loads(body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Callback)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    seen["url"] = f"http://127.0.0.1:{server.server_address[1]}/api/v1/workloads/{WORKLOAD}/endpoint/"
    yield seen
    server.shutdown()


def launch(tmp_path: Path, portal_url: str, server: list[str]) -> subprocess.Popen[str]:
    script = "\n".join(
        [
            f"export {ENDPOINT_URL_ENV}={portal_url!r} {ENDPOINT_SECRET_ENV}={SECRET!r} GRIDLANE_NOTEBOOK_HOST=node7",
            f"export GRIDLANE_CONNECT_PREFIX=/connect/{WORKLOAD}/",
            f"export GRIDLANE_PYTHON={sys.executable!r}",  # the node's python3, here this one
            f"export GRIDLANE_JUPYTERLAB_DIR={str(tmp_path / 'lab')!r}",  # the session's JupyterLab folder
            notebook.FUNCTION,
            shlex.join(["gridlane_notebook", *server]),
        ]
    )
    path = tmp_path / "job.sh"
    path.write_text(script)
    return subprocess.Popen(
        ["bash", str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def test_the_launcher_starts_the_server_then_reports_host_port_and_token_with_the_secret(tmp_path, portal):
    (tmp_path / "jupyter.py").write_text(FAKE_JUPYTER)
    job = launch(tmp_path, portal["url"], [sys.executable, str(tmp_path / "jupyter.py")])
    try:
        wait_until(lambda: "body" in portal or job.poll() is not None, timeout=30)
        assert job.poll() is None, job.communicate()[0]  # it waits on the server
        assert portal["path"] == f"/api/v1/workloads/{WORKLOAD}/endpoint/"
        assert portal["authorization"] == f"Bearer {SECRET}"
        assert set(portal["body"]) == {"host", "port", "token", "path"}
        assert portal["body"]["host"] == "node7"
        assert portal["body"]["path"] == f"/connect/{WORKLOAD}/"  # Jupyter serves under the connect path
        assert 0 < portal["body"]["port"] < 65536
        assert len(portal["body"]["token"]) >= 32
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(10)


def test_a_server_that_dies_first_is_reported_nowhere_and_the_job_fails(tmp_path, portal):
    job = launch(tmp_path, portal["url"], [sys.executable, "-c", "import sys; sys.exit(3)"])
    output, _ = job.communicate(timeout=30)
    assert job.returncode != 0
    assert "ended before it answered" in output
    assert "body" not in portal
