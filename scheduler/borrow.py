"""The second pass: everything not owed borrows what is left, in line order.

A job tries its targets in its route's order and starts on the first where, in this order, the fabric is up,
the job fits the fabric's size, no cap holds it back (limits.py), it fits the free capacity, it fits what is
left once capacity held for owed work is set aside, long work leaves the GPUs kept for short work free
(shortwork.py), and it delays no reserved start of work ahead of it (backfill.py). Else, where its tier may
preempt, it takes lower tiers' borrowed work on the first target where only capacity holds it back and no work
ahead of it waits (preemption.py). Else it waits, with its first target's reason, and reserves its earliest
start on each target where it waits for capacity while the fabric's plan has room for more reservations: once
it has waited long enough (backfill.reserves); work younger than that makes the fabric's plan all the same (so
tier preemption still passes over capacity it waits for), without a start in it. Long work that a target keeps
from its GPUs for short work tries no target after it: it waits for that one (shortwork.py).
"""

from __future__ import annotations

from datetime import datetime

from scheduler import reasons
from scheduler.backfill import RESERVED, Plan, reserves
from scheduler.cycle import Cycle
from scheduler.ledger import Amount, fits, sub
from scheduler.limits import Why
from scheduler.model import Job
from scheduler.reasons import Reason
from scheduler.reclaim import reclaim
from scheduler.routes import Route
from scheduler.shortwork import SHORT_WORK_S, kept

# What tier preemption can remedy: the job waits only for capacity on the target.
_SHORT_OF_CAPACITY = frozenset({reasons.NO_CAPACITY, reasons.GANG_DOES_NOT_FIT, reasons.HELD_FOR_RESERVATIONS})
# Why it waits on a later target where nothing reads why (see consider()).
_UNREAD: Why = (Reason(reasons.NO_CAPACITY), None, None)
# A later target of long work that a target ahead keeps from its GPUs for short work: not tried (shortwork.py).
_KEPT_AHEAD: Why = (Reason(reasons.KEPT_FOR_SHORT_WORK), None, None)


def consider(c: Cycle, job: Job, route: Route) -> None:
    """Admit the job on its first target that holds it now, or say why it waits (see the module docstring)."""
    if not route.targets:
        queue = c.s.queues.get(job.queue_id)
        c.waiting[job.id] = reasons.no_target(queue.slug if queue else str(job.queue_id))
        return
    why = walk(c, job, route)
    if why is None:
        return
    if c.preempting and _tier_preempts(c, job, route, why):
        return
    blocked = blocking(c, route, why)
    if len(blocked) > 1:
        _reserve_soonest(c, job, blocked)
    elif blocked:
        _reserve(c, job, *blocked[0])
    c.wait(job, why[0])  # the first target's reason: where it would go first


def walk(c: Cycle, job: Job, route: Route) -> list[Why] | None:
    """Try the job's targets in its route's order: None once it was admitted on one, else why not on each."""
    why: list[Why] = []
    plans = c.plans
    # Why it waits on a later target is read only where it may still reserve a start there (the fabric's plan has
    # room for one; tier preemption passes over a fabric with a plan): elsewhere a later target without the room
    # for it is passed over without asking why (its limits, the reason's words).
    capacity, used, healthy = c.ledger.capacity, c.ledger.used, c.healthy
    for fid, need in route.targets:
        if why:
            plan = plans.get(fid)
            if plan is not None and len(plan.starts) >= RESERVED:
                if fid not in healthy:
                    why.append(_UNREAD)
                    continue
                cap, u = capacity[fid], used[fid]  # fits(need, ledger.free(fid)), unrolled
                if need[0] > cap[0] - u[0] or need[1] > cap[1] - u[1] or need[2] > cap[2] - u[2]:
                    why.append(_UNREAD)
                    continue
        outcome = _try(c, job, fid, need)
        if outcome is None:
            return None
        why.append(outcome)
        if outcome[0].code == reasons.KEPT_FOR_SHORT_WORK:  # it waits for this fabric (shortwork.py)
            why.extend(_KEPT_AHEAD for _ in route.targets[len(why) :])
            break
    return why


