"""The burst autoscaler's decision: which instances to launch for the work that waits, which to terminate.
Pure: no clock (`now` is an argument), no database, no provider.

1. Drop the demand a burst cannot serve or should not: work over its team's limit on the pool, gangs, work no
   instance type can hold, and work the scheduler expects to start on premises within the pool's `burst_after`
   or before an instance could boot (its estimated start, from running work's runtime limits: an instance
   would boot, bill, and find it gone).
2. Place the rest on capacity that is there or on its way (instances launched, booting, idle), so the same
   demand never launches twice.
3. Pack what is left, the largest shapes first, onto new instances: for each shape the type whose price per
   workload placed is lowest, so several small workloads share one larger instance where that is cheaper;
   smaller shapes then fill the room the larger ones left. Within the maximum and both budgets. Work whose
   runtime limit is shorter than an instance takes to boot launches nothing: it takes room on instances
   already there, or waits where it is.
4. Keep the pool's minimum; terminate what never enrolled, what idles past its limit, what idles with no waiting
   work for it while a cheaper type of the pool would hold what arrives next (small work landing on a large
   idle instance would pay the large one's price for its whole run) or while the targets tried before the pool
   have room for all it could take (new work starts there first); move work back on premises: end a busy
   instance whose work may all go back in line, started lately enough that a restart loses little of what it
   saves, when a target tried before the pool has room for it with plenty to spare (a long job that burst at a
   peak does not hold an instance for days while on premises idles); and everything when the month's budget
   would be crossed before the next look.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from fabrics.base import Resources

GIB = 1024


@dataclass(frozen=True, slots=True)
class Waiting:
    """A workload waiting for capacity that the pool could hold."""

    id: str
    group_id: int
    group: str  # the team's name, for the reasons
    need: Resources  # per node
    since: datetime
    nodes: int = 1
    # When the scheduler expects it to start where it waits now (decide()'s estimate); None: no estimate (too far
    # down the line, or nothing running there will free enough), which counts as a long wait.
    expected_start: datetime | None = None
    runtime: timedelta | None = None  # its runtime limit; None: not known (long enough for any instance)


@dataclass(frozen=True, slots=True)
class Offer:
    """An instance type at its price in the pool's market (spot or on-demand), per hour."""

    name: str
    gpus: int
    cpus: int
    memory_mib: int
    price: float

    @property
    def capacity(self) -> Resources:
        return Resources(self.gpus * 1000, self.cpus * 1000, self.memory_mib)


@dataclass(frozen=True, slots=True)
class Work:
    """A workload running on an instance."""

    started: datetime | None  # None: not known
    runtime: timedelta | None  # its runtime limit; None: not known
    requeue: bool  # its queue puts it back in line when its host is lost (the queue's preemptible)


@dataclass(frozen=True, slots=True)
class Live:
    """An instance launched or on its way: `free` is what it can still take, `work` what runs on it."""

    id: str
    instance_type: str
    state: str  # pending, booting, enrolled, busy, idle
    price: float
    free: Resources
    requested_at: datetime
    idle_since: datetime | None = None
    work: tuple[Work, ...] = ()


@dataclass(frozen=True)
class Pool:
    name: str
    min_instances: int = 0
    max_instances: int = 4
    max_idle: timedelta = timedelta(minutes=10)
    boot_timeout: timedelta = timedelta(minutes=15)
    budget_per_hour: float = 0.0
    budget_per_month: float = 0.0
    month_spent: float = 0.0  # what instances cost so far this month
    horizon: timedelta = timedelta(hours=1)  # how far ahead a launch's cost is counted against the month
    # Burst only for work expected to wait longer than this where it waits now: shorter waits end on premises
    # (a launch for them boots, bills, and idles).
    burst_after: timedelta = timedelta(0)
    # How long an instance takes from launch to enrolled (the worker's median of the pool's recent boots):
    # work that starts on premises sooner, or ends sooner, is no reason to launch one.
    boot: timedelta = timedelta(0)


@dataclass(frozen=True)
class Launch:
    instance_type: str
    alternatives: tuple[str, ...]  # other types that hold the same work, cheapest first (capacity fallback)
    workload_ids: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Terminate:
    id: str
    reason: str


