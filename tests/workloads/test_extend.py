"""Extending a notebook's or VM's lease through the services: who may, by how much, when, and where it runs."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import PermissionDenied

from portal.accounts.models import AuditEvent, ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.worker import tasks
from portal.workloads import services
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("local_jobs")  # tests/conftest.py


@pytest.fixture
def boxes(cast):
    """A VM queue on the demo's local fabric, open to vision, with leases of up to 10 hours."""
    queue = Queue.objects.create(slug="boxes", name="Boxes", kinds=["vm"], max_runtime_minutes=600)
    queue.allowed_groups.add(ResourceGroup.objects.get(slug="vision"))
    QueueTarget.objects.create(queue=queue, fabric=Fabric.objects.get(name="local"))
    return queue


def notebook(submit, user, hours="1"):
    """A notebook as the form submits it: its lease is its runtime limit."""
    minutes = int(Decimal(hours) * 60)
    return submit(user, queue="notebooks", kind="notebook", name="nb", command="",
                  lease_hours=Decimal(hours), runtime_limit_minutes=minutes)  # fmt: skip


def running(workload, fabric_name="local", **fields):
    """Mark a workload running on a fabric, as the worker would once its job started."""
    fabric = Fabric.objects.get(name=fabric_name)
    started = datetime.fromisoformat("2026-05-04T13:00:00+00:00")
    Workload.objects.filter(pk=workload.pk).update(
        state=State.RUNNING, fabric=fabric, started_at=started,
        lease_ends_at=started + timedelta(seconds=workload.lease_s), **fields,
    )  # fmt: skip
    return Workload.objects.select_related("queue", "fabric").get(pk=workload.pk)


def test_the_owner_extends_a_pending_notebooks_lease_with_an_event_and_an_audit_record(alice, submit):
    w = notebook(submit, alice, "1")
    services.extend(alice, w, Decimal(2))
    w.refresh_from_db()
    assert (w.lease_s, w.runtime_limit_s, w.lease_ends_at) == (3 * 3600, 3 * 3600, None)
    event = WorkloadEvent.objects.filter(workload=w).last()
    assert event is not None
    assert (event.actor, event.to_state, event.reason) == (
        alice, State.PENDING, "lease extended by 2 hours, to 3 hours in all"
    )  # fmt: skip
    audit = AuditEvent.objects.get(action="workload.lease_extended")
    assert (audit.target, audit.actor, audit.detail["after_s"]) == (f"{w.name} ({w.pk})", alice, 3 * 3600)
    assert audit.detail["team"] == "vision"


def test_the_owner_a_lead_and_it_may_extend_but_not_a_teammate_or_another_team(alice, bob, charlie, it_admin, submit):
    w = notebook(submit, alice)
    for allowed in (alice, bob, it_admin):
        services.check_extend(allowed, w, Decimal(1))
    with pytest.raises(PermissionDenied):
        services.check_extend(alice, notebook(submit, bob), Decimal(1))  # a member: not a teammate's
    with pytest.raises(PermissionDenied):
        services.check_extend(charlie, w, Decimal(1))


@pytest.mark.parametrize(
    ("hours", "message"),
    [
        (Decimal(0), "more than 0"),
        (Decimal(-1), "more than 0"),
        (Decimal("0.0001"), "more than 0"),  # less than a second
        (Decimal(1000), "at most 720"),
        (Decimal("23.5"), "at most 24 hours: it can grow by 23 hours more"),  # the notebooks queue's maximum
    ],
)
def test_an_extension_beyond_what_the_queue_allows_is_refused_on_hours(alice, submit, hours, message):
    w = notebook(submit, alice, "1")
    with pytest.raises(services.SubmitRejected) as rejected:
        services.extend(alice, w, hours)
    assert message in rejected.value.errors["hours"][0]
    w.refresh_from_db()
    assert w.lease_s == 3600
    assert not AuditEvent.objects.filter(action="workload.lease_extended").exists()


