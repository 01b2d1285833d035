"""Bring fabric status back: one poll per fabric per cycle, then state changes through the services."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from datetime import datetime
from typing import NamedTuple
from uuid import UUID

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from fabrics import jupyter
from fabrics.base import FabricError, JobState, JobStatus
from portal import sql
from portal.queues.models import Fabric as FabricRow
from portal.queues.models import WorkloadKind
from portal.usage import samples
from portal.worker import idle, pods, stats
from portal.worker.connections import fabric_for
from portal.worker.health import set_health as _set_health
from portal.workloads import notebook_endpoint, services
from portal.workloads.calibration import shown
from portal.workloads.models import Workload
from portal.workloads.states import State

log = logging.getLogger("gridlane.worker")

# A finished fabric job -> the workload state it ends in.
FINAL = {
    JobState.SUCCEEDED: State.SUCCEEDED,
    JobState.FAILED: State.FAILED,
    JobState.TIMED_OUT: State.EXPIRED,
    JobState.CANCELLED: State.CANCELLED,
}


def sync_all() -> int:
    """Poll every fabric that has live work; returns how many workloads changed state."""
    by_fabric: defaultdict[int, list[Live]] = defaultdict(list)
    for w in _live():
        by_fabric[w.fabric_id].append(w)
    if not by_fabric:
        return 0
    fabrics = FabricRow.objects.in_bulk(list(by_fabric))
    changed = 0
    budget = jupyter.Budget()  # for asking notebooks' servers (idle.ask_server) in this cycle
    for fabric_id, workloads in by_fabric.items():
        changed += _sync_fabric(fabrics[fabric_id], workloads, budget)
    return changed


class Live(NamedTuple):
    """A live workload as a sync first reads it: enough to poll its job, and to say why the fabric holds it. A
    burst leaves thousands queued on their fabric, polled every cycle and most unchanged: those are never built
    as model instances (that cost most of a sync); the rest are read whole after the poll (_whole)."""

    pk: UUID
    fabric_id: int
    state: str
    external_id: str
    pending_reason: str
    estimated_start: datetime | None


LIVE = [State.DISPATCHING, State.RUNNING, State.CANCELLING, State.PREEMPTED]


def _live_now() -> QuerySet[Workload]:
    """Every workload whose fabric may still change it (one dispatching has a job id once its fabric took it)."""
    return Workload.objects.filter(state__in=LIVE, fabric_id__isnull=False).exclude(
        state=State.DISPATCHING, external_id=""
    )


def _live() -> list[Live]:
    return [Live._make(v) for v in _live_now().values_list(*Live._fields)]


def _whole(row: FabricRow, ids: list[UUID]) -> list[Workload]:
    """These workloads read whole, if they are still live (one may have ended meanwhile), with their fabric
    and queue: each of those read once and shared, not joined to every row."""
    if not ids:
        return []
    workloads = list(_live_now().filter(pk__in=ids, fabric_id=row.pk))
    sql.related_once(workloads, "queue")
    for w in workloads:
        w.fabric = row
    return workloads


def _sync_fabric(row: FabricRow, live: list[Live], budget: jupyter.Budget | None = None) -> int:
    fabric = fabric_for(row)
    stopping = _whole(row, [w.pk for w in live if w.state in (State.CANCELLING, State.PREEMPTED)])
    for w in stopping:
        _ask_cancel(row, w)
    found = {w.pk: w.external_id for w in stopping}  # a job found by its tag has its id now
    ids = [job for w in live if (job := found.get(w.pk, w.external_id))]
    try:
        statuses = fabric.poll(ids) if ids else {}
    except FabricError as error:
        _set_health(row, healthy=False, detail=str(error))
        return 0
    _set_health(row, healthy=True, detail="")
    if row.kind == "kubernetes":
        pods.record(live, statuses, timezone.now())  # where each job's server may be (server_reach)
    waiting = _waiting_on_fabric_many(live, statuses)
    workloads = stopping + _whole(row, [w.pk for w in live if w.pk not in waiting and w.pk not in found])
    changed = _record_starts(row, workloads, statuses)
    ended = _record_ends(row, workloads, statuses)
    changed += len(ended)
    for w in workloads:
        if w.pk in ended:
            continue
        status = statuses.get(w.external_id, JobStatus(JobState.UNDETERMINED))
        if w.external_id and status.state == JobState.RUNNING:  # a job still queued has written nothing yet
            _update_tail(fabric_tail(row, w), w)
        changed += _follow(row, w, status, budget)
    return changed


# Output of running work is read at most this often per workload: on SSH fabrics each read is a round trip.
TAIL_EVERY_S = 5.0
_tailed: dict[str, float] = {}


def fabric_tail(row: FabricRow, w: Workload, *, final: bool = False) -> str:
    """The end of the job's output; while it runs, no more often than TAIL_EVERY_S (else the last one read)."""
    now = time.monotonic()
    if not final and now - _tailed.get(w.external_id, -TAIL_EVERY_S) < TAIL_EVERY_S:
        return w.log_tail
    _tailed[w.external_id] = now
    if final:
        _tailed.pop(w.external_id, None)
    try:
        return fabric_for(row).tail(w.external_id)
    except FabricError:
        return w.log_tail


