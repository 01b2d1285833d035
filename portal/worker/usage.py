"""Decayed GPU use per team (the U of fair share), kept in one row per team and brought forward each cycle.

U(t) = U(t0) * 2^(-(t-t0)/half_life) + gpus_in_use * (t - t0); divided by half_life/ln 2 it reads as the
average number of GPUs the team held over recent half-lives."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.conf import settings

from portal.sql import ROWS, Compiled
from portal.worker.models import GroupUsage
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler.priority import decay


def bring_forward(now: datetime) -> None:
    """Add each team's GPUs in use since the last cycle to its decayed use (two queries and one write per team)."""
    half_life_s = settings.GRIDLANE_FAIR_SHARE_HALF_LIFE_HOURS * 3600
    in_use: defaultdict[int, int] = defaultdict(int)
    for group_id, gpus_milli, nodes in ROWS.rows(
        "running GPUs",
        lambda: Workload.objects.filter(state=State.RUNNING).values_list("group_id", "gpus_milli", "nodes"),
    ):
        in_use[group_id] += gpus_milli * nodes
    rows = {u.group_id: u for u in _USAGE.run("all", GroupUsage.objects.all)}
    changed = []
    for group_id in set(in_use) | set(rows):
        row = rows.get(group_id) or GroupUsage(group_id=group_id, decayed_gpu_seconds=0.0, updated_at=now)
        elapsed = max(0.0, (now - row.updated_at).total_seconds())
        row.decayed_gpu_seconds = decay(row.decayed_gpu_seconds, row.updated_at, now, half_life_s) + (
            in_use.get(group_id, 0) / 1000 * elapsed
        )
        row.updated_at = now
        changed.append(row)
    GroupUsage.objects.bulk_create(
        changed,
        update_conflicts=True,
        unique_fields=["group"],
        update_fields=["decayed_gpu_seconds", "updated_at"],
    )


# Read on every admission: compiled once (portal.sql), like the snapshot's queries.
_USAGE = Compiled(GroupUsage)
