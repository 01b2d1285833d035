"""Route on the soonest start: a job tries its targets in the order they would start it, by what each fabric
has free now (Snapshot.live), not only in its queue's order.

For each job, each target gets an expected start:
- now, where the fabric has no live observation (a fabric that keeps no queue of its own, or whose answer is
  stale: Gridlane's ledger alone decides, as before), or where its live room holds the job;
- else the fabric's own estimate (Slurm's `squeue --start` for work pending there), never before now;
- else Gridlane's own estimate: the step profile of the fabric's live room now and Gridlane's running (and this
  cycle's admitted) work there ending at its runtime limits, or learned runtimes where the snapshot has them
  (estimates.py): the earliest time the job's whole request stays free for its runtime. Others' work on the
  fabric is taken to hold what it holds (Gridlane does not know when it ends), so this is what Gridlane's own
  work alone frees; a look, holding nothing;
- else unknown, after every target with a start.
Targets with the same expected start keep their queue's order (a stable sort), so a queue over fabrics that all
have room behaves exactly as before. A request that names a GPU type goes only to targets that have it (a target
without a live observation is taken at its word: IT's declaration).

Invariants: live state decides only where and when, never whether: the reordered route has the same targets and
needs (less those without the named type), and every pass (reservations, limits, fair share, gangs) reads it as
before. Live room is used up within a cycle by what the cycle admits on that fabric, and before the cycle by
Gridlane's work sent there after the observation (portal/worker/live.py).
"""

from __future__ import annotations

from datetime import UTC, datetime

from fabrics.base import Resources
from fabrics.live import FreeNow
from scheduler.cycle import Cycle
from scheduler.estimates import Profile
from scheduler.ledger import amount, need_on
from scheduler.model import Job, Snapshot
from scheduler.routes import Route, Routes

NOW, ESTIMATED, OWN, UNKNOWN = 0, 1, 2, 3
_NO_TIME = datetime.min.replace(tzinfo=UTC)


class LiveRoutes(Routes):
    """Routes in soonest-start order (see the module docstring); installed on a cycle only where some fabric has
    a live observation, so that a cycle without one costs nothing more."""

    __slots__ = ("_cycle", "_free", "_profiles", "_seen")

    def __init__(self, cycle: Cycle) -> None:
        super().__init__(cycle.s, cycle.ledger.sharing)
        self._cycle = cycle
        live = cycle.s.live
        self._free: dict[int, Resources] = {fid: f.free for fid, f in live.items() if fid in cycle.s.fabrics}
        self._seen: dict[int, int] = dict.fromkeys(self._free, 0)  # admissions on each fabric already taken off
        self._profiles: dict[int, tuple[int, Profile]] = {}  # fabric -> (its admissions then, Gridlane's profile)

    def of(self, job: Job) -> Route:
        route = super().of(job)
        targets = route.targets
        gpu_type = job.gpu_type
        if gpu_type:
            live = self._cycle.s.live
            targets = tuple((f, n) for f, n in targets if f not in live or gpu_type in live[f].types())
        if len(targets) > 1:
            self._catch_up()
            keys = [self._key(fid, job, gpu_type) for fid, _ in targets]
            if any(keys):
                order = sorted(range(len(targets)), key=keys.__getitem__)
                targets = tuple(targets[i] for i in order)
        return route if targets is route.targets else route._replace(targets=targets)

    def _key(self, fid: int, job: Job, gpu_type: str) -> tuple[int, datetime]:
        key = start_key(self._cycle.s.live.get(fid), self._free.get(fid), job, gpu_type)
        if key[0] == UNKNOWN:
            when = self._own_estimate(fid, job)
            if when is not None:
                return (OWN, when)
        return key

    def _own_estimate(self, fid: int, job: Job) -> datetime | None:
        """Gridlane's own estimate of when the fabric would start the job (see the module docstring); the profile
        is made once per fabric and again only after the cycle admits more there."""
        cycle = self._cycle
        learned = bool(cycle.s.expected_runtimes)
        seen = len(cycle.admitted_on[fid])
        kept = self._profiles.get(fid)
        if kept is None or kept[0] != seen:
            kept = self._profiles[fid] = (
                seen,
                Profile(cycle.now, amount(self._free[fid]), cycle.releases(fid, learned)),
            )
        runtime = cycle.runtime_of(job) if learned else job.runtime_limit_s
        return kept[1].peek(need_on(job, cycle.ledger.sharing[fid]), cycle.span(runtime))

    def _catch_up(self) -> None:
        """Take what the cycle admitted on each observed fabric since the last look off its live room."""
        cycle = self._cycle
        for fid, seen in self._seen.items():
            admitted = cycle.admitted_on.get(fid)
            if admitted and len(admitted) > seen:
                taken = sum((job.total for job in admitted[seen:]), Resources())
                self._free[fid] = self._free[fid] - taken
                self._seen[fid] = len(admitted)


def start_key(live: FreeNow | None, free: Resources | None, job: Job, gpu_type: str = "") -> tuple[int, datetime]:
    """Sorts a target by when it would start the job (see the module docstring)."""
    if live is None or free is None:
        return (NOW, _NO_TIME)
    room = FreeNow(live.pools, free, live.largest, live.next_start, live.largest_by_type, live.free_by_type)
    if room.room_for(job.per_node, job.nodes, gpu_type):
        return (NOW, _NO_TIME)
    if live.next_start is not None:
        return (ESTIMATED, live.next_start)
    return (UNKNOWN, _NO_TIME)


def expected_start(snapshot: Snapshot, job: Job, fid: int) -> tuple[datetime | None, str]:
    """When the fabric would start the job, and why, in words (for the workload page): None when unknown."""
    fabric = snapshot.fabrics[fid]
    live = snapshot.live.get(fid)
    if live is None:
        return snapshot.now, f"{fabric.name} is planned with its declared capacity"
    gpu_type = job.gpu_type
    if gpu_type and gpu_type not in live.types():
        return None, f"{fabric.name} has no {gpu_type} GPUs"
    if live.room_for(job.per_node, job.nodes, gpu_type):
        return snapshot.now, f"{fabric.name} has room for it now ({_gpus(live, gpu_type)} free)"
    said = f"{fabric.name} is full now ({_gpus(live, gpu_type)} free)"
    if live.next_start is not None:
        when = max(snapshot.now, live.next_start)
        return when, f"{said}; it plans to start the work waiting there by {when:%H:%M} UTC"
    own = own_estimate(snapshot, job, fid)
    if own is not None:
        return own, (
            f"{said} and gives no estimate; by the runtime limits of Gridlane's work running there, Gridlane "
            f"expects it to start there by {own:%H:%M} UTC"
        )
    return None, f"{said} and gives no estimate"


def own_estimate(snapshot: Snapshot, job: Job, fid: int) -> datetime | None:
    """Gridlane's own estimate for one target outside a cycle (the workload page), by the same rule as the cycle's
    (see the module docstring); None without a live observation or where its running work frees too little."""
    live = snapshot.live.get(fid)
    if live is None:
        return None
    cycle = Cycle(snapshot)
    learned = bool(snapshot.expected_runtimes)
    profile = Profile(snapshot.now, amount(live.free), cycle.releases(fid, learned))
    runtime = cycle.runtime_of(job) if learned else job.runtime_limit_s
    return profile.peek(need_on(job, cycle.ledger.sharing[fid]), cycle.span(runtime))


def _gpus(live: FreeNow, gpu_type: str) -> str:
    count = live.gpus_free(gpu_type)
    kind = f"{gpu_type} GPU" if gpu_type else "GPU"
    return f"{count} {kind}{'' if count == 1 else 's'}"
