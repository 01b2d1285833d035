"""Holds: work whose team, member or agent identity has spent its budget waits, with the budget's reason, and takes
no part in the cycle (it holds no capacity for later and is no demand on a reservation). Running work is never
touched: a budget only stops work from starting. Which work is held is the portal's to say (Snapshot.held)."""

from __future__ import annotations

from scheduler.cycle import Cycle
from scheduler.model import Job


def held_back(c: Cycle, line: list[Job]) -> list[Job]:
    """The line without the held work, in its order; each held job waits with its hold's reason."""
    held = c.s.held
    rest = []
    for job in line:
        reason = held.get((job.group_id, 0)) or held.get((job.group_id, job.owner_id)) or held.get((0, job.owner_id))
        if reason is None:
            rest.append(job)
        else:
            c.waiting[job.id] = reason
    return rest
