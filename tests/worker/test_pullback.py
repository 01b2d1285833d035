"""Pull back and re-route (portal/worker/pullback.py) against a fabric that keeps its own queue, in memory: each
queue's patience (IT's setting, else the site's default), arrays moved whole or not at all, and gangs moved only
where all of their nodes fit. The real Slurm cluster's moves are in tests/fabrics/slurm/test_pullback_live.py."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from fabrics.base import JobState, JobStatus, Resources
from fabrics.live import Node, from_nodes
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.worker import connections, live, pullback
from portal.worker.models import Move
from portal.workloads.models import Workload
from portal.workloads.states import State


class Queued:
    """A fabric's own queue: jobs wait until `start` runs them; `take_back` cancels one only while it waits."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobState] = {}
        self.taken: list[str] = []

    def take_back(self, external_id: str) -> None:
        self.taken.append(external_id)
        if self.jobs.get(external_id) is JobState.QUEUED:
            self.jobs[external_id] = JobState.CANCELLED

    def poll(self, ids: list[str]) -> dict[str, JobStatus]:
        states = {i: self.jobs.get(i, JobState.MISSING) for i in ids}
        return {i: JobStatus(s, host="n1" if s is JobState.RUNNING else "") for i, s in states.items()}


@pytest.fixture
def hpc(cast: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[Fabric, Queued]:
    """Queue `hpc` with targets [a Slurm-like fabric `hpc` (its queue in memory), the local fabric]."""
    fabric = Fabric.objects.create(name="hpc", kind="slurm", gpus_milli=8000, cpus_milli=32000, memory_mib=64000)
    queue = Queue.objects.create(slug="hpc", name="HPC", kinds=["training", "batch"])
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=fabric, order=0)
    QueueTarget.objects.create(queue=queue, fabric=Fabric.objects.get(name="local"), order=1)
    own = Queued()
    local_fabric = connections.fabric_for

    def fabric_for(row: Fabric) -> Any:
        return own if row.pk == fabric.pk else local_fabric(row)

    monkeypatch.setattr(pullback, "fabric_for", fabric_for)
    return fabric, own


def local_has_room(gpus: int = 8, nodes: int = 1, at: datetime | None = None) -> None:
    """The local fabric's observation at `at` (else now): `nodes` nodes of `gpus` free GPUs each."""
    local = Fabric.objects.get(name="local")
    found = [
        Node(f"here{i}", ("",), {"": gpus}, {"": gpus}, Resources(gpus * 1000, 16000, 65536)) for i in range(nodes)
    ]
    live.keep(local.pk, from_nodes(found), at or timezone.now())


def waiting(w: Workload, hpc: tuple[Fabric, Queued], job: str, waited_s: float, now: datetime) -> Workload:
    """`w` dispatched to hpc as `job`, waiting in its queue for `waited_s` seconds."""
    fabric, own = hpc
    Workload.objects.filter(pk=w.pk).update(
        state=State.DISPATCHING, fabric=fabric, external_id=job, admitted_at=now - timedelta(seconds=waited_s)
    )
    own.jobs[job] = JobState.QUEUED
    w.refresh_from_db()
    return w


def test_a_queue_s_own_patience_decides_when_its_work_moves(alice, submit, hpc, settings):
    settings.GRIDLANE_PULLBACK_PATIENCE_SECONDS = 300
    local_has_room()
    now = timezone.now()
    w = waiting(submit(alice, queue="hpc", gpus=1, memory_gb=1), hpc, "41", 90, now)
    assert pullback.candidates(now) == []  # 90 s: the site's five minutes have not passed
    Queue.objects.filter(slug="hpc").update(pullback_patience_seconds=60)
    assert [([x.pk for x in g], to) for g, to in pullback.candidates(now)] == [
        ([w.pk], Fabric.objects.get(name="local").pk)
    ]
    Queue.objects.filter(slug="hpc").update(pullback_patience_seconds=600)
    Workload.objects.filter(pk=w.pk).update(admitted_at=now - timedelta(seconds=400))
    assert pullback.candidates(now) == []  # past the site's default, not past its queue's ten minutes
    assert pullback.patience(Queue.objects.get(slug="hpc")) == timedelta(seconds=600)
    assert pullback.patience(Queue.objects.get(slug="train")) == timedelta(seconds=300)


