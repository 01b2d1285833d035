"""The dry run's incremental placement: one more job placed into a snapshot whose cycle was decided once, without
deciding it again. It answers what decide() on the snapshot plus the job answers (scheduler/dryrun.py `place`),
or None where it cannot be sure, and the caller takes the other paths (scheduler/dryrun_fast.py).

Why it can: decide() walks its line in order (priority.ordered), and a job that changes nothing for the work
behind it is decided on the state the work ahead of it left. So, where the job
- is not owed (its team is not within its reservation on any healthy target even before the cycle, no agent
  reservation nor department can make it owed, and nothing is preempted in the cycle: its team's use only grows),
  so that the first pass runs as it did without it;
- meets, in the second pass, a state that nothing behind its place in the line changed: no work behind it was
  admitted on its targets, by its team (or a level above it), by its owner or in its queue, and no plan of its
  targets changed behind it (Known records the line index of each such change as the cycle runs, decide's Watch);
the job's walk over its targets (borrow.walk) on the cycle's end state finds what it would have found at its
place. Admitted: that target. Waiting: its first target's reason; its place in its queue's line counts the
waiting work ahead of it; and, where it reserves no start (the plans of the targets it is blocked on are full)
nothing behind it changes, so its estimate is the one its fabric's profile gives after the work ahead of it.

It says None (not sure) where the job would be owed, would preempt (a tier that may), would reserve a start,
waits under a limit, is an array element with a % limit, has a GPU type, or where the snapshot routes by live
room or GPU type, holds work for a budget, or its cycle preempted; where its team is new to the snapshot (every
team's default share would move); and where it admits without borrowing being sure.
tests/scheduler/test_dryrun.py holds it to the plain path on random snapshots.

What it earns (bench/bench_dryrun.py, 10,000 waiting, a loaded two-core machine): a shape not seen on the
snapshot placed in 0.2 ms, sure of 40 of 40, against 23 ms on the job's part and 112 ms on the whole; the
cycle is decided once per snapshot (151 ms), with the build, beside the requests.
"""

from __future__ import annotations

import copy
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, overload

from scheduler import reasons
from scheduler.borrow import blocking, walk
from scheduler.cycle import Cycle
from scheduler.decide import decide
from scheduler.dryrun import ADMIT, WAIT, Placement
from scheduler.estimates import MAX_PER_FABRIC, Profile
from scheduler.ledger import Amount, Ledger, need_on
from scheduler.model import Job, Snapshot
from scheduler.priority import line_key
from scheduler.routes import Route, targets

Key = tuple[str, int]  # ("f", fabric), ("g", team or department), ("o", owner), ("q", queue)


class LineKeys(Sequence[tuple[float, datetime, str]]):
    """The line's sort keys, each worked out when a placement's bisection first asks for it: a placement reads
    about log2 of the line's length of them (14 of 10,000), and working out all of them took a third of Known's
    time."""

    def __init__(self, line: list[Job], key: Callable[[Job], tuple[float, datetime, str]]) -> None:
        self.line, self.key = line, key
        self._known: dict[int, tuple[float, datetime, str]] = {}

    def __len__(self) -> int:
        return len(self.line)

    @overload
    def __getitem__(self, i: int) -> tuple[float, datetime, str]: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[tuple[float, datetime, str]]: ...

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        found = self._known.get(i)
        if found is None:
            found = self._known[i] = self.key(self.line[i])  # (two threads may both work one out: the same)
        return found


