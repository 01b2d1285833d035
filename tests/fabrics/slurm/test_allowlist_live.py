"""On the real cluster, whose submit account is a Slurm operator: a plain sbatch by that account takes
--priority and a negative --nice (Slurm would honour them), and Gridlane refuses the same script before
anything reaches Slurm, naming the line."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from fabrics.slurm.fabric import SlurmFabric
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric
from portal.worker import connections
from portal.workloads.models import Workload
from tests.fabrics.slurm.conftest import fabric_behind_queue


@pytest.fixture
def hpc(cast: dict[str, Any], cluster_lock: None, slurm_settings: dict[str, Any]) -> Iterator[Fabric]:
    connections.forget_all()
    fabric = fabric_behind_queue(
        slurm_settings, groups=ResourceGroup.objects.filter(slug__in=["vision"]),
        slug="hpc", name="HPC", kinds=["training", "batch"], default_runtime_minutes=10, max_runtime_minutes=60,
    )  # fmt: skip
    yield fabric
    connections.forget_all()


def script(name: str, directive: str) -> str:
    return f"#!/bin/bash\n#SBATCH --job-name={name}\n#SBATCH --time=1\n{directive}\nsleep 300\n"


@pytest.mark.parametrize(
    ("directive", "words"),
    [
        ("#SBATCH --priority=4000000", "--priority: a job's priority is Gridlane's"),
        ("#SBATCH --nice=-5000", "--nice=-5000: only a nice of 0 or more"),
    ],
)
def test_what_the_operator_account_could_do_and_the_person_could_not_is_refused_before_slurm(
    api_as, alice, hpc, directive, words
):
    slurm = connections.fabric_for(hpc)
    assert isinstance(slurm, SlurmFabric)
    user = slurm.ssh.run(["id", "-un"], retry=True).stdout.strip()
    level = slurm.ssh.run(["sacctmgr", "-n", "-P", "show", "user", user, "format=adminlevel"], retry=True)
    assert level.stdout.strip() == "Operator", level.stdout  # the account could set these itself

    # The same script through a plain sbatch by the account: Slurm takes it and honours the directive.
    plain_name = f"gl-plain-{uuid.uuid4().hex[:8]}"
    held = slurm.ssh.run(
        ["sbatch", "--parsable", "--begin=now+3600", "--partition=cpu"], stdin=script(plain_name, directive)
    )
    job = held.stdout.strip()
    assert job.isdigit(), held.stderr
    try:
        shown = slurm.ssh.run(["scontrol", "-o", "show", "job", job], retry=True).stdout
        if "priority" in directive:
            assert "Priority=4000000" in shown, shown
        else:
            assert "Nice=-5000" in shown, shown
    finally:
        slurm.ssh.run(["scancel", job], retry=True)

    # Through Gridlane: a 400 naming the line, no workload, and nothing in Slurm under the name.
    ours = f"gl-ours-{uuid.uuid4().hex[:8]}"
    body = {"queue": "hpc", "kind": "batch", "script": script(ours, directive)}
    response = api_as(alice).post("/api/v1/workloads/", json.dumps(body), content_type="application/json")
    assert response.status_code == 400, response.content
    (message,) = response.json()["errors"]["script"]
    assert message.startswith("line 4: "), message
    assert words in message, message
    assert not Workload.objects.exists()
    listed = slurm.ssh.run(["squeue", "--noheader", "--states=all", f"--name={ours}", "-o", "%i"], retry=True)
    assert listed.stdout.strip() == ""
