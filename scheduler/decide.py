"""One scheduling cycle over a snapshot: order the pending work, then admit what fits.

This is the seam the full policy engine (fair share, reservations, gang, backfill, preemption)
fills in; today it admits by capacity and group limit.
"""

from __future__ import annotations

from collections import defaultdict

from fabrics.base import Resources
from scheduler import reasons
from scheduler.model import QOS, Admit, Decisions, Job, Snapshot, Waiting
from scheduler.reasons import Reason


class Usage:
    """What running work holds, per fabric and per (group, fabric); a working copy for one cycle."""

    def __init__(self, running: tuple[Job, ...]) -> None:
        self.fabric: defaultdict[int, Resources] = defaultdict(Resources)
        self.group: defaultdict[tuple[int, int], Resources] = defaultdict(Resources)
        for job in running:
            if job.fabric_id is not None:
                self.add(job, job.fabric_id)

    def add(self, job: Job, fabric_id: int) -> None:
        self.fabric[fabric_id] += job.total
        self.group[job.group_id, fabric_id] += job.total


def decide(snapshot: Snapshot) -> Decisions:
    # 1. Take what running work holds.
    usage = Usage(snapshot.running)
    # 2. Order the pending work: priority class first, then age.
    order = sorted(snapshot.pending, key=lambda j: (-QOS.get(j.priority, 1), j.submitted_at or snapshot.now, j.id))
    # 3. Admit each job on the first target that can hold all of it now and keeps its group within limit.
    admit: list[Admit] = []
    waiting: list[Waiting] = []
    for job in order:
        placed = _place(job, snapshot, usage)
        if isinstance(placed, int):
            usage.add(job, placed)
            admit.append(Admit(job.id, placed))
        else:
            waiting.append(Waiting(job.id, placed))
    return Decisions(admit=tuple(admit), waiting=tuple(waiting))


def _place(job: Job, snapshot: Snapshot, usage: Usage) -> int | Reason:
    """The fabric id to admit the job on, or the reason it cannot start (from the first target tried)."""
    queue = snapshot.queues[job.queue_id]
    first_reason: Reason | None = None
    for fabric_id in queue.fabric_ids:
        fabric = snapshot.fabrics[fabric_id]
        need = job.total
        if not fabric.healthy:
            reason = reasons.fabric_unavailable(fabric.name)
        elif not (usage.fabric[fabric_id] + need).fits_in(fabric.capacity):
            reason = reasons.no_capacity(fabric.name, fabric.capacity - usage.fabric[fabric_id], need)
        else:
            limit = snapshot.quota(job.group_id, fabric_id).limit
            used = usage.group[job.group_id, fabric_id]
            if (used + need).fits_in(limit):
                return fabric_id
            reason = reasons.group_at_limit(fabric.name, used, limit, need)
        first_reason = first_reason or reason
    return first_reason or reasons.no_target(queue.slug)