def test_moved_work_goes_back_in_line_and_its_job_never_started(alice, submit, hpc):
    local_has_room()
    now = timezone.now()
    w = waiting(submit(alice, queue="hpc", gpus=1, memory_gb=1), hpc, "42", 600, now)
    assert pullback.step(now) == 1
    w.refresh_from_db()
    assert (w.state, w.attempt, w.external_id) == (State.PENDING, 1, "")
    assert hpc[1].jobs["42"] is JobState.CANCELLED
    assert not Move.objects.exists()


def elements(alice: Any, submit: Any, hpc: tuple[Fabric, Queued], now: datetime) -> list[Workload]:
    """An array of four one-GPU elements, all waiting in hpc's queue (as one Slurm array: 50_0 ... 50_3); the
    last sent there later than the others, within its patience."""
    parent = submit(alice, queue="hpc", name="sweep", gpus=1, memory_gb=1, array="0-3")
    found = list(Workload.objects.filter(array_parent=parent).order_by("array_index"))
    return [waiting(w, hpc, f"50_{w.array_index}", 600 if (w.array_index or 0) < 3 else 10, now) for w in found]


def test_an_array_moves_whole_intent_first_or_not_at_all(alice, submit, hpc):
    now = timezone.now()
    array = elements(alice, submit, hpc, now)
    local_has_room(gpus=3, at=now)  # room for three of its four: none moves
    assert pullback.candidates(now) == []
    assert pullback.step(now) == 0
    assert hpc[1].taken == []
    local_has_room(gpus=4, at=now)
    [(group, _)] = pullback.candidates(now)
    assert sorted(w.array_index or 0 for w in group) == [0, 1, 2, 3]  # the one sent later too
    assert pullback.step(now) == 4
    for w in array:
        w.refresh_from_db()
        assert (w.state, w.attempt) == (State.PENDING, 1)
        assert any(
            "with the 3 other waiting elements of its array" in r for r in w.events.values_list("reason", flat=True)
        )
    assert sorted(hpc[1].taken) == ["50_0", "50_1", "50_2", "50_3"]
    assert not Move.objects.exists()


def test_an_element_slurm_started_first_stays_and_the_others_move(alice, submit, hpc, monkeypatch):
    now = timezone.now()
    array = elements(alice, submit, hpc, now)
    local_has_room(gpus=4, at=now)
    recorded = []
    take_back = hpc[1].take_back

    def started_first(external_id: str) -> None:
        recorded.append(Move.objects.count())  # every element's intent was written before the first cancel
        if external_id == "50_1":
            hpc[1].jobs["50_1"] = JobState.RUNNING  # the fabric started it between the decision and the cancel
        take_back(external_id)

    monkeypatch.setattr(hpc[1], "take_back", started_first)
    assert pullback.step(now) == 3
    assert recorded[0] == 4
    states = {w.array_index: Workload.objects.get(pk=w.pk).state for w in array}
    assert states == {0: State.PENDING, 1: State.DISPATCHING, 2: State.PENDING, 3: State.PENDING}
    assert hpc[1].jobs["50_1"] is JobState.RUNNING
    assert not Move.objects.exists()


def test_a_gang_moves_only_where_all_its_nodes_fit(alice, submit, hpc):
    now = timezone.now()
    gang = submit(alice, queue="hpc", name="gang", gpus=4, memory_gb=1)
    Workload.objects.filter(pk=gang.pk).update(nodes=2)
    gang = waiting(gang, hpc, "60", 600, now)
    local_has_room(gpus=4, nodes=1, at=now)  # one node's worth free: not both
    assert pullback.candidates(now) == []
    local_has_room(gpus=4, nodes=2, at=now)
    assert [([w.pk for w in g], to) for g, to in pullback.candidates(now)] == [
        ([gang.pk], Fabric.objects.get(name="local").pk)
    ]
    assert pullback.step(now) == 1
    assert hpc[1].taken == ["60"]  # one job, taken back once


def test_a_fabric_that_deletes_what_it_takes_back_moves_on_a_missing_job(alice, submit, hpc):
    """As Kubernetes does: the Job taken back is deleted, and poll reads it missing."""
    now = timezone.now()
    own = hpc[1]
    local_has_room(at=now)
    w = waiting(submit(alice, queue="hpc", gpus=1, memory_gb=1), hpc, "gl-k", 600, now)
    own.taken_back_goes = True
    own.take_back = lambda external_id: own.jobs.pop(external_id, None)
    assert pullback.step(now) == 1
    w.refresh_from_db()
    assert (w.state, w.attempt) == (State.PENDING, 1)


# The local fabric without an observation: Gridlane is its only user, so its room is its declaration (8 GPUs,
# 16 CPUs, 64 GiB in the demo) less what Gridlane's own work holds there, as a cycle plans it.