def blocking(c: Cycle, route: Route, why: list[Why]) -> list[tuple[int, Amount]]:
    """The targets where waiting work reserves its start: blocked there for capacity, where the fabric's plan has
    room for more reservations."""
    plans = c.plans
    return [
        (fid, need)
        for (fid, need), w in zip(route.targets, why, strict=True)
        if w[1] is not None and (plans.get(fid) is None or len(plans[fid].starts) < RESERVED)
    ]


def _try(c: Cycle, job: Job, fid: int, need: Amount) -> Why | None:
    """None when the job was admitted on this fabric; else why not."""
    fabric = c.s.fabrics[fid]
    ledger = c.ledger
    if not fabric.healthy:
        return (reasons.fabric_unavailable(fabric.name), None, None)
    size = c.sizes[fid]
    n0, n1, n2 = need
    if n0 > size[0] or n1 > size[1] or n2 > size[2]:
        return (reasons.too_big(fabric.name, size, need), None, None)
    limited = c.limits.reason(job, fid, need)
    if limited is not None:
        return limited
    capacity, used = ledger.capacity[fid], ledger.used[fid]
    free = (capacity[0] - used[0], capacity[1] - used[1], capacity[2] - used[2])
    if n0 > free[0] or n1 > free[1] or n2 > free[2]:
        if job.nodes > 1:
            return (reasons.gang_does_not_fit(fabric.name, job.nodes, free, need), fid, None)
        # All the work of one need that finds the fabric as full (its use the same object: the ledger replaces it
        # on every change) waits for the same reason, in the same words: one reason for them all.
        short = c.short.get((fid, need))
        if short is None or short[0] is not used:
            short = c.short[fid, need] = (used, (reasons.no_capacity(fabric.name, free, need), fid, None))
        return short[1]
    held = ledger.held[fid]
    if (held[0] or held[1] or held[2]) and not fits(need, sub(free, held)):  # (nothing held: it fits)
        return (reasons.held_for_reservations(fabric.name, held), None, None)
    keep = kept(job, size[0])
    if keep and n0 > free[0] - held[0] - keep:
        return (reasons.kept_for_short_work(fabric.name, keep, SHORT_WORK_S), fid, None)
    plan = c.plans.get(fid)
    if plan is not None and not plan.admits(job.runtime_limit_s, need):
        return (reasons.behind_higher_priority(fabric.name, plan.first or c.now), fid, None)
    c.admit(job, fid, need)
    return None


def _tier_preempts(c: Cycle, job: Job, route: Route, why: list[Why]) -> bool:
    """Admit the job by preempting borrowed work of lower tiers, on the first target where only capacity holds
    it back and no work ahead of it in line waits for that capacity. True when it was admitted."""
    tier = c.preempting.get(job.priority)
    if tier is None:
        return False
    for (fid, need), blocked in zip(route.targets, why, strict=True):
        if blocked[0].code not in _SHORT_OF_CAPACITY or fid in c.plans:
            continue
        if reclaim(c, job, fid, need, below=tier.rank):
            c.admit(job, fid, need)
            return True
    return False


def _reserve(c: Cycle, job: Job, fid: int, need: Amount) -> None:
    """Work blocked on a fabric reserves its earliest start there (while the fabric's plan has room for more
    reservations): later work may not delay it."""
    plan = c.plans.get(fid)
    if plan is None:
        free = sub(c.ledger.free(fid), c.ledger.held[fid])
        plan = c.plans[fid] = Plan(c.now, free, c.releases(fid))
    if reserves(job, c.now):
        plan.reserve(job.runtime_limit_s, need)


def _reserve_soonest(c: Cycle, job: Job, blocked: list[tuple[int, Amount]]) -> None:
    """Work blocked on several fabrics reserves its start on the one where it would start soonest (the first of
    them on a tie), as Slurm's backfill does across partitions; where it fits none, on each as before."""
    best: tuple[datetime, int, Amount, Plan] | None = None
    for fid, need in blocked:
        plan = c.plans.get(fid)
        if plan is None:
            plan = Plan(c.now, sub(c.ledger.free(fid), c.ledger.held[fid]), c.releases(fid))
        start = plan.earliest(job.runtime_limit_s, need)
        if start is not None and (best is None or start < best[0]):
            best = (start, fid, need, plan)
    if best is None:
        for fid, need in blocked:
            _reserve(c, job, fid, need)
        return
    _, fid, need, plan = best
    c.plans[fid] = plan
    if reserves(job, c.now):
        plan.reserve(job.runtime_limit_s, need)
