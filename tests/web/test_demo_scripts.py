"""The demo's queue that takes batch scripts: a script pasted as written runs on the local fabric, honouring its
--time, --job-name and --output, and its output shows on its page, on PostgreSQL here and on the embedded SQLite
database (tests/embedded_script.py in a process of its own, as a newcomer's `make run` has it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.embedded_script import paste_and_run

pytestmark = pytest.mark.usefixtures("local_jobs")  # tests/conftest.py

ROOT = Path(__file__).resolve().parents[2]


def check_ran(seen: dict) -> None:
    assert "Queues that take scripts: Batch scripts." in seen["form"]
    assert seen["status"] < 400, seen.get("answer")
    assert seen["state"] == "succeeded", seen["page"][-2000:]
    assert (seen["name"], seen["runtime_limit_s"], seen["fabric"], seen["native_kind"]) == (
        "hello-demo", 300, "local", "local")  # fmt: skip
    assert "hi\n" in seen["page"]  # its output, on its page
    assert seen["output_file"] == "hi\n"  # and where its --output said


def test_a_script_pasted_to_the_demo_queue_runs_on_the_local_fabric_on_postgresql(client, alice):
    client.force_login(alice)
    check_ran(paste_and_run(client))


@pytest.mark.slow
def test_a_script_pasted_to_the_demo_queue_runs_on_the_local_fabric_on_sqlite(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "DJANGO_SETTINGS_MODULE"}}
    env |= {"GRIDLANE_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "tests.settings",
            "GRIDLANE_LOCAL_FABRIC_ROOT": str(tmp_path / "local-fabric")}  # fmt: skip
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-m", "tests.embedded_script"], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["vendor"] == "sqlite"
    check_ran(seen)
