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


def test_an_uploaded_job_file_is_submitted_as_it_is_and_the_training_form_links_here(alice_client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    page = alice_client.get("/workloads/new/script/").content.decode()
    assert 'enctype="multipart/form-data"' in page
    assert 'href="/workloads/new/script/"' in alice_client.get("/workloads/new/").content.decode()
    job = SimpleUploadedFile("train.sbatch", b"#!/bin/bash\n#SBATCH -J uploaded\n#SBATCH -t 5\nsrun hostname\n")
    data = {"queue": "hpc", "kind": "batch", "script": "", "script_file": job, "priority": "normal"}
    response = alice_client.post("/workloads/new/script/", data, **HTMX)
    workload = Workload.objects.get()
    assert response["HX-Redirect"] == f"/workloads/{workload.pk}/"
    assert (workload.name, workload.runtime_limit_s) == ("uploaded", 300)
    assert workload.script == "#!/bin/bash\n#SBATCH -J uploaded\n#SBATCH -t 5\nsrun hostname\n"


@pytest.mark.parametrize(
    ("script", "upload", "field", "says"),
    [
        ("", None, "script", "Paste the script here, or upload it below."),
        (SCRIPT, b"#!/bin/bash\nhostname\n", "script_file", "not both"),
        ("", b"\x7fELF\x02\x01\x01\x00\xff\xfe", "script_file", "not a text file"),
        ("", b"#" * (256 * 1024 + 1), "script_file", "at most 256 KiB"),
    ],
)
def test_an_upload_that_cannot_be_a_script_is_refused_and_nothing_is_submitted(alice_client, script, upload, field,
                                                                               says):  # fmt: skip
    from django.core.files.uploadedfile import SimpleUploadedFile

    data = {"queue": "hpc", "kind": "batch", "script": script, "priority": "normal"}
    if upload is not None:
        data["script_file"] = SimpleUploadedFile("job.sh", upload)
    response = alice_client.post("/workloads/new/script/", data, **HTMX)
    assert response.status_code == 422
    assert says in response.content.decode()
    assert not Workload.objects.exists()


def test_the_page_says_which_queues_take_scripts(alice_client):
    page = alice_client.get("/workloads/new/script/").content.decode()
    assert "Queues that take scripts: HPC, Batch scripts." in page  # this one, and the demo's


def test_the_demo_names_its_script_queue_and_a_script_to_another_is_refused_naming_it(client, alice):
    client.force_login(alice)  # the demo alone: its `scripts` queue runs scripts on the local fabric
    assert "Queues that take scripts: Batch scripts." in client.get("/workloads/new/script/").content.decode()
    script = "#!/bin/bash\n#SBATCH --gpus-per-node=1\necho hi\n"
    data = {"queue": "train", "kind": "batch", "script": script, "priority": "normal"}
    response = client.post("/workloads/new/script/", data, **HTMX)
    assert response.status_code == 422
    assert "runs no sbatch scripts; queues that take them: Batch scripts." in response.content.decode()


def test_the_page_says_when_no_queue_takes_scripts_and_a_script_there_is_refused_by_name(client, alice):
    client.force_login(alice)  # the demo with its local targets running no scripts
    QueueTarget.objects.filter(fabric__kind="local").update(runs_scripts=False)
    page = client.get("/workloads/new/script/").content.decode()
    assert "No queue you may use takes batch scripts yet" in page
    script = "#!/bin/bash\n#SBATCH --gpus-per-node=1\nsrun hostname\n"
    data = {"queue": "train", "kind": "batch", "script": script, "priority": "normal"}
    response = client.post("/workloads/new/script/", data, **HTMX)
    assert response.status_code == 422
    assert "runs no sbatch scripts; no queue you may use takes them" in response.content.decode()
