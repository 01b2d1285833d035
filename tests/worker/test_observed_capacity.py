"""What fabrics report about themselves lowers what the scheduler plans with, never raises it; a fabric that
cannot say keeps the declared numbers and is marked unhealthy, as sync marks it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.utils import timezone

from fabrics.base import FabricError, Resources
from fabrics.local.fabric import LocalFabric
from portal.queues.models import Fabric
from portal.worker import capacity, connections, snapshot

DECLARED = Resources(8000, 16000, 64 * 1024)  # the demo's local fabric, as seed_demo declares it


@pytest.fixture(autouse=True)
def fresh_connections(cast):
    connections.forget_all()
    capacity._asked.clear()
    yield
    connections.forget_all()
    capacity._asked.clear()


def reported(resources: Resources, *, seconds_ago: float) -> None:
    """The local fabric's row as if it had reported `resources` that long ago."""
    Fabric.objects.filter(name="local").update(
        observed_gpus_milli=resources.gpus_milli,
        observed_cpus_milli=resources.cpus_milli,
        observed_memory_mib=resources.memory_mib,
        observed_at=timezone.now() - timedelta(seconds=seconds_ago),
    )


def planned_for_local() -> Resources:
    snap, _ = snapshot.build(timezone.now())
    (state,) = [f for f in snap.fabrics.values() if f.name == "local"]
    assert state.size == DECLARED
    return state.capacity


@dataclass
class Case:
    name: str
    reported: Resources
    seconds_ago: float
    want_planned: Resources


CASES = [
    Case("a fabric reporting less plans with less, per resource", Resources(2000, 32000, 1024), 1,
         want_planned=Resources(2000, 16000, 1024)),
    Case("a fabric reporting more than IT declared plans with the declaration", Resources(64000, 10**6, 10**9), 1,
         want_planned=DECLARED),
    Case("a fabric reporting 0 GPUs plans with none", Resources(0, 16000, 64 * 1024), 1,
         want_planned=Resources(0, 16000, 64 * 1024)),
    Case("an answer older than three periods is ignored", Resources(0, 0, 0), 3 * 30 + 5, want_planned=DECLARED),
    Case("an answer just within three periods still counts", Resources(0, 0, 0), 3 * 30 - 5,
         want_planned=Resources(0, 0, 0)),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_planned_capacity(case: Case, settings) -> None:
    settings.GRIDLANE_CAPACITY_SECONDS = 30
    reported(case.reported, seconds_ago=case.seconds_ago)
    assert planned_for_local() == case.want_planned


def test_a_fabric_never_observed_plans_with_its_declaration() -> None:
    assert Fabric.objects.get(name="local").observed is None
    assert planned_for_local() == DECLARED


def test_the_local_fabric_reports_its_declared_capacity_and_is_asked_again_once_a_period_has_passed(settings):
    settings.GRIDLANE_CAPACITY_SECONDS = 30
    now = timezone.now()
    assert capacity.observe_all(now) == 1
    row = Fabric.objects.get(name="local")
    assert (row.observed, row.observed_at, row.healthy) == (DECLARED, now, True)
    assert "jobs run on this host" in row.observed_detail
    assert capacity.observe_all(now + timedelta(seconds=29)) == 0  # still recent: not asked
    assert capacity.observe_all(now + timedelta(seconds=31)) == 1


@pytest.mark.parametrize(
    ("error", "want_detail"),
    [
        (FabricError("sinfo: connection refused", retryable=True), "sinfo: connection refused"),
        (RuntimeError("a bug in the adapter"), "capacity check failed: a bug in the adapter"),
    ],
    ids=["a fabric error", "any other exception"],
)
def test_a_fabric_whose_capacity_fails_keeps_its_declared_numbers_and_is_marked_unhealthy(
    monkeypatch, caplog, settings, error, want_detail
):
    settings.GRIDLANE_CAPACITY_SECONDS = 30

    def fails(self):
        raise error

    monkeypatch.setattr(LocalFabric, "capacity", fails)
    now = timezone.now()
    with caplog.at_level(logging.WARNING, logger="gridlane.worker"):
        assert capacity.observe_all(now) == 0
    row = Fabric.objects.get(name="local")
    assert (row.observed, row.healthy, row.health_detail) == (None, False, want_detail)
    assert "capacity of local" in caplog.text
    assert planned_for_local() == DECLARED
    assert capacity.observe_all(now + timedelta(seconds=1)) == 0  # a failing fabric is not asked every cycle

    monkeypatch.undo()
    assert capacity.observe_all(now + timedelta(seconds=31)) == 1  # it answers again: healthy again
    row.refresh_from_db()
    assert (row.observed, row.healthy, row.health_detail) == (DECLARED, True, "")


def test_a_failing_fabric_with_a_fresh_answer_keeps_planning_with_that_answer(monkeypatch, settings):
    settings.GRIDLANE_CAPACITY_SECONDS = 30
    reported(Resources(4000, 16000, 64 * 1024), seconds_ago=40)

    def down(self):
        raise FabricError("down", retryable=True)

    monkeypatch.setattr(LocalFabric, "capacity", down)
    assert capacity.observe_all(timezone.now()) == 0
    assert planned_for_local() == Resources(4000, 16000, 64 * 1024)


@pytest.mark.parametrize("kind", ["slurm", "pbs", "kubernetes"])
def test_a_fabric_with_a_queue_of_its_own_is_planned_with_what_it_was_declared(kind):
    """Work that does not fit now waits in Slurm's (PBS's, Kubernetes') own queue, which says why; an
    autoscaler only adds nodes for pods that wait. Its answer informs the IT pages, not the plan."""
    now = timezone.now()
    row = Fabric.objects.create(
        name=f"{kind}-pool", kind=kind, gpus_milli=8000, cpus_milli=16000, memory_mib=65536,
        observed_gpus_milli=0, observed_cpus_milli=4000, observed_memory_mib=1024, observed_at=now,
    )  # fmt: skip
    assert capacity.queues_work(kind)
    assert capacity.planned(row, now) == Resources(8000, 16000, 65536)


def test_pools_without_a_queue_of_their_own_are_planned_with_what_they_report():
    assert not capacity.queues_work("agent")
    assert not capacity.queues_work("local")
    assert not capacity.queues_work("no-such-kind")
