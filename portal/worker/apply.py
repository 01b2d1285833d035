"""Write the scheduler's decisions back in one transaction, in bulk, through the workload services and the
workload store (portal.workloads.store): admissions and preemptions are compare-and-swap moves with events;
why the rest waits is one statement per 1,000 rows."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from portal.queues.models import QueueTarget
from portal.sql import ROWS
from portal.worker import team_limit
from portal.worker.snapshot import Row
from portal.workloads import services, store
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler import reasons
from scheduler.model import Decisions

# Reasons near the head of the line are rewritten whenever their words change; further back only when the
# reason itself changes, so that a long line does not rewrite thousands of rows every cycle.
FRESH_REASONS = 500
LIMIT_TOLD = 1000  # work newly at its team's limit read per cycle for the leads' messages (a team's is enough)
ESTIMATE_SLACK_S = 60


@dataclass(frozen=True)
class Applied:
    admitted: int
    preempted: int
    reasons_changed: int


def apply(decisions: Decisions, rows: dict[str, Row]) -> Applied:
    """Admit, preempt and record why the rest waits; a workload that moved on meanwhile is left alone."""
    with transaction.atomic():
        admitted = _admit(decisions, rows)
        preempted = _preempt(decisions)
        changed = _record_waiting(decisions, rows)
    return Applied(admitted, preempted, changed)


def _admit(decisions: Decisions, rows: dict[str, Row]) -> int:
    if not decisions.admit:
        return 0
    targets = {
        (queue_id, fabric_id): pk
        for queue_id, fabric_id, pk in ROWS.rows(
            "targets by queue and fabric", lambda: QueueTarget.objects.order_by().values_list("queue", "fabric", "pk")
        )
    }
    by_placement: defaultdict[tuple[int, int | None], list[str]] = defaultdict(list)
    for admit in decisions.admit:
        queue_id = rows[admit.job_id].queue_id
        by_placement[admit.fabric_id, targets.get((queue_id, admit.fabric_id))].append(admit.job_id)
    moved = 0
    for (fabric_id, target_id), ids in by_placement.items():
        moved += len(
            services.transition_many(
                ids, State.PENDING, State.ADMITTED, reason="admitted", fabric_id=fabric_id, target_id=target_id
            )
        )
    return moved


def _preempt(decisions: Decisions) -> int:
    """Running work goes to `preempted` (sync stops its job, then requeues it); admitted work goes straight back."""
    if not decisions.preempt:
        return 0
    workloads = {str(pk): w for pk, w in Workload.objects.in_bulk([p.job_id for p in decisions.preempt]).items()}
    done = 0
    for preempt in decisions.preempt:
        workload = workloads[preempt.job_id]
        message = preempt.reason.message
        if workload.state == State.ADMITTED:
            done += services.transition(
                workload, State.PENDING, reason=message, fabric_id=None, target_id=None, admitted_at=None
            )
        elif workload.state in (State.DISPATCHING, State.RUNNING):
            done += services.transition(workload, State.PREEMPTED, reason=message)
    return done


def _record_waiting(decisions: Decisions, rows: dict[str, Row]) -> int:
    changed: list[tuple[str, str, str, datetime | None, int]] = []
    at_limit: dict[str, str] = {}  # work that has just come to wait at its team's limit, for the team's leads
    for place, waiting in enumerate(decisions.waiting):
        row = rows[waiting.job_id]
        reason = waiting.reason
        new_reason = reason.code != row.pending_reason_code
        if new_reason and reason.code == reasons.GROUP_AT_LIMIT and len(at_limit) < LIMIT_TOLD:
            at_limit[waiting.job_id] = reason.message
        fresh = place < FRESH_REASONS  # near the head: words and places kept exact
        new_words = fresh and reason.message != row.pending_reason
        new_place = fresh and waiting.position != row.queue_position
        if new_reason or new_words or new_place or _moved(waiting.estimated_start, row.estimated_start):
            changed.append((waiting.job_id, reason.code, reason.message, waiting.estimated_start, waiting.position))
    store.write_waiting_reasons(changed)
    team_limit.tell_leads(at_limit, timezone.now())
    return len(changed)


def _moved(new: datetime | None, old: datetime | None) -> bool:
    if new is None or old is None:
        return new is not old
    return abs((new - old).total_seconds()) > ESTIMATE_SLACK_S
