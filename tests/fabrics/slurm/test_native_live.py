"""A user's own sbatch script through Gridlane on the real cluster, side by side with a plain sbatch of it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabrics.slurm.fabric import SlurmFabric
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, QueueTarget
from portal.worker import connections, tasks
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.slurm.conftest import fabric_behind_queue, finished

# The write-up's multi-node PyTorch script, scaled to the test cluster (fake GPUs, fewer CPUs and less memory):
# the same directives with smaller numbers, its launcher line printing what torchrun would be given.
WRITEUP = """#!/bin/bash
#SBATCH --job-name=multinode-example
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=2
#SBATCH --cpus-per-task=2
#SBATCH --mem=1G
#SBATCH --time=00:05:00
#SBATCH --partition=cpu
#SBATCH --output=gl-native-%x-%j.out

nodes=( $( scontrol show hostnames $SLURM_JOB_NODELIST ) )
head_node=${nodes[0]}
export MASTER_ADDR=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
env | grep -E '^SLURM_(GPUS|NTASKS|JOB_NAME|NNODES|CPUS_PER_TASK|JOB_PARTITION|MEM_PER_NODE|JOB_NUM_NODES)' | sort
echo "MASTER_ADDR=$MASTER_ADDR"
srun bash -c 'echo "task $SLURM_PROCID of $SLURM_NTASKS on $(hostname)"' | sort
echo "torchrun --nnodes $SLURM_NNODES --nproc_per_node $SLURM_GPUS_PER_NODE --rdzv_endpoint $MASTER_ADDR:29500"
"""
ROOT = Path(__file__).resolve().parents[3]
FIELDS = ("JobName", "Partition", "NumNodes", "NumCPUs", "NumTasks", "CPUs/Task", "TRES", "TimeLimit", "Comment")


@pytest.fixture
def hpc(cast: dict[str, Any], cluster_lock: None, slurm_settings: dict[str, Any]) -> Iterator[Fabric]:
    """A Slurm queue whose target forces the gpu partition and forbids reservations."""
    connections.forget_all()
    fabric = fabric_behind_queue(
        slurm_settings, groups=ResourceGroup.objects.filter(slug__in=["vision"]),
        slug="hpc", name="HPC", kinds=["training", "batch"], default_runtime_minutes=10, max_runtime_minutes=60,
    )  # fmt: skip
    QueueTarget.objects.filter(fabric=fabric).update(native={"forced": {"partition": "gpu"}, "forbidden": ["qos"]})
    yield fabric
    connections.forget_all()


def env_of(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if re.match(r"^[A-Z_]+=", line))


def show_job(slurm: SlurmFabric, job_id: str) -> dict[str, str]:
    text = slurm.ssh.run(["scontrol", "-o", "show", "job", job_id], retry=True).stdout
    pairs = dict(re.findall(r"(\S+?)=(\S*)", text))
    return {key: pairs.get(key, "") for key in FIELDS}


def test_a_script_runs_as_written_and_sees_what_a_plain_sbatch_gives(api_as, alice, hpc):
    client = api_as(alice)
    body = {"queue": "hpc", "kind": "training", "script": WRITEUP}
    response = client.post("/api/v1/workloads/", json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
    workload = Workload.objects.get(pk=response.json()["id"])
    assert (workload.gpus_milli, workload.cpus_milli, workload.memory_mib, workload.nodes) == (2000, 4000, 1024, 1)

    def done() -> bool:
        tasks.cycle()
        workload.refresh_from_db()
        return workload.state in (State.SUCCEEDED, State.FAILED)

    wait_until(done, timeout=120, every=0.5)
    assert workload.state == State.SUCCEEDED, list(workload.events.values_list("reason", flat=True))
    slurm = connections.fabric_for(hpc)
    assert isinstance(slurm, SlurmFabric)

    # The same file through a plain sbatch on the same cluster, from the same directory.
    plain = slurm.ssh.run(["sbatch", "--parsable"], stdin=WRITEUP).stdout.strip()
    assert plain.isdigit(), plain
    assert finished(slurm, plain, timeout=120).exit_code == 0

    ours = slurm.ssh.run(["cat", f"gl-native-multinode-example-{workload.external_id}.out"]).stdout
    theirs = slurm.ssh.run(["cat", f"gl-native-multinode-example-{plain}.out"]).stdout
    ours_env, theirs_env = env_of(ours), env_of(theirs)
    for name in ("SLURM_GPUS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_JOB_NAME", "SLURM_NNODES", "SLURM_NTASKS"):
        assert ours_env[name] == theirs_env[name], name
    assert (ours_env["SLURM_GPUS_PER_NODE"], ours_env["SLURM_NTASKS_PER_NODE"]) == ("2", "2")
    assert ours_env["SLURM_JOB_NAME"] == "multinode-example"
    assert ours_env["MASTER_ADDR"]
    assert "torchrun --nnodes 1 --nproc_per_node 2" in ours
    # The queue forces the gpu partition over the script's own (cpu), on sbatch's command line.
    assert (ours_env["SLURM_JOB_PARTITION"], theirs_env["SLURM_JOB_PARTITION"]) == ("gpu", "cpu")

    # The script reached Slurm byte for byte; Gridlane's tag is the comment, on the command line.
    kept = slurm.ssh.run(["scontrol", "write", "batch_script", workload.external_id, "-"]).stdout
    assert kept == WRITEUP
    ours_job, plain_job = show_job(slurm, workload.external_id), show_job(slurm, plain)
    assert ours_job["Comment"] == f"gridlane:{workload.run_id}"
    for key in ("JobName", "NumNodes", "NumTasks", "CPUs/Task", "TRES", "TimeLimit"):
        assert ours_job[key] == plain_job[key], key
    print("\nscontrol show job    Gridlane | plain sbatch")
    for key in FIELDS:
        print(f"  {key:12} {ours_job[key]} | {plain_job[key]}")
    print("job environment      Gridlane | plain sbatch")
    for key in sorted(set(ours_env) | set(theirs_env)):
        print(f"  {key:22} {ours_env.get(key, '-')} | {theirs_env.get(key, '-')}")


SWEEP = """#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --array=0-3%2
#SBATCH --time=2
#SBATCH --mem=100M
echo "task=$SLURM_ARRAY_TASK_ID index=$GRIDLANE_ARRAY_INDEX"
"""


def test_a_scripts_array_runs_element_by_element_each_a_slurm_array_task(api_as, alice, hpc):
    body = {"queue": "hpc", "kind": "batch", "script": SWEEP}
    response = api_as(alice).post("/api/v1/workloads/", json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
    parent = Workload.objects.get(pk=response.json()["id"])
    assert (parent.array, parent.array_size) == ("0-3%2", 4)
    elements = Workload.objects.filter(array_parent=parent)
    most = 0

    def done() -> bool:
        nonlocal most
        tasks.cycle()
        most = max(most, elements.filter(state__in=[State.ADMITTED, State.DISPATCHING, State.RUNNING]).count())
        parent.refresh_from_db()
        return parent.state != State.PENDING

    wait_until(done, timeout=180, every=0.5)
    assert parent.state == State.SUCCEEDED, list(elements.values_list("state", "pending_reason"))
    assert most <= 2
    for element in elements:
        assert element.log_tail.strip() == f"task={element.array_index} index={element.array_index}"


# The same script over two nodes, as the write-up runs it: the cluster's partition multi holds both nodes.
TWO_NODES = WRITEUP.replace("#SBATCH --nodes=1", "#SBATCH --nodes=2").replace("multinode-example", "two-nodes")


@pytest.fixture
def hpc_multi(cast: dict[str, Any], cluster_lock: None, slurm_settings: dict[str, Any]) -> Iterator[Fabric]:
    """A Slurm queue whose target forces the partition that spans both nodes."""
    connections.forget_all()
    fabric = fabric_behind_queue(
        slurm_settings, groups=ResourceGroup.objects.filter(slug__in=["vision"]),
        slug="hpc", name="HPC", kinds=["training", "batch"], default_runtime_minutes=10, max_runtime_minutes=60,
    )  # fmt: skip
    QueueTarget.objects.filter(fabric=fabric).update(native={"forced": {"partition": "multi"}})
    yield fabric
    connections.forget_all()


def submit_through_the_cli(live_server: Any, user: Any, tmp_path: Any, script: str) -> str:
    """`gridlane submit job.sbatch --queue hpc`, a real process against the live server: the workload's id."""
    from portal.accounts.models import ApiToken

    _, token = ApiToken.issue(user, "cli")
    (tmp_path / "job.sbatch").write_text(script)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRIDLANE_URL": live_server.url, "GRIDLANE_TOKEN": token,
           "XDG_CONFIG_HOME": str(tmp_path / "config")}  # fmt: skip
    answer = subprocess.run(
        [sys.executable, "-m", "gridlane_cli.main", "submit", "job.sbatch", "--queue", "hpc"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert answer.returncode == 0, answer.stderr
    return answer.stdout.strip()


@pytest.mark.django_db(transaction=True)  # the CLI's live server sees what the test wrote
@pytest.mark.parametrize("route", ["api", "cli"])
def test_the_write_ups_script_spans_two_nodes_as_a_plain_sbatch_of_it_does(route, request, alice, hpc_multi, tmp_path):
    if route == "api":
        response = request.getfixturevalue("api_as")(alice).post(
            "/api/v1/workloads/", json.dumps({"queue": "hpc", "kind": "training", "script": TWO_NODES}),
            content_type="application/json",
        )  # fmt: skip
        assert response.status_code == 201, response.content
        workload_id = response.json()["id"]
    else:
        workload_id = submit_through_the_cli(request.getfixturevalue("live_server"), alice, tmp_path, TWO_NODES)
    workload = Workload.objects.get(pk=workload_id)
    assert (workload.gpus_milli, workload.cpus_milli, workload.nodes) == (2000, 4000, 2)  # per node, two nodes

    def done() -> bool:
        tasks.cycle()
        workload.refresh_from_db()
        return workload.state in (State.SUCCEEDED, State.FAILED)

    wait_until(done, timeout=120, every=0.5)
    assert workload.state == State.SUCCEEDED, list(workload.events.values_list("reason", flat=True))
    slurm = connections.fabric_for(hpc_multi)
    assert isinstance(slurm, SlurmFabric)
    # A plain sbatch of the same file, given on its command line the partition the queue forces.
    plain = slurm.ssh.run(["sbatch", "--parsable", "--partition=multi"], stdin=TWO_NODES).stdout.strip()
    assert plain.isdigit(), plain
    assert finished(slurm, plain, timeout=120).exit_code == 0

    ours = slurm.ssh.run(["cat", f"gl-native-two-nodes-{workload.external_id}.out"]).stdout
    theirs = slurm.ssh.run(["cat", f"gl-native-two-nodes-{plain}.out"]).stdout
    ours_env, theirs_env = env_of(ours), env_of(theirs)
    for name in ("SLURM_GPUS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_JOB_NAME", "SLURM_NNODES", "SLURM_NTASKS",
                 "SLURM_JOB_PARTITION", "SLURM_CPUS_PER_TASK", "MASTER_ADDR"):  # fmt: skip
        assert ours_env[name] == theirs_env[name], name
    assert (ours_env["SLURM_NNODES"], ours_env["SLURM_NTASKS"], ours_env["SLURM_GPUS_PER_NODE"]) == ("2", "4", "2")
    assert ours_env["SLURM_JOB_PARTITION"] == "multi"
    # srun really spans both nodes: two tasks on each, and the head node's address resolves.
    hosts = sorted(re.findall(r"^task \d of 4 on (\S+)$", ours, re.MULTILINE))
    node = slurm.ssh.run(["hostname", "-s"]).stdout.strip()
    assert hosts == sorted([node, node, "gl-node2", "gl-node2"]), ours
    assert re.fullmatch(r"127\.0\.0\.[12]", ours_env["MASTER_ADDR"]), ours_env["MASTER_ADDR"]
    assert "torchrun --nnodes 2 --nproc_per_node 2" in ours
    assert slurm.ssh.run(["scontrol", "write", "batch_script", workload.external_id, "-"]).stdout == TWO_NODES
    ours_job, plain_job = show_job(slurm, workload.external_id), show_job(slurm, plain)
    for key in ("JobName", "Partition", "NumNodes", "NumTasks", "CPUs/Task", "TRES", "TimeLimit"):
        assert ours_job[key] == plain_job[key], key
    print(f"\n[{route}] scontrol show job    Gridlane | plain sbatch")
    for key in FIELDS:
        print(f"  {key:12} {ours_job[key]} | {plain_job[key]}")
    print("job environment      Gridlane | plain sbatch")
    for key in sorted(set(ours_env) | set(theirs_env)):
        print(f"  {key:22} {ours_env.get(key, '-')} | {theirs_env.get(key, '-')}")
    print(ours)
