"""What if: replay the site's own history through the same decide() under a proposed change.

The input is the site as the worker sees it (fabrics, queues, quotas, teams with their fair-share weight and
wait objective, the caps on members and agents, the priority weights) and its workloads of the last days: who
asked for what, when, and how long each ran. The replay runs them on the simulator's Clock (cycles on arrivals,
completions and cancellations, at most one per cycle_seconds). Each cycle brings the teams' decayed use forward
and decides on a snapshot built the way the worker builds its own (portal/worker/snapshot.py): the oldest
`candidates` pending per team, queue and priority class, fair share from the same allocations and half-life.

Work starts the moment it is admitted and runs for as long as it really ran (finished_at - started_at; still
running: until the end of the window). Work that never ran asks for what it asked for until it was cancelled (or
the window ends): if the replay starts it sooner, it holds that until then. A preempted run starts over.

What actually happened is measured by the same code (`actual`) from the workloads' own timestamps, so the three
columns of the what-if page (actual, current policy replayed, proposed) are counted alike: waits to the last
admission (work still waiting counts until it was cancelled or the window ended), GPUs held while running,
preemptions, and the waits above the team's objective. A workload's timestamps keep its last run only, so the
GPUs that runs cut short by a preemption held count in the replays but not in what actually happened.

Not modelled: fabric outages and capacity changes during the window (fabrics are as declared now), idle-GPU
marks, the use teams had before the window (fair share starts from nothing), departments and priority tiers.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from scheduler.decide import decide
from scheduler.model import UNLIMITED, Decisions, FabricState, Job, QueueState, Quota, Snapshot, Weights
from scheduler.priority import DecayedUse, allocations
from scheduler.simulate import Clock, Item, Observer

HOUR = 3600.0
EARLIEST = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Team:
    id: int
    slug: str
    fair_share_weight: int = 1
    wait_slo_s: int = 3600
    member_gpu_limit_milli: int | None = None
    parent_id: int | None = None  # its department


@dataclass(frozen=True)
class Site:
    """The policy a replay runs under (fabrics at their declared capacity, healthy throughout)."""

    fabrics: Mapping[int, FabricState]
    queues: Mapping[int, QueueState]
    quotas: Mapping[tuple[int, int | None], Quota]
    teams: Mapping[int, Team]
    weights: Weights = Weights()  # noqa: RUF009 (frozen, so one shared instance is safe)
    half_life_s: float = 24 * HOUR
    candidates: int = 256  # per team, queue and priority class, as GRIDLANE_CANDIDATES_PER_QUEUE
    owner_limits: Mapping[int, int] = field(default_factory=dict)
    owner_reservations: Mapping[int, int] = field(default_factory=dict)
    agents: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Work:
    """One workload of the site's history: the job as it waited (submitted_at set), and what happened to it."""

    job: Job
    runtime_s: float | None  # finished_at - started_at (still running: until the window's end); None: never ran
    admitted_at: datetime | None = None  # its last admission
    started_at: datetime | None = None
    finished_at: datetime | None = None  # ended, or cancelled while waiting; None: still running or waiting
    preemptions: int = 0


# -- proposed changes -------------------------------------------------------------------------------------


class ChangeError(ValueError):
    """A proposed change that cannot be applied, with a message for the person who proposed it."""


KINDS = ("quota", "capacity", "weight", "department")
NOT_MODELLED = {
    "tier_weight": "Priority tiers are not modelled in the replay yet.",
}


