"""The first pass: work that fits within an unused reservation is owed, and goes first, whatever its priority.

A job is owed on its healthy targets where its team's unused reservation holds it (in the team pass), or that
of a department above its team (in the department pass, after every team's own), or where it is an agent
identity's GPU work within the agent's own reservation. Owed work, in line order:
1. starts on the first of those targets where its limits hold and free capacity (less what is held) fits it;
2. else takes borrowed capacity back by preemption (reclaim.py) on the first where its limits hold; or, where
   only its department's limit holds it back, first from its sister teams' borrowed work;
3. else waits at its first such target: for its limit, or holding what it needs there so that nobody behind
   it takes it as it frees up.
Work owed nowhere is returned, with its route, to borrow in the second pass (borrow.py).
"""

from __future__ import annotations

from scheduler import reasons
from scheduler.cycle import Cycle
from scheduler.ledger import ZERO, Amount, sub
from scheduler.model import Job
from scheduler.reclaim import lent_away, reclaim
from scheduler.reservations import Levels, Passed
from scheduler.routes import Route

Targets = list[tuple[int, Amount]]


def teams_owed(c: Cycle, line: list[Job]) -> tuple[list[Job], list[Route]]:
    """Handle the work within its team's unused reservation (and array elements past their % limit); the rest,
    returned in line order with each job's route, borrows.

    Where no agent has a reservation, a job whose team's unused reservation holds it on none of its healthy
    targets is passed over (reservations.py), where owed() would return False for it without deciding anything."""
    rest: list[Job] = []
    routes: list[Route] = []  # each job's in `rest`, worked out once for the passes after this one
    agents = bool(c.s.owner_reservations)
    reservations = c.reservations
    route_of, known = c.routes.of, c.routes.known.get  # (Routes.of, its look-up unrolled: once per job in line)
    passed: Passed = set()
    preempted = 0
    own: dict[int, Levels] = {}  # team -> its own level, as room() takes it
    for job in line:
        if job.array_throttle and c.throttled(job):
            continue
        r = job.per_node
        route = known((job.queue_id, job.only_on, job.nodes, r.gpus_milli, r.cpus_milli, r.memory_mib)) or route_of(job)
        # (An agent's own reservation may make its work owed whatever the team's holds.)
        if route.targets and not agents:
            if len(c.preempted) != preempted:  # a level's use came down: a passed shape may fit again
                passed.clear()
                preempted = len(c.preempted)
            found = own.get(job.group_id)
            if found is None:
                found = own[job.group_id] = reservations.levels((job.group_id,))
            levels, most0, most1, most2 = found
            least = route.least
            if least[0] > most0 or least[1] > most1 or least[2] > most2:
                rest.append(job)  # beyond what its team reserves on any healthy fabric
                routes.append(route)
                continue
            targets = reservations.room(levels, route, passed)
            if not (targets and owed(c, job, route, targets=targets)):
                rest.append(job)
                routes.append(route)
            continue
        if not owed(c, job, route):
            rest.append(job)
            routes.append(route)
    return rest, routes


def departments_owe(c: Cycle) -> bool:
    """Whether the department pass can find anything owed: a department has unused reservation left on a
    fabric, or something was preempted (a team's own floor may have room again)."""
    if c.preempted:
        return True  # a team whose work was taken back may be owed again (within its own floor too)
    if not c.s.parents:
        return False
    ledger = c.ledger
    departments = set(c.s.parents.values())
    return any(ledger.within_reservation(d, fid, ZERO) for d in departments for fid in c.s.fabrics)


def departments_owed(c: Cycle, rest: list[Job], routes: list[Route]) -> tuple[list[Job], list[Route]]:
    """Handle the work within a department's unused reservation; the rest, returned in line order with each
    job's route, borrows.

    Until something is preempted, a job whose team has no department, or none of whose departments' unused
    reservations hold it on a healthy target, is passed over, where owed() would return False for it."""
    borrowers: list[Job] = []
    left: list[Route] = []
    ledger, reservations = c.ledger, c.reservations
    above_of: dict[int, Levels] = {}  # team -> its departments, as room() takes them
    passed: Passed = set()
    for job, route in zip(rest, routes, strict=True):
        if not c.preempted:
            found = above_of.get(job.group_id)
            if found is None:
                found = above_of[job.group_id] = reservations.levels(ledger.lineage(job.group_id)[1:])
            above, most0, most1, most2 = found
            if route.targets:
                least = route.least
                # (Beyond what its departments reserve on any healthy fabric: passed over.)
                if not (least[0] > most0 or least[1] > most1 or least[2] > most2):
                    targets = reservations.room(above, route, passed)
                    if targets and owed(c, job, route, department=True, targets=targets):
                        continue
            borrowers.append(job)
            left.append(route)
            continue
        if not owed(c, job, route, department=True):
            borrowers.append(job)
            left.append(route)
    return borrowers, left


