"""Hourly rollups, kept by the worker so that dashboards never scan raw samples.

Every GRIDLANE_ROLLUP_SECONDS (`due`) the worker calls `step(now)`: it records one UsageSample per running
workload at most once a minute, and recomputes the rollups of the hours that the last few minutes touch
(the current hour, and the one before it just after the hour turns, for as long as a sampler may post
late). Recomputing is idempotent: a row is the sum over the workloads that overlap its hour, so a missed
or repeated step changes nothing. The number of queries is
the same whatever the number of workloads (the cycle's own tests rely on that).

Per team, queue and hour:
- gpu_hours: GPUs held (x nodes) x the part of the hour they ran (allocated);
- idle_gpu_hours, used_gpu_hours, unknown_gpu_hours: the seed's rule. Time is cut into windows of
  GRIDLANE_IDLE_WINDOW_MINUTES (default 30; windows start at midnight UTC, so the length divides a day).
  A workload's GPUs are idle in a window when its utilisation samples there average below 80 %: those
  GPU-hours are idle. Where its samples say GPU by GPU (a sampler's readings: gpus_read, gpus_idle), each
  GPU is judged on its own: the idle share of the window is the average over its readings of the part of
  their GPUs that read below 80 %, and that share of its GPU-hours is idle (a job holding 8 GPUs and using 2
  has 6 idle, however busy the 2 are). A window whose CPUs worked (the job's CPU utilisation, where its sampler
  read it, at or above 10 %) has no idle GPU-hours: idle is GPUs and CPUs under their thresholds.
  Every rollup (team-queue, member, fabric, team) counts the same way.
  Where the window has samples, used_gpu_hours are the GPU-hours x the average
  utilisation (utilisation-weighted). Where it has none (a fabric that reports nothing, a node without
  nvidia-smi, a gap) the GPU-hours are unknown: never busy, never idle. So gpu_hours = known + unknown,
  and idle_gpu_hours <= known;
- cpu_hours, memory_gb_hours: CPUs and memory GB (1,024 MiB, as the portal shows memory) held (x nodes)
  x the part of the hour they ran: allocated only, as nothing here measures how busy CPUs were;
- cost: the GPU-, CPU- and GB-hours, each x the fabric's price per hour (Fabric.gpu_hour_price,
  cpu_hour_price, memory_gb_hour_price, as they are when the hour is rolled up; no price: 0);
  idle_cost: the idle GPU-hours x the price per GPU-hour (only GPUs are measured idle);
- reserved_gpu_hours: the team's GPU reservation over the hour, the same on each of its rows that hour;
- per team and hour (UsageTeamRollup, `by_team`): the reservation, the GPU-hours held over all its queues,
  and the reservation held but unused, max(0, reserved - held). Every hour of a team with a reservation
  has a row, even one in which nothing of it ran (and so no team-queue row exists);
- pending_gpu_hours: GPUs asked for x the part of the hour they waited (pending demand);
- started, wait_p50_s, wait_p95_s: of the workloads that started in that hour (wait = start - submit).

Beside them, from the same spans, the wait slices (portal.usage.waits): starts per team, queue, priority tier and
five minutes, with how many waited longer than each fixed threshold, for the wait objectives.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Avg, Case, F, FloatField, IntegerField, Min, Q, Value, When
from django.db.models.functions import Cast, ExtractHour, ExtractMinute, Floor, TruncDay

from portal.accounts.models import AuditEvent
from portal.counters import counts
from portal.queues.models import Quota
from portal.usage import waits
from portal.usage.models import UsageFabricRollup, UsageMemberRollup, UsageRollup, UsageSample, UsageTeamRollup
from portal.usage.samples import CPU_IDLE_BELOW, max_age
from portal.usage.samples import IDLE_BELOW as IDLE_BELOW  # the one threshold, read from here by the pages
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler.estimates import percentile

log = logging.getLogger("gridlane.usage")

HOUR = timedelta(hours=1)
SAMPLE_EVERY = timedelta(minutes=1)
# Just after the hour turns, the hour before it is recomputed once more with its last minutes (at least).
LOOK_BACK = timedelta(minutes=5)
LAST_RUN = "rollup_at"  # a counter (portal.counters): when the last rollup step ran
DAY = timedelta(days=1)
# What member and fabric rollups keep of a cell.
COST_FIELDS = [
    "gpu_hours",
    "idle_gpu_hours",
    "used_gpu_hours",
    "unknown_gpu_hours",
    "cpu_hours",
    "memory_gb_hours",
    "cost",
    "idle_cost",
]


def hour_of(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def idle_window() -> timedelta:
    return timedelta(minutes=settings.GRIDLANE_IDLE_WINDOW_MINUTES)


def window_of(at: datetime, window: timedelta) -> datetime:
    """The start of the idle window holding `at`: windows start at midnight UTC, `window` long."""
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day + ((at - day) // window) * window


def windows_in(hour: datetime, window: timedelta) -> Iterator[tuple[datetime, datetime, datetime]]:
    """(window start, part start, part end): the parts of the hour each idle window covers."""
    start = window_of(hour, window)
    while start < hour + HOUR:
        yield start, max(start, hour), min(start + window, hour + HOUR)
        start += window


def hours_between(start: datetime, end: datetime) -> Iterator[datetime]:
    """The starts of the hours from the one holding `start` to the one holding `end`."""
    hour = hour_of(start)
    while hour <= end:
        yield hour
        hour += HOUR


def overlap_hours(begin: datetime, end: datetime, hour: datetime, until: datetime) -> float:
    """How many hours of [begin, end) fall inside [hour, min(hour + 1 h, until))."""
    low = max(begin, hour)
    high = min(end, hour + HOUR, until)
    return max(0.0, (high - low).total_seconds() / 3600)


@dataclass(frozen=True)
class Span:
    """What the rollup needs of one workload: who, where, how many GPUs, and when it waited and ran."""

    group_id: int
    queue_id: int
    owner_id: int
    gpus: float  # GPUs over all its nodes
    submitted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    fabric_id: int | None = None  # where it ran (None: never placed)
    price: float = 0.0  # the fabric's price per GPU-hour
    cpus: float = 0.0  # CPUs over all its nodes
    memory_gb: float = 0.0  # memory GB over all its nodes
    cpu_price: float = 0.0  # the fabric's price per CPU-hour
    memory_price: float = 0.0  # the fabric's price per GB-hour of memory
    tier: str = ""  # its priority tier's slug (for the wait slices, portal.usage.waits)

    @property
    def cost_per_hour(self) -> float:
        """What an hour of its allocation costs: its GPUs, CPUs and memory, each at the fabric's price."""
        return self.gpus * self.price + self.cpus * self.cpu_price + self.memory_gb * self.memory_price


