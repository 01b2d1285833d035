"""Where one more job would land: the snapshot plus the job, through the same decide(), read back for that job.

The plain path (`place`) decides on the whole snapshot with the job added. scheduler/dryrun_fast.py decides on
the part of the snapshot the job can meet (the same answer, held equal by tests/scheduler/test_dryrun.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from scheduler.decide import decide
from scheduler.ledger import need_on
from scheduler.model import Decisions, Job, Snapshot
from scheduler.reasons import Reason
from scheduler.routes import targets

ADMIT = "admit"
WAIT = "wait"


@dataclass(frozen=True)
class Placement:
    """What decide() made of the job: admitted on `fabric_id`, or waiting (its reason, place and estimate), and
    whether it would run beyond its team's reservation there (`borrowing`). A waiting job's `fabric_id` is the
    first target it may go to (None: it has none)."""

    outcome: str
    fabric_id: int | None
    reason: Reason | None = None
    estimated_start: datetime | None = None
    position: int | None = None
    borrowing: bool = False


def with_job(snapshot: Snapshot, job: Job) -> Snapshot:
    return replace(snapshot, pending=(*snapshot.pending, job))


def place(snapshot: Snapshot, job: Job) -> Placement:
    """The plain path: decide() on the whole snapshot with the job added."""
    return read_back(with_job(snapshot, job), decide(with_job(snapshot, job)), job)


def read_back(snapshot: Snapshot, decisions: Decisions, job: Job) -> Placement:
    """The job's placement among the decisions made on a snapshot that holds it."""
    for admit in decisions.admit:
        if admit.job_id == job.id:
            return Placement(ADMIT, admit.fabric_id, borrowing=borrows(snapshot, decisions, job, admit.fabric_id))
    queue = snapshot.queues.get(job.queue_id)
    first = next(iter(targets(job, queue, snapshot)), None) if queue is not None else None
    for waiting in decisions.waiting:
        if waiting.job_id == job.id:
            return Placement(
                WAIT,
                first,
                waiting.reason,
                waiting.estimated_start,
                waiting.position,
                borrows(snapshot, decisions, job, first),
            )
    return Placement(WAIT, first)  # (decide() names every job it does not admit: not reached)


def borrows(snapshot: Snapshot, decisions: Decisions, job: Job, fid: int | None) -> bool:
    """Whether the job, started on the fabric beside what its team holds there (running, and admitted in these
    decisions), would hold more GPUs than its team's reservation there: borrowed capacity, which preemption may
    take back where its queue allows."""
    if fid is None or fid not in snapshot.fabrics:
        return False
    sharing = snapshot.fabrics[fid].gpu_sharing
    admitted = {a.job_id for a in decisions.admit if a.fabric_id == fid}
    held = sum(need_on(j, sharing)[0] for j in snapshot.running if j.group_id == job.group_id and j.fabric_id == fid)
    held += sum(
        need_on(j, sharing)[0]
        for j in snapshot.pending
        if j.id in admitted and j.id != job.id and j.group_id == job.group_id
    )
    reserved = snapshot.quota(job.group_id, fid).reservation.gpus_milli
    return held + need_on(job, sharing)[0] > reserved
