"""Caps: why a limit holds a job back on a fabric, or None where every limit lets it in.

The caps are judged in this order, and the first over gives the reason: each level of the job's team (the team,
then each department above it, nearest first), its limit on the fabric before its limit across fabrics; then,
past the team's, a member's (GPUs one person of the team may hold; not for agent identities), the queue's share
of the fabric, and an agent identity's own limit. A limit over which work would go is never crossed by an
admission; work already above one (a limit lowered later) stays.
"""

from __future__ import annotations

from scheduler import reasons
from scheduler.ledger import ZERO, Amount, Ledger, PerFabric
from scheduler.model import Job, Snapshot
from scheduler.reasons import Reason

# Why a job waits: the reason, the fabric it waits for capacity on (where a start can be estimated) or None, and
# the limit it waits under ((group, fabric or None), where a start can be estimated from the team's running
# work) or None. A plain tuple: the borrowing pass makes one for each target of most of the work it looks at.
Why = tuple[Reason, int | None, tuple[int, int | None] | None]

# A level of a team as reason() reads it: the level, its depth (0: the team), its limit across fabrics or None,
# its limits and its use by fabric (the ledger's own maps, read as they change).
_Level = tuple[int, int, Amount | None, PerFabric, PerFabric]


class Limits:
    """The caps of one cycle's snapshot, over the ledger's use as it changes."""

    __slots__ = ("_ledger", "_levels", "_people", "_snapshot")

    def __init__(self, snapshot: Snapshot, ledger: Ledger) -> None:
        self._snapshot = snapshot
        self._ledger = ledger
        self._levels: dict[int, tuple[_Level, ...]] = {}  # team -> its levels, nearest first
        # Whether any cap below the team's applies in this snapshot: a member's, a queue's share, an identity's.
        self._people = bool(
            snapshot.owner_limits
            or snapshot.member_limits
            or any(q.gpu_share is not None for q in snapshot.queues.values())
        )

    def reason(self, job: Job, fid: int, need: Amount) -> Why | None:
        """Why a cap holds the job back on this fabric (the first that does, in the module's order), or None."""
        levels = self._levels.get(job.group_id)
        if levels is None:
            levels = self._levels[job.group_id] = self._levels_of(job.group_id)
        n0, n1, n2 = need
        for level, depth, across, limits, used_at in levels:
            limit = limits.get(fid)
            if limit is not None:
                used = used_at.get(fid, ZERO)
                if used[0] + n0 > limit[0] or used[1] + n1 > limit[1] or used[2] + n2 > limit[2]:
                    return _at_limit((level, fid), depth, self._snapshot.fabrics[fid].name, used, limit, need)
            if across is not None:
                used = used_at.get(None, ZERO)
                if used[0] + n0 > across[0] or used[1] + n1 > across[1] or used[2] + n2 > across[2]:
                    return _at_limit((level, None), depth, "", used, across, need)
        if not self._people:
            return None
        return self._person_reason(job, fid, need)

    def _levels_of(self, group_id: int) -> tuple[_Level, ...]:
        ledger = self._ledger
        return tuple(
            (level, depth, ledger.limit_at(level, None), ledger.limit.get(level) or {}, ledger.group_used[level])
            for depth, level in enumerate(ledger.lineage(group_id))
        )

    def _person_reason(self, job: Job, fid: int, need: Amount) -> Why | None:
        """Past the team's limits: a member's, a queue's share and an agent identity's own (None: all hold)."""
        ledger, s = self._ledger, self._snapshot
        g = job.group_id
        owner_limit = s.owner_limits.get(job.owner_id)
        member_limit = None if job.owner_id in s.agents else s.member_limits.get(g)
        queue = s.queues.get(job.queue_id)
        queue_cap = ledger.queue_cap(queue.gpu_share if queue else None, fid)
        if ledger.within_limits(job, fid, need, owner_limit, member_limit, queue_cap):
            return None  # (the team's limits hold: reason() judged them)
        if member_limit is not None and ledger.member_used[g, job.owner_id] + need[0] > member_limit:
            return (reasons.member_at_limit(ledger.member_used[g, job.owner_id], member_limit, need[0]), None, None)
        in_queue = ledger.queue_used[job.queue_id, fid]
        if queue is not None and queue_cap is not None and in_queue + need[0] > queue_cap:
            fabric = s.fabrics[fid].name
            share = reasons.queue_at_share(queue.slug, fabric, queue.gpu_share or 0, in_queue, queue_cap, need[0])
            return (share, None, None)
        owner = (ledger.owner_used[job.owner_id], owner_limit or 0, need[0])
        return (reasons.owner_at_limit(*owner), None, None)


def _at_limit(key: tuple[int, int | None], depth: int, where: str, used: Amount, limit: Amount, need: Amount) -> Why:
    at_limit = reasons.group_at_limit if depth == 0 else reasons.department_at_limit
    return (at_limit(where, used, limit, need), None, key)