@dataclass
class Cell:
    gpu_hours: float = 0.0
    idle_gpu_hours: float = 0.0
    used_gpu_hours: float = 0.0
    unknown_gpu_hours: float = 0.0
    cpu_hours: float = 0.0
    memory_gb_hours: float = 0.0
    cost: float = 0.0
    idle_cost: float = 0.0
    reserved_gpu_hours: float = 0.0
    pending_gpu_hours: float = 0.0
    waits: list[float] = field(default_factory=list)


def compute(
    spans: Iterable[tuple[str, Span]],
    utilisation: dict[tuple[str, datetime], float],
    reservations: dict[int, float],
    start: datetime,
    until: datetime,
    window: timedelta = timedelta(minutes=30),
    *,
    since: dict[int, datetime] | None = None,
    idle_shares: dict[tuple[str, datetime], float] | None = None,
) -> tuple[dict[tuple[int, int, datetime], Cell], dict[tuple[int, int, datetime], Cell]]:
    """Pure: the team-queue-hour cells and the team-member-hour cells for the hours from `start` to `until`
    (`by_fabric` gives the team-fabric-hour cells of the same spans).

    `utilisation` maps (workload id, idle window start) to the average GPU utilisation of its samples in
    that window (no key: no data); `reservations` maps a team to its GPU reservation in GPUs, held from
    `since[team]` on where known (reservation_since): no reserved hours before its quota existed; `idle_shares`
    maps the same keys as `utilisation` to the part (0-1) of the workload's GPUs that read idle there, where its
    samples say GPU by GPU (no key: the window's average judges all its GPUs together).
    """
    shares = idle_shares or {}
    cells: defaultdict[tuple[int, int, datetime], Cell] = defaultdict(Cell)
    members: defaultdict[tuple[int, int, datetime], Cell] = defaultdict(Cell)
    hours = list(hours_between(start, until))
    for workload_id, s in spans:
        waited_until = s.started_at or s.finished_at or until
        ran_until = s.finished_at or until
        for hour in hours:
            key = (s.group_id, s.queue_id, hour)
            pending = overlap_hours(s.submitted_at, waited_until, hour, until)
            running = overlap_hours(s.started_at, ran_until, hour, until) if s.started_at else 0.0
            if pending:
                cells[key].pending_gpu_hours += s.gpus * pending
            if running:
                counted = (cells[key], members[(s.group_id, s.owner_id, hour)])
                for cell in counted:
                    cell.gpu_hours += s.gpus * running
                    cell.cpu_hours += s.cpus * running
                    cell.memory_gb_hours += s.memory_gb * running
                    cell.cost += s.cost_per_hour * running
                for begins, low, high in windows_in(hour, window):
                    part = overlap_hours(s.started_at, ran_until, low, min(high, until)) if s.started_at else 0.0
                    if part:
                        key_w = (workload_id, begins)
                        _classify(counted, s.gpus * part, s.price, utilisation.get(key_w), shares.get(key_w))
            if s.started_at is not None and hour <= s.started_at < hour + HOUR:
                cells[key].waits.append(max(0.0, (s.started_at - s.submitted_at).total_seconds()))
    for (group_id, _, hour), cell in cells.items():
        held = _held_hours(hour, until, (since or {}).get(group_id))
        cell.reserved_gpu_hours = reservations.get(group_id, 0.0) * held
    return dict(cells), dict(members)


