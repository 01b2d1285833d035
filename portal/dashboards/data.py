"""What the dashboards show, read from the hourly rollups (never from raw samples) in a fixed number of queries."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Sum

from portal.accounts.models import ResourceGroup, SchedulerUsage
from portal.dashboards import figures
from portal.usage.models import UsageMemberRollup, UsageRollup
from portal.usage.rollup import HOUR, hour_of, hours_between
from portal.workloads.models import Workload
from portal.workloads.states import ACTIVE, State

WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
DEFAULT_WINDOW = "7d"
NOW_LIMIT = 50


def window_of(value: str | None) -> str:
    return value if value in WINDOWS else DEFAULT_WINDOW


@dataclass(frozen=True)
class TeamDashboard:
    group: ResourceGroup
    window: str
    hours: list[datetime]
    totals: dict[str, float]
    reservation: float
    limit: float | None
    figures: dict[str, figures.Figure]
    now: list[Workload]
    running: int
    waiting: int
    accounting: list[
        SchedulerUsage
    ]  # per fabric: Gridlane's GPU-hours beside the scheduler's (portal/worker/accounting.py)


def team_dashboard(group: ResourceGroup, window: str, now: datetime) -> TeamDashboard:
    """Five queries: the quota, the team's rollups, its members' rollups, its work running or waiting now, and
    its GPU-hours as the scheduler's accounting counts them (fetched by the worker, never by the page)."""
    reservation_milli, limit_milli = group.gpu_quota_milli()
    start = hour_of(now) - WINDOWS[window] + HOUR
    hours = list(hours_between(start, now))
    index = {h: i for i, h in enumerate(hours)}
    used, idle, reserved, pending = ([0.0] * len(hours) for _ in range(4))
    by_queue: defaultdict[str, float] = defaultdict(float)
    waits: dict[str, tuple[list[datetime], list[float | None], list[float | None]]] = {}
    rollups = (
        UsageRollup.objects.filter(group=group, hour__gte=start)
        .order_by("hour")
        .values_list("hour", "queue__name", "gpu_hours", "idle_gpu_hours", "reserved_gpu_hours",
                     "pending_gpu_hours", "started", "wait_p50_s", "wait_p95_s")
    )  # fmt: skip
    for hour, queue, gpu_hours, idle_hours, reserved_hours, pending_hours, started, p50, p95 in rollups:
        i = index.get(hour)
        if i is None:
            continue
        used[i] += gpu_hours
        idle[i] += idle_hours
        reserved[i] = max(reserved[i], reserved_hours)  # each of the team's rows carries its reservation
        pending[i] += pending_hours
        by_queue[queue] += gpu_hours
        if started:
            series = waits.setdefault(queue, ([], [], []))
            series[0].append(hour)
            series[1].append(p50)
            series[2].append(p95)
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
    limit = None if limit_milli is None else limit_milli / 1000
    figs = {
        "use": figures.use_against_quota(hours, used, reserved, limit),
        "members": figures.gpu_hours_by("GPU-hours by member", by_member),
        "queues": figures.gpu_hours_by("GPU-hours by queue", dict(by_queue)),
        "idle": figures.idle_gpu_hours(hours, used, idle),
        "wait": figures.wait_against_slo(waits, group.wait_slo_seconds),
        "pending": figures.pending_demand(hours, pending),
    }
    totals = {"gpu_hours": sum(used), "idle_gpu_hours": sum(idle), "pending_gpu_hours": sum(pending)}
    return TeamDashboard(
        group=group,
        window=window,
        hours=hours,
        totals=totals,
        reservation=reservation_milli / 1000,
        limit=limit,
        figures=figs,
        now=current,
        running=sum(1 for w in current if w.state != State.PENDING),
        waiting=sum(1 for w in current if w.state == State.PENDING),
        accounting=list(SchedulerUsage.objects.filter(group=group).select_related("fabric")),
    )
