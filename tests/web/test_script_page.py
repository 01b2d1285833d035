"""Paste a batch script: the page submits it as written, and its errors name the line."""

from __future__ import annotations

import pytest

from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.workloads.models import Workload

HTMX = {"HTTP_HX_REQUEST": "true"}
SCRIPT = "#!/bin/bash\r\n#SBATCH --job-name=pasted\r\n#SBATCH --gpus-per-node=2 -t 20\r\nsrun hostname\r\n"


@pytest.fixture
def alice_client(client, alice):
    cluster = Fabric.objects.create(name="cluster", kind="slurm", gpus_milli=8000, cpus_milli=32000, memory_mib=64000)
    queue = Queue.objects.create(slug="hpc", name="HPC", kinds=["training", "batch"], max_runtime_minutes=60)
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=cluster)
    client.force_login(alice)
    return client


def test_a_pasted_script_is_submitted_with_its_directives_as_the_request(alice_client):
    assert "Batch script" in alice_client.get("/workloads/new/script/").content.decode()
    response = alice_client.post("/workloads/new/script/", {"queue": "hpc", "kind": "batch", "script": SCRIPT,
                                                            "priority": "normal"}, **HTMX)  # fmt: skip
    workload = Workload.objects.get()
    assert response["HX-Redirect"] == f"/workloads/{workload.pk}/"
    assert (workload.name, workload.gpus_milli, workload.runtime_limit_s) == ("pasted", 2000, 1200)
    assert workload.script == SCRIPT.replace("\r\n", "\n")  # as typed; the browser's line ends are its own


def test_a_bad_line_comes_back_named_on_the_form(alice_client):
    bad = "#!/bin/bash\n#SBATCH --gpu-per-nod=2\nsrun hostname\n"
    response = alice_client.post("/workloads/new/script/", {"queue": "hpc", "kind": "batch", "script": bad,
                                                            "priority": "normal"}, **HTMX)  # fmt: skip
    assert response.status_code == 422
    assert "line 2: --gpu-per-nod is not an sbatch option" in response.content.decode()
    assert not Workload.objects.exists()
