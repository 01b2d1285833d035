"""Taking capacity back within a cycle: preempt borrowed work so that one job fits now (preemption.py picks
which work). All or nothing: when the room cannot be made, nothing is taken."""

from __future__ import annotations

from scheduler import reasons
from scheduler.cycle import Cycle
from scheduler.ledger import Amount, add, need_on, sub
from scheduler.model import Job
from scheduler.preemption import idle, may_preempt, victims


def reclaim(
    c: Cycle,
    job: Job,
    fid: int,
    need: Amount,
    within: tuple[int, int | None] | None = None,
    below: int | None = None,
) -> bool:
    """Preempt borrowed work on the fabric so that this job, owed to its team (or, with `below`, of a tier that
    may preempt lower ones: a tier's rank), fits now. True when it does; the job itself is not admitted here.

    `within`: a department's limit (its key) that holds the job back. Its other teams' borrowed work is taken
    first, enough to bring the department under that limit; then, where the fabric still lacks room, anyone's
    borrowed work as usual."""
    gone = c.gone
    if not any(j.id not in gone for j in c.preemptible[fid]):
        return False  # nothing here may be preempted
    ledger = c.ledger
    sharing = ledger.sharing[fid]
    running = [j for j in c.preemptible[fid] if j.id not in gone]
    chosen: list[Job] = []
    if within is not None:
        over = sub(add(ledger.used_at(*within), need), ledger.limit[within[0]][within[1]])
        sisters = [j for j in running if within[0] in ledger.lineage(j.group_id)]
        first = victims(c.s, ledger, sisters, job.group_id, fid, (max(0, over[0]), max(0, over[1]), max(0, over[2])))
        if not first:
            return False
        for victim in first:
            ledger.give(victim, fid, need_on(victim, sharing))
        chosen, running = first, [j for j in running if j not in first]
    free, held = ledger.free(fid), ledger.held[fid]
    deficit = (
        max(0, need[0] + held[0] - free[0]),
        max(0, need[1] + held[1] - free[1]),
        max(0, need[2] + held[2] - free[2]),
    )
    if any(deficit):
        more = victims(c.s, ledger, running, job.group_id, fid, deficit, below)
        if not more:
            for victim in chosen:  # put back what the first step took
                ledger.take(victim, fid, need_on(victim, sharing))
            return False
        for victim in more:
            ledger.give(victim, fid, need_on(victim, sharing))
        chosen += more
    if not chosen:
        return False
    for victim in chosen:
        if below is None:
            c.preempt(victim, reasons.preempted(c.name(fid), idle(c.s, victim)))
        else:
            c.preempt(victim, reasons.preempted(c.name(fid), tier=job.priority))
    return True


def lent_away(c: Cycle, group_id: int, fid: int) -> int:
    """GPUs (milli) of the team's unused reservation on the fabric that other teams hold and cannot give back:
    their running work there that may never be preempted, as far as those teams are above their own reservation
    there (borrowing). 0 where none is; never more than the team's unused reservation."""
    ledger = c.ledger
    unused = ledger.reserved_at(group_id, fid)[0] - ledger.used_at(group_id, fid)[0]
    if unused <= 0:
        return 0
    fixed = c.fixed.get(fid)
    if fixed is None:  # running work never preempted stays all cycle long: read once per fabric
        fixed = c.fixed[fid] = {}
        sharing = ledger.sharing[fid]
        for job in c.running[fid]:
            if not may_preempt(c.s, job):
                fixed[job.group_id] = fixed.get(job.group_id, 0) + need_on(job, sharing)[0]
    lent = 0
    for team, gpus in fixed.items():
        if team != group_id:
            lent += min(gpus, max(0, ledger.used_at(team, fid)[0] - ledger.reserved_at(team, fid)[0]))
    return min(lent, unused)
