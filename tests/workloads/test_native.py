"""A user's own sbatch/qsub script through the API: its directives are the request, the queue's policy applies,
bad input is a 400 naming the line, and nothing is created."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.utils import timezone

from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.worker import snapshot
from portal.workloads.models import Workload

URL = "/api/v1/workloads/"
SCRIPT = """#!/bin/bash
#SBATCH --job-name=multinode-example
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=2
#SBATCH --cpus-per-task=3
#SBATCH --mem=2G
#SBATCH --time=00:10:00
srun hostname
"""
POLICY = {"forced": {"partition": "gpu"}, "forbidden": ["reservation", "qos"]}


@pytest.fixture
def hpc(cast: dict[str, Any]) -> Queue:
    """A queue `hpc` with a local fabric first and a Slurm fabric second (native work goes only to Slurm)."""
    slurm = Fabric.objects.create(
        name="cluster", kind="slurm", gpus_milli=16000, cpus_milli=64000, memory_mib=128000, settings={}
    )
    queue = Queue.objects.create(
        slug="hpc", name="HPC", kinds=["training", "batch"], default_runtime_minutes=30, max_runtime_minutes=120
    )
    queue.allowed_groups.add(*ResourceGroup.objects.filter(slug__in=["vision", "fraud"]))
    QueueTarget.objects.create(queue=queue, fabric=Fabric.objects.get(name="local"), order=0)
    QueueTarget.objects.create(queue=queue, fabric=slurm, order=1, native=POLICY)
    return queue


def post(client: Any, **body: Any) -> Any:
    data = {"queue": "hpc", "kind": "training", "script": SCRIPT} | body
    return client.post(URL, json.dumps(data), content_type="application/json")


def test_the_scripts_directives_are_the_request(api_as, alice, hpc):
    response = post(api_as(alice))
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["name"] == "multinode-example"
    assert data["resources"] == {"gpus": 2, "cpus": 6, "memory_gb": 2, "nodes": 2}
    assert data["runtime_limit_minutes"] == 10
    workload = Workload.objects.get(pk=data["id"])
    assert workload.script == SCRIPT  # as written, byte for byte
    assert (workload.native_kind, workload.command) == ("slurm", "")


def test_resources_beside_a_script_must_agree(api_as, alice, hpc):
    agreeing = post(api_as(alice), resources={"gpus": 2, "nodes": 2}, runtime_limit_minutes=10)
    assert agreeing.status_code == 201, agreeing.content
    response = post(api_as(alice), resources={"gpus": 4})
    assert response.status_code == 400
    assert "The script asks for 2" in response.json()["errors"]["resources.gpus"][0]


def test_native_work_is_planned_only_on_fabrics_of_its_kind(api_as, alice, hpc):
    assert post(api_as(alice)).status_code == 201
    snap, _ = snapshot.build(timezone.now())
    (job,) = [j for j in snap.pending if j.queue_id == hpc.pk]
    assert job.only_on == (Fabric.objects.get(name="cluster").pk,)


@pytest.mark.parametrize(
    ("script", "field", "words"),
    [
        ("#SBATCH -N 1\nsrun x\n", "script", "line 1: a batch script starts with #!"),
        ("#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gpu-per-nod=2\nx\n", "script", "line 3: --gpu-per-nod"),
        ("#!/bin/bash\n#SBATCH --gpus-per-node=8\n#SBATCH --gres=gpu:4\nx\n", "script", "line 3: --gres=gpu:4"),
        ("#!/bin/bash\n#SBATCH --mem=4Q\nx\n", "script", "line 2: --mem=4Q"),
        ("#!/bin/bash\n#SBATCH --dependency=afterok:1\nx\n", "script", "line 2: --dependency"),
        (
            "#!/bin/bash\n#SBATCH -N 1\n#SBATCH --qos=high\nx\n",
            "script",
            "line 3: --qos: a job's QOS comes from",
        ),
        ("#!/bin/bash\n#SBATCH --time=3:00:00\nx\n", "script", "line 2: the queue HPC allows 1 to 120 minutes"),
        ("#!/bin/bash\n#SBATCH --gpus-per-node=80\nx\n", "script", "line 2: at most 64 GPUs per node"),
        ("#!/bin/bash\n#SBATCH --exclusive\nx\n", "script", "how big a node is"),
    ],
)
def test_bad_scripts_answer_400_naming_the_line_and_create_nothing(api_as, alice, hpc, script, field, words):
    response = post(api_as(alice), script=script)
    assert response.status_code == 400, response.content
    assert any(words in message for message in response.json()["errors"][field]), response.json()
    assert not Workload.objects.exists()


def test_a_script_to_a_queue_without_its_kind_of_fabric_names_the_queues_that_take_it(api_as, alice, hpc):
    response = post(api_as(alice), queue="train")
    assert response.status_code == 400
    (message,) = response.json()["errors"]["script"]
    assert message == "The queue Training and batch runs no sbatch scripts; queues that take them: Batch scripts, HPC."
    assert not Workload.objects.exists()


def test_a_pbs_script_to_a_slurm_only_queue_is_refused(api_as, alice, hpc):
    response = post(api_as(alice), script="#!/bin/bash\n#PBS -l select=1:ncpus=2\nx\n")
    assert response.status_code == 400
    assert "runs no qsub scripts; no queue you may use takes them" in response.json()["errors"]["script"][0]


def test_the_exclusive_flag_counts_the_node_it_declared(api_as, alice, hpc):
    target = QueueTarget.objects.get(queue=hpc, fabric__kind="slurm")
    target.native = POLICY | {"node": {"gpus": 8, "cpus": 32, "memory_gb": 64}}
    target.save()
    response = post(api_as(alice), script="#!/bin/bash\n#SBATCH --exclusive\n#SBATCH -t 5\nx\n")
    assert response.status_code == 201, response.content
    assert response.json()["resources"] == {"gpus": 8, "cpus": 32, "memory_gb": 64, "nodes": 1}


def test_it_cannot_save_a_policy_that_forces_what_a_queue_may_not(hpc):
    target = QueueTarget.objects.get(queue=hpc, fabric__kind="slurm")
    target.native = {"forced": {"nodes": "4"}}
    with pytest.raises(Exception, match="may force partition, account, qos, constraint, reservation"):
        target.full_clean()
    target.native = {"forbidden": ["partitoin"]}
    with pytest.raises(Exception, match="partitoin is no slurm directive"):
        target.full_clean()


def test_a_native_policy_belongs_on_a_slurm_or_pbs_target(hpc):
    target = QueueTarget.objects.get(queue=hpc, fabric__kind="local")
    target.native = {"forced": {"partition": "gpu"}}
    with pytest.raises(Exception, match="Only Slurm and PBS targets read batch scripts"):
        target.full_clean()


def test_an_sbatch_script_goes_to_slurm_where_the_queue_has_it_beside_a_local_target_that_runs_scripts(
    api_as, alice, hpc
):
    QueueTarget.objects.filter(queue=hpc, fabric__kind="local").update(runs_scripts=True)
    response = post(api_as(alice))
    assert response.status_code == 201, response.content
    assert Workload.objects.get().native_kind == "slurm"


def test_a_script_the_local_fabric_cannot_honour_is_refused_naming_the_line_on_the_demo_queue(api_as, alice):
    script = "#!/bin/bash\n#SBATCH --time=5\n#SBATCH --exclusive\necho hi\n"
    response = post(api_as(alice), queue="scripts", kind="batch", script=script)
    assert response.status_code == 400
    (message,) = response.json()["errors"]["script"]
    assert message.startswith("line 3: --exclusive: the local fabric cannot honour it")
    assert not Workload.objects.exists()


def test_only_a_local_target_is_told_to_run_scripts_and_it_takes_no_forced_or_extra_directives(cast):
    from django.core.exceptions import ValidationError

    slurm = Fabric.objects.create(name="c2", kind="slurm", gpus_milli=1000, cpus_milli=1000, memory_mib=1000)
    queue = Queue.objects.get(slug="scripts")
    with pytest.raises(ValidationError, match="Slurm and PBS ones always do"):
        QueueTarget(queue=queue, fabric=slurm, runs_scripts=True).full_clean()
    local = QueueTarget.objects.get(queue=queue)
    local.native = {"forced": {"partition": "gpu"}}
    with pytest.raises(ValidationError, match="may force nothing"):
        local.full_clean()
    local.native, local.directives_allowed = {}, ["mail-type"]
    with pytest.raises(ValidationError, match="honours only the directives it reads"):
        local.full_clean()
    local.runs_scripts, local.directives_allowed, local.native = False, [], {"max_array": 5}
    with pytest.raises(ValidationError, match="local ones IT lets run scripts"):
        local.full_clean()