def _held_hours(hour: datetime, until: datetime, since: datetime | None) -> float:
    """The part of the hour (up to `until`) in hours from `since` on (None: the whole of it)."""
    begins = hour if since is None else max(hour, since)
    return max(0.0, (min(hour + HOUR, until) - begins).total_seconds() / 3600)


def _classify(
    cells: Iterable[Cell], gpu_hours: float, price: float, average: float | None, idle_share: float | None = None
) -> None:
    """Count GPU-hours of one idle window as unknown (no samples), or as used by their utilisation, and idle:
    the share of its GPUs judged idle one by one where known, else all of them when the average is below the
    threshold."""
    for c in cells:
        if average is None:
            c.unknown_gpu_hours += gpu_hours
            continue
        c.used_gpu_hours += gpu_hours * average / 100
        if idle_share is not None:
            idle = gpu_hours * max(0.0, min(1.0, idle_share))
        else:
            idle = gpu_hours if average < IDLE_BELOW else 0.0
        c.idle_gpu_hours += idle
        c.idle_cost += idle * price


def by_fabric(
    spans: Iterable[tuple[str, Span]],
    utilisation: dict[tuple[str, datetime], float],
    start: datetime,
    until: datetime,
    window: timedelta = timedelta(minutes=30),
    idle_shares: dict[tuple[str, datetime], float] | None = None,
) -> dict[tuple[int, int, datetime], Cell]:
    """Pure: the team-fabric-hour cells (running time only) of the spans that were placed on a fabric; CPU-only
    work has cells too (its CPU- and GB-hours are charged)."""
    placed = [(pk, replace(s, queue_id=s.fabric_id)) for pk, s in spans if s.fabric_id is not None]
    cells, _ = compute(placed, utilisation, {}, start, until, window, idle_shares=idle_shares)
    for cell in cells.values():
        cell.pending_gpu_hours, cell.waits = 0.0, []
    return {key: cell for key, cell in cells.items() if cell.gpu_hours or cell.cpu_hours or cell.memory_gb_hours}


