"""Gridlane's GPU-hours beside what the scheduler's own accounting (sacct) reports, per team and fabric.

Every GRIDLANE_ACCOUNTING_SECONDS, for each Slurm fabric where teams have a scheduler account, one sacct
over the last WINDOW for those accounts; the same window's GPU-hours from Gridlane's own records of
its workloads there, per team and per member (with the POSIX user sacct says each member's jobs ran
as); both written to SchedulerUsage, which the team dashboard shows (no page asks the cluster). They
agree within rounding for the jobs Gridlane submitted (found in sacct by their name, gl-<run id>); the
account's total also counts what people submitted on the cluster directly.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Max, Q

from fabrics.base import FabricError
from portal.accounts.models import SchedulerAccount, SchedulerUsage
from portal.queues.models import Fabric
from portal.worker.connections import fabric_for
from portal.workloads.models import Workload

log = logging.getLogger("gridlane.worker")


@dataclass
class Hours:
    """One member's GPU-hours in the window: Gridlane's records, and sacct's for the same jobs (and the POSIX
    users sacct says they ran as: one, the member's own, when jobs run as the person)."""

    gridlane: float = 0.0
    scheduler: float = 0.0
    posix: set[str] = field(default_factory=set)


WINDOW = timedelta(days=7)
DEFAULT_EVERY_S = 900


def check_all(now: datetime) -> int:
    """Fetch what is due; returns how many fabrics were asked."""
    every = timedelta(seconds=getattr(settings, "GRIDLANE_ACCOUNTING_SECONDS", DEFAULT_EVERY_S))
    rows = Fabric.objects.filter(kind="slurm", enabled=True, scheduler_accounts__isnull=False).distinct()
    last = dict(
        SchedulerUsage.objects.values("fabric_id").annotate(at=Max("fetched_at")).values_list("fabric_id", "at")
    )
    asked = 0
    for row in rows:
        if row.pk in last and now - last[row.pk] < every:
            continue
        asked += check(row, now)
    return asked


def check(row: Fabric, now: datetime, window: timedelta = WINDOW) -> int:
    """One fabric: sacct for its teams' accounts and Gridlane's records, over [now - window, now)."""
    usage = getattr(fabric_for(row), "account_usage", None)
    if usage is None:
        return 0
    accounts = dict(SchedulerAccount.objects.filter(fabric=row).values_list("group_id", "account"))
    start = now - window
    try:
        charges = usage(set(accounts.values()), start, now)
    except FabricError as error:
        log.warning("accounting of %s failed: %s", row.name, error)
        return 0
    ours: dict[str, tuple[int, str]] = {}  # job name -> (team, member)
    gridlane: defaultdict[int, float] = defaultdict(float)
    member_hours: defaultdict[tuple[int, str], Hours] = defaultdict(Hours)
    ran = Workload.objects.filter(fabric=row, group_id__in=accounts, started_at__lt=now).filter(
        Q(finished_at__isnull=True) | Q(finished_at__gt=start)
    )
    fields = ("id", "attempt", "group_id", "gpus_milli", "nodes", "started_at", "finished_at", "owner__username")
    for w in ran.select_related("owner").only(*fields):
        member = w.owner.get_username()
        ours[f"gl-{w.run_id}"] = (w.group_id, member)
        began = w.started_at or now  # never None here: filtered on above
        seconds = max(0.0, (min(w.finished_at or now, now) - max(began, start)).total_seconds())
        hours = w.gpus_milli * w.nodes / 1000 * seconds / 3600
        gridlane[w.group_id] += hours
        member_hours[(w.group_id, member)].gridlane += hours
    scheduler: defaultdict[int, float] = defaultdict(float)
    by_account: defaultdict[str, float] = defaultdict(float)
    for charge in charges:
        by_account[charge.account] += charge.gpu_hours
        group_id, member = ours.get(charge.name, (None, ""))
        if group_id is not None and accounts.get(group_id) == charge.account:
            scheduler[group_id] += charge.gpu_hours
            member_hours[(group_id, member)].scheduler += charge.gpu_hours
            member_hours[(group_id, member)].posix.add(charge.user)
    for group_id, account in accounts.items():
        members = [
            {"member": member, "posix": sorted(h.posix), "gridlane": h.gridlane, "scheduler": h.scheduler}
            for (gid, member), h in sorted(member_hours.items())
            if gid == group_id
        ]
        SchedulerUsage.objects.update_or_create(
            group_id=group_id,
            fabric=row,
            defaults={
                "account": account,
                "window_start": start,
                "window_end": now,
                "gridlane_gpu_hours": gridlane[group_id],
                "scheduler_gpu_hours": scheduler[group_id],
                "account_gpu_hours": by_account[account],
                "members": members,
                "fetched_at": now,
            },
        )
    return 1
