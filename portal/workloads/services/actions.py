"""What a person does to their work after submitting it: cancel it, change its priority tier. Each `check_*`
checks access and validity and raises; each `do_*` makes the change with an audit record and kicks the worker."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from fabrics import base as fabric_base
from fabrics.registry import connect
from portal import access
from portal.accounts import audit
from portal.queues import tiers
from portal.workloads import kick
from portal.workloads.models import Workload
from portal.workloads.services.errors import SubmitRejected
from portal.workloads.services.lifecycle import transition, transition_many
from portal.workloads.states import FINISHED, State

log = logging.getLogger("gridlane.services")


def check_cancel(user: Any, workload: Workload) -> None:
    if not access.can_manage(user, workload):
        raise PermissionDenied("Only the owner, a team lead or IT may cancel this workload.")


def do_cancel(user: Any, workload: Workload, reason: str = "cancelled") -> Workload:
    """Cancel at once what holds nothing on a fabric; ask the worker to stop the rest.

    Already finished or already cancelling work is left as it is.
    """
    if workload.is_array:
        return _cancel_array(user, workload, reason)
    for _ in range(5):  # the worker may move the state under us; try again from what is stored now
        state = State(workload.state)
        if state in FINISHED or state == State.CANCELLING:
            return workload
        target = State.CANCELLED if state in (State.PENDING, State.ADMITTED) else State.CANCELLING
        with transaction.atomic():
            moved = transition(workload, target, actor=user, reason=reason)
            if moved:  # recorded like an extension: who, what, and the state it was in
                audit.record("workload.cancelled", audit_target(workload), actor=user, team=workload.group.slug,
                             state=state.value)  # fmt: skip
        if moved:
            kick.kick()
            return workload
        workload.refresh_from_db()
    raise RuntimeError(f"workload {workload.pk} kept changing state while being cancelled")


def _cancel_array(user: Any, parent: Workload, reason: str) -> Workload:
    """Cancel every element that has not ended (waiting ones at once, in two statements), then the parent."""
    elements = Workload.objects.filter(array_parent=parent)
    for old in (State.PENDING, State.ADMITTED):
        ids = list(elements.filter(state=old).values_list("pk", flat=True))
        if ids:
            transition_many(ids, old, State.CANCELLED, reason=reason, actor=user, finished_at=timezone.now())
    for element in elements.filter(state__in=[State.DISPATCHING, State.RUNNING, State.PREEMPTED]):
        do_cancel(user, element, reason)
    if parent.state == State.PENDING:
        transition(parent, State.CANCELLED, actor=user, reason=reason)
    kick.kick()
    return parent


def audit_target(workload: Workload) -> str:
    """How the audit log names a workload: by its name, with its id to find it by."""
    return f"{workload.name} ({workload.pk})"


def check_reprioritize(user: Any, workload: Workload, priority: str) -> None:
    """Raises SubmitRejected for a bad or late change (a tier the team may not use), PermissionDenied when the
    user may not make it."""
    # Only leads and IT may make the change at all, so a tier for leads only is no obstacle here.
    refused = tiers.check(priority, tiers.for_team(workload.group_id), workload.group.slug, may_lead=True)
    if refused:
        raise SubmitRejected({"priority": [refused]})
    if not access.may_reprioritize(user, workload):
        raise PermissionDenied("Only the team's leads or IT may change a workload's priority.")
    if workload.state in FINISHED:
        raise SubmitRejected({"priority": [f"The workload has already {workload.state}."]})


def do_reprioritize(user: Any, workload: Workload, priority: str) -> Workload:
    """Set the priority tier of unfinished work; the next cycle orders the queue by it. Work a fabric holds but
    has not started (dispatching) is reordered inside the fabric too, where the fabric has priorities of its
    own (Slurm, PBS); a fabric that refuses keeps its own order, and the audit record says so."""
    old = workload.priority
    if old == priority:
        return workload
    with transaction.atomic():
        changed = Workload.objects.filter(pk=workload.pk).exclude(state__in=FINISHED).update(priority=priority)
    workload.refresh_from_db()
    if changed:
        fabric = _reorder_in_fabric(workload, old, priority)
        audit.record("workload.reprioritized", audit_target(workload), actor=user, team=workload.group.slug,
                     before=old, after=priority, **({"fabric": fabric} if fabric else {}))  # fmt: skip
        kick.kick()
    return workload


def _reorder_in_fabric(workload: Workload, old: str, new: str) -> str:
    """Tell the fabric of a queued job (dispatched, not started) its new tier; what came of it in words, or ""
    when there was nothing to tell."""
    if workload.state != State.DISPATCHING or not workload.external_id or workload.fabric is None:
        return ""
    found = tiers.hints_of([old, new])
    hints = tiers.moving(found.get(old, fabric_base.TierHints()), found.get(new, fabric_base.TierHints()))
    name = workload.fabric.name
    try:
        told = fabric_base.reprioritise(connect(workload.fabric.to_config()), workload.external_id, hints)
    except fabric_base.FabricError as error:
        log.warning("workload %s: %s kept its own priority for job %s: %s", workload.pk, name, workload.external_id,
                    error)  # fmt: skip
        return f"{name} kept its own order: {error}"
    return f"reordered on {name} too" if told else ""