def _update_tail(tail: str, w: Workload) -> None:
    if tail != w.log_tail:
        Workload.objects.filter(pk=w.pk).update(log_tail=tail)
        w.log_tail = tail


def _record_starts(row: FabricRow, workloads: list[Workload], statuses: dict[str, JobStatus]) -> int:
    """Every dispatching workload whose job has started (or run and ended between two polls) is running, all in
    one statement: a burst's thousand starts are not a thousand transactions. `_follow` then takes each further
    (an ended job's end) from its new state. Returns how many started."""
    starts = []
    for w in workloads:
        status = statuses.get(w.external_id)
        if status is None or w.state != State.DISPATCHING:
            continue
        if status.state == JobState.RUNNING or status.state.finished:
            starts.append((w, status.started_at, status.host))
    if not starts:
        return 0
    started = services.start_many(starts, reason=f"running on {row.name}")
    stats.observe_waits(started)
    return len(started)


def _record_ends(row: FabricRow, workloads: list[Workload], statuses: dict[str, JobStatus]) -> set[object]:
    """Every running workload whose job has ended takes its end, all in one statement (as _record_starts: a
    burst's thousand ends are not a thousand transactions). Returns the ids of those moved; the rest (one
    cancelled or preempted meanwhile, and every other case) `_follow` takes one by one."""
    ends = []
    for w in workloads:
        status = statuses.get(w.external_id)
        if status is None or w.state != State.RUNNING or not status.state.finished:
            continue
        if status.gpu_utilisation is not None or status.cpu_utilisation is not None:  # its last reading
            samples.from_fabric(w, status.gpu_utilisation, timezone.now(), status.cpu_utilisation)
        new = FINAL[status.state]
        ends.append(services.End(w, new, _end_reason(row, w, status, new), status.exit_code, status.finished_at,
                                 fabric_tail(row, w, final=True), status.host or w.host))  # fmt: skip
    return {w.pk for w in services.finish_many(ends)} if ends else set()


def _end_reason(row: FabricRow, w: Workload, status: JobStatus, new: State) -> str:
    if new == State.CANCELLED and w.state != State.CANCELLING:
        return f"cancelled on {row.name} outside Gridlane"
    if new == State.EXPIRED:
        return f"stopped at its runtime limit of {w.runtime_limit_s // 60} minutes"
    return status.reason or f"{new.label.lower()} (exit code {status.exit_code})"


def _follow(row: FabricRow, w: Workload, status: JobStatus, budget: jupyter.Budget | None = None) -> int:
    """Apply one job's status to its workload; 1 if the workload changed state."""
    state = State(w.state)
    if state == State.PREEMPTED:
        return _follow_preempted(row, w, status)
    if status.endpoint is not None and status.endpoint != notebook_endpoint.stored(w):
        notebook_endpoint.record(w, status.endpoint)  # the local fabric's notebooks: found by its poll
    if (status.gpu_utilisation is not None or status.cpu_utilisation is not None) and state == State.RUNNING:
        samples.from_fabric(w, status.gpu_utilisation, timezone.now(), status.cpu_utilisation)  # Kubernetes
    if status.state == JobState.RUNNING and state == State.DISPATCHING:
        return _started(row, w, status)
    if status.state == JobState.RUNNING and state == State.RUNNING and w.kind == WorkloadKind.NOTEBOOK:
        status = idle.ask_server(w, status, budget or jupyter.Budget())  # where the fabric cannot know its use
        return int(idle.follow(w, status))  # stopped when idle past its queue's limit, after a warning
    if status.state == JobState.QUEUED and state == State.DISPATCHING:
        _waiting_on_fabric(w, status)
        return 0
    if status.state.finished:
        if state == State.DISPATCHING:
            # It ran and finished between two polls: record the start too, so every history reads the same.
            _started(row, w, status)
        tail = fabric_tail(row, w, final=True)
        new = FINAL[status.state]
        reason = _end_reason(row, w, status, new)
        return int(
            services.transition(
                w,
                new,
                reason=reason,
                exit_code=status.exit_code,
                finished_at=status.finished_at,
                log_tail=tail,
                host=status.host or w.host,
                notebook_endpoint=None,  # its server is gone, and its token with it
            )
        )
    if status.state == JobState.MISSING:
        if state == State.CANCELLING:
            return int(services.transition(w, State.CANCELLED, reason=f"cancelled; {row.name} has no job left"))
        return int(services.transition(w, State.FAILED, reason=f"{row.name} lost the job ({w.external_id})"))
    return 0  # queued, running as before, or undetermined: nothing to change