def test_up_to_the_queue_maximum_is_fine(alice, submit):
    w = notebook(submit, alice, "1")
    services.extend(alice, w, Decimal(23))
    assert Workload.objects.get(pk=w.pk).lease_s == 24 * 3600


def test_only_notebooks_and_vms_have_a_lease(alice, submit):
    with pytest.raises(services.SubmitRejected) as rejected:
        services.check_extend(alice, submit(alice), Decimal(1))
    assert rejected.value.errors == {"hours": ["Only notebooks and VMs have a lease."]}


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (State.SUCCEEDED, "already succeeded"),
        (State.CANCELLED, "already cancelled"),
        (State.EXPIRED, "already expired"),
        (State.ADMITTED, "starting on its fabric"),
        (State.DISPATCHING, "starting on its fabric"),
        (State.CANCELLING, "only pending or running"),
    ],
)
def test_a_lease_that_is_not_pending_or_running_cannot_be_extended(alice, submit, state, message):
    w = notebook(submit, alice)
    Workload.objects.filter(pk=w.pk).update(state=state)
    w.refresh_from_db()
    with pytest.raises(services.CannotExtend, match=message):
        services.extend(alice, w, Decimal(1))
    assert WorkloadEvent.objects.filter(workload=w).count() == 1  # submitted, nothing since


def test_a_fabric_that_cannot_extend_says_so_and_nothing_changes(alice, submit):
    Fabric.objects.create(name="cluster", kind="slurm")  # a user may not lengthen a Slurm job's time limit
    w = running(notebook(submit, alice), "cluster", external_id="1234")
    with pytest.raises(services.CannotExtend, match=r"The fabric cluster \(slurm\) cannot extend a lease"):
        services.extend(alice, w, Decimal(1))
    assert Workload.objects.get(pk=w.pk).lease_s == 3600


def test_a_fabric_that_refuses_at_the_time_leaves_everything_as_it_was(alice, submit):
    w = running(notebook(submit, alice), external_id="00000000-0000-4000-8000-000000000000")  # no such job
    with pytest.raises(services.CannotExtend, match=r"could not extend it: .* is not running"):
        services.extend(alice, w, Decimal(1))
    w.refresh_from_db()
    assert (w.lease_s, w.runtime_limit_s) == (3600, 3600)
    assert not AuditEvent.objects.filter(action="workload.lease_extended").exists()


@pytest.mark.django_db(transaction=True)
def test_a_running_vm_on_the_local_fabric_gets_a_new_end_its_supervisor_reads(alice, submit, boxes):
    w = submit(alice, queue="boxes", kind="vm", name="box", command="sleep 300",
               lease_hours=Decimal(1), runtime_limit_minutes=60)  # fmt: skip
    wait_until(lambda: (tasks.cycle(), Workload.objects.get(pk=w.pk).state == State.RUNNING)[1], every=0.1)
    w = Workload.objects.select_related("queue", "fabric").get(pk=w.pk)
    assert w.started_at is not None
    services.extend(alice, w, Decimal("1.5"))
    w.refresh_from_db()
    assert w.started_at is not None
    assert (w.lease_s, w.runtime_limit_s) == (9000, 9000)
    assert w.lease_ends_at == w.started_at + timedelta(hours=2.5)
    deadline = Path(django_settings.GRIDLANE_LOCAL_FABRIC_ROOT) / "local" / str(w.pk) / "deadline"
    assert datetime.fromisoformat(deadline.read_text().strip()) == w.lease_ends_at
    reason = WorkloadEvent.objects.filter(workload=w).last().reason
    assert reason == f"lease extended by 1.5 hours: it now ends at {w.lease_ends_at:%Y-%m-%d %H:%M} UTC"
    services.do_cancel(alice, w)
    wait_until(lambda: (tasks.cycle(), Workload.objects.get(pk=w.pk).state == State.CANCELLED)[1], every=0.1)