def apply_change(site: Site, change: Mapping[str, Any] | None) -> Site:
    """The site with one proposed change applied; None or {} is the current policy. Raises ChangeError.

    {"quota": {"team": slug, "fabric": name or None (all fabrics), "gpu_reservation": GPUs, "gpu_limit": GPUs
    or None (no cap)}} (a key left out keeps what is there); {"capacity": {"fabric": name, "gpus": n}};
    {"weight": {"team": slug, "fair_share_weight": w}}; {"department": {"team": slug, "parent": slug or None}}
    (the team moves into that department, or out of any)."""
    if not change:
        return site
    if not isinstance(change, Mapping) or len(change) != 1:
        raise ChangeError("Propose one change at a time.")
    ((kind, args),) = change.items()
    if kind in NOT_MODELLED:
        raise ChangeError(NOT_MODELLED[kind])
    if kind not in KINDS or not isinstance(args, Mapping):
        raise ChangeError(f"Unknown change {kind!r}: propose one of {', '.join(KINDS)}.")
    if kind == "capacity":
        fid = _fabric(site, args.get("fabric"))
        gpus = _milli(args.get("gpus"), "gpus")
        fabric = site.fabrics[fid]
        size = None if fabric.size is None else replace(fabric.size, gpus_milli=gpus)
        new = replace(fabric, capacity=replace(fabric.capacity, gpus_milli=gpus), size=size)
        return replace(site, fabrics={**site.fabrics, fid: new})
    team = _team(site, args.get("team"))
    if kind == "weight":
        weight = args.get("fair_share_weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
            raise ChangeError("A fair-share weight is a whole number, 1 or more.")
        return replace(site, teams={**site.teams, team.id: replace(team, fair_share_weight=weight)})
    if kind == "department":
        parent = args.get("parent")
        above = None if parent in (None, "") else _team(site, parent)
        if above is not None:
            chain: set[int] = {team.id}
            at: Team | None = above
            while at is not None:
                if at.id in chain:
                    raise ChangeError(f"{above.slug} is below {team.slug} already: a department cycle.")
                chain.add(at.id)
                at = site.teams.get(at.parent_id) if at.parent_id is not None else None
        moved = replace(team, parent_id=above.id if above else None)
        return replace(site, teams={**site.teams, team.id: moved})
    fabric_name = args.get("fabric")
    fid_or_none = None if fabric_name in (None, "") else _fabric(site, fabric_name)
    quota = site.quotas.get((team.id, fid_or_none)) or Quota(team.id, fid_or_none)
    reservation, limit = quota.reservation, quota.limit
    if "gpu_reservation" in args:
        if fid_or_none is None and args["gpu_reservation"]:
            raise ChangeError("A reservation is per fabric: name the fabric.")
        reservation = replace(reservation, gpus_milli=_milli(args["gpu_reservation"], "gpu_reservation"))
    if "gpu_limit" in args:
        gpus = UNLIMITED if args["gpu_limit"] is None else _milli(args["gpu_limit"], "gpu_limit")
        limit = replace(limit, gpus_milli=gpus)
    if limit.gpus_milli < reservation.gpus_milli:
        raise ChangeError("The limit is below the reservation: a cap cannot sit under the floor.")
    new_quota = Quota(team.id, fid_or_none, reservation=reservation, limit=limit)
    return replace(site, quotas={**site.quotas, (team.id, fid_or_none): new_quota})


def _team(site: Site, slug: object) -> Team:
    for team in site.teams.values():
        if team.slug == slug:
            return team
    raise ChangeError(f"No team {slug!r}.")


def _fabric(site: Site, name: object) -> int:
    for fid, fabric in site.fabrics.items():
        if fabric.name == name:
            return fid
    raise ChangeError(f"No fabric {name!r}.")


def _milli(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ChangeError(f"{what}: a number of GPUs, 0 or more.")
    return round(value * 1000)


# -- the replay -------------------------------------------------------------------------------------------


class _Snapshots:
    """Builds each cycle's snapshot as the worker does, bringing the teams' decayed use forward first."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.use = DecayedUse(site.half_life_s)
        weights = {t.id: t.fair_share_weight for t in site.teams.values()}
        self.parents = {t.id: t.parent_id for t in site.teams.values() if t.parent_id is not None}
        self.shares = allocations(site.quotas, site.fabrics, weights, departments=frozenset(self.parents.values()))
        self.member_limits = {
            t.id: t.member_gpu_limit_milli for t in site.teams.values() if t.member_gpu_limit_milli is not None
        }

    def __call__(self, now: datetime, pending: tuple[Job, ...], running: tuple[Job, ...]) -> Snapshot:
        site = self.site
        # 1. Each team's decayed use, brought forward with what runs now (as portal/worker/usage.py does).
        usage = self.use.at(now, running)
        # 2. The slice of the line the worker reads, and its running work newest first (Workload's ordering:
        #    backfill breaks ties between equal runtime limits in that order).
        return Snapshot(
            now=now,
            fabrics=site.fabrics,
            queues=site.queues,
            pending=candidates(pending, site.candidates),
            running=tuple(sorted(running, key=_newest_first)),
            quotas=site.quotas,
            usage=usage,
            shares=self.shares,
            owner_limits=site.owner_limits,
            owner_reservations=site.owner_reservations,
            member_limits=self.member_limits,
            parents=self.parents,
            agents=site.agents,
            weights=site.weights,
        )


def _newest_first(job: Job) -> float:
    return -job.submitted_at.timestamp() if job.submitted_at else 0.0


def candidates(pending: tuple[Job, ...], per_queue: int) -> tuple[Job, ...]:
    """The oldest `per_queue` pending jobs of each team, queue and priority class (portal.worker.snapshot)."""
    if len(pending) <= per_queue:
        return pending
    taken: defaultdict[tuple[int, int, str], int] = defaultdict(int)
    out = []
    for job in sorted(pending, key=lambda j: (j.submitted_at or EARLIEST, j.id)):
        key = (job.group_id, job.queue_id, job.priority)
        if taken[key] < per_queue:
            taken[key] += 1
            out.append(job)
    return tuple(out)


class _Tally(Observer):
    """Per team: waits, GPU-seconds held, preemptions, and hourly GPUs in use and waiting."""

    def __init__(self, start: datetime, span_s: float, chosen: frozenset[str] = frozenset()) -> None:
        self.start = start
        self.chosen = chosen  # jobs whose waits the result lists by themselves (`selected_waits`)
        self.span = span_s
        self.hours = max(1, math.ceil(span_s / HOUR))
        self.waits: dict[str, tuple[int, float]] = {}  # job -> (team, wait)
        self.held: defaultdict[int, float] = defaultdict(float)  # team -> GPU-seconds
        self.preemptions: defaultdict[int, int] = defaultdict(int)
        self.in_use: defaultdict[int, list[float]] = defaultdict(lambda: [0.0] * self.hours)
        self.pending: defaultdict[int, list[float]] = defaultdict(lambda: [0.0] * self.hours)
        self.waiting_since: dict[str, float] = {}

    def spread(self, buckets: list[float], a: float, b: float, gpus: float) -> None:
        """Add `gpus` held from a to b (seconds into the window) to the hours they cover."""
        a, b = max(0.0, a), min(self.span, b)
        while a < b:
            h = min(self.hours - 1, int(a // HOUR))
            upto = min(b, (h + 1) * HOUR)
            buckets[h] += gpus * (upto - a)
            if upto <= a:
                break
            a = upto

    def ran(self, team: int, gpus: float, a: float, b: float) -> None:
        a, b = max(0.0, a), min(self.span, b)
        if b > a:
            self.held[team] += gpus * (b - a)
            self.spread(self.in_use[team], a, b, gpus)

    def waited(self, job_id: str, team: int, gpus: float, since: float, a: float, b: float) -> None:
        """Waited from a to b; its wait, from `since` (its arrival), is b - since unless it starts later."""
        self.waits[job_id] = (team, b - since)
        self.spread(self.pending[team], a, b, gpus)

    # The Clock's hooks (the replay).
    def started(self, item: Item, now: float) -> None:
        job = item.job
        since = self.waiting_since.pop(job.id, item.arrival)
        self.waited(job.id, job.group_id, job.total.gpus_milli / 1000, item.arrival, since, now)

    def stopped(self, item: Item, started: float, now: float, preempted: bool) -> None:
        job = item.job
        self.ran(job.group_id, job.total.gpus_milli / 1000, started, now)
        if preempted:
            self.preemptions[job.group_id] += 1
            self.waiting_since[job.id] = now

    def withdrawn(self, item: Item, now: float) -> None:
        job = item.job
        since = self.waiting_since.pop(job.id, item.arrival)
        self.waited(job.id, job.group_id, job.total.gpus_milli / 1000, item.arrival, since, now)

    def result(self, site: Site, cycles: int = 0) -> dict[str, Any]:
        capacity = sum(f.capacity.gpus_milli for f in site.fabrics.values()) / 1000
        pool_seconds = capacity * self.span or 1.0
        by_team: defaultdict[int, list[float]] = defaultdict(list)
        for team, wait in self.waits.values():
            by_team[team].append(wait)
        ids = sorted(set(by_team) | set(self.held), key=lambda g: _slug(site, g))
        teams = {}
        for g in ids:
            slo = site.teams[g].wait_slo_s if g in site.teams else None
            teams[_slug(site, g)] = _figures(by_team[g], self.held[g], pool_seconds, self.preemptions[g], slo)
        every = [w for ws in by_team.values() for w in ws]
        breaches = sum(t["slo_breaches"] for t in teams.values())
        overall = _figures(every, sum(self.held.values()), pool_seconds, sum(self.preemptions.values()), None)
        overall["slo_breaches"] = breaches
        chosen = {"selected_waits": sorted(w for j, (_, w) in self.waits.items() if j in self.chosen)}
        return (chosen if self.chosen else {}) | {
            "capacity_gpus": capacity,
            "hours": self.hours,
            "cycles": cycles,
            "teams": teams,
            "overall": overall,
            "in_use": {_slug(site, g): [round(v / HOUR, 3) for v in self.in_use[g]] for g in ids},
            "pending": {_slug(site, g): [round(v / HOUR, 3) for v in self.pending[g]] for g in ids},
        }


def _slug(site: Site, group_id: int) -> str:
    team = site.teams.get(group_id)
    return team.slug if team else str(group_id)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank, as the simulator reports it; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def _figures(waits: list[float], held: float, pool_seconds: float, preemptions: int, slo: int | None) -> dict[str, Any]:
    return {
        "workloads": len(waits),
        "p50_wait_s": round(percentile(waits, 50), 1),
        "p95_wait_s": round(percentile(waits, 95), 1),
        "gpu_hours": round(held / HOUR, 2),
        "utilisation": round(held / pool_seconds, 4),
        "preemptions": preemptions,
        "slo_s": slo,
        "slo_breaches": 0 if slo is None else sum(1 for w in waits if w > slo),
    }


def replay(site: Site, history: Sequence[Work], start: datetime, end: datetime, *, cycle_seconds: float = 2.0,
           progress: Callable[[float], None] | None = None,
           select: Callable[[Job], bool] | None = None) -> dict[str, Any]:  # fmt: skip
    """Replay the work submitted in [start, end) under the site's policy; the figures per team (see _Tally).
    `progress` is called with the share of the window replayed so far, every 2 % or so; the waits of the jobs
    `select` picks (a wait objective's) are listed as well, sorted, under "selected_waits"."""
    span = max(1.0, (end - start).total_seconds())
    items = []
    for w in history:
        if w.job.submitted_at is None or not start <= w.job.submitted_at < end:
            continue
        arrival = (w.job.submitted_at - start).total_seconds()
        leaves = None
        if w.runtime_s is None and w.finished_at is not None:
            leaves = max(arrival, (w.finished_at - start).total_seconds())
        items.append(Item(w.job, arrival, w.runtime_s, leaves))
    tally = _Tally(start, span, _chosen(history, select))
    observer: Observer = tally if progress is None else _Reporting(tally, span, progress)
    clock = Clock(items, start, decide, _Snapshots(site), observer, cycle_seconds=cycle_seconds, until=span,
                  rounds_at=site.candidates)  # fmt: skip
    clock.run()
    # What still runs or waits when the window ends: held, or waited, until then.
    for job, started, _ in clock.running.values():
        tally.ran(job.group_id, job.total.gpus_milli / 1000, started, span)
    for job_id, job in clock.pending.items():
        item = clock.by_id[job_id]
        since = tally.waiting_since.pop(job_id, item.arrival)
        tally.waited(job_id, job.group_id, job.total.gpus_milli / 1000, item.arrival, since, span)
    return tally.result(site, clock.cycles)


class _Reporting(Observer):
    """Passes every hook on to the tally, and reports progress as the clock moves."""

    def __init__(self, tally: _Tally, span: float, progress: Callable[[float], None]) -> None:
        self.tally = tally
        self.span = span
        self.progress = progress
        self.next = 0.02

    def started(self, item: Item, now: float) -> None:
        self.tally.started(item, now)

    def stopped(self, item: Item, started: float, now: float, preempted: bool) -> None:
        self.tally.stopped(item, started, now, preempted)

    def withdrawn(self, item: Item, now: float) -> None:
        self.tally.withdrawn(item, now)

    def cycled(self, clock: Clock, snapshot: Snapshot, decisions: Decisions) -> None:
        done = clock.now / self.span
        if done >= self.next:
            self.progress(min(1.0, done))
            self.next = done + 0.02


def _chosen(history: Sequence[Work], select: Callable[[Job], bool] | None) -> frozenset[str]:
    return frozenset(w.job.id for w in history if select(w.job)) if select is not None else frozenset()


def actual(
    site: Site, history: Sequence[Work], start: datetime, end: datetime, select: Callable[[Job], bool] | None = None
) -> dict[str, Any]:
    """What really happened to the work submitted in [start, end), counted as the replay counts it."""
    span = max(1.0, (end - start).total_seconds())
    tally = _Tally(start, span, _chosen(history, select))
    for w in history:
        job = w.job
        if job.submitted_at is None or not start <= job.submitted_at < end:
            continue
        gpus = job.total.gpus_milli / 1000
        arrival = (job.submitted_at - start).total_seconds()
        admitted = w.admitted_at or w.started_at
        waited_until = admitted if admitted is not None else (w.finished_at or end)
        b = min(span, (waited_until - start).total_seconds())
        tally.waited(job.id, job.group_id, gpus, arrival, arrival, max(arrival, b))
        if w.started_at is not None:
            stop = min(span, ((w.finished_at or end) - start).total_seconds())
            tally.ran(job.group_id, gpus, (w.started_at - start).total_seconds(), stop)
        tally.preemptions[job.group_id] += w.preemptions
    return tally.result(site)
