"""One scheduling cycle over a frozen snapshot: order the line, admit what the policy allows, say why the
rest waits. Pure: no clock (`now` is in the snapshot), no database, no fabric.

The line is walked in two passes. First the work each team is owed: jobs that fit within their team's
unused reservation on a target. They start on free capacity, or take borrowed capacity back by preemption,
or else hold what they need so that nobody behind them takes it as it frees up. Then everything else, which
borrows what is left, in priority order, with backfill around the first work waiting on each fabric.
"""

from __future__ import annotations

import gc
import math
from collections import defaultdict
from datetime import datetime, timedelta
from operator import itemgetter

from scheduler import reasons
from scheduler.backfill import RESERVED, Plan
from scheduler.estimates import MAX_PER_FABRIC, Profile
from scheduler.ledger import ZERO, Amount, Ledger, PerFabric, add, amount, fits, need_on, sub
from scheduler.model import Admit, Decisions, Job, Preempt, QueueState, Snapshot, Waiting
from scheduler.preemption import idle, may_preempt, victims
from scheduler.priority import ordered
from scheduler.reasons import Reason

# What tier preemption can remedy: the job waits only for capacity on the target.
_SHORT_OF_CAPACITY = frozenset({reasons.NO_CAPACITY, reasons.GANG_DOES_NOT_FIT, reasons.HELD_FOR_RESERVATIONS})


Route = tuple[tuple[int, Amount], ...]  # a job's targets in order, each with its need there


# Why a job waits: the reason, the fabric it waits for capacity on (where a start can be estimated) or None, and
# the team limit it waits under ((group, fabric or None), where a start can be estimated from the team's running
# work) or None. A plain tuple: the borrowing pass makes one for each target of most of the work it looks at.
_Why = tuple[Reason, int | None, tuple[int, int | None] | None]
# Why it waits on a later target where nothing reads it (consider()).
_UNREAD: _Why = (Reason(reasons.NO_CAPACITY), None, None)


def decide(snapshot: Snapshot) -> Decisions:
    # The cyclic garbage collector waits while a cycle decides (and catches up after): a cycle keeps tens of
    # thousands of new objects alive until it returns (each waiting job's reason and place, each admission, the
    # ledger's uses), and collections in its middle would walk them again and again, and move them up to be
    # walked again with everything else in the process; it makes no reference cycles for them to free. (Process
    # wide for as long as decide() runs; left alone where something else has already turned it off.)
    if not gc.isenabled():
        return _decide(snapshot)
    gc.disable()
    try:
        return _decide(snapshot)
    finally:
        gc.enable()


def _decide(snapshot: Snapshot) -> Decisions:
    cycle = _Cycle(snapshot)
    # 1. Order the line: fair share, priority tier, age and size (priority.py).
    line = ordered(snapshot)
    # 2. What each team is owed: work within its unused reservation goes first, whatever its priority; then
    #    work within its department's unused reservation (a team's own floor before what sister teams share).
    #    An array's elements past its % limit wait, whatever is free.
    rest, routes = cycle.teams_owed(line)
    borrowers, routes = cycle.departments_owed(rest, routes) if cycle.departments_owe() else (rest, routes)
    # 3. The rest borrows what is left, in line order, with backfill around the first work waiting on each fabric
    #    (backfill.py); a tier that may preempt takes borrowed capacity from lower tiers where nothing ahead of it
    #    waits for it (preemption.py).
    for job, route in zip(borrowers, routes, strict=True):
        if not (job.array_throttle and cycle.throttled(job)):
            cycle.consider(job, route)
    # 4. Estimate when the waiting work could start, in line order.
    return cycle.decisions(line)


