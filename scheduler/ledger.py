"""The working copy one cycle decides on: free capacity per fabric, use per group, unused reservations.

Amounts are (gpus_milli, cpus_milli, memory_mib) tuples of ints: this is the hot loop of the scheduler,
and plain tuples are several times faster than dataclasses here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from fabrics.base import Resources
from scheduler.model import UNLIMITED, Job, Snapshot

Amount = tuple[int, int, int]
ZERO: Amount = (0, 0, 0)
NO_CAP: Amount = (UNLIMITED, UNLIMITED, UNLIMITED)


def amount(r: Resources) -> Amount:
    return (r.gpus_milli, r.cpus_milli, r.memory_mib)


def add(a: Amount, b: Amount) -> Amount:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def sub(a: Amount, b: Amount) -> Amount:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def fits(a: Amount, b: Amount) -> bool:
    """a <= b in every resource."""
    return a[0] <= b[0] and a[1] <= b[1] and a[2] <= b[2]


def shortfall(used: Amount, reserved: Amount) -> Amount:
    """How much of a reservation is unused: max(0, reserved - used) per resource."""
    return (max(0, reserved[0] - used[0]), max(0, reserved[1] - used[1]), max(0, reserved[2] - used[2]))


def need_on(job: Job, gpu_sharing: bool) -> Amount:
    """The job's whole request on a fabric; without GPU sharing a fraction of a GPU takes a whole one."""
    gpus = job.per_node.gpus_milli
    if not gpu_sharing and gpus % 1000:
        gpus = (gpus // 1000 + 1) * 1000
    n = job.nodes
    return (gpus * n, job.per_node.cpus_milli * n, job.per_node.memory_mib * n)


class Ledger:
    """What is free and used now; admissions and preemptions in this cycle update it."""

    def __init__(self, snapshot: Snapshot, demand: dict[int, set[int]]) -> None:
        self.capacity: dict[int, Amount] = {fid: amount(f.capacity) for fid, f in snapshot.fabrics.items()}
        self.used: dict[int, Amount] = dict.fromkeys(snapshot.fabrics, ZERO)
        self.group_used: defaultdict[tuple[int, int | None], Amount] = defaultdict(lambda: ZERO)
        self.owner_used: defaultdict[int, int] = defaultdict(int)
        self.reserved: dict[tuple[int, int | None], Amount] = {}
        self.limit: dict[tuple[int, int | None], Amount] = {}
        for key, quota in snapshot.quotas.items():
            self.reserved[key] = amount(quota.reservation)
            self.limit[key] = amount(quota.limit)
        self.sharing = {fid: f.gpu_sharing for fid, f in snapshot.fabrics.items()}
        # Per fabric: the unused reservations of the groups with demand there (kept current by take/give).
        self.unused: dict[int, Amount] = dict.fromkeys(snapshot.fabrics, ZERO)
        self.demand: dict[int, set[int]] = {}  # filled in below, once running work is counted
        for job in snapshot.running:
            if job.fabric_id in self.used:
                self.take(job, job.fabric_id, need_on(job, self.sharing[job.fabric_id]))
        self.demand = demand  # fabric -> groups with pending work that could go there
        for fid, groups in demand.items():
            if fid in self.unused:
                for gid in groups:
                    self.unused[fid] = add(self.unused[fid], self.shortfall(gid, fid))

    def shortfall(self, group_id: int, fabric_id: int) -> Amount:
        reserved = self.reserved.get((group_id, fabric_id))
        return shortfall(self.group_used[group_id, fabric_id], reserved) if reserved else ZERO

    def free(self, fabric_id: int) -> Amount:
        return sub(self.capacity[fabric_id], self.used[fabric_id])

    def held_for_others(self, group_id: int, fabric_id: int) -> Amount:
        """Capacity kept for the unused reservations of other groups that have demand on this fabric."""
        held = self.unused[fabric_id]
        if held == ZERO:
            return held
        if group_id in self.demand.get(fabric_id, ()):
            held = sub(held, self.shortfall(group_id, fabric_id))
        return held

    def within_limits(self, job: Job, fabric_id: int, need: Amount, owner_limit: int | None) -> bool:
        g = job.group_id
        for key in ((g, fabric_id), (g, None)):
            limit = self.limit.get(key)
            if limit is not None:
                used = self.group_used[key]
                if used[0] + need[0] > limit[0] or used[1] + need[1] > limit[1] or used[2] + need[2] > limit[2]:
                    return False
        return owner_limit is None or self.owner_used[job.owner_id] + need[0] <= owner_limit

    def take(self, job: Job, fabric_id: int, need: Amount) -> None:
        self._move(job, fabric_id, need, 1)

    def give(self, job: Job, fabric_id: int, need: Amount) -> None:
        self._move(job, fabric_id, need, -1)

    def _move(self, job: Job, fabric_id: int, need: Amount, sign: int) -> None:
        g = job.group_id
        delta = (sign * need[0], sign * need[1], sign * need[2])
        tracked = g in self.demand.get(fabric_id, ())
        before = self.shortfall(g, fabric_id) if tracked else ZERO
        self.used[fabric_id] = add(self.used[fabric_id], delta)
        self.group_used[g, fabric_id] = add(self.group_used[g, fabric_id], delta)
        self.group_used[g, None] = add(self.group_used[g, None], delta)
        self.owner_used[job.owner_id] += delta[0]
        if tracked:
            self.unused[fabric_id] = add(sub(self.unused[fabric_id], before), self.shortfall(g, fabric_id))


def demand_by_fabric(snapshot: Snapshot, pending: Iterable[Job]) -> dict[int, set[int]]:
    """Fabric -> the groups with pending work that one of its queues could place there."""
    demand: dict[int, set[int]] = defaultdict(set)
    seen: set[tuple[int, int]] = set()
    for job in pending:
        key = (job.group_id, job.queue_id)
        if key in seen:
            continue
        seen.add(key)
        queue = snapshot.queues.get(job.queue_id)
        for fid in queue.fabric_ids if queue else ():
            demand[fid].add(job.group_id)
    return demand
