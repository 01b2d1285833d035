"""What the dashboards show, read from the hourly rollups (never from raw samples) in a fixed number of queries."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, F, Min, Q, Sum

from portal.accounts.models import AuditEvent, ResourceGroup, SchedulerUsage, combined_gpu_quota
from portal.dashboards import figures
from portal.queues.models import QuotaGrant
from portal.usage.models import UsageMemberRollup, UsageRollup
from portal.usage.rollup import HOUR, hour_of, hours_between
from portal.workloads import stats
from portal.workloads.models import Workload
from portal.workloads.states import ACTIVE, State
from scheduler.estimates import percentile

WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
DEFAULT_WINDOW = "7d"
NOW_LIMIT = 50


def window_of(value: str | None) -> str:
    return value if value in WINDOWS else DEFAULT_WINDOW


@dataclass(frozen=True)
class Now:
    """The team this minute, read live (not from the hourly rollups): what its work holds and asks for."""

    in_use: float  # GPUs held by its running work
    waiting: float  # GPUs asked for by its waiting work
    running: int
    waiting_count: int
    reservation: float
    limit: float | None
    longest_wait_s: float | None  # how long its oldest waiting workload has waited
    granted: float = 0.0  # GPUs its temporary grants add to both now (portal.queues.grants)
    cpus_in_use: float = 0.0  # CPUs and memory (GB) its running work holds, beside the GPUs
    memory_gb_in_use: float = 0.0
    cpus_waiting: float = 0.0  # and its waiting work asks for
    memory_gb_waiting: float = 0.0

    @property
    def headroom(self) -> float | None:
        """GPUs more it may start now under its limit, temporary grants included; None without a limit."""
        return None if self.limit is None else max(0.0, self.limit + self.granted - self.in_use)


@dataclass(frozen=True)
class TeamDashboard:
    group: ResourceGroup
    window: str
    hours: list[datetime]
    totals: dict[str, float | None]  # idle_share is None where no GPU-hour's use is known
    reservation: float
    limit: float | None
    figures: dict[str, figures.Figure]
    now: list[Workload]
    running: int
    waiting: int
    live: Now
    accounting: list[
        SchedulerUsage
    ]  # per fabric: Gridlane's GPU-hours beside the scheduler's (portal/worker/accounting.py)
    grants: list[QuotaGrant]  # those in force over the window or later, asked for or decided, newest first


def team_dashboard(group: ResourceGroup, window: str, now: datetime) -> TeamDashboard:
    """Eight queries: the quotas, their history (the audit log), the team's temporary grants, its rollups, its
    members' rollups, its work running or waiting now, what that work holds and asks for, and its GPU-hours as
    the scheduler's accounting counts them (fetched by the worker, never by the page); a ninth for how long the
    waiting work waited when more than NOW_LIMIT workloads run or wait.

    Past hours come from the rollups; the current hour, which the rollup averages over the whole hour so far,
    is drawn with the live figures instead (the "now" panel's), so the chart's last point matches the panel.
    """
    quotas = list(group.quotas.select_related("fabric"))
    reservation_milli, limit_milli = combined_gpu_quota(quotas)
    start = hour_of(now) - WINDOWS[window] + HOUR
    hours = list(hours_between(start, now))
    grants = list(
        QuotaGrant.objects.filter(team=group, ends_at__gt=start).select_related("fabric", "requested_by", "decided_by")
    )
    hourly = _hourly(group, start, hours)
    used, idle, unknown, reserved, pending = hourly.used, hourly.idle, hourly.unknown, hourly.reserved, hourly.pending
    by_queue, waits = hourly.by_queue, hourly.waits
    by_member = {
        username: total or 0.0
        for username, total in UsageMemberRollup.objects.filter(group=group, hour__gte=start)
        .values("user__username")
        .annotate(total=Sum("gpu_hours"))
        .values_list("user__username", "total")
    }
    current = list(
        Workload.objects.filter(group=group, state__in=[State.PENDING, *ACTIVE])
        .select_related("owner", "queue")
        .defer("log_tail", "rendered", "command", "script")
        .order_by("state", "submitted_at")[:NOW_LIMIT]
    )
    known = sum(used) - sum(unknown)
    totals = {
        "gpu_hours": sum(used),
        "idle_gpu_hours": sum(idle),
        "unknown_gpu_hours": sum(unknown),
        "pending_gpu_hours": sum(pending),
        # Of the GPU-hours whose use is known; None (shown as "unknown") when none is.
        "idle_share": sum(idle) / known if known > 1e-9 else None,
    }
    granted = granted_per_hour(grants, hours, now)
    live = _live(group, reservation_milli, limit_milli, now, granted[-1] if granted else 0.0)
    hour_gpu_hours = list(used)  # GPU-hours per hour, for the busy and idle bars
    # The GPUs charts' current hour: what is held and asked for now, and the reservation in force now.
    used[-1], pending[-1], reserved[-1] = live.in_use, live.waiting, live.reservation
    # Every waiting workload is in `current` unless it was cut at NOW_LIMIT: then they are read on their own.
    waiting_now = None if len(current) >= NOW_LIMIT else [w for w in current if w.state == State.PENDING]
    _count_work_still_waiting(group, waits, hour_of(now), now, waiting_now)
    limits = _limit_history(group, quotas, hours, limit_milli)
    figs = {
        "use": figures.use_against_quota(hours, used, reserved, limits, granted),
        "members": figures.gpu_hours_by("GPU-hours by member", by_member),
        "queues": figures.gpu_hours_by("GPU-hours by queue", dict(by_queue)),
        "idle": figures.idle_gpu_hours(hours, hour_gpu_hours, idle, unknown),
        "wait": figures.wait_against_slo(waits, group.wait_slo_seconds, hours),
        "pending": figures.pending_demand(hours, pending),
    }
    return TeamDashboard(
        group=group,
        window=window,
        hours=hours,
        totals=totals,
        reservation=reservation_milli / 1000,
        limit=live.limit,
        figures=figs,
        now=current,
        running=live.running,
        waiting=live.waiting_count,
        live=live,
        accounting=list(SchedulerUsage.objects.filter(group=group).select_related("fabric")),
        grants=grants,
    )


@dataclass(frozen=True)
class _Hourly:
    """A team's rollups over a window, hour by hour (GPU-hours used, idle, of unknown use, reserved and asked
    for), its GPU-hours by queue, and each queue's wait percentiles in the hours something started."""

    used: list[float]
    idle: list[float]
    unknown: list[float]
    reserved: list[float]
    pending: list[float]
    by_queue: dict[str, float]
    waits: dict[str, tuple[list[datetime], list[float | None], list[float | None]]]


