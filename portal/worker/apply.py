"""Write the scheduler's decisions back in one transaction, through the workload services."""

from __future__ import annotations

from django.db import transaction

from portal.queues.models import QueueTarget
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler.model import Decisions


def apply(decisions: Decisions, pending: dict[str, Workload]) -> int:
    """Admit what was admitted and record why the rest waits. Returns how many were admitted."""
    admitted = 0
    targets = {(t.queue_id, t.fabric_id): t.pk for t in QueueTarget.objects.all()} if decisions.admit else {}
    with transaction.atomic():
        for admit in decisions.admit:
            workload = pending[admit.job_id]
            if services.transition(
                workload,
                State.ADMITTED,
                reason="admitted",
                fabric_id=admit.fabric_id,
                target_id=targets.get((workload.queue_id, admit.fabric_id)),
            ):
                admitted += 1
        for waiting in decisions.waiting:
            workload = pending[waiting.job_id]
            new = (waiting.reason.code, waiting.reason.message, waiting.estimated_start)
            if new == (workload.pending_reason_code, workload.pending_reason, workload.estimated_start):
                continue  # unchanged: no write
            Workload.objects.filter(pk=workload.pk, state=State.PENDING).update(
                pending_reason_code=new[0], pending_reason=new[1], estimated_start=new[2]
            )
    return admitted
