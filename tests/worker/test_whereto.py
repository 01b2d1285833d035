"""People see where Gridlane would start waiting work and why not elsewhere; IT sees each fabric's live free GPUs
by type next to Gridlane's and others' use (portal/worker/whereto.py)."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from fabrics.base import Resources
from fabrics.live import Node, from_nodes
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.worker import capacity, live, whereto
from portal.workloads.models import Workload
from portal.workloads.states import State


def observed(free: int, gpu_type: str = "h100", *, at_s_ago: float = 1) -> None:
    local = Fabric.objects.get(name="local")
    node = Node("n1", ("gpu",), {gpu_type: 8}, {gpu_type: free}, Resources(free * 1000, 16000, 65536))
    live.keep(local.pk, from_nodes([node]), timezone.now() - timedelta(seconds=at_s_ago))


def test_a_waiting_workload_page_says_where_it_would_start_and_why(cast, alice, submit):
    observed(2)
    workload = submit(alice, queue="train", gpus=1)
    assert workload.queue == Queue.objects.get(slug="train")
    assert QueueTarget.objects.filter(queue=workload.queue, fabric__name="local").exists()
    (start,) = whereto.starts(workload, timezone.now())
    assert (start.fabric, start.first) == ("local", True)
    assert start.why == "local has room for it now (2 GPUs free)"
    client = Client()
    client.force_login(alice)
    page = client.get(workload.get_absolute_url()).content.decode()
    assert "Where it would start" in page
    assert "local has room for it now (2 GPUs free)" in page


def test_a_full_fabric_says_so_and_nothing_is_shown_without_an_observation(cast, alice, submit):
    workload = submit(alice, queue="train", gpus=4)
    assert whereto.starts(workload, timezone.now()) == []
    observed(1)
    (start,) = whereto.starts(workload, timezone.now())
    assert (start.when, start.first) == (None, False)
    assert start.why == "local is full now (1 GPU free) and gives no estimate"


def test_it_sees_live_free_gpus_by_type_with_gridlanes_and_others_use(cast, it_admin):
    observed(3, "a100")
    client = Client()
    client.force_login(it_admin)
    page = client.get("/it/capacity/?window=24h").content.decode()
    assert "Free now, as each fabric reports it" in page
    (row,) = whereto.capacity_rows(timezone.now())
    assert (row.fabric, row.gpu_type, row.total, row.free, row.used, row.fresh) == ("local", "a100", 8, 3, 5, True)
    assert row.others == max(0, 5 - row.gridlane)
    observed(3, "a100", at_s_ago=capacity.period().total_seconds() * (capacity.FRESH_PERIODS + 1))
    (stale,) = whereto.capacity_rows(timezone.now())
    assert not stale.fresh
    assert "stale: planned with the declaration" in client.get("/it/capacity/?window=24h").content.decode()


def test_a_full_fabric_without_an_estimate_gives_gridlanes_own_by_its_running_work(cast, alice, submit):
    local = Fabric.objects.get(name="local")
    running = submit(alice, queue="train", gpus=2)
    started = timezone.now() - timedelta(minutes=5)
    Workload.objects.filter(pk=running.pk).update(
        state=State.RUNNING, fabric=local, started_at=started, runtime_limit_s=600
    )
    waiting = submit(alice, queue="train", gpus=2)
    observed(0)
    (start,) = whereto.starts(waiting, timezone.now())
    assert start.when == started + timedelta(seconds=600)
    assert start.first
    assert start.why == (
        "local is full now (0 GPUs free) and gives no estimate; by the runtime limits of Gridlane's work running "
        f"there, Gridlane expects it to start there by {start.when:%H:%M} UTC"
    )
