"""Every page and form on the embedded SQLite database (the default a newcomer meets), not only on PostgreSQL:
tests/embedded_walk.py visits them in a process of its own with no DATABASE_URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_every_page_and_form_answers_without_a_server_error_on_sqlite(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "DJANGO_SETTINGS_MODULE"}}
    env |= {"GRIDLANE_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-m", "tests.embedded_walk"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "var" / "gridlane.sqlite3").exists()
    walked = json.loads(done.stdout.strip().splitlines()[-1])
    assert walked["failed"] == []
    # The walk reached what it is for: each of the cast, the script page's post and the forms the pages carry.
    seen = walked["seen"]
    for who in ("alice", "bob", "charlie", "it"):
        assert f"{who} POST /workloads/new/script/" in seen
        assert f"{who} GET /teams/" in seen
    assert "bob POST /teams/vision/grants/new/" in seen
    assert len(seen) > 100, len(seen)
