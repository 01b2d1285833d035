"""The embedded default end to end, as `make run` starts it: SQLite under var/, web and worker processes,
a token from `issue_token alice`, a job through the API to `succeeded`, Ctrl-C stops everything."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(url: str, token: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.slow
def test_make_run_serves_the_portal_and_a_job_reaches_succeeded(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "DJANGO_SETTINGS_MODULE"}}
    env |= {
        "GRIDLANE_VAR_DIR": str(tmp_path / "var"),
        "GRIDLANE_DEMO": "1",
        "GRIDLANE_CYCLE_SECONDS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("GRIDLANE_KICK_WORKER", None)
    manage = [sys.executable, str(ROOT / "manage.py")]
    for command in (["migrate", "--no-input", "-v0"], ["seed_demo"]):
        done = subprocess.run([*manage, *command], env=env, cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
    issued = subprocess.run(
        [*manage, "issue_token", "alice"], env=env, check=True, cwd=ROOT, capture_output=True, text=True
    )
    token = issued.stdout.strip().splitlines()[-1]
    assert (tmp_path / "var" / "gridlane.sqlite3").exists()

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "portal.log", "wb")  # noqa: SIM115 (closed below)
    # In a session of its own, as a terminal starts it: Ctrl-C goes to its whole foreground process group.
    portal = subprocess.Popen(
        [*manage, "run_portal", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    started: list[int] = []
    try:
        wait_until(lambda: up(f"{base}/healthz"), timeout=30, every=0.2)
        created = call(
            f"{base}/api/v1/workloads/",
            token,
            {
                "queue": "train",
                "kind": "training",
                "name": "smoke",
                "command": "echo smoke-ok on $GRIDLANE_WORKLOAD_ID via $GRIDLANE_ENDPOINT_URL",
                "resources": {"gpus": 1},
            },
        )
        assert created["state"] == "pending"
        url = f"{base}/api/v1/workloads/{created['id']}/"
        done = wait_until(lambda: (w := call(url, token))["state"] in {"succeeded", "failed"} and w, timeout=60)
        assert done["state"] == "succeeded", done
        assert done["exit_code"] == 0
        assert done["fabric"] == "local"
        tail = call(url + "logs/", token)["tail"]
        assert f"smoke-ok on {created['id']}" in tail
        # The job calls the portal back on the port it is served on (PORT=N moves the public URL too).
        assert f"via {base}/api/v1/" in tail, tail
        # The web server, the worker, its django-q2 cluster and the cluster's processes.
        started = wait_until(lambda: len(found := descendants(portal.pid)) >= 5 and found, timeout=30)
    finally:
        os.killpg(portal.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
        try:
            code = portal.wait(timeout=30)
        finally:
            if portal.poll() is None:
                portal.kill()
            log.close()
    output = (tmp_path / "portal.log").read_text()
    assert f"Gridlane is up at {base}/" in output
    assert "alice, bob, charlie, it" in output
    assert "Stopped. No work was running or waiting." in output  # what keeps running, said on Ctrl-C
    assert code == 0, output[-3000:]
    # Ctrl-C stopped every process it started (local jobs' supervisors, in sessions of their own, are not
    # among them: the job here had finished).
    assert [pid for pid in started if alive(pid)] == []
    # Quiet: no warning about a static folder, no routine line for every cycle of the worker.
    assert "No directory at" not in output
    for routine in ("Enqueued [", "processing 'cycle'", "Processed 'portal.worker.tasks.cycle'"):
        assert routine not in output, routine


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc (the ppid field of /proc/N/stat)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether the process still runs (a zombie waiting for its parent counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