@dataclass
class TeamHour:
    reserved_gpu_hours: float = 0.0
    gpu_hours: float = 0.0

    @property
    def unused_reservation_gpu_hours(self) -> float:
        """The reservation held but unused in the hour: an hour in which the team held more than it reserved
        (borrowing beyond its reservation) counts 0, never less: one hour's excess repays no other's idle."""
        return max(0.0, self.reserved_gpu_hours - self.gpu_hours)


def by_team(
    cells: dict[tuple[int, int, datetime], Cell],
    reservations: dict[int, float],
    start: datetime,
    until: datetime,
    since: dict[int, datetime] | None = None,
) -> dict[tuple[int, datetime], TeamHour]:
    """Pure: per team and hour from `start` to `until`, its reservation and the GPU-hours its queues' cells held.
    Every hour of a team with a reservation is there, with or without cells; hours of no length (`until` on the
    hour) are not."""
    teams: defaultdict[tuple[int, datetime], TeamHour] = defaultdict(TeamHour)
    for (group_id, _, hour), cell in cells.items():
        teams[(group_id, hour)].gpu_hours += cell.gpu_hours
    for hour in hours_between(start, until):
        for group_id, gpus in reservations.items():
            held = _held_hours(hour, until, (since or {}).get(group_id))
            if gpus > 0 and held > 0:
                teams[(group_id, hour)].reserved_gpu_hours = gpus * held
    return dict(teams)


def due(now: datetime) -> bool:
    """Whether the rollup (and the idle-GPU step after it) is due: every GRIDLANE_ROLLUP_SECONDS, not every
    cycle. Both read whole idle windows and hours, so a minute's delay changes nothing a person sees, while
    recomputing the hour every two seconds would cost a core at a large site (`make bench BENCH=samples`)."""
    last = counts.read(LAST_RUN)
    return last is None or not 0 <= now.timestamp() - last < settings.GRIDLANE_ROLLUP_SECONDS


def look_back() -> timedelta:
    """How far back a step recomputes: far enough for the latest readings a sampler may still post
    (portal.usage.samples.max_age) to be counted once they arrive."""
    return max(LOOK_BACK, max_age() + timedelta(seconds=settings.GRIDLANE_ROLLUP_SECONDS))


def step(now: datetime) -> int:
    """The worker's rollup step: sample what runs (once a minute) and bring the recent hours' rollups up
    to date. Returns the number of team-queue-hour rows written. Never raises: a dashboard that lags
    must not stop scheduling."""
    try:
        rows = _step(now)
    except Exception:  # logged; the next cycle tries again
        log.exception("usage rollup failed")
        return 0
    counts.gauge(**{LAST_RUN: now.timestamp()})
    return rows


def _step(now: datetime) -> int:
    start = hour_of(now - look_back())
    spans = list(_spans(start, now))
    _sample(now, [(pk, s) for pk, s, state in spans if state == State.RUNNING])
    return roll_up(start, now, [(pk, s) for pk, s, _ in spans])


