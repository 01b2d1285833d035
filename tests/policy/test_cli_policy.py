"""`gridlane policy export | plan | apply` as IT runs it: a real process against a live test server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from portal.accounts.models import ApiToken
from portal.queues.models import Quota

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gridlane(live_server, site, tmp_path):
    def as_user(name):
        _, token = ApiToken.issue(site[name], "cli")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "GRIDLANE_URL": live_server.url, "GRIDLANE_TOKEN": token,
               "XDG_CONFIG_HOME": str(tmp_path / "config")}  # fmt: skip

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "gridlane_cli.main", "policy", *args], capture_output=True,
                                  text=True, env=env, cwd=tmp_path, timeout=120)  # fmt: skip

        return run

    return as_user


def test_export_plan_and_apply_from_the_terminal(gridlane, tmp_path):
    it = gridlane("it")
    exported = it("export", "-o", "policy.yaml")
    assert exported.returncode == 0, exported.stderr
    path = tmp_path / "policy.yaml"
    assert it("plan", "policy.yaml", "--days", "0").stdout.startswith("Would apply 0 change(s)")
    path.write_text(path.read_text().replace("gpu_reservation: 1.5  # GPUs", "gpu_reservation: 2  # GPUs"))
    planned = it("plan", "policy.yaml")
    assert planned.returncode == 0, planned.stderr
    assert "~ quotas fraud.h100: gpu_reservation 1.5 -> 2" in planned.stdout
    assert "Predicted over the last 30 days" in planned.stdout
    assert Quota.objects.get(group__slug="fraud", fabric__name="h100").gpu_reservation_milli == 1500
    applied = it("apply", "policy.yaml")
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.startswith("Applied 1 change(s)")
    assert Quota.objects.get(group__slug="fraud", fabric__name="h100").gpu_reservation_milli == 2000
    again = it("apply", "policy.yaml")  # its version is the old policy's now, but it changes nothing
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("Applied 0 change(s)")
    path.write_text(path.read_text().replace("gpu_reservation: 2  # GPUs", "gpu_reservation: 1  # GPUs"))
    stale = it("apply", "policy.yaml")
    assert stale.returncode == 1
    assert "409" in stale.stderr
    assert "version" in stale.stderr


def test_a_lead_is_refused(gridlane):
    answer = gridlane("bob")("export")
    assert answer.returncode == 1
    assert "403" in answer.stderr
