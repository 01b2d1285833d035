"""`gridlane submit --dry-run` as a user runs it: a real process against a live test server, recording nothing."""

from __future__ import annotations

import json

import pytest

from portal.worker import dryrun, tasks
from portal.workloads.models import Workload
from tests.cli.test_cli import gridlane  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_dry_run_prints_where_it_would_land_and_submits_nothing(gridlane, alice, submit):  # noqa: F811
    asked = gridlane("submit", "--dry-run", "--queue", "train", "--gpus", "1", "--name", "probe", "--", "true")
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.startswith("would start now on local\n")
    assert "why: It would start now on local." in asked.stdout
    assert Workload.objects.count() == 0
    submit(alice, gpus=6)
    tasks.admit()
    dryrun.SNAPSHOTS.forget()  # (the live server's, in this process)
    asked = gridlane("submit", "--dry-run", "--json", "--queue", "train", "--gpus", "1", "--", "true")
    answer = json.loads(asked.stdout)
    assert (answer["outcome"], answer["target"], answer["position"]) == ("wait", "local", 1)  # vision holds its 6
    assert answer["reason"]
    assert Workload.objects.count() == 1


def test_a_refused_dry_run_says_why_as_a_submit_does(gridlane):  # noqa: F811
    answer = gridlane("submit", "--dry-run", "--queue", "nope", "--", "true")
    assert answer.returncode == 1
    assert "queue: There is no queue called 'nope'." in answer.stderr


def test_a_file_of_bodies_is_dry_run_together(gridlane, tmp_path):  # noqa: F811
    body = {"queue": "train", "kind": "batch", "name": "part", "command": "true", "resources": {"gpus": 3}}
    (tmp_path / "many.jsonl").write_text("\n".join(json.dumps(body) for _ in range(3)) + "\n")
    asked = gridlane("submit", "--dry-run", "--json", "--from-file", "many.jsonl")
    assert asked.returncode == 0, asked.stderr
    outcomes = [json.loads(line)["outcome"] for line in asked.stdout.splitlines()]
    assert outcomes == ["admit", "admit", "wait"]
    assert Workload.objects.count() == 0