@dataclass(frozen=True)
class Plan:
    launch: tuple[Launch, ...] = ()
    terminate: tuple[Terminate, ...] = ()
    held: tuple[str, ...] = ()  # demand left waiting, and why (budget, maximum, no type holds it)
    covered: int = 0  # waiting workloads placed on instances already there or on their way


COMING = ("pending", "booting")
# Work on an instance goes back on premises only while restarting it there loses at most this share of the time
# it would still hold the instance (by its runtime limit): one hour run of a 21-hour job, not ten of a twelve.
MOVE_LOSS = 0.05
# ... and only into room on premises of at least this many times what it holds: the rest of the room is left
# for the work that arrives next, which would otherwise wait for an instance to boot.
MOVE_ROOM = 2
STARTING_OR_IDLE = ("pending", "booting", "enrolled", "idle")


def plan(
    now: datetime,
    pool: Pool,
    offers: Sequence[Offer],
    live: Sequence[Live],
    waiting: Sequence[Waiting],
    headroom: Mapping[int, Resources] | None = None,
    elsewhere: Sequence[Resources] = (),
) -> Plan:
    """What to launch and terminate now, in the module's four steps. `headroom`: each team's room under its
    limits on the pool (a team absent from it has no limit there). `elsewhere`: the room free now on each fabric
    that the pool's queues try before it (none known: idle instances wait out the pool's `max_idle`)."""
    # Instances that never enrolled within the boot timeout are no capacity at all.
    alive, terminate = _enrolled_in_time(now, pool, live)
    # 1. What a burst can serve.
    offers = sorted(offers, key=lambda o: (o.price, o.name))
    shapes, held = _shapes(now, pool, waiting, offers, headroom or {})
    # 2. Capacity there or on its way takes the demand first.
    wanted, covered = _place_on_live(shapes, alive)
    # 3. New instances for the rest, within the maximum and the budgets; none for work shorter than a boot.
    held.extend(_drop_brief(shapes, pool))
    capacities = [(o, o.capacity) for o in offers]
    packing = _Packing(pool, capacities, rate=sum(inst.price for inst in alive), count=len(alive))
    held.extend(packing.pack(shapes))
    launches = [b.launch(now, capacities) for b in packing.bins]
    # 4. The pool's minimum, then what has been idle too long, then busy work that may go back on premises.
    launches.extend(packing.keep_minimum(offers[0] if offers else None))
    keep = len(alive) - pool.min_instances
    idle = _idle_to_end(now, pool, alive, wanted, offers, elsewhere, keep)
    terminate.extend(idle)
    gone = {t.id for t in terminate}
    terminate.extend(_moves_back(now, alive, wanted | gone, offers, elsewhere, keep - len(idle)))
    # The month's budget: stop everything before the next look could cross it.
    live_rate = sum(i.price for i in alive)
    if pool.month_spent + live_rate * pool.horizon.total_seconds() / 3600 > pool.budget_per_month:
        gone = {t.id for t in terminate}
        spent = f"{pool.month_spent:.2f} of the month's budget of {pool.budget_per_month:.2f} spent"
        terminate.extend(Terminate(i.id, f"{spent}: stopping before it is crossed") for i in alive if i.id not in gone)
        launches = []
    return Plan(tuple(launches), tuple(terminate), tuple(held), covered)


