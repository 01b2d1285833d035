"""Read the site and its last N days of work as the replay's plain values, in a fixed number of queries.

The site is read as the worker reads it (portal.worker.snapshot), with each enabled fabric at its declared
capacity. The work is every workload submitted in the window (an array's elements, not its parent), read as
tuples: 10,000 model instances would cost more than replaying them.

Runtime: finished_at - started_at; still running: until the window's end. Work that never started (waiting
now, or cancelled while it waited, or admitted but not started yet) has no runtime: the replay keeps it in line
until it was cancelled or the window ends.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings

from fabrics.base import Resources
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric
from portal.worker import snapshot
from portal.workloads.models import Workload
from scheduler import model
from scheduler.replay import Site, Team, Work

FIELDS = (
    "id", "group_id", "queue_id", "owner_id", "priority", "submitted_at", "admitted_at", "started_at", "finished_at",
    "runtime_limit_s", "gpus_milli", "cpus_milli", "memory_mib", "nodes", "native_kind", "array_parent_id",
    "array_throttle", "attempt",
)  # fmt: skip


class History(NamedTuple):
    site: Site
    work: list[Work]
    start: datetime
    end: datetime


def site_now(now: datetime) -> tuple[Site, dict[str, tuple[int, ...]]]:
    """The site's policy now, and the fabric ids of each kind (for native work); six queries."""
    rows = list(Fabric.objects.filter(enabled=True))
    fabrics = {f.pk: model.FabricState(f.pk, f.name, f.capacity, True, f.gpu_sharing, size=f.capacity) for f in rows}
    kinds: dict[str, tuple[int, ...]] = {}
    for f in rows:
        kinds[f.kind] = (*kinds.get(f.kind, ()), f.pk)
    teams = {
        pk: Team(pk, slug, weight, slo, member_cap, parent)
        for pk, slug, weight, slo, member_cap, parent in ResourceGroup.objects.values_list(
            "pk", "slug", "fair_share_weight", "wait_slo_seconds", "member_gpu_limit_milli", "parent_id"
        )
    }
    caps = snapshot.agent_caps(now)
    site = Site(
        fabrics=fabrics,
        queues=snapshot.queue_states(fabrics),
        quotas=snapshot.quota_states(fabrics),
        teams=teams,
        weights=snapshot.weights(),
        half_life_s=settings.GRIDLANE_FAIR_SHARE_HALF_LIFE_HOURS * 3600,
        candidates=settings.GRIDLANE_CANDIDATES_PER_QUEUE,
        owner_limits=caps.limits,
        owner_reservations=caps.reservations,
        agents=caps.agents,
    )
    return site, kinds


def load(days: int, end: datetime) -> History:
    """The site now and the work submitted in the `days` before `end`; seven queries."""
    start = end - timedelta(days=days)
    site, kinds = site_now(end)
    rows = (
        Workload.objects.filter(submitted_at__gte=start, submitted_at__lt=end, array_size=0)
        .order_by()
        .values_list(*FIELDS)
    )
    return History(site, [work_of(v, kinds, end) for v in rows.iterator(chunk_size=5000)], start, end)


def work_of(values: tuple[Any, ...], kinds: dict[str, tuple[int, ...]], end: datetime) -> Work:
    (pk, group_id, queue_id, owner_id, priority, submitted_at, admitted_at, started_at, finished_at, runtime_limit_s,
     gpus, cpus, memory, nodes, native_kind, array_parent_id, array_throttle, attempt) = values  # fmt: skip
    runtime: float | None = None
    if started_at is not None:
        runtime = max(0.0, ((finished_at or end) - started_at).total_seconds())
    job = model.Job(
        id=str(pk),
        group_id=group_id,
        queue_id=queue_id,
        per_node=Resources(gpus, cpus, memory),
        nodes=nodes,
        priority=priority,
        submitted_at=submitted_at,
        runtime_limit_s=runtime_limit_s,
        owner_id=owner_id,
        only_on=kinds.get(native_kind, ()) if native_kind else None,
        array_id=str(array_parent_id) if array_parent_id else "",
        array_throttle=array_throttle or 0,
    )
    return Work(job, runtime, admitted_at, started_at, finished_at, attempt)