def owed(c: Cycle, job: Job, route: Route, department: bool = False, targets: Targets | None = None) -> bool:
    """Handle the job if it fits within its team's unused reservation on one of its targets (with `department`:
    within that of a department above the team), in the three steps of the module docstring.

    Returns False, deciding nothing, when it does not: it then borrows in the second pass. `targets`: those
    where the unused reservation holds it, where the pass found them already (Reservations.room)."""
    if not route.targets:
        return False
    if targets is None:
        targets = _owed_on(c, job, route, department)
        if not targets:
            return False
    ledger = c.ledger
    limit_reason = c.limits.reason
    capacity, used, held = ledger.capacity, ledger.used, ledger.held
    # 1. Free capacity, less what is held, on the first target where its limits hold.
    for fid, need in targets:
        if limit_reason(job, fid, need) is None:
            cap, u, h = capacity[fid], used[fid], held[fid]
            if need[0] <= cap[0] - u[0] - h[0] and need[1] <= cap[1] - u[1] - h[1] and need[2] <= cap[2] - u[2] - h[2]:
                c.admit(job, fid, need)
                return True
    # 2. Borrowed capacity taken back.
    for fid, need in targets:
        limited = limit_reason(job, fid, need)
        if limited is None and reclaim(c, job, fid, need):
            c.admit(job, fid, need)
            return True
        # Its department is at its limit with sister teams borrowing this team's floor: they give it back.
        if (
            limited is not None
            and not department
            and limited[0].code == reasons.DEPARTMENT_AT_LIMIT
            and reclaim(c, job, fid, need, within=limited[2])
            and limit_reason(job, fid, need) is None
        ):
            c.admit(job, fid, need)
            return True
    # 3. It waits at its first target: under its limit, or holding what it needs.
    fid, need = targets[0]
    limited = limit_reason(job, fid, need)
    if limited is not None:
        c.wait(job, limited)
        return True
    ledger.hold(fid, need)
    free = sub(ledger.free(fid), ledger.held[fid])
    lent = lent_away(c, job.group_id, fid) if not department else 0  # a team's own reservation, lent
    c.wait(job, (reasons.no_capacity(c.name(fid), free, need, lent), fid, None))
    return True


def _owed_on(c: Cycle, job: Job, route: Route, department: bool) -> Targets:
    """The job's healthy targets where its team's unused reservation holds it (with `department`: that of a
    department above the team), or an agent's own reservation does."""
    ledger, healthy = c.ledger, c.healthy
    g = job.group_id
    if department:
        lineage = ledger.lineage(g)
        if c.preempted:  # a team's use may have come down since the first pass: every level again
            return [
                (f, need) for f, need in route.targets if f in healthy and ledger.owed_within(g, f, need) is not None
            ]
        if len(lineage) == 1:
            return []  # no department, and the first pass found the team's own floor full
        # The team's own level only filled up since the first pass found it full: the levels above.
        within = ledger.within_reservation
        found = []
        for f, need in route.targets:
            if f in healthy:
                for d in lineage[1:]:
                    if within(d, f, need):
                        found.append((f, need))
                        break
        return found
    if c.s.owner_reservations and _owed_to_agent(c, job):
        return [(f, need) for f, need in route.targets if f in healthy]
    within = ledger.within_reservation
    return [(f, need) for f, need in route.targets if f in healthy and within(g, f, need)]


def _owed_to_agent(c: Cycle, job: Job) -> bool:
    """An agent identity's GPU work within the agent's own reservation is owed to it, even when its teammates
    already fill the team's reservation (the team's limits still hold)."""
    reserved = c.s.owner_reservations.get(job.owner_id, 0)
    gpus = job.per_node.gpus_milli * job.nodes
    return bool(reserved) and gpus > 0 and c.ledger.owner_used[job.owner_id] + gpus <= reserved
