"""The new-workload form offers the GPU types its queues' fabrics have (and any), and a chosen type is kept."""

from __future__ import annotations

from django.utils import timezone

from fabrics.base import Resources
from fabrics.live import Node, from_nodes
from portal.queues.models import Fabric
from portal.worker import live
from portal.workloads.models import Workload
from tests.conftest import TRAINING_FORM


def test_the_form_offers_the_queues_types_and_keeps_the_choice(client, alice):
    local = Fabric.objects.get(name="local")
    node = Node("n1", ("gpu",), {"h100": 4}, {"h100": 4}, Resources(4000, 16000, 65536))
    live.keep(local.pk, from_nodes([node]), timezone.now())
    client.force_login(alice)
    page = client.get("/workloads/new/").content.decode()
    assert '<option value="" selected>Any</option>' in page
    option = page[page.index('<option value="h100"') :].split("</option>")[0]
    assert "Training and batch" in option  # and the demo's other queue on the local fabric, Batch scripts
    assert "a100" not in page
    response = client.post("/workloads/new/", TRAINING_FORM | {"gpu_type": "h100"})
    assert response.status_code == 302, response.content.decode()[:500]
    assert Workload.objects.latest("submitted_at").gpu_type == "h100"
    refused = client.post("/workloads/new/", TRAINING_FORM | {"gpu_type": "l4"})
    assert refused.status_code == 422
    assert "Select a valid choice" in refused.content.decode()