def local_holds(alice: Any, submit: Any, gpus: int, state: State = State.RUNNING) -> Workload:
    """Gridlane work holding `gpus` GPUs of the local fabric."""
    w = submit(alice, queue="hpc", name="held", gpus=1, memory_gb=1)
    Workload.objects.filter(pk=w.pk).update(
        state=state, fabric=Fabric.objects.get(name="local"), external_id=f"here-{w.pk}", gpus_milli=gpus * 1000
    )
    return w


def moves(now: datetime) -> list[tuple[list[str], str]]:
    """The moves due now: each group's external ids, and the fabric it would move to."""
    names = dict(Fabric.objects.values_list("pk", "name"))
    return [(sorted(w.external_id for w in g), names[to]) for g, to in pullback.candidates(now)]


def test_work_waiting_in_slurm_moves_to_the_local_fabric_s_declared_room(alice, submit, hpc):
    now = timezone.now()
    assert not live.fresh(now, now - timedelta(days=1))  # nobody observed the local fabric
    w = waiting(submit(alice, queue="hpc", gpus=2, memory_gb=1), hpc, "70", 600, now)
    held = [local_holds(alice, submit, 4), local_holds(alice, submit, 3, State.DISPATCHING)]
    assert moves(now) == []  # 7 of its 8 GPUs are Gridlane's, running or sent: no room for 2
    Workload.objects.filter(pk=held[1].pk).update(state=State.SUCCEEDED)
    assert moves(now) == [(["70"], "local")]  # 4 free now
    assert pullback.step(now) == 1
    w.refresh_from_db()
    assert (w.state, w.fabric_id, w.external_id) == (State.PENDING, None, "")
    assert hpc[1].taken == ["70"]
    assert "local can start it now" in " ".join(w.events.values_list("reason", flat=True))


def test_the_local_fabric_s_room_is_used_up_by_the_moves_of_one_run(alice, submit, hpc):
    now = timezone.now()
    for job, waited in (("71", 603), ("72", 602), ("73", 601)):  # the longest waiting moves first
        waiting(submit(alice, queue="hpc", gpus=3, memory_gb=1), hpc, job, waited, now)
    assert moves(now) == [(["71"], "local"), (["72"], "local")]  # 3 + 3 of 8: the third waits


def test_an_array_moves_to_the_local_fabric_whole_or_not_at_all(alice, submit, hpc):
    now = timezone.now()
    elements(alice, submit, hpc, now)
    filler = local_holds(alice, submit, 5)
    assert moves(now) == []  # room for three of its four
    Workload.objects.filter(pk=filler.pk).update(gpus_milli=4000)
    assert moves(now) == [(["50_0", "50_1", "50_2", "50_3"], "local")]
    assert pullback.step(now) == 4
    assert sorted(hpc[1].taken) == ["50_0", "50_1", "50_2", "50_3"]


def test_a_gang_moves_to_the_local_fabric_only_where_all_its_nodes_fit(alice, submit, hpc):
    now = timezone.now()
    gang = submit(alice, queue="hpc", name="gang", gpus=4, memory_gb=1)
    Workload.objects.filter(pk=gang.pk).update(nodes=2)
    waiting(gang, hpc, "80", 600, now)
    filler = local_holds(alice, submit, 1)
    assert moves(now) == []  # 2 x 4 GPUs, 7 free
    Workload.objects.filter(pk=filler.pk).update(state=State.FAILED)
    assert moves(now) == [(["80"], "local")]


def test_a_fabric_with_a_queue_of_its_own_is_never_moved_to_without_an_observation(alice, submit, hpc):
    """Its declaration says what it holds, not what others use of it now: room there needs a fresh answer."""
    now = timezone.now()
    other = Fabric.objects.create(name="pbs", kind="pbs", gpus_milli=8000, cpus_milli=32000, memory_mib=64000)
    queue = Queue.objects.get(slug="hpc")
    QueueTarget.objects.filter(queue=queue, fabric__name="local").update(order=2)
    QueueTarget.objects.create(queue=queue, fabric=other, order=1)
    waiting(submit(alice, queue="hpc", gpus=1, memory_gb=1), hpc, "90", 600, now)
    assert moves(now) == [(["90"], "local")]  # the idle declared PBS is skipped, the local fabric has room
    local_holds(alice, submit, 8)
    assert moves(now) == []
    Fabric.objects.filter(name="local").update(healthy=False)
    Workload.objects.filter(fabric__name="local").update(state=State.SUCCEEDED)
    assert moves(now) == []  # nor to an unhealthy fabric
