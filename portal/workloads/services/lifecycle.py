"""State changes: a compare-and-swap from the state the writer read to the next one, with its WorkloadEvent in
the same transaction; a change that loses a race changes nothing. In bulk on PostgreSQL every change goes
through store.swap_with_events (one statement); elsewhere, and one at a time, through the ORM."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone

from portal import sql
from portal.workloads import store
from portal.workloads.calibration import error_s
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.services.errors import InvalidTransition
from portal.workloads.states import FINISHED, State, can_move

# What leaving `pending` clears: why it waited, and where it stood in line.
LEFT_PENDING: dict[str, Any] = {"pending_reason": "", "pending_reason_code": "", "estimated_start": None,
                                "queue_position": 0}  # fmt: skip


def transition(workload: Workload, new: State, *, actor: Any = None, reason: str = "", **fields: Any) -> bool:
    """Move the workload from its current state to `new` if nobody moved it first.

    Returns False, changing nothing, when the stored state is no longer `workload.state`.
    """
    old = State(workload.state)
    if not can_move(old, new):
        raise InvalidTransition(f"{old} -> {new} is not a workload transition")
    now = timezone.now()
    stamps: dict[str, Any] = {"updated_at": now}
    if new == State.ADMITTED:
        stamps["admitted_at"] = now
    elif new == State.RUNNING:
        stamps["started_at"] = fields.pop("started_at", None) or now
        stamps["estimate_error_s"] = error_s(stamps["started_at"], workload.last_estimated_start)
        if workload.lease_s:
            stamps["lease_ends_at"] = stamps["started_at"] + timedelta(seconds=workload.lease_s)
    elif new in FINISHED:
        stamps["finished_at"] = fields.pop("finished_at", None) or now
    if new != State.PENDING and old == State.PENDING:
        stamps |= LEFT_PENDING
    values = {**stamps, **fields, "state": new}
    with transaction.atomic():
        if Workload.objects.filter(pk=workload.pk, state=old).update(**values) != 1:
            return False  # another worker or request got there first
        WorkloadEvent.objects.create(
            workload=workload, at=now, actor=actor, from_state=old, to_state=new, reason=reason[:500]
        )
    for key, value in values.items():
        setattr(workload, key, value)
    if new in FINISHED and workload.array_parent_id is not None:
        settle_array(workload.array_parent_id)
    return True


def settle_array(parent_id: Any) -> None:
    """Once an array's last element has ended, its parent ends: succeeded when every element did, failed when
    one failed or expired, else cancelled. One query while elements still run."""
    counts = dict(
        Workload.objects.filter(array_parent_id=parent_id).values_list("state").annotate(n=Count("pk")).order_by()
    )
    if any(state not in FINISHED for state in counts):
        return
    parent = Workload.objects.filter(pk=parent_id, state=State.PENDING).first()
    if parent is None:
        return  # cancelled already
    if set(counts) <= {State.SUCCEEDED}:
        outcome = State.SUCCEEDED
    elif counts.keys() & {State.FAILED, State.EXPIRED}:
        outcome = State.FAILED
    else:
        outcome = State.CANCELLED
    said = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    transition(parent, outcome, reason=f"every element has ended: {said}")


def transition_many(
    ids: list[Any],
    old: State,
    new: State,
    *,
    reason: str,
    actor: Any = None,
    each: Mapping[str, Mapping[Any, str]] | None = None,
    **fields: Any,
) -> list[Any]:
    """Move many workloads from `old` to `new` at once (the scheduler's admissions): the rows still in `old` are
    updated and get their events; returns the ids moved. The others had moved on (cancelled, say) and are left
    alone. On PostgreSQL one statement (store.swap_with_events), elsewhere a transaction per 500 rows.

    `each`: text columns and each row's own value for them (column -> id -> value; a dispatch's rendered
    scripts), set by the same UPDATE: one new version of each row, not one more per column."""
    if not can_move(old, new):
        raise InvalidTransition(f"{old} -> {new} is not a workload transition")
    now = timezone.now()
    stamps: dict[str, Any] = {"updated_at": now, "state": new}
    if new == State.ADMITTED:
        stamps["admitted_at"] = now
    if old == State.PENDING:
        stamps |= LEFT_PENDING
    if connection.vendor == "postgresql":
        per_row = {name: ("text", [by_pk[pk] for pk in ids]) for name, by_pk in (each or {}).items()}
        return store.swap_with_events(ids, old, stamps | fields, per_row, at=now, reason=reason, actor=actor)
    moved: list[Any] = []
    with transaction.atomic():
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            won = list(
                Workload.objects.select_for_update().filter(pk__in=chunk, state=old).values_list("pk", flat=True)
            )
            if not won:
                continue
            Workload.objects.filter(pk__in=won).update(**stamps, **fields)
            for name, by_pk in (each or {}).items():
                sql.set_each(Workload, name, {pk: by_pk[pk] for pk in won})
            WorkloadEvent.objects.bulk_create(
                WorkloadEvent(workload_id=pk, at=now, actor=actor, from_state=old, to_state=new, reason=reason[:500])
                for pk in won
            )
            moved += won
    return moved


def start_many(starts: list[tuple[Workload, datetime | None, str]], *, reason: str) -> list[Workload]:
    """dispatching -> running for many workloads at once (a sync that found a batch's jobs started), each with
    its own start time (None: now) and host; on PostgreSQL one statement (store.swap_with_events), elsewhere
    `transition` each. Returns those moved, their fields set; the others had moved on (a cancel) and are left
    alone. Leases take `transition` (their end follows from the start)."""
    now = timezone.now()

    def start_one(w: Workload, at: datetime | None, host: str) -> bool:
        return transition(w, State.RUNNING, reason=reason, started_at=at, host=host, pending_reason="",
                          estimated_start=None)  # fmt: skip

    plain = [(w, at or now, host) for w, at, host in starts if not w.lease_s and w.state == State.DISPATCHING]
    moved = [w for w, at, host in starts if (w.lease_s or w.state != State.DISPATCHING) and start_one(w, at, host)]
    if not plain:
        return moved
    if connection.vendor != "postgresql":
        return moved + [w for w, at, host in plain if start_one(w, at, host)]
    values = {"state": State.RUNNING, "updated_at": now, "pending_reason": "", "estimated_start": None}
    errors = [error_s(at, w.last_estimated_start) for w, at, _ in plain]
    each: dict[str, tuple[str, Sequence[Any]]] = {
        "started_at": ("timestamptz", [at for _, at, _ in plain]),
        "host": ("text", [h for _, _, h in plain]),
        "estimate_error_s": ("int", errors),
    }
    won = {str(pk) for pk in store.swap_with_events([w.pk for w, _, _ in plain], State.DISPATCHING, values, each,
                                                    at=now, reason=reason)}  # fmt: skip
    for (w, at, host), error in zip(plain, errors, strict=True):
        if str(w.pk) in won:
            w.state, w.updated_at, w.started_at, w.host = State.RUNNING, now, at, host
            w.estimate_error_s = error
            w.pending_reason, w.estimated_start = "", None
            moved.append(w)
    return moved


@dataclass(frozen=True)
class End:
    """How a running workload's job ended, as a sync found it (finish_many)."""

    workload: Workload
    state: State
    reason: str
    exit_code: int | None
    finished_at: datetime | None
    log_tail: str
    host: str


def finish_many(ends: list[End]) -> list[Workload]:
    """running -> its end (succeeded, failed, expired, cancelled) for many workloads at once, each with its own
    state, reason, exit code, end time, output and host: a sync that found a batch's jobs ended. On PostgreSQL
    one statement (store.swap_with_events), elsewhere `transition` each. A notebook's endpoint goes with its
    server. Returns those moved, their fields set; the others had moved on (a cancel, a preemption) and are
    left alone."""
    now = timezone.now()

    def values_of(end: End) -> dict[str, Any]:
        return {"exit_code": end.exit_code, "finished_at": end.finished_at or now, "log_tail": end.log_tail,
                "host": end.host, "notebook_endpoint": None}  # fmt: skip

    plain = [e for e in ends if e.workload.state == State.RUNNING and e.state in FINISHED]
    if connection.vendor != "postgresql":
        return [e.workload for e in plain if transition(e.workload, e.state, reason=e.reason, **values_of(e))]
    if not plain:
        return []
    each: dict[str, tuple[str, Sequence[Any]]] = {
        "state": ("text", [str(e.state) for e in plain]),
        "exit_code": ("int", [e.exit_code for e in plain]),
        "finished_at": ("timestamptz", [e.finished_at or now for e in plain]),
        "log_tail": ("text", [e.log_tail for e in plain]),
        "host": ("text", [e.host for e in plain]),
    }
    won = {str(pk) for pk in store.swap_with_events([e.workload.pk for e in plain], State.RUNNING,
                                                    {"updated_at": now, "notebook_endpoint": None}, each,
                                                    at=now, reason=[e.reason for e in plain])}  # fmt: skip
    moved = []
    for e in plain:
        if str(e.workload.pk) in won:
            for key, value in {**values_of(e), "state": e.state, "updated_at": now}.items():
                setattr(e.workload, key, value)
            moved.append(e.workload)
    for parent_id in {w.array_parent_id for w in moved if w.array_parent_id is not None}:
        settle_array(parent_id)
    return moved
