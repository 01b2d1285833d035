"""Preemption: give a group its reservation back by stopping work that borrows it, or work whose GPUs sit idle;
and let work of a tier that may preempt take borrowed capacity from lower tiers.

Reclaiming a reservation: work whose GPUs sit idle in a queue that marks such work preemptible (its idle-GPU
action) goes first, whether or not its group borrows. Then work in preemptible queues, only from groups using
more than their own reservation on that fabric. Within each, lowest tier first and, within a tier, newest first.

Tier preemption (`below`: the preempting job's tier rank): work that is owed nothing, of a tier that may
preempt, takes capacity only from work of strictly lower tiers, of other teams, in preemptible queues, and only
what those teams borrow (never below their own reservation; an idle mark does not count here, it is for teams
owed their reservation). Strictly lower: two jobs can never preempt each other back and forth.

Borrowing is judged at each level the claimant does not share: a team in another department is a lender only
when both it and its department are above their reservations; a sister team, when it is above its own.

Nothing is preempted unless the whole shortfall can be covered."""

from __future__ import annotations

from datetime import datetime

from scheduler.ledger import ZERO, Amount, Ledger, add, fits, need_on
from scheduler.model import Job, Snapshot, ranks


def victims(
    snapshot: Snapshot,
    ledger: Ledger,
    running: list[Job],
    group_id: int,
    fabric_id: int,
    deficit: Amount,
    below: int | None = None,
) -> list[Job] | None:
    """The running jobs to stop so that `deficit` frees up on the fabric, or None when it cannot. `below`: a
    tier's rank, for tier preemption (only borrowed work of lower tiers in preemptible queues); None: to give
    `group_id` its reservation back."""
    sharing = ledger.sharing[fabric_id]
    epoch = datetime.min.replace(tzinfo=snapshot.now.tzinfo)
    rank_of = ranks(snapshot.tiers)
    rank = {j.id: rank_of.get(j.priority, 1) for j in running}  # once per job, not per comparison
    if below is None:
        takes_idle = True
        eligible = [
            j for j in running if j.group_id != group_id and j.fabric_id == fabric_id and may_preempt(snapshot, j)
        ]
    else:
        takes_idle = False
        eligible = [
            j
            for j in running
            if j.group_id != group_id
            and j.fabric_id == fabric_id
            and rank[j.id] < below
            and _in_preemptible(snapshot, j)
        ]

    def order(job: Job) -> tuple[bool, int, float, str]:
        started = (job.started_at or snapshot.now) - epoch
        return (not (takes_idle and idle(snapshot, job)), rank[job.id], -started.total_seconds(), job.id)

    candidates = sorted(eligible, key=order)
    used: dict[int, Amount] = {}
    picked: list[Job] = []
    freed = ZERO
    claimant = set(ledger.lineage(group_id))
    for job in candidates:
        if fits(deficit, freed):
            break
        # Lent at every level the claimant is not part of: the team above its reservation, and its department
        # above the department's unless the claimant is in that department too (borrowing within a department
        # is taken back by its own teams, not by other departments).
        apart = [level for level in ledger.lineage(job.group_id) if level not in claimant]
        current = {level: used.get(level, ledger.used_at(level, fabric_id)) for level in apart}
        lent = all(_borrowing(current[h], ledger.reserved_at(h, fabric_id), deficit) for h in apart)
        if not (takes_idle and idle(snapshot, job)) and not lent:
            continue  # within a reservation at some level: nothing of it is borrowed from the claimant
        need = need_on(job, sharing)
        picked.append(job)
        freed = add(freed, need)
        for h, now_used in current.items():
            used[h] = (now_used[0] - need[0], now_used[1] - need[1], now_used[2] - need[2])
    return picked if fits(deficit, freed) else None


def idle(snapshot: Snapshot, job: Job) -> bool:
    """Its GPUs sit idle, and its queue lets a team owed its reservation take such work first."""
    queue = snapshot.queues.get(job.queue_id)
    return job.gpus_idle and queue is not None and queue.idle_preemptible


def may_preempt(snapshot: Snapshot, job: Job) -> bool:
    """Whether the job may ever be preempted: its queue is preemptible, or its GPUs sit idle and the queue
    marks such work preemptible."""
    queue = snapshot.queues.get(job.queue_id)
    return queue is not None and (queue.preemptible or idle(snapshot, job))


def _in_preemptible(snapshot: Snapshot, job: Job) -> bool:
    queue = snapshot.queues.get(job.queue_id)
    return queue is not None and queue.preemptible


def _borrowing(used: Amount, reserved: Amount, deficit: Amount) -> bool:
    """Above its reservation in a resource that is short (a GPU shortfall is not met by taking CPUs)."""
    return any(deficit[i] > 0 and used[i] > reserved[i] for i in range(3))