def roll_up(start: datetime, until: datetime, spans: list[tuple[str, Span]] | None = None) -> int:
    """Recompute and store the rollups of the hours from `start` to `until` (e.g. to backfill after an outage)."""
    start = hour_of(start)
    if spans is None:
        spans = [(pk, s) for pk, s, _ in _spans(start, until)]
    window = idle_window()
    utilisation, shares = figures(window_of(start, window), until, window)
    reservations: defaultdict[int, float] = defaultdict(float)
    for group_id, reserved_milli in Quota.objects.filter(fabric__isnull=False).values_list(
        "group_id", "gpu_reservation_milli"
    ):
        reservations[group_id] += reserved_milli / 1000
    since = reservation_since()
    cells, members = compute(spans, utilisation, reservations, start, until, window, since=since, idle_shares=shares)
    rows = [
        UsageRollup(
            group_id=group_id,
            queue_id=queue_id,
            hour=hour,
            **{f: getattr(c, f) for f in COST_FIELDS},
            reserved_gpu_hours=c.reserved_gpu_hours,
            pending_gpu_hours=c.pending_gpu_hours,
            started=len(c.waits),
            wait_p50_s=percentile(c.waits, 50),
            wait_p95_s=percentile(c.waits, 95),
        )
        for (group_id, queue_id, hour), c in cells.items()
    ]
    if rows:
        UsageRollup.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["group", "queue", "hour"],
            update_fields=[
                *COST_FIELDS,
                "reserved_gpu_hours",
                "pending_gpu_hours",
                "started",
                "wait_p50_s",
                "wait_p95_s",
            ],
        )
    member_rows = [
        UsageMemberRollup(group_id=group_id, user_id=user_id, hour=hour, **{f: getattr(c, f) for f in COST_FIELDS})
        for (group_id, user_id, hour), c in members.items()
    ]
    if member_rows:
        UsageMemberRollup.objects.bulk_create(
            member_rows,
            update_conflicts=True,
            unique_fields=["group", "user", "hour"],
            update_fields=COST_FIELDS,
        )
    fabric_rows = [
        UsageFabricRollup(group_id=group_id, fabric_id=fabric_id, hour=hour, **{f: getattr(c, f) for f in COST_FIELDS})
        for (group_id, fabric_id, hour), c in by_fabric(spans, utilisation, start, until, window, shares).items()
    ]
    if fabric_rows:
        UsageFabricRollup.objects.bulk_create(
            fabric_rows, update_conflicts=True, unique_fields=["group", "fabric", "hour"], update_fields=COST_FIELDS
        )
    team_rows = [
        UsageTeamRollup(group_id=group_id, hour=hour, reserved_gpu_hours=t.reserved_gpu_hours, gpu_hours=t.gpu_hours,
                        unused_reservation_gpu_hours=t.unused_reservation_gpu_hours)
        for (group_id, hour), t in by_team(cells, reservations, start, until, since).items()
    ]  # fmt: skip
    if team_rows:
        UsageTeamRollup.objects.bulk_create(
            team_rows,
            update_conflicts=True,
            unique_fields=["group", "hour"],
            update_fields=["reserved_gpu_hours", "gpu_hours", "unused_reservation_gpu_hours"],
        )
    started = [(s.group_id, s.queue_id, s.tier, s.submitted_at, s.started_at) for _, s in spans if s.started_at]
    waits.store(waits.compute(started, start, until))
    return len(rows)


def reservation_since() -> dict[int, datetime]:
    """When each team's GPU reservation began to be held: the first record of the creation of its reserving
    quotas in the audit log (two queries). A team with a reserving quota the log does not know (older than
    the log) is left out: its reservation counts in every hour, as before the log began."""
    quotas = list(
        Quota.objects.filter(fabric__isnull=False, gpu_reservation_milli__gt=0).select_related("group", "fabric")
    )
    created = dict(
        AuditEvent.objects.filter(action="quota.created", target__in={str(q) for q in quotas})
        .values("target")
        .annotate(first=Min("at"))
        .values_list("target", "first")
    )
    firsts: defaultdict[int, list[datetime | None]] = defaultdict(list)
    for q in quotas:
        firsts[q.group_id].append(created.get(str(q)))
    return {team: min(d for d in at if d is not None) for team, at in firsts.items() if all(at)}


def averages(
    start: datetime, until: datetime, window: timedelta, workloads: list[Any] | None = None
) -> dict[tuple[str, datetime], float]:
    """The average GPU utilisation per workload (of `workloads`, else all) and idle window, of the samples that
    report one in [start, until): one query, grouped in the database (never a scan of raw samples in Python)."""
    return figures(start, until, window, workloads)[0]


