"""Recording a checked submission: its idempotency key, its row and first event (one statement on PostgreSQL,
see store.insert_submitted), the kick, and the answer to a repeated key."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from portal import sql
from portal.workloads import context, kick, store
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.services.errors import IdempotencyConflict
from portal.workloads.services.request import SubmitRequest
from portal.workloads.states import State

if TYPE_CHECKING:
    from portal.workloads.services.kept import KeptSubmit

log = logging.getLogger("gridlane.services")


def keyed(workload: Workload, req: SubmitRequest, key: str | None) -> None:
    """Give a checked workload its idempotency key, and the fingerprint of its request that a repeat with the same
    key is compared with (replay). Work submitted without a key is never replayed: it keeps no fingerprint."""
    workload.idempotency_key = key or None
    workload.request_fingerprint = req.fingerprint() if key else ""


def replay(user: Any, req: SubmitRequest, key: str) -> Workload | None:
    """The earlier workload for this key, or None when the key is new; IdempotencyConflict when the earlier one
    was for a different request."""
    existing = Workload.objects.filter(owner=user, idempotency_key=key).first()
    if existing is not None and existing.request_fingerprint != req.fingerprint():
        raise IdempotencyConflict("This Idempotency-Key was already used for a different request.")
    return existing


def replayed(user: Any, req: SubmitRequest, idempotency_key: str | None, workload: Workload) -> Workload:
    """The workload a submit whose insert did nothing answers with: the earlier one with its key (or the one of a
    request that won the race)."""
    existing = replay(user, req, idempotency_key) if idempotency_key else None
    if existing is None:
        raise IntegrityError(f"workload {workload.pk} was not inserted and no earlier one has its key")
    return existing


def first_event(workload: Workload) -> WorkloadEvent:
    return sql.unsaved(
        WorkloadEvent,
        workload=workload, at=workload.submitted_at, actor=workload.owner, to_state=State.PENDING, reason="submitted",
    )  # fmt: skip


def do_submit(workload: Workload) -> Workload:
    """Record a checked workload (see check_submit). Raises IntegrityError when its idempotency key is taken."""
    if insert(workload) is not True:
        raise IntegrityError(f"the idempotency key {workload.idempotency_key!r} is taken")
    return workload


def insert(workload: Workload, guard: KeptSubmit | None = None) -> bool | None:
    """Insert the workload with its first event and kick the worker; False (nothing written) when another
    workload of the same owner has its idempotency key.

    On PostgreSQL one statement (store.insert_submitted); elsewhere a transaction. With a `guard` (PostgreSQL:
    a kept submit's generation and charge) the same statement does all that only while the generation is still
    the guard's, and counts the charge: None when it has moved (nothing written, nothing counted); RateLimited
    raised when the count is over the limit (then only the count was written: a refused submit counts, as one
    counted on its own does)."""
    workload.submitted_at = workload.updated_at = timezone.now()
    event = first_event(workload)
    if connection.vendor == "postgresql":
        notify = kick.in_statement(kick.ADMIT)
        if guard is None:
            event.pk = store.insert_submitted(workload, event, notify)
        else:
            generation, count, event.pk = store.insert_submitted_guarded(
                workload, event, guard.generation, guard.charge, notify
            )
            if generation != guard.generation:
                context.seen(generation)
                return None
            guard.charge.settle(count)  # type: ignore[arg-type]  # counted whenever the generation held
        if event.pk is None:
            return False
        for saved in (workload, event):  # as save() leaves them: a later save() updates
            saved._state.adding, saved._state.db = False, connection.alias
    elif not _insert_elsewhere(workload, event):
        return False
    remember_events(workload, [event])
    log.info("workload %s submitted to %s by %s", workload.pk, workload.queue.slug, workload.owner)
    return True


def _insert_elsewhere(workload: Workload, event: WorkloadEvent) -> bool:
    """insert's transaction where there is no one statement for it (SQLite)."""
    try:
        with transaction.atomic():
            workload.save(force_insert=True)
            event.save(force_insert=True)
            kick.kick(kick.ADMIT)
    except IntegrityError:
        if workload.idempotency_key is None:
            raise
        return False
    return True


def remember_events(workload: Workload, events: list[WorkloadEvent]) -> None:
    """Let `workload.events.all()` answer from memory (the API's answer to a submit)."""
    sql.prefetched(workload, "events", events)
