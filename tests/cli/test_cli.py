"""`gridlane` as a user runs it: a real process against a live test server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from portal.accounts.models import ApiToken
from portal.workloads.models import Workload
from portal.workloads.states import State

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gridlane(live_server, alice, tmp_path):
    _, token = ApiToken.issue(alice, "cli")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRIDLANE_URL": live_server.url, "GRIDLANE_TOKEN": token,
           "XDG_CONFIG_HOME": str(tmp_path / "config")}  # fmt: skip

    def run(*args: str, **overrides: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gridlane_cli.main", *args],
            capture_output=True, text=True, env={**env, **overrides}, cwd=tmp_path, timeout=60,
        )  # fmt: skip

    run.token = token  # type: ignore[attr-defined]
    return run


def test_submit_show_ls_logs_and_cancel(gridlane):
    submitted = gridlane("submit", "--queue", "train", "--kind", "batch", "--name", "hello", "--", "echo", "hi")
    assert submitted.returncode == 0, submitted.stderr
    wid = submitted.stdout.strip()
    workload = Workload.objects.get(pk=wid)
    assert (workload.command, workload.queue.slug, workload.name) == ("echo hi", "train", "hello")

    shown = json.loads(gridlane("show", wid).stdout)
    assert (shown["id"], shown["state"]) == (wid, "pending")
    listed = gridlane("ls", "--mine").stdout
    assert wid in listed
    assert "pending" in listed
    Workload.objects.filter(pk=wid).update(log_tail="line one\n")
    assert gridlane("logs", wid).stdout == "line one\n"

    cancelled = gridlane("cancel", wid)
    assert cancelled.stdout.strip() == f"{wid} cancelled"
    assert Workload.objects.get(pk=wid).state == State.CANCELLED


def test_the_apis_errors_come_back_as_one_line(gridlane):
    answer = gridlane("submit", "--queue", "nope", "--", "true")
    assert answer.returncode == 1
    assert "queue: There is no queue called 'nope'." in answer.stderr


def test_url_and_token_come_from_the_config_file_when_not_given(gridlane, tmp_path, live_server):
    config = tmp_path / "config" / "gridlane" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'url = "{live_server.url}"\ntoken = "{gridlane.token}"\n')
    answer = gridlane("ls", GRIDLANE_URL="", GRIDLANE_TOKEN="")
    assert answer.returncode == 0, answer.stderr


def test_without_a_server_it_says_where_to_give_one(gridlane):
    answer = gridlane("ls", GRIDLANE_URL="", GRIDLANE_TOKEN="")
    assert answer.returncode == 2
    assert "GRIDLANE_URL" in answer.stderr


def test_a_bad_token_is_refused(gridlane):
    answer = gridlane("ls", GRIDLANE_TOKEN="glt_not-a-token")
    assert answer.returncode == 1
    assert "401" in answer.stderr


def test_submit_from_a_jsonl_file_sends_them_in_one_request_and_prints_the_ids_in_order(gridlane, tmp_path):
    lines = [{"queue": "train", "kind": "batch", "name": f"line-{i}", "command": f"echo {i}"} for i in range(3)]
    lines[1]["idempotency_key"] = "line-1"
    (tmp_path / "jobs.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    answer = gridlane("submit", "--from-file", "jobs.jsonl")
    assert answer.returncode == 0, answer.stderr
    ids = answer.stdout.split()
    assert [Workload.objects.get(pk=i).name for i in ids] == ["line-0", "line-1", "line-2"]
    assert Workload.objects.get(pk=ids[1]).idempotency_key == "line-1"


def test_a_bad_line_in_the_file_names_the_item_and_creates_nothing(gridlane, tmp_path):
    lines = [{"queue": "train", "kind": "batch", "name": "ok", "command": "true"},
             {"queue": "train", "kind": "batch", "name": "", "command": "true"}]  # fmt: skip
    (tmp_path / "jobs.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    answer = gridlane("submit", "--from-file", "jobs.jsonl")
    assert answer.returncode == 1
    assert "items.1.name:" in answer.stderr
    assert Workload.objects.count() == 0
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    broken = gridlane("submit", "--from-file", "broken.jsonl")
    assert (broken.returncode, "broken.jsonl, line 1: not JSON" in broken.stderr) == (1, True)