def figures(
    start: datetime,
    until: datetime,
    window: timedelta,
    workloads: list[Any] | None = None,
    cpus_busy: set[tuple[str, datetime]] | None = None,
) -> tuple[dict[tuple[str, datetime], float], dict[tuple[str, datetime], float]]:
    """`averages`, and beside them the idle share per workload and window where its samples say GPU by GPU (the
    average over those samples of gpus_idle / gpus_read): one query. Into `cpus_busy`, where given, go the
    windows whose CPUs worked (their CPU utilisation averaged at or above CPU_IDLE_BELOW): never idle."""
    minutes = int(window.total_seconds() // 60)
    # The window's number within its day: minutes since midnight over the window, rounded down (PostgreSQL's
    # EXTRACT gives numerics, so the division is not an integer one by itself).
    since_midnight = ExtractHour("at", tzinfo=UTC) * 60 + ExtractMinute("at", tzinfo=UTC)
    slot = Cast(Floor(since_midnight / Value(float(minutes))), IntegerField())
    samples = UsageSample.objects.filter(at__gte=start, at__lt=until, gpu_utilisation__isnull=False)
    if workloads is not None:
        samples = samples.filter(workload_id__in=workloads)
    rows = samples.annotate(day=TruncDay("at", tzinfo=UTC), slot=slot).values("workload_id", "day", "slot")
    per_gpu = Case(
        When(gpus_read__gt=0, then=Cast(F("gpus_idle"), FloatField()) / Cast(F("gpus_read"), FloatField())),
        default=None,
        output_field=FloatField(),
    )
    found: dict[tuple[str, datetime], float] = {}
    shares: dict[tuple[str, datetime], float] = {}
    for workload_id, day, slot_number, average, share, cpu in rows.annotate(
        average=Avg("gpu_utilisation"), share=Avg(per_gpu), cpu=Avg("cpu_utilisation")
    ).values_list("workload_id", "day", "slot", "average", "share", "cpu"):
        key = (str(workload_id), day + int(slot_number) * window)
        found[key] = float(average)
        if cpu is not None and cpu >= CPU_IDLE_BELOW:
            shares[key] = 0.0  # its CPUs worked: none of its GPUs counts idle (idle is GPUs and CPUs)
            if cpus_busy is not None:
                cpus_busy.add(key)
        elif share is not None:
            shares[key] = float(share)
    return found, shares


def _spans(start: datetime, until: datetime) -> Iterator[tuple[str, Span, str]]:
    """Every workload that waited or ran during [start, until): one query."""
    rows = (
        Workload.objects.filter(submitted_at__lt=until)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .values_list(
            "pk", "group_id", "queue_id", "owner_id", "gpus_milli", "cpus_milli", "memory_mib", "nodes",
            "submitted_at", "started_at", "finished_at", "state", "fabric_id", "fabric__gpu_hour_price",
            "fabric__cpu_hour_price", "fabric__memory_gb_hour_price", "priority",
        )
    )  # fmt: skip
    for (
        pk, group_id, queue_id, owner_id, gpus_milli, cpus_milli, memory_mib, nodes, submitted, started, finished,
        state, fabric, price, cpu_price, memory_price, tier,
    ) in rows:  # fmt: skip
        span = Span(
            group_id, queue_id, owner_id, gpus_milli * nodes / 1000, submitted, started, finished, fabric,
            price=float(price or 0), cpus=cpus_milli * nodes / 1000, memory_gb=memory_mib * nodes / 1024,
            cpu_price=float(cpu_price or 0), memory_price=float(memory_price or 0), tier=tier,
        )  # fmt: skip
        yield str(pk), span, state


def _sample(now: datetime, running: list[tuple[str, Span]]) -> None:
    """One allocation sample per running workload that has none from the last minute (a fabric or agent
    reporting utilisation may have written one): one query, plus one insert when any is due."""
    if not running:
        return
    recent = {
        str(pk)
        for pk in UsageSample.objects.filter(
            at__gt=now - SAMPLE_EVERY, workload_id__in=[pk for pk, _ in running]
        ).values_list("workload_id", flat=True)
    }
    due = [
        UsageSample(workload_id=pk, at=now, gpus_milli=round(s.gpus * 1000)) for pk, s in running if pk not in recent
    ]
    if due:
        UsageSample.objects.bulk_create(due)