class _Cycle:
    def __init__(self, snapshot: Snapshot) -> None:
        self.s = snapshot
        self.now = snapshot.now
        self.ledger = Ledger(snapshot)
        self.running: defaultdict[int, list[Job]] = defaultdict(list)
        self.preemptible: defaultdict[int, list[Job]] = defaultdict(list)  # running work that may be preempted
        for job in snapshot.running:
            if job.fabric_id is not None:
                self.running[job.fabric_id].append(job)
                if may_preempt(snapshot, job):
                    self.preemptible[job.fabric_id].append(job)
        self.plans: dict[int, Plan] = {}  # fabric -> the reservations of the first work waiting there (backfill.py)
        # The tiers whose work may preempt borrowed work of lower ones (the old classes never may).
        self.preempting = {slug: t for slug, t in snapshot.tiers.items() if t.may_preempt}
        self.admitted: list[Admit] = []
        self.admitted_on: defaultdict[int, list[Job]] = defaultdict(list)
        # Their needs there, in the same order (kept apart: no object per admission for the collector to walk).
        self.needs_on: defaultdict[int, list[Amount]] = defaultdict(list)
        self.preempted: list[Preempt] = []
        self.gone: set[str] = set()  # preempted in this cycle
        # Why each waiting job waits, and what it waits for: a fabric's capacity, or a limit (its key). Kept apart
        # rather than as _Why objects: a cycle that leaves fewer objects alive spends less on collecting garbage.
        self.waiting: dict[str, Reason] = {}
        self.waits_on: dict[str, int] = {}
        self.waits_under: dict[str, tuple[int, int | None]] = {}
        self.array_active: defaultdict[str, int] = defaultdict(int)  # array -> its elements holding capacity
        # A job's targets and its need on each, by what decides them: its queue, native fabrics, nodes and request
        # (many jobs share one; a cycle keeps few objects alive, and so spends little on collecting garbage).
        self.routes: dict[tuple[object, ...], Route] = {}
        self.least: dict[int, Amount] = {}  # a route (its id) -> the least the job needs on any of its targets
        self.healthy = {fid for fid, f in snapshot.fabrics.items() if f.healthy}
        # Each team's levels, nearest first: (the level, its depth, its limit across fabrics or None, its limits
        # and its use, each by fabric: the ledger's own maps, read as they change).
        self.levels: dict[int, tuple[tuple[int, int, Amount | None, PerFabric, PerFabric], ...]] = {}
        # (fabric, need) -> the fabric's use when work of that need last found no room there, and why it waits.
        self.short: dict[tuple[int, Amount], tuple[Amount, _Why]] = {}
        # Whether any cap below the team's applies in this snapshot: a member's, a queue's share, an identity's.
        self.person_caps = bool(
            snapshot.owner_limits
            or snapshot.member_limits
            or any(q.gpu_share is not None for q in snapshot.queues.values())
        )
        # Each fabric's size: what it holds in all when everything is up (work beyond it can never run there).
        self.sizes = {
            fid: self.ledger.capacity[fid] if f.size is None else amount(f.size) for fid, f in snapshot.fabrics.items()
        }
        self.spans: dict[int, timedelta] = {}  # runtime limit (s) -> as a timedelta
        self.ends: dict[int, datetime] = {}  # runtime limit (s) -> when work started now ends
        self.by_limit: dict[tuple[int, int | None], list[tuple[datetime, Amount]]] | None = None
        # Levels as _room takes them -> each with its reservation bound (_bound), its reservations and its use (the
        # ledger's maps by fabric), worked out when first asked.
        self.bounds: dict[tuple[int, ...], tuple[tuple[int, float, float, float, PerFabric, PerFabric], ...]] = {}
        for job in snapshot.running:
            if job.array_id:
                self.array_active[job.array_id] += 1

    # -- pass 1: what teams are owed -----------------------------------------------------------------
    def teams_owed(self, line: list[Job]) -> tuple[list[Job], list[Route]]:
        """Handle the work within its team's unused reservation (and array elements past their % limit); the
        rest, returned in line order with each job's route, borrows.

        Most work is not owed: a job whose team's unused reservation holds it on none of its healthy targets is
        passed over here, where owed() would return False for it without deciding anything."""
        rest: list[Job] = []
        routes: list[Route] = []  # each job's in `rest`, worked out once for the passes after this one
        queues, agents = self.s.queues, bool(self.s.owner_reservations)
        known = self.routes.get
        passed: set[tuple[tuple[int, ...], int]] = set()  # see _room
        preempted = 0
        own: dict[int, tuple[tuple[int, ...], float, float, float]] = {}  # team -> its own level (_levels)
        leasts = self.least
        for job in line:
            if job.array_throttle and self.throttled(job):
                continue
            r = job.per_node
            route = known((job.queue_id, job.only_on, job.nodes, r.gpus_milli, r.cpus_milli, r.memory_mib))
            if route is None:  # (a shape seen first: its queue's targets, once; see _route)
                queue = queues.get(job.queue_id)
                route = () if queue is None else self._route(job, queue)
            # (An agent's own reservation may make its work owed whatever the team's holds.)
            if route and not agents:
                if len(self.preempted) != preempted:
                    passed.clear()
                    preempted = len(self.preempted)
                found = own.get(job.group_id)
                if found is None:  # the one level a team's own reservation is judged at, as _room takes levels
                    found = own[job.group_id] = self._levels((job.group_id,))
                levels, most0, most1, most2 = found
                least = leasts[id(route)]
                if least[0] > most0 or least[1] > most1 or least[2] > most2:
                    rest.append(job)  # beyond what its team reserves on any healthy fabric (_bound)
                    routes.append(route)
                    continue
                targets = self._room(levels, route, passed)
                if not (targets and self.owed(job, route, targets=targets)):
                    rest.append(job)
                    routes.append(route)
                continue
            if not self.owed(job, route):
                rest.append(job)
                routes.append(route)
        return rest, routes

    def departments_owed(self, rest: list[Job], routes: list[Route]) -> tuple[list[Job], list[Route]]:
        """Handle the work within a department's unused reservation; the rest, returned in line order with each
        job's route, borrows.

        Until something is preempted, a job whose team has no department, or none of whose departments' unused
        reservations hold it on a healthy target, is passed over here, where owed() would return False for it."""
        borrowers: list[Job] = []
        left: list[Route] = []
        ledger = self.ledger
        above_of: dict[int, tuple[tuple[int, ...], float, float, float]] = {}  # team -> its departments (_levels)
        passed: set[tuple[tuple[int, ...], int]] = set()  # see _room
        leasts = self.least
        for job, route in zip(rest, routes, strict=True):
            if not self.preempted:
                found = above_of.get(job.group_id)
                if found is None:
                    found = above_of[job.group_id] = self._levels(ledger.lineage(job.group_id)[1:])
                above, most0, most1, most2 = found
                if route:
                    least = leasts[id(route)]
                    # (Beyond what its departments reserve on any healthy fabric: passed over, see _bound.)
                    if not (least[0] > most0 or least[1] > most1 or least[2] > most2):
                        targets = self._room(above, route, passed)
                        if targets and self.owed(job, route, department=True, targets=targets):
                            continue
                borrowers.append(job)
                left.append(route)
                continue
            if not self.owed(job, route, department=True):
                borrowers.append(job)
                left.append(route)
        return borrowers, left

    def _room(
        self, levels: tuple[int, ...], route: Route, passed: set[tuple[tuple[int, ...], int]]
    ) -> list[tuple[int, Amount]]:
        """The job's healthy targets, in its route's order, where the unused reservation of one of these levels
        holds it (Ledger.within_reservation, inlined: the hot path of both passes); none: it is passed over, as
        owed() would do.

        Once there are none, for these levels and this route (one object per shape of work for the whole cycle,
        so its id names the shape), there will be none for any later job of the same levels and shape in the
        same pass: a level's use only grows as work is admitted, and only preemption gives any back. The passes
        remember such (levels, route) pairs in `passed`, and forget them when something is preempted."""
        seen = (levels, id(route))
        if seen in passed:
            return []
        healthy = self.healthy
        bounded = self.bounds[levels]
        targets = []
        for fid, need in route:
            if fid not in healthy:
                continue
            n0, n1, n2 = need
            for _level, b0, b1, b2, reserved, used_at in bounded:
                # Beyond what the level reserves on any healthy fabric: beyond its unused reservation on this one.
                if n0 > b0 or n1 > b1 or n2 > b2:
                    continue
                r = reserved.get(fid)
                if r is None or not (r[0] or r[1] or r[2]):
                    continue
                used = used_at.get(fid, ZERO)
                if (
                    (not r[0] or used[0] + n0 <= r[0])
                    and (not r[1] or used[1] + n1 <= r[1])
                    and (not r[2] or used[2] + n2 <= r[2])
                ):
                    targets.append((fid, need))
                    break
        if not targets:
            passed.add(seen)
        return targets

    def _levels(self, levels: tuple[int, ...]) -> tuple[tuple[int, ...], float, float, float]:
        """Levels as _room takes them, with the most any of them reserves on a healthy fabric in each resource
        (below zero in all where there are none); each level's own bound kept for _room."""
        bounded = self.bounds.get(levels)
        if bounded is None:
            ledger = self.ledger
            bounded = self.bounds[levels] = tuple(
                (level, *self._bound(level), ledger.reserved.get(level) or {}, ledger.group_used[level])
                for level in levels
            )
        if not bounded:
            return (levels, -1, -1, -1)
        return (
            levels,
            max(b[1] for b in bounded),
            max(b[2] for b in bounded),
            max(b[3] for b in bounded),
        )

    def _bound(self, level: int) -> tuple[float, float, float]:
        """The most a level reserves on any one healthy fabric, in each resource (unbounded in one it leaves
        unreserved on some fabric; below zero in all where it reserves nothing): no work beyond it is within
        its unused reservation on any healthy fabric, since a level's use is never below zero."""
        reserved = (self.ledger.reserved.get(level) or {}).get
        found = {r for fid in self.healthy if (r := reserved(fid)) is not None}
        found.discard(ZERO)
        if not found:
            return (-1, -1, -1)
        return (
            max(r[0] or math.inf for r in found),
            max(r[1] or math.inf for r in found),
            max(r[2] or math.inf for r in found),
        )

    def owed(
        self, job: Job, route: Route, department: bool = False, targets: list[tuple[int, Amount]] | None = None
    ) -> bool:
        """Handle the job if it fits within its team's unused reservation on one of its targets (with
        `department`: within that of a department above the team).

        Returns False, deciding nothing, when it does not: it then borrows in the second pass. `route`: the job's
        targets with its need on each (none where its queue is gone). `targets`: those where the unused
        reservation holds it, where the pass found them already (_room)."""
        if not route:
            return False
        if targets is None:
            targets = self._owed_on(job, route, department)
            if not targets:
                return False
        ledger = self.ledger
        capacity, used, held = ledger.capacity, ledger.used, ledger.held
        for fid, need in targets:
            if self._limit_reason(job, fid, need) is None:
                c, u, h = capacity[fid], used[fid], held[fid]  # fits(need, free less held), inlined
                if need[0] <= c[0] - u[0] - h[0] and need[1] <= c[1] - u[1] - h[1] and need[2] <= c[2] - u[2] - h[2]:
                    self._admit(job, fid, need)
                    return True
        for fid, need in targets:
            limited = self._limit_reason(job, fid, need)
            if limited is None and self._reclaim(job, fid, need):
                self._admit(job, fid, need)
                return True
            # Its department is at its limit with sister teams borrowing this team's floor: they give it back.
            if (
                limited is not None
                and not department
                and limited[0].code == reasons.DEPARTMENT_AT_LIMIT
                and self._reclaim(job, fid, need, within=limited[2])
                and self._limit_reason(job, fid, need) is None
            ):
                self._admit(job, fid, need)
                return True
        fid, need = targets[0]
        limited = self._limit_reason(job, fid, need)
        if limited is not None:
            self._wait(job, limited)
            return True
        # Owed but not free yet, and nothing to take back: hold it, so it goes to this team as it frees up.
        ledger.hold(fid, need)
        free = sub(ledger.free(fid), ledger.held[fid])
        self._wait(job, (reasons.no_capacity(self._name(fid), free, need), fid, None))
        return True

    def _owed_on(self, job: Job, route: Route, department: bool) -> list[tuple[int, Amount]]:
        """The job's healthy targets where its team's unused reservation holds it (with `department`: that of a
        department above the team), or an agent's own reservation does."""
        ledger = self.ledger
        healthy = self.healthy
        g = job.group_id
        if department:
            lineage = ledger.lineage(g)
            if self.preempted:  # a team's use may have come down since the first pass: every level again
                return [(f, need) for f, need in route if f in healthy and ledger.owed_within(g, f, need) is not None]
            if len(lineage) == 1:
                return []  # no department, and the first pass found the team's own floor full
            # The team's own level only filled up since the first pass found it full: the levels above.
            within = ledger.within_reservation
            targets = []
            for f, need in route:
                if f in healthy:
                    for d in lineage[1:]:
                        if within(d, f, need):
                            targets.append((f, need))
                            break
            return targets
        if self.s.owner_reservations and self._owed_to_agent(job):
            return [(f, need) for f, need in route if f in healthy]
        within = ledger.within_reservation
        return [(f, need) for f, need in route if f in healthy and within(g, f, need)]

    def departments_owe(self) -> bool:
        """Whether the department pass can find anything owed: a department has unused reservation left on a
        fabric, or something was preempted (a team's own floor may have room again)."""
        if not self.s.parents:
            return False
        if self.preempted:
            return True
        ledger = self.ledger
        departments = set(self.s.parents.values())
        return any(ledger.within_reservation(d, fid, ZERO) for d in departments for fid in self.s.fabrics)

    def _owed_to_agent(self, job: Job) -> bool:
        """An agent identity's GPU work within the agent's own reservation is owed to it, even when its
        teammates already fill the team's reservation (the team's limits still hold)."""
        if not self.s.owner_reservations:
            return False
        reserved = self.s.owner_reservations.get(job.owner_id, 0)
        gpus = job.per_node.gpus_milli * job.nodes
        return bool(reserved) and gpus > 0 and self.ledger.owner_used[job.owner_id] + gpus <= reserved

    # -- pass 2: borrowing ---------------------------------------------------------------------------
    def consider(self, job: Job, route: Route) -> None:
        if not route:
            queue = self.s.queues.get(job.queue_id)
            slug = queue.slug if queue else str(job.queue_id)
            self.waiting[job.id] = reasons.no_target(slug)
            return
        # Routing: the first target that can hold all of it now.
        why: list[_Why] = []
        plans = self.plans
        # Why it waits on a later target is read only where it may still reserve a start there (the fabric's plan
        # has room for one; tier preemption passes over a fabric with a plan): elsewhere a later target without
        # the room for it is passed over without asking why (its limits, the reason's words).
        capacity, used, healthy = self.ledger.capacity, self.ledger.used, self.healthy
        for fid, need in route:
            if why:
                plan = plans.get(fid)
                if plan is not None and len(plan.starts) >= RESERVED:
                    if fid not in healthy:
                        why.append(_UNREAD)
                        continue
                    c, u = capacity[fid], used[fid]  # fits(need, ledger.free(fid)), inlined
                    if need[0] > c[0] - u[0] or need[1] > c[1] - u[1] or need[2] > c[2] - u[2]:
                        why.append(_UNREAD)
                        continue
            outcome = self._try(job, fid, need)
            if outcome is None:
                return
            why.append(outcome)
        # A tier that may preempt: the first target where lower tiers' borrowed work can make room.
        if self.preempting and self._tier_preempts(job, route, why):
            return
        for (fid, need), blocked in zip(route, why, strict=True):
            if blocked[1] is not None:
                plan = plans.get(fid)
                if plan is None or len(plan.starts) < RESERVED:  # a plan with all its reservations takes no more
                    self._reserve(job, fid, need)
        self._wait(job, why[0])  # the first target's reason: where it would go first

    def _route(self, job: Job, queue: QueueState) -> Route:
        """The job's targets in its queue's order, each with the job's need there."""
        r = job.per_node
        shape = (job.queue_id, job.only_on, job.nodes, r.gpus_milli, r.cpus_milli, r.memory_mib)
        route = self.routes.get(shape)
        if route is None:
            shared = need_on(job, True)
            whole = need_on(job, False) if r.gpus_milli % 1000 else shared
            sharing = self.ledger.sharing
            targets = _targets(job, queue, self.s)
            route = self.routes[shape] = tuple((fid, shared if sharing[fid] else whole) for fid in targets)
            if route:  # (the least it needs on any target: less than `whole` only where a fabric shares GPUs)
                self.least[id(route)] = shared if any(sharing[fid] for fid in targets) else whole
        return route

    def _try(self, job: Job, fid: int, need: Amount) -> _Why | None:
        """None when the job was admitted on this fabric; else why not."""
        fabric = self.s.fabrics[fid]
        ledger = self.ledger
        if not fabric.healthy:
            return (reasons.fabric_unavailable(fabric.name), None, None)
        size = self.sizes[fid]
        n0, n1, n2 = need
        if n0 > size[0] or n1 > size[1] or n2 > size[2]:
            return (reasons.too_big(fabric.name, size, need), None, None)
        limited = self._limit_reason(job, fid, need)
        if limited is not None:
            return limited
        capacity, used = ledger.capacity[fid], ledger.used[fid]
        free = (capacity[0] - used[0], capacity[1] - used[1], capacity[2] - used[2])
        if n0 > free[0] or n1 > free[1] or n2 > free[2]:
            if job.nodes > 1:
                args = (fabric.name, job.nodes, free, need)
                return (reasons.gang_does_not_fit(*args), fid, None)
            # One reason for all the work of one size that finds the fabric as full (its use the same object: the
            # ledger replaces it on every change): the same words, one object for them all.
            short = self.short.get((fid, need))
            if short is None or short[0] is not used:
                short = self.short[fid, need] = (used, (reasons.no_capacity(fabric.name, free, need), fid, None))
            return short[1]
        held = ledger.held[fid]
        if (held[0] or held[1] or held[2]) and not fits(need, sub(free, held)):  # (nothing held: it fits)
            return (reasons.held_for_reservations(fabric.name, held), None, None)
        plan = self.plans.get(fid)
        if plan is not None and not plan.admits(job.runtime_limit_s, need):
            return (reasons.behind_higher_priority(fabric.name, plan.first or self.now), fid, None)
        self._admit(job, fid, need)
        return None

    def _limit_reason(self, job: Job, fid: int, need: Amount) -> _Why | None:
        """Why a cap holds the job back on this fabric (the first that does, team before member before queue
        before agent identity), or None."""
        levels = self.levels.get(job.group_id)
        if levels is None:
            ledger = self.ledger
            levels = self.levels[job.group_id] = tuple(
                (level, depth, ledger.limit_at(level, None), ledger.limit.get(level) or {}, ledger.group_used[level])
                for depth, level in enumerate(ledger.lineage(job.group_id))
            )
        n0, n1, n2 = need
        # Each level's limit on the fabric, then across fabrics, nearest level first: the first one over.
        for level, depth, across, limits, used_at in levels:
            limit = limits.get(fid)
            if limit is not None:
                used = used_at.get(fid, ZERO)
                if used[0] + n0 > limit[0] or used[1] + n1 > limit[1] or used[2] + n2 > limit[2]:
                    return self._at_limit((level, fid), depth, self._name(fid), used, limit, need)
            if across is not None:
                used = used_at.get(None, ZERO)
                if used[0] + n0 > across[0] or used[1] + n1 > across[1] or used[2] + n2 > across[2]:
                    return self._at_limit((level, None), depth, "", used, across, need)
        if not self.person_caps:
            return None
        return self._person_limit_reason(job, fid, need)

    @staticmethod
    def _at_limit(
        key: tuple[int, int | None], depth: int, where: str, used: Amount, limit: Amount, need: Amount
    ) -> _Why:
        at_limit = reasons.group_at_limit if depth == 0 else reasons.department_at_limit
        return (at_limit(where, used, limit, need), None, key)

    def _person_limit_reason(self, job: Job, fid: int, need: Amount) -> _Why | None:
        """Past the team's limits: a member's, a queue's share and an agent identity's own (None: all hold)."""
        ledger, s = self.ledger, self.s
        g = job.group_id
        owner_limit = s.owner_limits.get(job.owner_id)
        member_limit = None if job.owner_id in s.agents else s.member_limits.get(g)
        queue = s.queues.get(job.queue_id)
        queue_cap = ledger.queue_cap(queue.gpu_share if queue else None, fid)
        if ledger.within_limits(job, fid, need, owner_limit, member_limit, queue_cap):
            return None  # (the team's limits hold: _limit_reason judged them)
        if member_limit is not None and ledger.member_used[g, job.owner_id] + need[0] > member_limit:
            return (reasons.member_at_limit(ledger.member_used[g, job.owner_id], member_limit, need[0]), None, None)
        in_queue = ledger.queue_used[job.queue_id, fid]
        if queue is not None and queue_cap is not None and in_queue + need[0] > queue_cap:
            share = reasons.queue_at_share(
                queue.slug, self._name(fid), queue.gpu_share or 0, in_queue, queue_cap, need[0]
            )
            return (share, None, None)
        owner = (ledger.owner_used[job.owner_id], owner_limit or 0, need[0])
        return (reasons.owner_at_limit(*owner), None, None)

    def throttled(self, job: Job) -> bool:
        """Whether the job is an array element past its array's % limit (then it waits, with that reason)."""
        if not job.array_throttle or self.array_active[job.array_id] < job.array_throttle:
            return False
        self.waiting[job.id] = reasons.array_throttle(job.array_throttle)
        return True

    def _wait(self, job: Job, why: _Why) -> None:
        reason, fid, limit_key = why
        self.waiting[job.id] = reason
        if fid is not None:
            self.waits_on[job.id] = fid
        elif limit_key is not None:
            self.waits_under[job.id] = limit_key

    def _admit(self, job: Job, fid: int, need: Amount) -> None:
        if job.array_id:
            self.array_active[job.array_id] += 1
        self.ledger.move(job, fid, need, 1)
        self.admitted.append(Admit(job.id, fid))
        self.admitted_on[fid].append(job)
        self.needs_on[fid].append(need)

    def _name(self, fid: int) -> str:
        return self.s.fabrics[fid].name

    # -- reservations come back -----------------------------------------------------------------------
    def _reclaim(
        self,
        job: Job,
        fid: int,
        need: Amount,
        within: tuple[int, int | None] | None = None,
        below: int | None = None,
    ) -> bool:
        """Preempt borrowed work so that this job, owed to its team (or, with `below`, of a tier that may preempt
        lower ones: preemption.py), fits now. True when it does.

        `within`: a department's limit (its key) that holds the job back. Its other teams' borrowed work is
        taken first, enough to bring the department under that limit; then, where the fabric still lacks room,
        anyone's borrowed work as usual. All or nothing: when the room cannot be made, nothing is taken."""
        if not any(j.id not in self.gone for j in self.preemptible[fid]):
            return False  # nothing here may be preempted
        ledger = self.ledger
        sharing = ledger.sharing[fid]
        running = [j for j in self.preemptible[fid] if j.id not in self.gone]
        chosen: list[Job] = []
        if within is not None:
            over = sub(add(ledger.used_at(*within), need), ledger.limit[within[0]][within[1]])
            sisters = [j for j in running if within[0] in ledger.lineage(j.group_id)]
            first = victims(
                self.s, ledger, sisters, job.group_id, fid, (max(0, over[0]), max(0, over[1]), max(0, over[2]))
            )
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
            more = victims(self.s, ledger, running, job.group_id, fid, deficit, below)
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
            self.gone.add(victim.id)
            if below is None:
                why = reasons.preempted(self._name(fid), idle(self.s, victim))
            else:
                why = reasons.preempted(self._name(fid), tier=job.priority)
            self.preempted.append(Preempt(victim.id, why))
        return True

    # -- tier preemption (preemption.py) ----------------------------------------------------------------
    def _tier_preempts(self, job: Job, route: Route, why: list[_Why]) -> bool:
        """Admit the job by preempting borrowed work of lower tiers, on the first target where only capacity
        holds it back and no work ahead of it in line waits for that capacity. True when it was admitted."""
        tier = self.preempting.get(job.priority)
        if tier is None:
            return False
        for (fid, need), blocked in zip(route, why, strict=True):
            if blocked[0].code not in _SHORT_OF_CAPACITY or fid in self.plans:
                continue
            if self._reclaim(job, fid, need, below=tier.rank):
                self._admit(job, fid, need)
                return True
        return False

    # -- backfill -------------------------------------------------------------------------------------
    def _releases(self, fid: int) -> list[tuple[datetime, Amount]]:
        """When capacity comes back on a fabric: each running job at its runtime limit."""
        sharing = self.ledger.sharing[fid]
        out = []
        for job in self.running[fid]:
            if job.id in self.gone:
                continue
            start = job.started_at or self.now
            out.append((max(self.now, start + self._span(job.runtime_limit_s)), need_on(job, sharing)))
        ends, end = self.ends, self._end
        for job, need in zip(self.admitted_on[fid], self.needs_on[fid], strict=True):
            runtime = job.runtime_limit_s
            out.append((ends.get(runtime) or end(runtime), need))
        out.sort(key=itemgetter(0))
        return out

    def _span(self, seconds: int) -> timedelta:
        """A runtime limit as a timedelta (many jobs share one)."""
        span = self.spans.get(seconds)
        if span is None:
            span = self.spans[seconds] = timedelta(seconds=seconds)
        return span

    def _end(self, seconds: int) -> datetime:
        """When work started now ends at its runtime limit."""
        end = self.ends.get(seconds)
        if end is None:
            end = self.ends[seconds] = self.now + self._span(seconds)
        return end

    def _reserve(self, job: Job, fid: int, need: Amount) -> None:
        """Work blocked on a fabric reserves its earliest start there (while the fabric's plan has room for more
        reservations): later work may not delay it."""
        plan = self.plans.get(fid)
        if plan is None:
            free = sub(self.ledger.free(fid), self.ledger.held[fid])
            plan = self.plans[fid] = Plan(self.now, free, self._releases(fid))
        plan.reserve(job.runtime_limit_s, need)

    # -- the result -----------------------------------------------------------------------------------
    def decisions(self, line: list[Job]) -> Decisions:
        """Every waiting job with its reason, its place in its queue's line, and an estimated start: when
        capacity frees up on the fabric it waits for, or, under a team limit, when the team's running work
        ends (each at its runtime limit)."""
        profiles: dict[int, Profile] = {}
        limit_profiles: dict[tuple[int, int | None], Profile] = {}
        places: dict[int, int] = {}
        waiting = []
        reason_of, waits_on, waits_under = self.waiting.get, self.waits_on.get, self.waits_under.get
        sharing = self.ledger.sharing
        spans, span = self.spans, self._span
        for job in line:
            reason = reason_of(job.id)
            if reason is None:
                continue
            place = places[job.queue_id] = places.get(job.queue_id, 0) + 1
            fid = waits_on(job.id)
            start = None
            # A profile past its MAX_PER_FABRIC estimates gives no more (estimates.py): not asked.
            if fid is not None:
                profile = profiles.get(fid)
                if profile is None:
                    profile = profiles[fid] = Profile(self.now, self.ledger.free(fid), self._releases(fid))
                if profile.estimated < MAX_PER_FABRIC:
                    runtime = job.runtime_limit_s
                    start = profile.earliest(need_on(job, sharing[fid]), runtime, spans.get(runtime) or span(runtime))
            else:
                key = waits_under(job.id)
                if key is not None:
                    profile = limit_profiles.get(key)
                    if profile is None:
                        room = sub(self.ledger.limit[key[0]][key[1]], self.ledger.used_at(*key))
                        profile = limit_profiles[key] = Profile(self.now, room, self._team_releases(key))
                    if profile.estimated < MAX_PER_FABRIC:
                        runtime = job.runtime_limit_s
                        start = profile.earliest(
                            need_on(job, sharing[key[1]] if key[1] is not None else True),
                            runtime,
                            spans.get(runtime) or span(runtime),
                        )
            waiting.append(Waiting(job.id, reason, start, place))
        return Decisions(admit=tuple(self.admitted), waiting=tuple(waiting), preempt=tuple(self.preempted))

    def _team_releases(self, key: tuple[int, int | None]) -> list[tuple[datetime, Amount]]:
        """When a team's use under one of its limits comes down: each of its running jobs (on that fabric, or
        anywhere for its team-wide limit) at its runtime limit."""
        if self.by_limit is None:  # every job's release under each limit work waits under, indexed once
            by_limit = self.by_limit = defaultdict(list)
            asked = set(self.waits_under.values())
            now, gone, span, sharing = self.now, self.gone, self._span, self.ledger.sharing
            releases = []  # (when, what, where, whose), in time order: each limit's share of it is in order too
            for fid, jobs in self.running.items():
                for job in jobs:
                    if job.id not in gone:
                        end = max(now, (job.started_at or now) + span(job.runtime_limit_s))
                        releases.append((end, need_on(job, sharing[fid]), fid, job.group_id))
            for fid, admitted in self.admitted_on.items():
                for job, need in zip(admitted, self.needs_on[fid], strict=True):
                    if job.id not in gone:
                        end = max(now, (job.started_at or now) + span(job.runtime_limit_s))
                        releases.append((end, need, fid, job.group_id))
            releases.sort(key=itemgetter(0))
            lineage = self.ledger.lineage
            limit_key: tuple[int, int | None]
            for end, need, fid, group_id in releases:
                release = (end, need)
                for level in lineage(group_id):
                    limit_key = (level, fid)
                    if limit_key in asked:
                        by_limit[limit_key].append(release)
                    limit_key = (level, None)
                    if limit_key in asked:
                        by_limit[limit_key].append(release)
        return self.by_limit.get(key, [])


def _targets(job: Job, queue: QueueState, snapshot: Snapshot) -> tuple[int, ...]:
    """The fabrics a job may go to, in its queue's order: native work only to fabrics of its kind, a gang only to
    fabrics that run that many nodes for one workload."""
    fids = queue.fabric_ids if job.only_on is None else tuple(f for f in queue.fabric_ids if f in job.only_on)
    if job.nodes > 1:
        fids = tuple(f for f in fids if _spans(snapshot, f, job.nodes))
    return fids


def _spans(snapshot: Snapshot, fid: int, nodes: int) -> bool:
    fabric = snapshot.fabrics.get(fid)
    return fabric is None or fabric.max_nodes is None or nodes <= fabric.max_nodes
