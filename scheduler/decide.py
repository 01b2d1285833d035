"""One scheduling cycle over a frozen snapshot: order the line, admit what the policy allows, say why the
rest waits. Pure: no clock (`now` is in the snapshot), no database, no fabric, and no process-wide settings
(the garbage collector included: how it runs around a cycle is the caller's choice).

The line is walked in two passes. First the work each team is owed (owed.py): jobs that fit within their
team's unused reservation on a target. They start on free capacity, or take borrowed capacity back by
preemption (reclaim.py), or else hold what they need so that nobody behind them takes it as it frees up. Then
everything else (borrow.py), which borrows what is left, in priority order, with backfill around the first work
waiting on each fabric. One Cycle (cycle.py) holds the working state both passes read and record into.
"""

from __future__ import annotations

from typing import Protocol

from scheduler.borrow import consider
from scheduler.cycle import Cycle
from scheduler.held import held_back
from scheduler.model import Decisions, Job, Snapshot
from scheduler.owed import departments_owe, departments_owed, teams_owed
from scheduler.priority import ordered
from scheduler.routes import Route
from scheduler.soonest import LiveRoutes
from scheduler.waiting import decisions


class Watch(Protocol):
    """What a caller learns of a cycle as it runs (the dry run's incremental placement, scheduler/dryrun_incr.py):
    the cycle and its line before the first pass, and each job the second pass considered, with its route."""

    def begin(self, cycle: Cycle, line: list[Job]) -> None: ...

    def considered(self, job: Job, route: Route) -> None: ...


def decide(snapshot: Snapshot, watch: Watch | None = None) -> Decisions:
    cycle = Cycle(snapshot)
    if snapshot.live or any(job.gpu_type for job in snapshot.pending):
        cycle.routes = LiveRoutes(cycle)  # soonest start first, by what fabrics have free now (soonest.py)
    # 1. Order the line: fair share, priority tier, age and size (priority.py).
    line = ordered(snapshot)
    #    Work whose budget is spent waits, with that reason, and takes no part in what follows (held.py).
    considered = held_back(cycle, line) if snapshot.held else line
    if watch is not None:
        watch.begin(cycle, line)
    # 2. What each team is owed: work within its unused reservation goes first, whatever its priority; then
    #    work within its department's unused reservation (a team's own floor before what sister teams share).
    #    An array's elements past its % limit wait, whatever is free.
    rest, routes = teams_owed(cycle, considered)
    borrowers, routes = departments_owed(cycle, rest, routes) if departments_owe(cycle) else (rest, routes)
    # 3. The rest borrows what is left, in line order, with backfill around the first work waiting on each fabric
    #    (backfill.py); a tier that may preempt takes borrowed capacity from lower tiers where nothing ahead of it
    #    waits for it (preemption.py).
    live = isinstance(cycle.routes, LiveRoutes)  # its routes change as the cycle uses up live room: asked again
    for job, route in zip(borrowers, routes, strict=True):
        if not (job.array_throttle and cycle.throttled(job)):
            consider(cycle, job, cycle.routes.of(job) if live else route)
            if watch is not None:
                watch.considered(job, route)
    # 4. Estimate when the waiting work could start, in line order (waiting.py).
    return decisions(cycle, line)
