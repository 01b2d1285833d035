"""GRIDLANE_LIVE_ROUTING=0 routes on the declarations alone (portal/worker/live.py): a queue over [a Slurm fabric
observed full, the local fabric] admits its work on the Slurm fabric (its declaration has room), nothing is moved
from there, and the workload page shows no expected starts; with live routing on, the same work goes to the local
fabric, which can start it now."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from fabrics.base import Resources
from fabrics.live import Node, from_nodes
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget, Quota
from portal.worker import live, pullback, snapshot, tasks, whereto
from portal.workloads.models import Workload
from portal.workloads.states import State


@pytest.fixture
def hpc(cast: dict[str, Any]) -> Fabric:
    """Queue `hpc` with targets [a Slurm fabric `hpc` whose last answer says it is full, the local fabric]."""
    fabric = Fabric.objects.create(name="hpc", kind="slurm", gpus_milli=8000, cpus_milli=32000, memory_mib=64000)
    queue = Queue.objects.create(slug="hpc", name="HPC", kinds=["training", "batch"])
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=fabric, order=0)
    local = Fabric.objects.get(name="local")
    QueueTarget.objects.create(queue=queue, fabric=local, order=1)
    Quota.objects.filter(fabric=local).delete()  # no team's reservation draws its work there: the queue's order does
    full = Node("n1", ("cpu",), {"": 8}, {"": 0}, Resources(0, 0, 0))  # another user's jobs hold all of it
    live.keep(fabric.pk, from_nodes([full]), timezone.now())
    return fabric


def admitted_on(alice: Any, submit: Any) -> str:
    workload = submit(alice, queue="hpc", kind="batch", cpus=1, memory_gb=1)
    tasks.admit()
    workload.refresh_from_db()
    assert workload.state == State.ADMITTED
    return workload.fabric.name


def test_live_routing_sends_work_where_it_can_start_now(alice, submit, hpc, settings):
    settings.GRIDLANE_LIVE_ROUTING = True
    assert admitted_on(alice, submit) == "local"


def test_with_live_routing_off_work_goes_where_the_declaration_has_room(alice, submit, hpc, settings):
    settings.GRIDLANE_LIVE_ROUTING = False
    snap, _ = snapshot.build(timezone.now())
    assert snap.live == {}  # the fresh answer is not read for planning
    assert admitted_on(alice, submit) == "hpc"


class Queued:
    """The Slurm fabric as pull back sees it: it can take a waiting job back."""

    def take_back(self, external_id: str) -> None:
        raise AssertionError("only candidates are asked for here")


def test_with_live_routing_off_nothing_is_moved_and_no_start_is_shown(alice, submit, hpc, settings, monkeypatch):
    settings.GRIDLANE_LIVE_ROUTING = False
    monkeypatch.setattr(pullback, "fabric_for", lambda row: Queued())
    now = timezone.now()
    room = Node("here", ("",), {"": 8}, {"": 8}, Resources(8000, 16000, 65536))
    live.keep(Fabric.objects.get(name="local").pk, from_nodes([room]), now)
    workload = submit(alice, queue="hpc", kind="batch", cpus=1, memory_gb=1)
    Workload.objects.filter(pk=workload.pk).update(
        state=State.DISPATCHING, fabric=hpc, external_id="41", admitted_at=now - timedelta(hours=1)
    )
    workload.refresh_from_db()
    assert pullback.candidates(now) == []  # waited an hour in Slurm's queue while local has room: stays
    assert whereto.starts(workload, now) == []
    settings.GRIDLANE_LIVE_ROUTING = True  # the same work, with live routing on, is moved and shown
    assert [([w.pk for w in group], to) for group, to in pullback.candidates(now)] == [
        ([workload.pk], Fabric.objects.get(name="local").pk)
    ]
    assert [s.fabric for s in whereto.starts(workload, now)] == ["local", "hpc"]
