"""The VM lease form: a size, hours and an SSH key; the key is recorded with the lease and remembered."""

from __future__ import annotations

from portal.accounts.models import ResourceGroup
from portal.agents.models import LeaseKey
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.workloads.models import Workload

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBPq alice@laptop"


def vm_queue():
    queue = Queue.objects.create(slug="leases", name="VM leases", kinds=["vm"])
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=Fabric.objects.get(name="local"))
    return queue


def test_a_lease_is_submitted_with_its_key_and_the_key_is_remembered(client, alice):
    vm_queue()
    client.force_login(alice)
    form = {"queue": "leases", "name": "debug-box", "size": "small", "lease_hours": "4", "public_key": KEY + "\n",
            "from_addresses": "10.0.0.0/8", "group": ""}  # fmt: skip
    response = client.post("/leases/new/", form)
    lease = Workload.objects.get(name="debug-box")
    assert response.status_code == 302
    assert (lease.kind, lease.gpus_milli, lease.cpus_milli, lease.lease_s) == ("vm", 1000, 8000, 4 * 3600)
    key = LeaseKey.objects.get(workload=lease)
    assert (key.public_key, key.from_addresses) == (KEY, "10.0.0.0/8")
    assert KEY in client.get("/leases/new/").content.decode()


def test_a_bad_key_is_refused_with_a_message_next_to_the_field(client, alice):
    vm_queue()
    client.force_login(alice)
    form = {"queue": "leases", "name": "debug-box", "size": "small", "lease_hours": "4", "public_key": "hello"}
    response = client.post("/leases/new/", form, HTTP_HX_REQUEST="true")
    assert response.status_code == 422
    assert "OpenSSH public key" in response.content.decode()
    assert not Workload.objects.exists()


def test_the_notebook_form_submits_a_notebook_whose_lease_is_its_runtime(client, alice):
    client.force_login(alice)
    form = {"queue": "notebooks", "name": "explore", "gpus": "0.25", "cpus": "2", "memory_gb": "8", "image": "",
            "lease_hours": "2", "group": ""}  # fmt: skip
    assert client.post("/notebooks/new/", form).status_code == 302
    notebook = Workload.objects.get(name="explore")
    assert (notebook.kind, notebook.gpus_milli, notebook.lease_s, notebook.runtime_limit_s) == (
        "notebook", 250, 7200, 7200,
    )  # fmt: skip
