"""A team's allocations idle now, by the seed's rule, for its leads: who holds them and for how long.

A running workload's GPUs are idle now when its samples in the last whole idle window average below
80 % and its CPUs, where read, below 10 % (the seed's rule: GPUs *and* CPUs; a job whose GPUs wait while its
CPUs work is not idle); it has been idle since the start of the run of such windows that ends there (looking
back at most LOOK_BACK). A workload whose last window has no samples is not listed as idle: its use is unknown.
Two queries: the team's running GPU work, and its window averages (grouped in the database).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from portal.accounts.models import ResourceGroup
from portal.usage.rollup import IDLE_BELOW, figures, idle_window, window_of
from portal.workloads.models import Workload
from portal.workloads.states import State

LOOK_BACK = timedelta(hours=24)
MAX_LISTED = 500  # running GPU workloads of one team looked at


@dataclass(frozen=True)
class IdleNow:
    workload: Workload
    since: datetime  # the start of its current run of idle windows (or when it started, if later)
    average: float  # the last whole window's average utilisation, percent

    @property
    def owner(self) -> str:
        return self.workload.owner.get_username()


def idle_since(windows: dict[datetime, float], last: datetime, window: timedelta, started: datetime) -> datetime | None:
    """Pure: the start of the run of idle windows that ends with the window starting at `last`; None when that
    window is busy or has no data. The run goes back no further than the window the workload started in."""
    average = windows.get(last)
    if average is None or average >= IDLE_BELOW:
        return None
    first, at = window_of(started, window), last
    while at > first and (before := windows.get(at - window)) is not None and before < IDLE_BELOW:
        at -= window
    return max(at, started)


def team_idle_now(group: ResourceGroup, now: datetime) -> list[IdleNow]:
    """The team's running GPU workloads that are idle now, longest idle first."""
    running = list(
        Workload.objects.filter(group=group, state=State.RUNNING, gpus_milli__gt=0, started_at__isnull=False)
        .select_related("owner", "queue")
        .defer("log_tail", "rendered", "command", "script")
        .order_by("started_at")[:MAX_LISTED]
    )
    if not running:
        return []
    spells = idle_spells(running, now)
    idle = [IdleNow(w, *spells[w.pk]) for w in running if w.pk in spells]
    return sorted(idle, key=lambda i: i.since)


def idle_spells(running: list[Workload], now: datetime) -> dict[Any, tuple[datetime, float]]:
    """Per running workload (by pk) whose GPUs (and CPUs, where read) are idle now: since when, and the last whole
    window's GPU average. One query."""
    if not running:
        return {}
    window = idle_window()
    last = window_of(now, window) - window  # the last whole window
    cpus_busy: set[tuple[str, datetime]] = set()
    found, _ = figures(last - LOOK_BACK, last + window, window, [w.pk for w in running], cpus_busy)
    per_workload: dict[str, dict[datetime, float]] = {}
    for (pk, begins), value in found.items():
        # a window whose CPUs worked is busy, whatever its GPUs read (its average stays the GPUs')
        per_workload.setdefault(pk, {})[begins] = IDLE_BELOW if (pk, begins) in cpus_busy else value
    spells = {}
    for w in running:
        windows = per_workload.get(str(w.pk), {})
        since = idle_since(windows, last, window, w.started_at or now)  # (every one has started: filtered above)
        if since is not None:
            spells[w.pk] = (since, windows[last])
    return spells
