"""Arrays on the real cluster: a 20-element array with a limit of 5, through the API and the worker, reaches Slurm
as real Slurm arrays (the elements admitted together share one job id, `<id>_<index>`), never runs more than 5
at once, and each element sees its index as Slurm and Gridlane name it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from fabrics.slurm import parse
from fabrics.slurm.fabric import SlurmFabric
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric
from portal.worker import connections, tasks
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.slurm.conftest import fabric_behind_queue

ACTIVE = [State.ADMITTED, State.DISPATCHING, State.RUNNING, State.CANCELLING]


@pytest.fixture
def hpc(cast: dict[str, Any], cluster_lock: None, slurm_settings: dict[str, Any]) -> Iterator[Fabric]:
    connections.forget_all()
    fabric = fabric_behind_queue(
        slurm_settings, groups=ResourceGroup.objects.filter(slug__in=["vision"]),
        slug="hpc", name="HPC", kinds=["training", "batch"], default_runtime_minutes=10, max_runtime_minutes=60,
    )  # fmt: skip
    yield fabric
    connections.forget_all()


def test_twenty_elements_with_a_limit_of_five_run_as_slurm_arrays_five_at_most_each_seeing_its_index(
    api_as, alice, hpc
):
    body = {
        "queue": "hpc", "kind": "batch", "name": "sweep", "array": "0-19%5",
        "resources": {"cpus": 1, "memory_gb": 0.25},
        "command": 'echo "task=$SLURM_ARRAY_TASK_ID index=$GRIDLANE_ARRAY_INDEX job=${SLURM_ARRAY_JOB_ID}"; sleep 3',
    }  # fmt: skip
    response = api_as(alice).post("/api/v1/workloads/", json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
    parent = Workload.objects.get(pk=response.json()["id"])
    elements = Workload.objects.filter(array_parent=parent)
    slurm = connections.fabric_for(hpc)
    assert isinstance(slurm, SlurmFabric)
    most_in_gridlane = most_in_slurm = 0

    def done() -> bool:
        nonlocal most_in_gridlane, most_in_slurm
        tasks.cycle()
        most_in_gridlane = max(most_in_gridlane, elements.filter(state__in=ACTIVE).count())
        ids = [i for i in elements.values_list("external_id", flat=True) if i]
        if ids:  # what Slurm itself runs now, element by element (squeue -r)
            held = slurm.ssh.run(slurm._squeue("-r", f"--jobs={','.join(ids)}", fields=parse.squeue_tasks_format()))
            running = [job for job in parse.squeue_tasks(held.stdout) if job.state == "RUNNING"]
            most_in_slurm = max(most_in_slurm, len(running))
        parent.refresh_from_db()
        return parent.state != State.PENDING

    wait_until(done, timeout=300, every=0.5)
    assert parent.state == State.SUCCEEDED, list(elements.values_list("array_index", "state", "pending_reason"))
    assert most_in_gridlane <= 5
    assert most_in_slurm <= 5
    by_job = Counter(external_id.split("_")[0] for external_id in elements.values_list("external_id", flat=True))
    assert len(by_job) < 20, by_job  # elements admitted together went as one sbatch
    assert max(by_job.values()) > 1
    for element in elements:
        job_id, _, index = element.external_id.partition("_")
        assert index == str(element.array_index)
        assert element.log_tail.strip() == f"task={index} index={index} job={job_id}"
        status = slurm.poll([element.external_id])[element.external_id]
        assert status.exit_code == 0
