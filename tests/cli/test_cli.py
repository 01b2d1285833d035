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

    def run(*args: str, stdin: str | None = None, **overrides: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gridlane_cli.main", *args], input=stdin,
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

    shown = json.loads(gridlane("show", "--json", wid).stdout)
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


def test_a_commands_words_arrive_exactly_as_given(gridlane):
    submitted = gridlane("submit", "--queue", "train", "--", "python", "-c", 'print("a b")', "x  y", "$HOME")
    assert submitted.returncode == 0, submitted.stderr
    workload = Workload.objects.get(pk=submitted.stdout.strip())
    assert workload.command == """python -c 'print("a b")' 'x  y' '$HOME'"""
    one = gridlane("submit", "--queue", "train", "--", "make && make test")  # one word: a shell line
    assert Workload.objects.get(pk=one.stdout.strip()).command == "make && make test"


SCRIPT = "#!/bin/bash\n#SBATCH --job-name=from-cli\n#SBATCH -N 1 --gpus-per-node=2\n#SBATCH -t 15\nsrun hostname\n"


def test_a_batch_script_is_submitted_as_sbatch_takes_it_from_a_file_or_stdin(gridlane, tmp_path, slurm_queue):
    (tmp_path / "job.sbatch").write_text(SCRIPT)
    from_file = gridlane("submit", "job.sbatch", "--queue", "hpc")
    assert from_file.returncode == 0, from_file.stderr
    from_stdin = gridlane("submit", "-", "--queue", "hpc", "--gpus", "2", stdin=SCRIPT)
    assert from_stdin.returncode == 0, from_stdin.stderr
    for answer in (from_file, from_stdin):
        workload = Workload.objects.get(pk=answer.stdout.strip())
        assert (workload.script, workload.name, workload.gpus_milli, workload.runtime_limit_s) == (
            SCRIPT,
            "from-cli",
            2000,
            900,
        )
    disagreeing = gridlane("submit", "-", "--queue", "hpc", "--gpus", "4", stdin=SCRIPT)
    assert disagreeing.returncode == 1
    assert "resources.gpus" in disagreeing.stderr
    bad = gridlane("submit", "-", "--queue", "hpc", stdin="#!/bin/bash\n#SBATCH --nodez=2\nx\n")
    assert bad.returncode == 1
    assert "line 2: --nodez is not an sbatch option" in bad.stderr


@pytest.fixture
def slurm_queue(cast):
    from portal.accounts.models import ResourceGroup
    from portal.queues.models import Fabric, Queue, QueueTarget

    cluster = Fabric.objects.create(name="cluster", kind="slurm", gpus_milli=8000, cpus_milli=32000, memory_mib=64000)
    queue = Queue.objects.create(slug="hpc", name="HPC", kinds=["training", "batch"], max_runtime_minutes=60)
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=cluster)
    return queue


def test_a_file_that_is_no_batch_script_goes_as_a_kubernetes_manifest(gridlane, tmp_path, slurm_queue):
    (tmp_path / "job.yaml").write_text("apiVersion: batch/v1\nkind: Job\nspec: {}\n")
    answer = gridlane("submit", "job.yaml", "--queue", "hpc")
    assert answer.returncode == 1
    assert "manifest" in answer.stderr
    assert "runs no Kubernetes Jobs" in answer.stderr


def test_a_priority_tier_the_team_may_not_use_is_refused_naming_those_it_may(gridlane):
    from portal.accounts.models import ResourceGroup
    from portal.queues.models import PriorityTier

    gold = PriorityTier.objects.create(slug="gold", name="Gold", weight=5)
    gold.allowed_groups.add(ResourceGroup.objects.get(slug="fraud"))
    answer = gridlane("submit", "--queue", "train", "--priority", "gold", "--", "true")
    assert answer.returncode == 1
    assert "priority: Choose a priority tier team vision may use: low, normal." in answer.stderr
    gold.allowed_groups.add(ResourceGroup.objects.get(slug="vision"))
    answer = gridlane("submit", "--queue", "train", "--priority", "gold", "--", "true")
    assert answer.returncode == 0, answer.stderr
    assert Workload.objects.get(pk=answer.stdout.strip()).priority == "gold"
