"""A request may name a GPU type its queue's targets have (portal/workloads/gpu_types.py); the API refuses any other,
naming the field, and the scheduler skips targets without it (scheduler/soonest.py)."""

from __future__ import annotations

import json

from django.utils import timezone

from fabrics.base import Resources
from fabrics.live import Node, from_nodes
from portal.queues.models import Fabric, Queue
from portal.worker import live, snapshot
from portal.workloads import gpu_types
from portal.workloads.models import Workload

URL = "/api/v1/workloads/"
BODY = {"queue": "train", "kind": "training", "name": "typed", "command": "true", "resources": {"gpus": 1}}


def post(client, **extra):
    return client.post(URL, json.dumps(BODY | extra), content_type="application/json")


def local_has(gpu_type: str) -> None:
    local = Fabric.objects.get(name="local")
    node = Node("n1", ("gpu",), {gpu_type: 4}, {gpu_type: 4}, Resources(4000, 16000, 65536))
    live.keep(local.pk, from_nodes([node]), timezone.now())


def test_a_type_some_target_has_is_taken_and_reaches_the_scheduler(api_as, alice):
    local_has("h100")
    assert gpu_types.offered(Queue.objects.get(slug="train")) == ["h100"]
    response = post(api_as(alice), gpu_type="h100")
    assert response.status_code == 201, response.content
    workload = Workload.objects.get(pk=response.json()["id"])
    assert workload.gpu_type == "h100"
    snap, _ = snapshot.build(timezone.now())
    (job,) = [j for j in snap.pending if j.id == str(workload.pk)]
    assert job.gpu_type == "h100"


def test_a_type_no_target_has_is_refused_by_name(api_as, alice):
    local_has("a100")
    response = post(api_as(alice), gpu_type="h100")
    assert response.status_code == 400
    assert response.json() == {
        "errors": {"gpu_type": ["The queue Training and batch has a100; leave it empty for any type."]}
    }
    bad = post(api_as(alice), gpu_type="H100; rm")
    assert list(bad.json()["errors"]) == ["gpu_type"]


def test_no_type_is_open_to_any(api_as, alice):
    response = post(api_as(alice))
    assert response.status_code == 201, response.content
    assert Workload.objects.get(pk=response.json()["id"]).gpu_type == ""
