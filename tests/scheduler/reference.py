"""A slow, readable statement of the rules scheduler.decide() follows, for the property test that holds the two
equal (test_reference.py).

No memo, no unrolled arithmetic, no pass-over shortcuts: every rule is asked afresh for every job and target,
through the ledger's plain methods. It shares with decide() only what is not the cycle's own: the line's order
(priority.py), the ledger's bookkeeping (ledger.py), which work preemption picks (preemption.py), backfill's and
the estimates' step functions (backfill.py, estimates.py), and the reasons' words (reasons.py).

The rules, in order:
1. Order the line (priority.ordered). Work held by a spent budget (its team's, its owner's in the team, or its
   owner's anywhere) waits with the hold's reason and takes no part in the passes below.
2. The team pass, in line order: an array element past its array's % limit waits. Work within its team's unused
   reservation on a healthy target (or an agent's GPU work within the agent's own reservation) is owed: it
   starts on the first such target where its caps hold and free capacity less what is held fits it; else it
   takes borrowed work back by preemption on the first such target where its caps hold (where only its
   department's limit holds it back, first from its sister teams); else it waits at the first such target,
   for its cap, or holding its need there. Other work goes on.
3. The department pass, where something was preempted, or there are departments and one has unused
   reservation left: the same, for work within a department's unused reservation (once something is
   preempted, within any level's, the team's again included: a team whose work was taken back may be owed
   again). Other work goes on.
4. The borrowing pass, in line order: an array element past its % limit waits. Work without targets waits for
   its queue. Else it starts on the first target that is up, holds it by size, keeps its caps, has the free
   capacity, and the free capacity less what is held, and (work over shortwork.SHORT_WORK_S) the free capacity
   less what is held and the GPUs kept for short work, and where backfill lets it start now (long work held
   back by the GPUs kept for short work on a target tries no later one). Else a tier that
   may preempt takes lower tiers' borrowed work on the first target where it waits only for capacity and no
   plan is made. Else it reserves its start where it waits for capacity (while the plan there has room for
   more): on the one such target where its earliest start is soonest (the first on a tie), or on each where it
   has a start on none; and waits with its first target's reason. Work that has waited less than
   backfill.RESERVE_AFTER_S makes those plans all the same, but takes no start in them.
5. Waiting work, in line order: its place in its queue's line and its estimated start (for capacity on a
   fabric, or under a limit).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from scheduler import reasons
from scheduler.backfill import RESERVED, Plan, reserves
from scheduler.estimates import Profile
from scheduler.ledger import ZERO, Amount, Ledger, add, amount, fits, need_on, sub
from scheduler.model import Admit, Decisions, Job, Preempt, Snapshot, Waiting
from scheduler.preemption import idle, may_preempt, victims
from scheduler.priority import ordered
from scheduler.reasons import Reason
from scheduler.shortwork import SHORT_WORK_S, kept

SHORT_OF_CAPACITY = {reasons.NO_CAPACITY, reasons.GANG_DOES_NOT_FIT, reasons.HELD_FOR_RESERVATIONS}

Target = tuple[int, Amount]


class Why:
    """Why a job waits on one target, and what it waits for: capacity on a fabric, or under a limit."""

    def __init__(self, reason: Reason, fabric: int | None = None, limit: tuple[int, int | None] | None = None) -> None:
        self.reason, self.fabric, self.limit = reason, fabric, limit


def decide(s: Snapshot) -> Decisions:
    return Reference(s).decide()


class Reference:
    def __init__(self, s: Snapshot) -> None:
        self.s = s
        self.ledger = Ledger(s)
        self.admitted: list[Admit] = []
        self.admitted_jobs: list[tuple[Job, int, Amount]] = []
        self.preempted: list[Preempt] = []
        self.gone: set[str] = set()
        self.why: dict[str, Why] = {}
        self.plans: dict[int, Plan] = {}

    def decide(self) -> Decisions:
        line = ordered(self.s)
        considered = [job for job in line if not self.held(job)]
        rest = [job for job in considered if not self.throttled(job) and not self.owed(job, department=False)]
        if self.preempted or (self.s.parents and self.departments_have_room()):
            rest = [job for job in rest if not self.owed(job, department=True)]
        for job in rest:
            if not self.throttled(job):
                self.borrow(job)
        return Decisions(tuple(self.admitted), tuple(self.waiting(line)), tuple(self.preempted))

    # -- what a job is and may do -------------------------------------------------------------------
    def targets(self, job: Job) -> list[Target]:
        queue = self.s.queues.get(job.queue_id)
        if queue is None:
            return []
        out = []
        for fid in queue.fabric_ids:
            if job.only_on is not None and fid not in job.only_on:
                continue
            fabric = self.s.fabrics.get(fid)
            if job.nodes > 1 and fabric is not None and fabric.max_nodes is not None and job.nodes > fabric.max_nodes:
                continue
            out.append((fid, need_on(job, self.ledger.sharing[fid])))
        return out

    def healthy(self, fid: int) -> bool:
        return self.s.fabrics[fid].healthy

    def held(self, job: Job) -> bool:
        for key in ((job.group_id, 0), (job.group_id, job.owner_id), (0, job.owner_id)):
            if key in self.s.held:
                self.why[job.id] = Why(self.s.held[key])
                return True
        return False

    def throttled(self, job: Job) -> bool:
        if not job.array_throttle:
            return False
        active = sum(1 for j in self.s.running if j.array_id == job.array_id)
        active += sum(1 for j, _, _ in self.admitted_jobs if j.array_id == job.array_id)
        if active < job.array_throttle:
            return False
        self.why[job.id] = Why(reasons.array_throttle(job.array_throttle))
        return True

    def cap_reason(self, job: Job, fid: int, need: Amount) -> Why | None:
        """The first cap over: each level's on the fabric then across fabrics, nearest first; a member's, the
        queue's share, the identity's."""
        ledger = self.ledger
        for depth, level in enumerate(ledger.lineage(job.group_id)):
            for where in (fid, None):
                limit = ledger.limit_at(level, where)
                used = ledger.used_at(level, where)
                if limit is not None and not fits(add(used, need), limit):
                    at_limit = reasons.group_at_limit if depth == 0 else reasons.department_at_limit
                    name = self.s.fabrics[fid].name if where is not None else ""
                    return Why(at_limit(name, used, limit, need), limit=(level, where))
        s = self.s
        owner_limit = s.owner_limits.get(job.owner_id)
        member_limit = None if job.owner_id in s.agents else s.member_limits.get(job.group_id)
        queue = s.queues.get(job.queue_id)
        queue_cap = ledger.queue_cap(queue.gpu_share if queue else None, fid)
        if ledger.within_limits(job, fid, need, owner_limit, member_limit, queue_cap):
            return None
        member_used = ledger.member_used[job.group_id, job.owner_id]
        if member_limit is not None and member_used + need[0] > member_limit:
            return Why(reasons.member_at_limit(member_used, member_limit, need[0]))
        in_queue = ledger.queue_used[job.queue_id, fid]
        if queue is not None and queue_cap is not None and in_queue + need[0] > queue_cap:
            name = s.fabrics[fid].name
            return Why(reasons.queue_at_share(queue.slug, name, queue.gpu_share or 0, in_queue, queue_cap, need[0]))
        return Why(reasons.owner_at_limit(ledger.owner_used[job.owner_id], owner_limit or 0, need[0]))

    # -- recording -----------------------------------------------------------------------------------
    def admit(self, job: Job, fid: int, need: Amount) -> None:
        self.ledger.take(job, fid, need)
        self.admitted.append(Admit(job.id, fid))
        self.admitted_jobs.append((job, fid, need))

    def wait(self, job: Job, why: Why) -> None:
        self.why[job.id] = why

    # -- passes 2 and 3: owed work --------------------------------------------------------------------
    def departments_have_room(self) -> bool:
        return any(
            self.ledger.within_reservation(d, fid, ZERO) for d in set(self.s.parents.values()) for fid in self.s.fabrics
        )

    def owed_on(self, job: Job, department: bool) -> list[Target]:
        ledger, g = self.ledger, job.group_id
        healthy = [(fid, need) for fid, need in self.targets(job) if self.healthy(fid)]
        if department and self.preempted:
            return [(fid, need) for fid, need in healthy if ledger.owed_within(g, fid, need) is not None]
        if department:
            above = ledger.lineage(g)[1:]
            return [(fid, need) for fid, need in healthy if any(ledger.within_reservation(d, fid, need) for d in above)]
        if self.agent_owed(job):
            return healthy
        return [(fid, need) for fid, need in healthy if ledger.within_reservation(g, fid, need)]

    def agent_owed(self, job: Job) -> bool:
        reserved = self.s.owner_reservations.get(job.owner_id, 0)
        gpus = job.per_node.gpus_milli * job.nodes
        return reserved > 0 and gpus > 0 and self.ledger.owner_used[job.owner_id] + gpus <= reserved

    def owed(self, job: Job, department: bool) -> bool:
        """True when the job was handled as owed (admitted, or waiting where it is owed)."""
        targets = self.owed_on(job, department)
        if not targets:
            return False
        ledger = self.ledger
        for fid, need in targets:
            if self.cap_reason(job, fid, need) is None and fits(need, sub(ledger.free(fid), ledger.held[fid])):
                self.admit(job, fid, need)
                return True
        for fid, need in targets:
            capped = self.cap_reason(job, fid, need)
            if capped is None and self.reclaim(job, fid, need):
                self.admit(job, fid, need)
                return True
            if (
                capped is not None
                and not department
                and capped.reason.code == reasons.DEPARTMENT_AT_LIMIT
                and self.reclaim(job, fid, need, within=capped.limit)
                and self.cap_reason(job, fid, need) is None
            ):
                self.admit(job, fid, need)
                return True
        fid, need = targets[0]
        capped = self.cap_reason(job, fid, need)
        if capped is not None:
            self.wait(job, capped)
            return True
        ledger.hold(fid, need)
        free = sub(ledger.free(fid), ledger.held[fid])
        lent = 0 if department else self.lent_away(job.group_id, fid)
        self.wait(job, Why(reasons.no_capacity(self.s.fabrics[fid].name, free, need, lent), fabric=fid))
        return True

    def lent_away(self, group_id: int, fid: int) -> int:
        """GPUs of the team's unused reservation that other teams borrow with work never preempted."""
        ledger = self.ledger
        unused = ledger.reserved_at(group_id, fid)[0] - ledger.used_at(group_id, fid)[0]
        lent = 0
        for team in {j.group_id for j in self.s.running if j.fabric_id == fid and j.group_id != group_id}:
            fixed = sum(
                need_on(j, ledger.sharing[fid])[0]
                for j in self.s.running
                if j.fabric_id == fid and j.group_id == team and not may_preempt(self.s, j)
            )
            lent += min(fixed, max(0, ledger.used_at(team, fid)[0] - ledger.reserved_at(team, fid)[0]))
        return max(0, min(lent, unused))

    def reclaim(
        self, job: Job, fid: int, need: Amount, within: tuple[int, int | None] | None = None, below: int | None = None
    ) -> bool:
        """Preempt borrowed work on the fabric so that the job fits now; all or nothing."""
        ledger = self.ledger
        sharing = ledger.sharing[fid]
        candidates = [
            j for j in self.s.running if j.fabric_id == fid and may_preempt(self.s, j) and j.id not in self.gone
        ]
        if not candidates:
            return False
        chosen: list[Job] = []
        if within is not None:
            limit = ledger.limit_at(*within)
            assert limit is not None
            over = sub(add(ledger.used_at(*within), need), limit)
            sisters = [j for j in candidates if within[0] in ledger.lineage(j.group_id)]
            first = victims(
                self.s, ledger, sisters, job.group_id, fid, (max(0, over[0]), max(0, over[1]), max(0, over[2]))
            )
            if not first:
                return False
            for victim in first:
                ledger.give(victim, fid, need_on(victim, sharing))
            chosen = first
            candidates = [j for j in candidates if j not in first]
        short = sub(add(need, ledger.held[fid]), ledger.free(fid))
        deficit = (max(0, short[0]), max(0, short[1]), max(0, short[2]))
        if deficit != ZERO:
            more = victims(self.s, ledger, candidates, job.group_id, fid, deficit, below)
            if not more:
                for victim in chosen:
                    ledger.take(victim, fid, need_on(victim, sharing))
                return False
            for victim in more:
                ledger.give(victim, fid, need_on(victim, sharing))
            chosen += more
        if not chosen:
            return False
        name = self.s.fabrics[fid].name
        for victim in chosen:
            self.gone.add(victim.id)
            if below is None:
                self.preempted.append(Preempt(victim.id, reasons.preempted(name, idle(self.s, victim))))
            else:
                self.preempted.append(Preempt(victim.id, reasons.preempted(name, tier=job.priority)))
        return True

    # -- pass 4: borrowing ----------------------------------------------------------------------------
    def borrow(self, job: Job) -> None:
        targets = self.targets(job)
        if not targets:
            queue = self.s.queues.get(job.queue_id)
            self.wait(job, Why(reasons.no_target(queue.slug if queue else str(job.queue_id))))
            return
        why = []
        for fid, need in targets:
            blocked = self.try_on(job, fid, need)
            if blocked is None:
                return
            why.append(blocked)
            if blocked.reason.code == reasons.KEPT_FOR_SHORT_WORK:  # it waits for this one, trying no later one
                why += [Why(blocked.reason) for _ in targets[len(why) :]]
                break
        tier = self.s.tiers.get(job.priority)
        if tier is not None and tier.may_preempt:
            for (fid, need), blocked in zip(targets, why, strict=True):
                short = blocked.reason.code in SHORT_OF_CAPACITY and fid not in self.plans
                if short and self.reclaim(job, fid, need, below=tier.rank):
                    self.admit(job, fid, need)
                    return
        waits_for = [(fid, need) for (fid, need), w in zip(targets, why, strict=True) if w.fabric is not None]
        self.reserve_soonest(job, [(fid, need) for fid, need in waits_for if self.plan_has_room(fid)])
        self.wait(job, why[0])

    def try_on(self, job: Job, fid: int, need: Amount) -> Why | None:
        """None: admitted here; else why not."""
        fabric, ledger = self.s.fabrics[fid], self.ledger
        if not fabric.healthy:
            return Why(reasons.fabric_unavailable(fabric.name))
        size = ledger.capacity[fid] if fabric.size is None else amount(fabric.size)
        if not fits(need, size):
            return Why(reasons.too_big(fabric.name, size, need))
        capped = self.cap_reason(job, fid, need)
        if capped is not None:
            return capped
        free = ledger.free(fid)
        if not fits(need, free):
            if job.nodes > 1:
                return Why(reasons.gang_does_not_fit(fabric.name, job.nodes, free, need), fabric=fid)
            return Why(reasons.no_capacity(fabric.name, free, need), fabric=fid)
        if not fits(need, sub(free, ledger.held[fid])):
            return Why(reasons.held_for_reservations(fabric.name, ledger.held[fid]))
        keep = kept(job, size[0])
        if keep and need[0] > free[0] - ledger.held[fid][0] - keep:
            return Why(reasons.kept_for_short_work(fabric.name, keep, SHORT_WORK_S), fabric=fid)
        plan = self.plans.get(fid)
        if plan is not None and not plan.admits(job.runtime_limit_s, need):
            return Why(reasons.behind_higher_priority(fabric.name, plan.first or self.s.now), fabric=fid)
        self.admit(job, fid, need)
        return None

    def plan_has_room(self, fid: int) -> bool:
        return fid not in self.plans or len(self.plans[fid].starts) < RESERVED

    def reserve_soonest(self, job: Job, blocked: list[Target]) -> None:
        """One blocked target: it reserves there. Several: only on the one where its earliest start is soonest
        (the first on a tie); where it has a start on none of them, on each."""
        starts = []
        for fid, need in blocked:
            plan = self.plans.get(fid) or Plan(self.s.now, sub(self.ledger.free(fid), self.ledger.held[fid]),
                                               self.releases(fid))  # fmt: skip
            starts.append(plan.earliest(job.runtime_limit_s, need) if len(blocked) > 1 else None)
        timed = [(start, i) for i, start in enumerate(starts) if start is not None]
        if timed:
            fid, need = blocked[min(timed)[1]]
            self.reserve(job, fid, need)
            return
        for fid, need in blocked:
            self.reserve(job, fid, need)

    def reserve(self, job: Job, fid: int, need: Amount) -> None:
        if fid not in self.plans:
            free = sub(self.ledger.free(fid), self.ledger.held[fid])
            self.plans[fid] = Plan(self.s.now, free, self.releases(fid))
        if len(self.plans[fid].starts) < RESERVED and reserves(job, self.s.now):
            self.plans[fid].reserve(job.runtime_limit_s, need)

    # -- when capacity comes back ---------------------------------------------------------------------
    def ends(self) -> list[tuple[datetime, Amount, int, Job]]:
        """Everything that holds capacity after this cycle, each at its runtime limit: (when, need, where, job)."""
        now, out = self.s.now, []
        for job in self.s.running:
            if job.fabric_id is not None and job.id not in self.gone:
                end = max(now, (job.started_at or now) + timedelta(seconds=job.runtime_limit_s))
                out.append((end, need_on(job, self.ledger.sharing[job.fabric_id]), job.fabric_id, job))
        for job, fid, need in self.admitted_jobs:
            out.append((now + timedelta(seconds=job.runtime_limit_s), need, fid, job))
        return sorted(out, key=lambda e: e[0])

    def releases(self, fid: int) -> list[tuple[datetime, Amount]]:
        return [(end, need) for end, need, where, _ in self.ends() if where == fid]

    def releases_under(self, level: int, fid: int | None) -> list[tuple[datetime, Amount]]:
        lineage = self.ledger.lineage
        return [
            (end, need)
            for end, need, where, job in self.ends()
            if level in lineage(job.group_id) and (fid is None or where == fid)
        ]

    # -- pass 5: waiting work -------------------------------------------------------------------------
    def waiting(self, line: list[Job]) -> list[Waiting]:
        out = []
        places: dict[int, int] = {}
        fabric_profiles: dict[int, Profile] = {}
        limit_profiles: dict[tuple[int, int | None], Profile] = {}
        for job in line:
            why = self.why.get(job.id)
            if why is None:
                continue
            places[job.queue_id] = places.get(job.queue_id, 0) + 1
            start = None
            if why.fabric is not None:
                fid = why.fabric
                if fid not in fabric_profiles:
                    fabric_profiles[fid] = Profile(self.s.now, self.ledger.free(fid), self.releases(fid))
                start = fabric_profiles[fid].earliest(need_on(job, self.ledger.sharing[fid]), job.runtime_limit_s)
            elif why.limit is not None:
                level, where = why.limit
                if why.limit not in limit_profiles:
                    limit = self.ledger.limit_at(level, where)
                    assert limit is not None
                    room = sub(limit, self.ledger.used_at(level, where))
                    limit_profiles[why.limit] = Profile(self.s.now, room, self.releases_under(level, where))
                sharing = self.ledger.sharing[where] if where is not None else True
                start = limit_profiles[why.limit].earliest(need_on(job, sharing), job.runtime_limit_s)
            out.append(Waiting(job.id, why.reason, start, places[job.queue_id]))
        return out
