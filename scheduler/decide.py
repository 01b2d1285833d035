"""One scheduling cycle over a frozen snapshot: order the line, admit what the policy allows, say why the
rest waits. Pure: no clock (`now` is in the snapshot), no database, no fabric."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import NamedTuple

from scheduler import reasons
from scheduler.backfill import Shadow, shadow
from scheduler.estimates import Profile
from scheduler.ledger import Amount, Ledger, add, demand_by_fabric, fits, need_on, sub
from scheduler.model import Admit, Decisions, Job, Preempt, Snapshot, Waiting
from scheduler.preemption import victims
from scheduler.priority import ordered
from scheduler.reasons import Reason


class _Why(NamedTuple):
    """Why a job waits, with its message made only if it is the one reported (formatting is costly)."""

    code: str
    fabric_id: int | None  # the fabric it waits for capacity on, where a start can be estimated
    make: Callable[..., Reason]
    args: tuple[object, ...]

    def reason(self) -> Reason:
        return self.make(*self.args)


# Waiting for one of these, a job within its team's reservation may take borrowed capacity back.
RECLAIMABLE = frozenset({reasons.NO_CAPACITY, reasons.GANG_DOES_NOT_FIT, reasons.HELD_FOR_RESERVATIONS})


def decide(snapshot: Snapshot) -> Decisions:
    cycle = _Cycle(snapshot)
    # 1. Order the line: fair share, priority class, age and size (priority.py).
    line = ordered(snapshot)
    # 2. Walk it once: admit, preempt borrowed capacity for reservations, or record why each job waits.
    for job in line:
        cycle.consider(job)
    # 3. Estimate when the waiting work could start, in line order.
    return cycle.decisions(line)


class _Cycle:
    def __init__(self, snapshot: Snapshot) -> None:
        self.s = snapshot
        self.now = snapshot.now
        self.ledger = Ledger(snapshot, demand_by_fabric(snapshot, snapshot.pending))
        self.running: defaultdict[int, list[Job]] = defaultdict(list)
        self.preemptible: defaultdict[int, list[Job]] = defaultdict(list)  # running work that may be preempted
        for job in snapshot.running:
            if job.fabric_id is not None:
                self.running[job.fabric_id].append(job)
                queue = snapshot.queues.get(job.queue_id)
                if queue is not None and queue.preemptible:
                    self.preemptible[job.fabric_id].append(job)
        self.shadows: dict[int, Shadow] = {}  # fabric -> the head of the line's reservation there
        self.admitted: list[Admit] = []
        self.preempted: list[Preempt] = []
        self.gone: set[str] = set()  # preempted in this cycle
        self.waiting: dict[str, _Why] = {}
        self.admitted_on: defaultdict[int, list[Job]] = defaultdict(list)

    # -- one job ------------------------------------------------------------------------------------
    def consider(self, job: Job) -> None:
        queue = self.s.queues.get(job.queue_id)
        if queue is None or not queue.fabric_ids:
            slug = queue.slug if queue else str(job.queue_id)
            self.waiting[job.id] = _Why(reasons.NO_TARGET, None, reasons.no_target, (slug,))
            return
        # Routing: the first target that can hold all of it now; only if none can, take a reservation back.
        why = []
        for fid in queue.fabric_ids:
            outcome = self._try(job, fid)
            if outcome is None:
                self._admit(job, fid)
                return
            why.append(outcome)
        for fid, blocked in zip(queue.fabric_ids, why, strict=True):
            if blocked.code in RECLAIMABLE and self._reclaim(job, fid):
                self._admit(job, fid)
                return
        for fid, blocked in zip(queue.fabric_ids, why, strict=True):
            if blocked.fabric_id is not None:
                self._maybe_head(job, fid, need_on(job, self.ledger.sharing[fid]))
        self.waiting[job.id] = why[0]  # the first target's reason: where it would go first

    def _admit(self, job: Job, fid: int) -> None:
        self.admitted.append(Admit(job.id, fid))
        self.admitted_on[fid].append(job)

    def _try(self, job: Job, fid: int) -> _Why | None:
        """None when the job was admitted on this fabric; else why not (and the fabric, when capacity)."""
        fabric = self.s.fabrics[fid]
        ledger = self.ledger
        need = need_on(job, fabric.gpu_sharing)
        if not fabric.healthy:
            return _Why(reasons.FABRIC_UNAVAILABLE, None, reasons.fabric_unavailable, (fabric.name,))
        if not fits(need, ledger.capacity[fid]):
            return _Why(reasons.TOO_BIG, None, reasons.too_big, (fabric.name, ledger.capacity[fid], need))
        limited = self._limit_reason(job, fid, need)
        if limited is not None:
            return limited
        free = ledger.free(fid)
        if not fits(need, free):
            if job.nodes > 1:
                args = (fabric.name, job.nodes, free, need)
                return _Why(reasons.GANG_DOES_NOT_FIT, fid, reasons.gang_does_not_fit, args)
            return _Why(reasons.NO_CAPACITY, fid, reasons.no_capacity, (fabric.name, free, need))
        held = ledger.held_for_others(job.group_id, fid)
        if not fits(need, sub(free, held)):
            return _Why(reasons.HELD_FOR_RESERVATIONS, None, reasons.held_for_reservations, (fabric.name, held))
        head = self.shadows.get(fid)
        # Work within its own team's reservation is owed that capacity, head of the line or not.
        if (
            head is not None
            and not self._within_reservation(job, fid, need)
            and not head.admits(self.now, job.runtime_limit_s, need)
        ):
            return _Why(reasons.BEHIND_HIGHER_PRIORITY, fid, reasons.behind_higher_priority, (fabric.name, head.start))
        ledger.take(job, fid, need)
        return None

    def _limit_reason(self, job: Job, fid: int, need: Amount) -> _Why | None:
        ledger = self.ledger
        g = job.group_id
        owner_limit = self.s.owner_limits.get(job.owner_id)
        if ledger.within_limits(job, fid, need, owner_limit):
            return None
        for key, where in (((g, fid), self.s.fabrics[fid].name), ((g, None), "")):
            limit = ledger.limit.get(key)
            if limit is not None and not fits(add(ledger.group_used[key], need), limit):
                used = ledger.group_used[key]
                return _Why(reasons.GROUP_AT_LIMIT, None, reasons.group_at_limit, (where, used, limit, need))
        owner = (ledger.owner_used[job.owner_id], owner_limit or 0, need[0])
        return _Why(reasons.OWNER_AT_LIMIT, None, reasons.owner_at_limit, owner)

    # -- reservations come back -----------------------------------------------------------------------
    def _reclaim(self, job: Job, fid: int) -> bool:
        """Preempt borrowed work so a group below its reservation gets it back; True if the job was admitted."""
        ledger = self.ledger
        if not any(j.id not in self.gone for j in self.preemptible[fid]):
            return False  # nothing here may be preempted
        need = need_on(job, ledger.sharing[fid])
        if not self._within_reservation(job, fid, need):
            return False  # only what stays within the group's own reservation is taken back
        free = ledger.free(fid)
        held = ledger.held_for_others(job.group_id, fid)
        deficit = (
            max(0, need[0] + held[0] - free[0]),
            max(0, need[1] + held[1] - free[1]),
            max(0, need[2] + held[2] - free[2]),
        )
        running = [j for j in self.preemptible[fid] if j.id not in self.gone]
        chosen = victims(self.s, ledger, running, job.group_id, fid, deficit)
        if not chosen:
            return False
        for victim in chosen:
            ledger.give(victim, fid, need_on(victim, ledger.sharing[fid]))
            self.gone.add(victim.id)
            self.preempted.append(Preempt(victim.id, reasons.preempted(self.s.fabrics[fid].name)))
        ledger.take(job, fid, need)
        return True

    def _within_reservation(self, job: Job, fid: int, need: Amount) -> bool:
        """Whether the job keeps its group within its reservation in every resource that has one."""
        reserved = self.ledger.reserved.get((job.group_id, fid))
        if reserved is None or not any(reserved):
            return False
        after = add(self.ledger.group_used[job.group_id, fid], need)
        return all(after[i] <= reserved[i] for i in range(3) if reserved[i])

    # -- backfill -------------------------------------------------------------------------------------
    def _releases(self, fid: int) -> list[tuple[datetime, Amount]]:
        """When capacity comes back on a fabric: each running job at its runtime limit."""
        sharing = self.ledger.sharing[fid]
        out = []
        for job in self.running[fid]:
            if job.id in self.gone:
                continue
            start = job.started_at or self.now
            out.append((max(self.now, start + timedelta(seconds=job.runtime_limit_s)), need_on(job, sharing)))
        for job in self.admitted_on[fid]:
            out.append((self.now + timedelta(seconds=job.runtime_limit_s), need_on(job, sharing)))
        out.sort(key=lambda r: r[0])
        return out

    def _maybe_head(self, job: Job, fid: int, need: Amount) -> None:
        """The first job blocked by capacity on a fabric becomes its head: later work may not delay it."""
        if fid in self.shadows:
            return
        head = shadow(job.id, need, self.ledger.free(fid), self._releases(fid))
        if head is not None:
            self.shadows[fid] = head

    # -- the result -----------------------------------------------------------------------------------
    def decisions(self, line: list[Job]) -> Decisions:
        profiles: dict[int, Profile] = {}
        waiting = []
        for job in line:
            why = self.waiting.get(job.id)
            if why is None:
                continue
            fid = why.fabric_id
            start = None
            if fid is not None:
                profile = profiles.get(fid)
                if profile is None:
                    profile = profiles[fid] = Profile(self.now, self.ledger.free(fid), self._releases(fid))
                start = profile.earliest(need_on(job, self.ledger.sharing[fid]), job.runtime_limit_s)
            waiting.append(Waiting(job.id, why.reason(), start))
        return Decisions(admit=tuple(self.admitted), waiting=tuple(waiting), preempt=tuple(self.preempted))