def _waiting_on_fabric_many(live: list[Live], statuses: dict[str, JobStatus]) -> set[UUID]:
    """_waiting_on_fabric for every job the fabric still holds, with one UPDATE per distinct (reason, estimate):
    a burst's thousand jobs waiting for the same thing are one statement, not a thousand. Returns their ids."""
    held: defaultdict[tuple[str, datetime | None], list[UUID]] = defaultdict(list)
    taken: set[UUID] = set()
    for w in live:
        status = statuses.get(w.external_id)
        if status is None or status.state != JobState.QUEUED or w.state != State.DISPATCHING or status.endpoint:
            continue  # anything else (a notebook's server found while queued, say) goes through _follow
        taken.add(w.pk)
        if (why := _why(status)) != (w.pending_reason, w.estimated_start):
            held[why].append(w.pk)
    for (reason, estimate), ids in held.items():
        _say_why(ids, reason, estimate)
    return taken


def _say_why(ids: list[UUID], reason: str, estimate: datetime | None) -> set[UUID]:
    """Set these workloads' pending reason and estimate in one statement; returns the ids it set. On PostgreSQL
    it never waits for a row another transaction holds (a cancel, say): that one is changing anyway, and the next
    sync says why it waits, if it still does. A statement that waited for thousands of rows in its own order
    could deadlock with another such; one that takes only free rows cannot."""
    if connection.vendor != "postgresql":
        Workload.objects.filter(pk__in=ids).update(pending_reason=reason, estimated_start=estimate, **shown(estimate))
        return set(ids)
    with transaction.atomic():
        free = list(
            Workload.objects.filter(pk__in=ids).select_for_update(skip_locked=True).values_list("pk", flat=True)
        )
        Workload.objects.filter(pk__in=free).update(pending_reason=reason, estimated_start=estimate, **shown(estimate))
    return set(free)


def _waiting_on_fabric(w: Workload, status: JobStatus) -> None:
    """The fabric holds the job (Slurm's, Kueue's or Volcano's own queue): say why, and when it expects to start."""
    reason, estimate = _why(status)
    if (reason, estimate) != (w.pending_reason, w.estimated_start):
        Workload.objects.filter(pk=w.pk).update(pending_reason=reason, estimated_start=estimate, **shown(estimate))
        w.pending_reason, w.estimated_start = reason, estimate


def _why(status: JobStatus) -> tuple[str, datetime | None]:
    """What a workload the fabric holds says of its wait: the fabric's reason (as long as the column takes) and
    its estimate of the start."""
    return status.reason[:300], status.estimated_start


def _started(row: FabricRow, w: Workload, status: JobStatus) -> int:
    if not services.transition(
        w,
        State.RUNNING,
        reason=f"running on {row.name}",
        started_at=status.started_at,
        host=status.host,
        pending_reason="",
        estimated_start=None,
    ):
        return 0
    stats.observe_wait(w.group_id, w)
    return 1


def _follow_preempted(row: FabricRow, w: Workload, status: JobStatus) -> int:
    """Once the preempted job has stopped, the workload waits in line again, with its history."""
    if status.state == JobState.SUCCEEDED:
        return int(services.transition(w, State.SUCCEEDED, reason="finished before the preemption took effect",
                                       exit_code=status.exit_code, finished_at=status.finished_at))  # fmt: skip
    if status.state.finished or status.state == JobState.MISSING:
        return _requeue(w)
    return 0


def _requeue(w: Workload) -> int:
    return int(
        services.transition(
            w, State.PENDING, reason="back in line after preemption", attempt=w.attempt + 1,
            fabric_id=None, target_id=None, external_id="", rendered="", host="", connect_url="",
            notebook_endpoint=None, admitted_at=None, started_at=None, exit_code=None, idle_stop_at=None,
            gpu_idle_warned_at=None, last_sample_at=None, last_estimated_start=None, estimate_error_s=None,
        )
    )  # fmt: skip


def _ask_cancel(row: FabricRow, w: Workload) -> None:
    """Stop the job on its fabric; a workload with no job anywhere is cancelled (or requeued) at once."""
    fabric = fabric_for(row)
    try:
        external_id = w.external_id or fabric.find(w.run_id)
        if external_id is None:
            if w.state == State.PREEMPTED:
                _requeue(w)
            else:
                services.transition(w, State.CANCELLED, reason="cancelled before it reached the fabric")
            return
        if not w.external_id:
            Workload.objects.filter(pk=w.pk, external_id="").update(external_id=external_id)
            w.external_id = external_id
        fabric.cancel(external_id)
    except FabricError as error:
        log.warning("cancel of %s on %s failed, will retry: %s", w.pk, row.name, error)