def _hourly(group: ResourceGroup, start: datetime, hours: list[datetime]) -> _Hourly:
    """The team's rollups from `start` on, by hour of `hours` (one query)."""
    index = {h: i for i, h in enumerate(hours)}
    used, idle, unknown, reserved, pending = ([0.0] * len(hours) for _ in range(5))
    by_queue: defaultdict[str, float] = defaultdict(float)
    waits: dict[str, tuple[list[datetime], list[float | None], list[float | None]]] = {}
    rollups = (
        UsageRollup.objects.filter(group=group, hour__gte=start)
        .order_by("hour")
        .values_list("hour", "queue__name", "gpu_hours", "idle_gpu_hours", "unknown_gpu_hours", "reserved_gpu_hours",
                     "pending_gpu_hours", "started", "wait_p50_s", "wait_p95_s")
    )  # fmt: skip
    for hour, queue, gpu_hours, idle_hours, unknown_hours, reserved_hours, pending_hours, started, p50, p95 in rollups:
        i = index.get(hour)
        if i is None:
            continue
        used[i] += gpu_hours
        idle[i] += idle_hours
        unknown[i] += unknown_hours
        reserved[i] = max(reserved[i], reserved_hours)  # each of the team's rows carries its reservation
        pending[i] += pending_hours
        by_queue[queue] += gpu_hours
        if started:
            series = waits.setdefault(queue, ([], [], []))
            series[0].append(hour)
            series[1].append(p50)
            series[2].append(p95)
    return _Hourly(used, idle, unknown, reserved, pending, dict(by_queue), waits)


def granted_per_hour(grants: list[QuotaGrant], hours: list[datetime], now: datetime) -> list[float]:
    """GPUs the team's approved grants added at the end of each hour (now, for the current hour)."""
    out = []
    for hour in hours:
        at = min(hour + HOUR, now)
        out.append(sum(g.gpus_milli for g in grants if g.active_at(at)) / 1000)
    return out