# -- the steps -------------------------------------------------------------------------------------------
def _enrolled_in_time(now: datetime, pool: Pool, live: Sequence[Live]) -> tuple[list[Live], list[Terminate]]:
    """The instances that are capacity (enrolled, or still within the boot timeout), and the end of the rest."""
    alive: list[Live] = []
    terminate: list[Terminate] = []
    for inst in live:
        if inst.state in COMING and now - inst.requested_at > pool.boot_timeout:
            minutes = int(pool.boot_timeout.total_seconds() // 60)
            terminate.append(Terminate(inst.id, f"never enrolled within the boot timeout of {minutes} min"))
        else:
            alive.append(inst)
    return alive, terminate


def _place_on_live(shapes: list[_Shape], alive: list[Live]) -> tuple[set[str], int]:
    """Place the waiting work, largest shapes first, on the room of instances there or on their way (taken out of
    its shape). Returns the instances that took any, and how many workloads they took."""
    room = {inst.id: inst.free for inst in alive}
    wanted: set[str] = set()
    covered = 0
    for shape in shapes:
        for inst in alive:
            if not shape.jobs:
                break
            k = min(_fit(room[inst.id], shape.need), len(shape.jobs))
            if k:
                del shape.jobs[:k]
                room[inst.id] = room[inst.id] - shape.need.times(k)
                wanted.add(inst.id)
                covered += k
    return wanted, covered


def _drop_brief(shapes: list[_Shape], pool: Pool) -> list[str]:
    """Take out of each shape the work that ends sooner than an instance boots; why it waits, where any did."""
    brief = 0
    for shape in shapes:
        long_enough = [j for j in shape.jobs if j.runtime is None or j.runtime >= pool.boot]
        brief += len(shape.jobs) - len(long_enough)
        shape.jobs = long_enough
    if not brief:
        return []
    return [f"{brief} waiting workloads run for less than an instance takes to boot "
            f"({_minutes(pool.boot)} min): not launching for them"]  # fmt: skip


class _Packing:
    """New instances for the work left, within the pool's maximum and both budgets: `rate` and `count` are the
    pool's hourly price and instances, those launched here included."""

    def __init__(self, pool: Pool, capacities: list[tuple[Offer, Resources]], rate: float, count: int) -> None:
        self.pool, self.capacities, self.rate, self.count = pool, capacities, rate, count
        self.bins: list[_Bin] = []

    def pack(self, shapes: list[_Shape]) -> list[str]:
        """Largest shapes first: fill the room new instances left for smaller shapes, then launch, for each
        shape, the type whose price per workload placed is lowest. Returns why work is left waiting."""
        open_bins: list[_Bin] = []  # bins with room left for the smallest shape
        smallest = _smallest(shapes)
        stopped: dict[str, list[int]] = {}  # why no more instances start -> [workloads]
        why = ""
        teams: set[str] = set()
        for shape in shapes:
            for b in open_bins:
                if not shape.jobs:
                    break
                k = min(_fit(b.free, shape.need), len(shape.jobs))
                if k:
                    b.take(shape, k)
            if smallest is not None:
                open_bins = [b for b in open_bins if smallest.fits_in(b.free)]
            why = why or self._launch_for(shape, smallest, open_bins)
            if shape.jobs:
                stopped.setdefault(why, [0])[0] += len(shape.jobs)
                teams |= shape.all_groups
        if not why:
            return []
        who = _teams(teams)
        return [f"{n} waiting workloads of {who} wait: {reason}" for reason, (n,) in stopped.items()]

    def _launch_for(self, shape: _Shape, smallest: Resources | None, open_bins: list[_Bin]) -> str:
        """Launch instances for the shape's jobs until none are left; why no more may start, where that stops
        it (empty: nothing did)."""
        pool = self.pool
        fitting = [(o, f) for o, cap in self.capacities if (f := _fit(cap, shape.need))]
        while shape.jobs:
            n = len(shape.jobs)
            choices = sorted(((o.price / min(f, n), o.price, o, f) for o, f in fitting), key=lambda c: c[:2])
            if self.count >= pool.max_instances:
                return f"the pool is at its maximum of {pool.max_instances} instances"
            chosen = next((c for c in choices if _affordable(pool, self.rate, c[2].price)), None)
            if chosen is None:
                return _over_budget(pool, self.rate, choices[0][2])
            offer, fits = chosen[2], chosen[3]
            b = _Bin(offer, offer.capacity)
            b.take(shape, min(fits, n))
            self.bins.append(b)
            if smallest is not None and smallest.fits_in(b.free):
                open_bins.append(b)
            self.rate += offer.price
            self.count += 1
        return ""

    def keep_minimum(self, cheapest: Offer | None) -> list[Launch]:
        """Launches of the cheapest type up to the pool's minimum, within the budgets."""
        pool = self.pool
        launches = []
        while cheapest is not None and self.count < pool.min_instances and _affordable(pool, self.rate, cheapest.price):
            launches.append(Launch(cheapest.name, (), (), f"launched {cheapest.name} to keep the pool's minimum of "
                                                          f"{pool.min_instances} instances"))  # fmt: skip
            self.rate += cheapest.price
            self.count += 1
        return launches


def _idle_to_end(
    now: datetime,
    pool: Pool,
    alive: list[Live],
    wanted: set[str],
    offers: Sequence[Offer],
    elsewhere: Sequence[Resources],
    keep: int,
) -> list[Terminate]:
    """Idle instances no waiting work wants, longest idle first, at most `keep` of them: past the pool's
    `max_idle`, or while a cheaper type would hold what arrives next, or while on premises has room for all
    they could take."""
    idle = sorted(
        (i for i in alive if i.state in ("enrolled", "idle") and i.idle_since is not None and i.id not in wanted),
        key=lambda i: i.idle_since or now,
    )
    terminate: list[Terminate] = []
    for inst in idle:
        since = inst.idle_since or now
        if len(terminate) >= keep:
            break
        if now - since >= pool.max_idle:
            reason = f"idle for {_minutes(now - since)} min, past the pool's limit of {_minutes(pool.max_idle)} min"
        elif (cheaper := _cheaper(inst, offers)) is not None:
            # Kept idle, it takes whatever arrives next, small work included, and bills its own price for that
            # work's whole run: the idle capacity that waits for work to come is the cheapest type's, and a larger
            # type launches again for work that needs it.
            reason = (f"idle with no waiting work for it, and {cheaper.name} holds what arrives next for less "
                      f"({cheaper.price:.2f}/h against {inst.price:.2f}/h)")  # fmt: skip
        elif any(inst.free.fits_in(room) for room in elsewhere):
            # No waiting work fits it (that would have made it wanted), and what arrives next of its size starts
            # on premises first: waiting out max_idle would only bill.
            reason = "idle with no waiting work for it, and on premises has room for all it could take"
        else:
            continue
        terminate.append(Terminate(inst.id, reason))
    return terminate


def _moves_back(
    now: datetime,
    alive: list[Live],
    passed: set[str],
    offers: Sequence[Offer],
    elsewhere: Sequence[Resources],
    keep: int,
) -> list[Terminate]:
    """Busy instances whose work restarts on premises for little, at most `keep` of them (none of `passed`): it
    goes back in line, where on premises is tried first, and the instance stops billing for the rest of its run."""
    rooms = list(elsewhere)
    terminate: list[Terminate] = []
    for inst in alive:
        if len(terminate) >= keep:
            break
        if inst.id in passed or not inst.work:
            continue
        move = _movable(now, inst, offers, rooms)
        if move is not None:
            terminate.append(move)
    return terminate


# -- the pieces ------------------------------------------------------------------------------------------
@dataclass
class _Shape:
    need: Resources
    jobs: list[Waiting] = field(default_factory=list)
    all_groups: set[str] = field(default_factory=set)


@dataclass
class _Bin:
    offer: Offer
    free: Resources
    jobs: list[Waiting] = field(default_factory=list)

    def take(self, shape: _Shape, k: int) -> None:
        self.jobs.extend(shape.jobs[:k])
        del shape.jobs[:k]
        self.free = self.free - shape.need.times(k)

    def launch(self, now: datetime, capacities: Sequence[tuple[Offer, Resources]]) -> Launch:
        used = self.offer.capacity - self.free
        others = tuple(o.name for o, cap in capacities if o.name != self.offer.name and used.fits_in(cap))
        who = _teams({j.group for j in self.jobs})
        gpus = sum(j.need.gpus_milli for j in self.jobs) / 1000
        oldest = min(j.since for j in self.jobs)
        minutes = max(0, int((now - oldest).total_seconds() // 60))
        n = len(self.jobs)
        work = "workload" if n == 1 else "workloads"
        reason = f"launched {self.offer.name} for {n} waiting {work} of {who}: {gpus:g} GPUs pending for {minutes} min"
        return Launch(self.offer.name, others, tuple(j.id for j in self.jobs), reason)


def _cheaper(inst: Live, offers: Sequence[Offer]) -> Offer | None:
    """The cheapest type that costs less than the idle instance and holds a unit of what it holds (a GPU; for
    an instance without GPUs, a CPU). None when it is of the cheapest such type already, and when part of it is
    spoken for (work admitted to the pool that an agent has yet to take may be bound for it) or its type is not
    offered now."""
    own = next((o for o in offers if o.name == inst.instance_type), None)
    if own is None or not own.capacity.fits_in(inst.free):
        return None
    holding = [o for o in offers if o.price < inst.price and (o.gpus > 0 if own.gpus else o.cpus > 0)]
    return min(holding, key=lambda o: (o.price, o.name), default=None)


def _movable(now: datetime, inst: Live, offers: Sequence[Offer], rooms: list[Resources]) -> Terminate | None:
    """Ends the instance when all its work may go back in line, started lately enough that restarting it loses
    at most MOVE_LOSS of what it saves, and fits MOVE_ROOM times over in the free room of a fabric tried before
    the pool (that room is then taken). None when it stays."""
    own = next((o for o in offers if o.name == inst.instance_type), None)
    if own is None:
        return None
    held = own.capacity - inst.free
    lost = timedelta(0)
    saved = timedelta(0)
    for work in inst.work:
        if not work.requeue or work.started is None or work.runtime is None:
            return None
        ran = now - work.started
        left = work.runtime - ran
        if ran > left * MOVE_LOSS:
            return None
        lost, saved = max(lost, ran), max(saved, left)
    for k, room in enumerate(rooms):
        if held.times(MOVE_ROOM).fits_in(room):
            rooms[k] = room - held
            n = len(inst.work)
            what = "workload" if n == 1 else "workloads"
            reason = (f"on premises has room for its {n} {what}: back in line to restart there ({_minutes(lost)} "
                      f"min run lost, up to {_minutes(saved)} min on this instance saved)")  # fmt: skip
            return Terminate(inst.id, reason)
    return None


def _fit(room: Resources, need: Resources) -> int:
    """How many of `need` fit in `room` (a need of nothing in a resource does not limit it)."""
    best = 1 << 30
    if need.gpus_milli > 0:
        best = room.gpus_milli // need.gpus_milli
    if need.cpus_milli > 0:
        best = min(best, room.cpus_milli // need.cpus_milli)
    if need.memory_mib > 0:
        best = min(best, room.memory_mib // need.memory_mib)
    return max(0, best)


def _smallest(shapes: Sequence[_Shape]) -> Resources | None:
    if not shapes:
        return None
    return Resources(min(s.need.gpus_milli for s in shapes), min(s.need.cpus_milli for s in shapes),
                     min(s.need.memory_mib for s in shapes))  # fmt: skip


def _teams(names: set[str]) -> str:
    ordered = sorted(names)
    return f"team {ordered[0]}" if len(ordered) == 1 else f"teams {', '.join(ordered)}"


# CPUs and GiB are rounded up to the next step of this ladder (at most a third more than asked), so that
# 10,000 waiting workloads make a few hundred shapes, and packing them is quick.
LADDER = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)


def _step_up(value: int) -> int:
    for step in LADDER:
        if value <= step:
            return step
    return value


def _whole(need: Resources) -> Resources:
    """Whole CPUs and GiB; GPUs as asked, fractions included: an agent claims work while the GPU milli it
    declared cover what its jobs ask, so fractional work shares devices on an instance too."""
    return Resources(need.gpus_milli, -(-need.cpus_milli // 1000) * 1000, -(-need.memory_mib // GIB) * GIB)


def _key(need: Resources) -> tuple[int, int, int]:
    """Shapes group needs of the same GPUs whose CPUs and GiB are on the same step of the ladder; a shape then
    asks for the most any of its members does."""
    return need.gpus_milli, _step_up(need.cpus_milli // 1000), _step_up(need.memory_mib // GIB)


def _minutes(length: timedelta) -> int:
    return int(length.total_seconds() // 60)


def burst_after(pool: Pool) -> timedelta:
    """How long work may be expected to wait where it is before it bursts: the pool's `burst_after`, and never
    less than a boot (an instance launched for it would come up after it started elsewhere)."""
    return max(pool.burst_after, pool.boot)


def starts_soon(now: datetime, pool: Pool, job: Waiting) -> bool:
    """Whether the work is expected to start where it waits within `burst_after(pool)`: no burst for it."""
    return job.expected_start is not None and job.expected_start - now <= burst_after(pool)


def _shapes(
    now: datetime, pool: Pool, waiting: Sequence[Waiting], offers: Sequence[Offer], headroom: Mapping[int, Resources]
) -> tuple[list[_Shape], list[str]]:
    """The burstable demand grouped by shape, largest first, oldest first within a shape."""
    room = dict(headroom)
    soon = 0
    groups: dict[tuple[int, int, int], _Shape] = {}
    at_limit: defaultdict[str, int] = defaultdict(int)
    too_big: defaultdict[Resources, int] = defaultdict(int)
    gangs = 0
    capacities = [o.capacity for o in offers]
    known: dict[Resources, tuple[Resources, tuple[int, int, int]]] = {}
    for job in sorted(waiting, key=lambda j: j.since):
        if job.nodes > 1:
            gangs += 1
            continue
        if starts_soon(now, pool, job):
            soon += 1
            continue
        if job.group_id in room:
            left = room[job.group_id]
            if not job.need.fits_in(left):
                at_limit[job.group] += 1
                continue
            room[job.group_id] = left - job.need
        seen = known.get(job.need)
        if seen is None:  # waiting work comes in few sizes: each is worked out once
            whole = _whole(job.need)
            seen = known[job.need] = (whole, _key(whole))
        need, key = seen
        shape = groups.get(key)
        if shape is None:
            shape = groups[key] = _Shape(need)
        elif not need.fits_in(shape.need):
            shape.need = Resources(max(need.gpus_milli, shape.need.gpus_milli),
                                   max(need.cpus_milli, shape.need.cpus_milli),
                                   max(need.memory_mib, shape.need.memory_mib))  # fmt: skip
        shape.jobs.append(job)
        shape.all_groups.add(job.group)
    # A shape no type holds splits into its members' own needs; those no type holds either are left out.
    for key, shape in list(groups.items()):
        if any(shape.need.fits_in(c) for c in capacities):
            continue
        del groups[key]
        for job in shape.jobs:
            need = known[job.need][0]
            if not any(need.fits_in(c) for c in capacities):
                too_big[need] += 1
                continue
            exact = (need.gpus_milli, need.cpus_milli, -1 - need.memory_mib)
            own = groups.get(exact) or groups.setdefault(exact, _Shape(need))
            own.jobs.append(job)
            own.all_groups.add(job.group)
    held = [f"{n} waiting workloads of team {g} are over its limit on the pool: not bursting for them"
            for g, n in sorted(at_limit.items())]  # fmt: skip
    held += [f"{n} waiting workloads need {need.gpus_milli // 1000} GPUs, {need.cpus_milli // 1000} CPUs, "
             f"{need.memory_mib // GIB} GB: no instance type holds that" for need, n in too_big.items()]  # fmt: skip
    if gangs:
        held.append(f"{gangs} waiting gangs (several nodes at once) do not burst: an instance's agent runs one "
                    "node's work, so a gang waits for capacity where all its nodes start together")  # fmt: skip
    if soon:
        minutes = _minutes(burst_after(pool))
        held.append(f"{soon} waiting workloads are expected to start where they wait within {minutes} min: "
                    "not bursting for them")  # fmt: skip
    shapes = sorted(groups.values(), key=lambda s: (s.need.gpus_milli, s.need.cpus_milli, s.need.memory_mib),
                    reverse=True)  # fmt: skip
    return shapes, held


def _affordable(pool: Pool, rate: float, price: float) -> bool:
    """Within the hourly budget, and within the month's counting the next `horizon` at the new rate."""
    hours = pool.horizon.total_seconds() / 3600
    return rate + price <= pool.budget_per_hour and pool.month_spent + (rate + price) * hours <= pool.budget_per_month


def _over_budget(pool: Pool, rate: float, offer: Offer) -> str:
    if rate + offer.price > pool.budget_per_hour:
        return (f"launching {offer.name} ({offer.price:.2f}/h) would take the pool to {rate + offer.price:.2f}/h, "
                f"over its budget of {pool.budget_per_hour:.2f}/h")  # fmt: skip
    return f"the month's budget of {pool.budget_per_month:.2f} would be crossed ({pool.month_spent:.2f} spent)"