class Known:
    """One snapshot's cycle, decided once, with what a placement reads of it (see the module docstring)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.start = Ledger(snapshot)  # the ledger before the cycle: running work only
        self.last: dict[Key, int] = {}  # the line index of the last change of each, in the second pass
        self._plans: dict[int, tuple[int, int]] = {}
        self.decisions = decide(snapshot, self)
        c = self.cycle
        self.sure = not (snapshot.live or snapshot.held or c.preempted or any(j.gpu_type for j in snapshot.pending))
        self.key = line_key(snapshot)
        self.keys = LineKeys(self.line, self.key)
        self.groups = {j.group_id for j in snapshot.pending} | {j.group_id for j in snapshot.running}
        # Line indices of waiting work, by queue; and the work waiting on each fabric, in line order.
        self.waiting_in: defaultdict[int, list[int]] = defaultdict(list)
        self.waiting_on: defaultdict[int, list[tuple[int, Job]]] = defaultdict(list)
        for i, job in enumerate(self.line):
            if job.id in c.waiting:
                self.waiting_in[job.queue_id].append(i)
                fid = c.waits_on.get(job.id)
                if fid is not None:
                    self.waiting_on[fid].append((i, job))
        # GPUs each team holds on each fabric once the cycle is done (borrows(): running and admitted work).
        self.holds: defaultdict[tuple[int, int], int] = defaultdict(int)
        admitted = {a.job_id: a.fabric_id for a in self.decisions.admit}
        for job in (*snapshot.running, *(j for j in snapshot.pending if j.id in admitted)):
            fid = job.fabric_id if job.fabric_id is not None else admitted[job.id]
            if fid in snapshot.fabrics:
                self.holds[job.group_id, fid] += need_on(job, snapshot.fabrics[fid].gpu_sharing)[0]

    # -- decide's Watch ----------------------------------------------------------------------------------
    def begin(self, cycle: Cycle, line: list[Job]) -> None:
        self.cycle, self.line = cycle, line
        self.index = {job.id: i for i, job in enumerate(line)}

    def considered(self, job: Job, route: Route) -> None:
        c, i = self.cycle, self.index[job.id]
        if c.admitted and c.admitted[-1].job_id == job.id:
            fid = c.admitted[-1].fabric_id
            self.last["f", fid] = self.last["o", job.owner_id] = self.last["q", job.queue_id] = i
            for level in c.ledger.lineage(job.group_id):
                self.last["g", level] = i
        for fid, _ in route.targets:
            plan = c.plans.get(fid)
            seen = (id(plan), len(plan.starts)) if plan is not None else (0, 0)
            if self._plans.get(fid, (0, 0)) != seen:
                self._plans[fid] = seen
                self.last["f", fid] = i

    # -- one more job ------------------------------------------------------------------------------------
    def place(self, job: Job) -> Placement | None:
        """Where decide() on the snapshot plus the job puts it, or None where this cannot be sure."""
        s, c = self.snapshot, self.cycle
        if not self.sure or job.array_throttle or job.gpu_type or job.group_id not in self.groups:
            return None
        if job.owner_id in s.owner_reservations or s.parents.get(job.group_id) is not None:
            return None
        if c.preempting.get(job.priority) is not None:
            return None
        route = c.routes.of(job)
        within = self.start.within_reservation
        if any(fid in c.healthy and within(job.group_id, fid, need) for fid, need in route.targets):
            return None  # owed
        at = bisect_left(self.keys, self.key(job))  # its place in the line: the work ahead of it
        last = self.last.get
        touched = [("f", fid) for fid, _ in route.targets]
        touched += [("o", job.owner_id), ("q", job.queue_id)]
        touched += [("g", level) for level in c.ledger.lineage(job.group_id)]
        if any(last(key, -1) >= at for key in touched):
            return None  # something behind it changed what it reads
        queue = s.queues.get(job.queue_id)
        first = next(iter(targets(job, queue, s)), None) if queue is not None else None
        place = bisect_left(self.waiting_in[job.queue_id], at) + 1
        if not route.targets:
            reason = reasons.no_target(queue.slug if queue else str(job.queue_id))
            return Placement(WAIT, first, reason, None, place, self._borrows(job, first))
        return self._walked(job, route, at, first, place)

    def _walked(self, job: Job, route: Route, at: int, first: int | None, place: int) -> Placement | None:
        c = self.cycle
        probe = copy.copy(c)  # the end state, read only: an admission is noted, the plans it may take are copies
        admitted: list[int] = []
        probe.admit = lambda _job, fid, _need: admitted.append(fid)  # type: ignore[method-assign,assignment]
        probe.plans = {**c.plans, **{fid: c.plans[fid].copy() for fid, _ in route.targets if fid in c.plans}}
        why = walk(probe, job, route)
        if why is None:
            fid = admitted[0]
            gpus = need_on(job, self.snapshot.fabrics[fid].gpu_sharing)[0]
            if self.holds[job.group_id, fid] + gpus > self.snapshot.quota(job.group_id, fid).reservation.gpus_milli:
                return Placement(ADMIT, fid, borrowing=True)
            return None  # (whether work behind it of its team is admitted as before decides it: not sure)
        if blocking(c, route, why):
            return None  # it would reserve a start: the work behind it may go otherwise
        reason, waits_on, limit_key = why[0]
        if waits_on is None and limit_key is not None:
            return None
        start = self._estimate(job, waits_on, at) if waits_on is not None else None
        return Placement(WAIT, first, reason, start, place, self._borrows(job, first))

    def _estimate(self, job: Job, fid: int, at: int) -> datetime | None:
        """Its estimated start on the fabric it waits for, as waiting.decisions() gives it after the work ahead."""
        ahead = self.waiting_on[fid][: bisect_left(self.waiting_on[fid], (at,))]
        if len(ahead) >= MAX_PER_FABRIC:
            return None
        c = self.cycle
        learned = bool(self.snapshot.expected_runtimes)
        profile = Profile(c.now, c.ledger.free(fid), c.releases(fid, learned))
        sharing = c.ledger.sharing[fid]
        for _, other in ahead:
            runtime = c.runtime_of(other) if learned else other.runtime_limit_s
            profile.earliest(need_on(other, sharing), runtime, c.span(runtime))
        runtime = c.runtime_of(job) if learned else job.runtime_limit_s
        return profile.earliest(need_on(job, sharing), runtime, c.span(runtime))

    def _borrows(self, job: Job, fid: int | None) -> bool:
        """dryrun.borrows() on the decisions with the job waiting: what its team holds there, and the job."""
        s = self.snapshot
        if fid is None or fid not in s.fabrics:
            return False
        need: Amount = need_on(job, s.fabrics[fid].gpu_sharing)
        return self.holds[job.group_id, fid] + need[0] > s.quota(job.group_id, fid).reservation.gpus_milli