def _live(
    group: ResourceGroup, reservation_milli: int, limit_milli: int | None, now: datetime, granted: float = 0.0
) -> Now:
    held = F("gpus_milli") * F("nodes")
    waiting = Q(state=State.PENDING)
    active = Q(state__in=ACTIVE)
    seen = (
        Workload.objects.filter(group=group)
        .filter(waiting | active)
        .aggregate(
            in_use=Sum(held, filter=active),
            asked=Sum(held, filter=waiting),
            cpus=Sum(F("cpus_milli") * F("nodes"), filter=active),
            cpus_asked=Sum(F("cpus_milli") * F("nodes"), filter=waiting),
            memory=Sum(F("memory_mib") * F("nodes"), filter=active),
            memory_asked=Sum(F("memory_mib") * F("nodes"), filter=waiting),
            running=Count("pk", filter=active),
            waiting=Count("pk", filter=waiting),
            oldest=Min("submitted_at", filter=waiting),
        )
    )
    oldest = seen["oldest"]
    return Now(
        in_use=(seen["in_use"] or 0) / 1000,
        waiting=(seen["asked"] or 0) / 1000,
        running=seen["running"],
        waiting_count=seen["waiting"],
        reservation=reservation_milli / 1000,
        limit=None if limit_milli is None else limit_milli / 1000,
        longest_wait_s=(now - oldest).total_seconds() if oldest else None,
        granted=granted,
        cpus_in_use=(seen["cpus"] or 0) / 1000,
        memory_gb_in_use=(seen["memory"] or 0) / 1024,
        cpus_waiting=(seen["cpus_asked"] or 0) / 1000,
        memory_gb_waiting=(seen["memory_asked"] or 0) / 1024,
    )


WAITING_SAMPLE = 2000  # the oldest waiting workloads read for the current hour's wait percentiles


def _count_work_still_waiting(
    group: ResourceGroup,
    waits: dict[str, tuple[list[datetime], list[float | None], list[float | None]]],
    hour: datetime,
    now: datetime,
    waiting_now: list[Workload] | None = None,
) -> None:
    """Work still waiting counts in the current hour's wait: a p95 of 0 while a job has waited 5 minutes says
    the opposite of what is true. Each queue's current p50/p95 is at least that of its waiting work's ages.

    waiting_now: all of the team's waiting work when the caller already holds it; None reads it here."""
    ages: defaultdict[str, list[float]] = defaultdict(list)
    rows = (
        [(w.queue.name, w.submitted_at) for w in waiting_now]
        if waiting_now is not None
        else Workload.objects.filter(group=group, state=State.PENDING)
        .order_by("submitted_at")
        .values_list("queue__name", "submitted_at")[:WAITING_SAMPLE]
    )
    for queue, submitted in rows:
        ages[queue].append(stats.waited(submitted, None, now))
    for queue, seconds in ages.items():  # the same percentile as the rollup's and IT's Queues page's
        p50, p95 = percentile(seconds, 50) or 0.0, percentile(seconds, 95) or 0.0
        series = waits.setdefault(queue, ([], [], []))
        if series[0] and series[0][-1] == hour:
            series[1][-1] = max(series[1][-1] or 0.0, p50)
            series[2][-1] = max(series[2][-1] or 0.0, p95)
        else:
            series[0].append(hour)
            series[1].append(p50)
            series[2].append(p95)


@dataclass
class _QuotaState:
    fabric: Any
    gpu_reservation_milli: int
    gpu_limit_milli: int | None


def _limit_history(
    group: ResourceGroup, quotas: list[Any], hours: list[datetime], limit_milli: int | None
) -> list[float | None]:
    """The team's GPU limit in force at the end of each hour, replayed from the audit log's record of its
    quotas (created, changed, deleted): no limit is drawn for hours before its first quota existed.

    Where the log holds nothing about them (quotas older than the log), the current limit is drawn
    throughout, as before."""
    current = None if limit_milli is None else limit_milli / 1000
    events = list(
        AuditEvent.objects.filter(
            action__in=["quota.created", "quota.changed", "quota.deleted"], target__startswith=f"{group.name} on "
        )
        .order_by("at", "pk")
        .values_list("at", "action", "target", "detail")
    )
    if not events:
        return [current] * len(hours)
    capacity = {str(q.fabric): q.fabric for q in quotas if q.fabric is not None}
    state: dict[str, dict[str, Any]] = {}
    out: list[float | None] = []
    i = 0
    for hour in hours:
        end = hour + HOUR
        while i < len(events) and events[i][0] < end:
            _, action, target, detail = events[i]
            if action == "quota.deleted":
                state.pop(target, None)
            else:
                state.setdefault(target, {}).update((detail or {}).get("after") or {})
            i += 1
        rows = [
            _QuotaState(
                fabric=None if not values.get("fabric") else capacity.get(str(values["fabric"]), _NoFabric()),
                gpu_reservation_milli=int(values.get("gpu_reservation_milli") or 0),
                gpu_limit_milli=values.get("gpu_limit_milli"),
            )
            for values in state.values()
        ]
        _, limit = combined_gpu_quota(rows)
        out.append(None if limit is None else limit / 1000)
    if out and current is not None and out[-1] != current:
        out[-1] = current  # the log missed a change (e.g. made without signals): now is what is in force
    return out


class _NoFabric:
    """A fabric the log names but that no longer has a quota of the team's: its size is not known."""

    gpus_milli = 0
