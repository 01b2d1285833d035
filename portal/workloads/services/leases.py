"""Leases of notebooks and VMs: extended by their owners (or leads, or IT) up to what the queue allows; a
running one only where its fabric can move the end of a running job, which it is told before anything is
recorded."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from fabrics import base as fabric_base
from fabrics.registry import connect, fabric_class
from portal import access, words
from portal.accounts import audit
from portal.queues.models import WorkloadKind
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.services.actions import audit_target
from portal.workloads.services.errors import CannotExtend, SubmitRejected
from portal.workloads.services.request import MAX_LEASE_HOURS
from portal.workloads.states import FINISHED, State

log = logging.getLogger("gridlane.services")


@dataclass(frozen=True)
class Extension:
    """A checked lease extension: the workload's new lease (which is also its runtime limit from now on),
    and, when it runs, the new end its fabric is told (None while it waits: it starts with the new lease)."""

    workload: Workload
    hours: Decimal
    lease_s: int
    ends_at: datetime | None


def _hours(seconds: float) -> str:
    """Seconds as hours in plain words: 3600 -> "1 hour", 5400 -> "1.5 hours"."""
    return words.hours(seconds)


def check_extend(user: Any, workload: Workload, hours: Decimal) -> Extension:
    """Check that this user may extend this notebook's or VM's lease by `hours`, and by how much in all.

    Raises PermissionDenied for someone who may not manage the workload, SubmitRejected (on "hours") for an
    extension that is no number of hours or goes past what the queue allows, and CannotExtend for a workload
    that is not pending or running, or runs on a fabric that cannot extend a lease.
    """
    if not access.can_manage(user, workload):
        raise PermissionDenied("Only the owner, a team lead or IT may extend this lease.")
    if workload.kind not in (WorkloadKind.NOTEBOOK, WorkloadKind.VM):
        raise SubmitRejected({"hours": ["Only notebooks and VMs have a lease."]})
    state = State(workload.state)
    if state in FINISHED:
        raise CannotExtend(f"It has already {state.label.lower()}; there is no lease left to extend.")
    if state in (State.ADMITTED, State.DISPATCHING):
        raise CannotExtend("It is starting on its fabric right now; extend it once it runs.")
    if state != State.PENDING and state != State.RUNNING:
        raise CannotExtend(f"It is {state.label.lower()}; only pending or running leases can be extended.")
    if not hours.is_finite() or not 0 < hours <= MAX_LEASE_HOURS or int(hours * 3600) < 1:
        raise SubmitRejected({"hours": [f"Give a number of hours more than 0 and at most {MAX_LEASE_HOURS}."]})
    current = workload.lease_s or workload.runtime_limit_s
    most = min(MAX_LEASE_HOURS * 3600, workload.queue.max_runtime_minutes * 60)
    lease_s = current + int(hours * 3600)
    if lease_s > most:
        room = f"it can grow by {_hours(most - current)} more" if most > current else "it already lasts that long"
        raise SubmitRejected(
            {"hours": [f"The queue {workload.queue.name} allows leases of at most {_hours(most)}: {room}."]}
        )
    ends_at = None
    if state == State.RUNNING:
        fabric = workload.fabric
        if fabric is None or not fabric_base.can_extend(fabric_class(fabric.kind), fabric.resolved_settings()):
            where = f"The fabric {fabric.name} ({fabric.kind})" if fabric is not None else "Its fabric"
            raise CannotExtend(f"{where} cannot extend a lease: this one ends as planned.")
        ends_at = (workload.started_at or timezone.now()) + timedelta(seconds=lease_s)
    return Extension(workload, hours, lease_s, ends_at)


def check_lease_to(user: Any, workload: Workload, lease_hours: Decimal) -> Decimal:
    """The hours to add for a lease of `lease_hours` in all (the API's PATCH): check_extend's checks, with
    the errors on `lease_hours`; a lease is only ever made longer."""
    more = lease_hours - Decimal(workload.lease_s or workload.runtime_limit_s) / 3600
    if more <= 0:
        now = f"it is {words.hours(workload.lease_s or workload.runtime_limit_s)} now"
        raise SubmitRejected({"lease_hours": [f"A lease can only be made longer: {now}."]})
    try:
        check_extend(user, workload, more)
    except SubmitRejected as rejected:  # it speaks of the hours added; this field is the total
        errors = dict(rejected.errors)
        raise SubmitRejected({"lease_hours": errors.pop("hours", [])} | errors) from rejected
    return more


class _Moved(Exception):
    """The workload changed between the check and the record."""


def do_extend(user: Any, extension: Extension) -> Workload:
    """Tell the fabric first (a running job), then record the new lease with an event and an audit record:
    a fabric that refuses leaves everything as it was. Raises CannotExtend when the fabric refuses, and
    _Moved when the workload changed meanwhile (extend() checks again)."""
    w, lease_s, ends_at = extension.workload, extension.lease_s, extension.ends_at
    if ends_at is not None and w.fabric is not None:
        try:
            fabric_base.extend(connect(w.fabric.to_config()), w.external_id, ends_at)
        except fabric_base.FabricError as error:
            raise CannotExtend(f"The fabric {w.fabric.name} could not extend it: {str(error).rstrip('.')}.") from error
    now = timezone.now()
    values: dict[str, Any] = {"lease_s": lease_s, "runtime_limit_s": lease_s, "updated_at": now}
    by = f"lease extended by {_hours(float(extension.hours) * 3600)}"
    if ends_at is not None:
        values["lease_ends_at"] = ends_at
        reason = f"{by}: it now ends at {ends_at:%Y-%m-%d %H:%M} UTC"
    else:
        reason = f"{by}, to {_hours(lease_s)} in all"
    with transaction.atomic():
        same = Workload.objects.filter(pk=w.pk, state=w.state, lease_s=w.lease_s, runtime_limit_s=w.runtime_limit_s)
        if same.update(**values) != 1:
            raise _Moved
        WorkloadEvent.objects.create(workload=w, at=now, actor=user, to_state=w.state, reason=reason[:500])
        audit.record("workload.lease_extended", audit_target(w), actor=user, team=w.group.slug,
                     hours=str(extension.hours),
                     before_s=w.lease_s or w.runtime_limit_s, after_s=lease_s, ends_at=ends_at)  # fmt: skip
    for key, value in values.items():
        setattr(w, key, value)
    log.info("workload %s: %s, by %s", w.pk, reason, user)
    return w


def extend(user: Any, workload: Workload, hours: Decimal) -> Workload:
    """Check and extend a lease (see check_extend for what it raises); checked again if the workload moves."""
    for _ in range(3):
        try:
            return do_extend(user, check_extend(user, workload, hours))
        except _Moved:
            workload.refresh_from_db()
    raise CannotExtend("It kept changing while you asked; look at it again and retry.")
