"""The working copy one cycle decides on: free capacity per fabric, use per group, unused reservations.

Groups nest: a team may belong to a department (Snapshot.parents), itself a group with quotas of its own.
A team's use counts for its department too, so the department's limit caps all its teams together, and
its reservation is what its teams are owed between them (`owed_within`).

Amounts are (gpus_milli, cpus_milli, memory_mib) tuples of ints, compared resource by resource where a pass
reads them for every job in line (the passes' speed is guarded by `python -m bench scheduler`, decide() over
10,000 pending workloads).
"""

from __future__ import annotations

from collections import defaultdict

from fabrics.base import Resources
from scheduler.model import UNLIMITED, Job, Snapshot

Amount = tuple[int, int, int]
ZERO: Amount = (0, 0, 0)
# A group's amounts on each fabric, and across all fabrics under None. Kept per group (level) rather than by
# (group, fabric) keys: the passes look up one level's amounts on fabric after fabric, and an int key costs a
# dict look-up less than a tuple made and hashed for each.
PerFabric = dict[int | None, Amount]
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


def need_on(job: Job, gpu_sharing: bool) -> Amount:
    """The job's whole request on a fabric; without GPU sharing a fraction of a GPU takes a whole one."""
    gpus = job.per_node.gpus_milli
    if not gpu_sharing and gpus % 1000:
        gpus = (gpus // 1000 + 1) * 1000
    n = job.nodes
    return (gpus * n, job.per_node.cpus_milli * n, job.per_node.memory_mib * n)


class Ledger:
    """What is free, used and held now; admissions, holds and preemptions in this cycle update it."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.capacity: dict[int, Amount] = {fid: amount(f.capacity) for fid, f in snapshot.fabrics.items()}
        self.used: dict[int, Amount] = dict.fromkeys(snapshot.fabrics, ZERO)
        # Capacity held for teams' own work that waits within their reservation: nobody after them may take it.
        self.held: dict[int, Amount] = dict.fromkeys(snapshot.fabrics, ZERO)
        self.group_used: defaultdict[int, PerFabric] = defaultdict(dict)  # group -> its use (PerFabric)
        # GPUs (milli) each identity, each member of a team ((team, owner)) and each queue on each fabric
        # ((queue, fabric)) holds: kept only where the snapshot has a cap or a reservation they are read for (a
        # member's or an identity's limit, a queue's share, an identity's reservation).
        self.people = bool(
            snapshot.owner_limits
            or snapshot.member_limits
            or snapshot.owner_reservations
            or any(q.gpu_share is not None for q in snapshot.queues.values())
        )
        self.owner_used: defaultdict[int, int] = defaultdict(int)
        self.member_used: defaultdict[tuple[int, int], int] = defaultdict(int)
        self.queue_used: defaultdict[tuple[int, int], int] = defaultdict(int)
        self.reserved: dict[int, PerFabric] = {}  # group -> its reservations (PerFabric)
        self.limit: dict[int, PerFabric] = {}  # group -> its limits (PerFabric)
        # amount() inlined: one per quota, there may be thousands. Most quotas share a few amounts: each is kept
        # once.
        shared: dict[Amount, Amount] = {}
        for (group_id, fabric_id), quota in snapshot.quotas.items():
            r, cap = quota.reservation, quota.limit
            reserved = (r.gpus_milli, r.cpus_milli, r.memory_mib)
            limit = (cap.gpus_milli, cap.cpus_milli, cap.memory_mib)
            self.reserved.setdefault(group_id, {})[fabric_id] = shared.setdefault(reserved, reserved)
            self.limit.setdefault(group_id, {})[fabric_id] = shared.setdefault(limit, limit)
        self.sharing = {fid: f.gpu_sharing for fid, f in snapshot.fabrics.items()}
        self.lineages: dict[int, tuple[int, ...]] = {}  # group -> (group, its department, ...)
        self.parents = snapshot.parents
        for job in snapshot.running:
            if job.fabric_id in self.used:
                self.take(job, job.fabric_id, need_on(job, self.sharing[job.fabric_id]))

    def used_at(self, group_id: int, fabric_id: int | None) -> Amount:
        """What the group (and the teams below it) holds on the fabric; None: across all fabrics."""
        return self.group_used[group_id].get(fabric_id, ZERO)

    def limit_at(self, group_id: int, fabric_id: int | None) -> Amount | None:
        """The group's limit on the fabric (None: across all fabrics), or None where it has none."""
        limits = self.limit.get(group_id)
        return None if limits is None else limits.get(fabric_id)

    def reserved_at(self, group_id: int, fabric_id: int) -> Amount:
        """The group's reservation on the fabric (ZERO where it has none)."""
        reserved = self.reserved.get(group_id)
        return ZERO if reserved is None else reserved.get(fabric_id, ZERO)

    def free(self, fabric_id: int) -> Amount:
        return sub(self.capacity[fabric_id], self.used[fabric_id])

    def hold(self, fabric_id: int, need: Amount) -> None:
        self.held[fabric_id] = add(self.held[fabric_id], need)

    def lineage(self, group_id: int) -> tuple[int, ...]:
        """The group and the departments above it, nearest first (a cycle, refused by the admin, stops)."""
        found = self.lineages.get(group_id)
        if found is None:
            chain = [group_id]
            parent = self.parents.get(group_id)
            while parent is not None and parent not in chain:
                chain.append(parent)
                parent = self.parents.get(parent)
            found = self.lineages[group_id] = tuple(chain)
        return found

    def owed_within(self, group_id: int, fabric_id: int, need: Amount) -> int | None:
        """The nearest level (the team, or a department above it) whose unused reservation on the fabric holds
        `need`: work there is owed, not borrowed. None when no level's does."""
        for level in self.lineage(group_id):
            if self.within_reservation(level, fabric_id, need):
                return level
        return None

    def within_reservation(self, group_id: int, fabric_id: int, need: Amount) -> bool:
        """Whether `need` keeps the group within its reservation in every resource that has one."""
        reserved = self.reserved_at(group_id, fabric_id)
        g, c, m = reserved
        if not (g or c or m):
            return False
        used = self.group_used[group_id].get(fabric_id, ZERO)
        # Unrolled over the three resources (the hot path of both passes): each one reserved must hold `need`.
        return (
            (not g or used[0] + need[0] <= g)
            and (not c or used[1] + need[1] <= c)
            and (not m or used[2] + need[2] <= m)
        )

    def within_limits(
        self,
        job: Job,
        fabric_id: int,
        need: Amount,
        owner_limit: int | None,
        member_limit: int | None = None,
        queue_cap: int | None = None,
    ) -> bool:
        """Whether `need` keeps every cap: the team's on the fabric and across fabrics, its member's (GPUs one
        person may hold), the queue's share of the fabric, and an agent identity's own limit."""
        g = job.group_id
        for level in self.lineage(g):
            limits = self.limit.get(level)
            if limits is None:
                continue
            used_at = self.group_used[level]
            for where in (fabric_id, None):
                limit = limits.get(where)
                if limit is not None:
                    used = used_at.get(where, ZERO)
                    if used[0] + need[0] > limit[0] or used[1] + need[1] > limit[1] or used[2] + need[2] > limit[2]:
                        return False
        if need[0]:
            if member_limit is not None and self.member_used[g, job.owner_id] + need[0] > member_limit:
                return False
            if queue_cap is not None and self.queue_used[job.queue_id, fabric_id] + need[0] > queue_cap:
                return False
        return owner_limit is None or self.owner_used[job.owner_id] + need[0] <= owner_limit

    def take(self, job: Job, fabric_id: int, need: Amount) -> None:
        self.move(job, fabric_id, need, 1)

    def give(self, job: Job, fabric_id: int, need: Amount) -> None:
        self.move(job, fabric_id, need, -1)

    def move(self, job: Job, fabric_id: int, need: Amount, sign: int) -> None:
        """The job takes `need` on the fabric (sign 1) or gives it back (sign -1), at every level above it too."""
        g = job.group_id
        d0, d1, d2 = sign * need[0], sign * need[1], sign * need[2]
        used = self.used[fabric_id]
        self.used[fabric_id] = (used[0] + d0, used[1] + d1, used[2] + d2)
        group_used = self.group_used
        for level in self.lineages.get(g) or self.lineage(g):
            at = group_used[level]
            used = at.get(fabric_id, ZERO)
            at[fabric_id] = (used[0] + d0, used[1] + d1, used[2] + d2)
            used = at.get(None, ZERO)
            at[None] = (used[0] + d0, used[1] + d1, used[2] + d2)
        if self.people:
            self.owner_used[job.owner_id] += d0
            self.member_used[g, job.owner_id] += d0
            self.queue_used[job.queue_id, fabric_id] += d0

    def queue_cap(self, share: int | None, fabric_id: int) -> int | None:
        """The GPUs (milli) a queue with this share of a fabric may hold there; None: no cap."""
        return None if share is None else self.capacity[fabric_id][0] * share // 100
