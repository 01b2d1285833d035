"""`gridlane login`, `ls` (mine by default, an owner column, --team), `show` readable by default and
`logs -f` that follows and says why there is no output yet: a real process against a live test server."""

from __future__ import annotations

import io
import json
import stat
import threading
from typing import Any

import pytest

from gridlane_cli import everyday
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.cli.test_cli import gridlane  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_login_checks_a_pasted_token_and_writes_the_config_file_for_later_commands(gridlane, tmp_path, live_server):  # noqa: F811
    done = gridlane("login", "--paste", stdin=gridlane.token + "\n", GRIDLANE_TOKEN="", GRIDLANE_URL=live_server.url)
    assert done.returncode == 0, done.stderr
    assert "as alice (teams: vision)" in done.stdout
    assert f"{live_server.url}/accounts/#tokens" in done.stderr  # where a token is made
    config = tmp_path / "config" / "gridlane" / "config.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    later = gridlane("ls", GRIDLANE_TOKEN="", GRIDLANE_URL="")
    assert later.returncode == 0, later.stderr
    refused = gridlane("login", "--paste", stdin="not-a-token\n", GRIDLANE_TOKEN="", GRIDLANE_URL=live_server.url)
    assert refused.returncode == 1
    assert "refused this token" in refused.stderr


def test_ls_shows_mine_with_an_owner_column_and_team_shows_the_teams(gridlane, bob, submit):  # noqa: F811
    mine = gridlane("submit", "--queue", "train", "--name", "mine", "--", "true").stdout.strip()
    theirs = submit(bob, name="bobs-run")
    listed = gridlane("ls").stdout
    assert listed.splitlines()[0].split() == ["ID", "STATE", "QUEUE", "OWNER", "NAME"]
    assert mine in listed
    assert "alice" in listed
    assert str(theirs.pk) not in listed
    team = gridlane("ls", "--team").stdout
    assert str(theirs.pk) in team
    assert "bob" in team
    assert json.loads(gridlane("ls", "--json").stdout)["results"][0]["id"] == mine


def test_show_is_readable_by_default(gridlane):  # noqa: F811
    wid = gridlane("submit", "--queue", "train", "--name", "readable", "--gpus", "1", "--", "echo", "hi").stdout.strip()
    shown = gridlane("show", wid).stdout
    assert shown.startswith("readable  (batch, pending)")
    assert "asks for  1 GPU, 1 CPU, 4 GB" in shown
    assert "command   echo hi" in shown
    assert json.loads(gridlane("--json", "show", wid).stdout)["id"] == wid


class Portal:
    """The API as `logs -f` reads it, scripted: each call to sleep moves the workload on one step."""

    def __init__(self, steps):
        self.steps = steps
        self.at = 0

    def get(self, path):
        state, reason, tail = self.steps[self.at]
        if path.endswith("/logs/"):
            return {"tail": tail}
        return {"state": state, "pending_reason": reason, "exit_code": 0 if state == "succeeded" else None}

    def sleep(self, _):
        self.at = min(self.at + 1, len(self.steps) - 1)


def test_logs_follow_prints_new_output_once_and_says_why_there_is_none_yet(capsys):
    portal: Any = Portal([
        ("pending", "Waiting for capacity on local", ""),
        ("running", "", ""),
        ("running", "", "one\n"),
        ("running", "", "one\ntwo\n"),
        ("succeeded", "", "one\ntwo\nthree\n"),
    ])  # fmt: skip
    out = io.StringIO()
    args = type("Args", (), {"id": "w", "follow": True})()
    assert everyday.logs(args, portal, sleep=portal.sleep, out=out) == 0
    assert out.getvalue() == "one\ntwo\nthree\n"
    said = capsys.readouterr().err
    assert "waiting to start: Waiting for capacity on local" in said
    assert "running: no output yet" in said
    assert said.strip().endswith("gridlane: succeeded (exit code 0)")


def test_new_part_of_a_tail_that_moved_on():
    assert everyday.new_part("a\nb\n", "a\nb\nc\n") == "c\n"
    assert everyday.new_part("a\nb\nc\n", "b\nc\nd\n") == "d\n"  # the kept tail dropped its first line
    assert everyday.new_part("x\n", "y\n") == "y\n"


def test_logs_follow_against_the_portal_until_the_work_ends(gridlane):  # noqa: F811
    wid = gridlane("submit", "--queue", "train", "--name", "followed", "--", "true").stdout.strip()

    def finish():
        Workload.objects.filter(pk=wid).update(state=State.SUCCEEDED, exit_code=0, log_tail="done\n")

    timer = threading.Timer(1.0, finish)
    timer.start()
    try:
        followed = gridlane("logs", "-f", wid)
    finally:
        timer.join()
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout == "done\n"
    assert "waiting to start" in followed.stderr


def test_show_says_how_good_the_estimate_is():
    from gridlane_cli.everyday import readable

    base = {"id": "1", "name": "n", "kind": "batch", "queue": "train", "group": "vision", "owner": "alice",
            "resources": {"gpus": 1, "cpus": 1, "memory_gb": 4, "nodes": 1}}  # fmt: skip
    waiting = readable(base | {"state": "pending", "estimated_start": "2026-12-06T14:05:00Z",
                               "estimate_band": {"low_seconds": -150, "high_seconds": 700}})  # fmt: skip
    assert "expected  2026-12-06T14:05:00Z  (usually within -3/+12 min)" in waiting
    started = readable(base | {"state": "running", "started_at": "2026-12-06T14:09:00Z", "estimate_error_seconds": 240})
    assert "started   2026-12-06T14:09:00Z  (4 min later than estimated)" in started
    assert "than estimated" not in readable(base | {"state": "running", "started_at": "2026-12-06T14:09:00Z"})
