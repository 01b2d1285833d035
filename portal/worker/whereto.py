"""Where and when Gridlane would start a waiting workload now, target by target, and why not on the others, for
the workload page; and each fabric's live free GPUs next to Gridlane's and others' use, for IT's capacity page.

Both read what fabrics said they have free (portal/worker/live.py) while it is fresh; the words come from the
scheduler's own rules (scheduler/soonest.py), so the page says what the scheduler does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, Sum

from fabrics.base import Resources
from fabrics.live import FreeNow
from portal.queues.models import Fabric, QueueTarget
from portal.worker import live
from portal.worker.capacity import live_since
from portal.worker.models import FabricFree
from portal.workloads.models import Workload
from portal.workloads.states import ACTIVE, State
from scheduler.model import FabricState, Job, Snapshot
from scheduler.soonest import expected_start


@dataclass(frozen=True)
class Start:
    fabric: str
    when: datetime | None
    why: str
    first: bool = False  # where Gridlane would start it


def starts(w: Workload, now: datetime) -> list[Start]:
    """The workload's targets, soonest start first (unknown last), each with when and why."""
    if not live.routing():
        return []  # planned with declarations alone, as the scheduler does; its reason says why it waits
    targets = QueueTarget.objects.filter(queue_id=w.queue_id, fabric__enabled=True).select_related("fabric")
    rows = {t.fabric_id: t.fabric for t in targets.order_by("order", "pk")}  # its targets' fabrics, one query
    rooms = {fid: answer for fid, (_, answer) in live.fresh(now, live_since(now)).items() if fid in rows}
    if not rooms:
        return []  # nothing observed: the scheduler plans with declarations, and its reason says why it waits
    fabrics = {fid: FabricState(fid, f.name, f.capacity, f.healthy, f.gpu_sharing) for fid, f in rows.items()}
    snapshot = Snapshot(now, fabrics, {}, running=_running(set(rooms)), live=rooms)
    job = Job(
        str(w.pk), w.group_id, w.queue_id, Resources(w.gpus_milli, w.cpus_milli, w.memory_mib), nodes=w.nodes,
        gpu_type=str(getattr(w, "gpu_type", "") or ""),
    )  # fmt: skip
    found = []
    for order, fid in enumerate(rows):
        when, why = expected_start(snapshot, job, fid)
        if not fabrics[fid].healthy:
            when, why = None, f"{fabrics[fid].name} does not answer now"
        found.append((when is None, when or now, order, Start(fabrics[fid].name, when, why)))
    found.sort(key=lambda item: item[:3])
    out = [item[3] for item in found]
    if out and out[0].when is not None:
        out[0] = Start(out[0].fabric, out[0].when, out[0].why, first=True)
    return out


def _running(fabric_ids: set[int]) -> tuple[Job, ...]:
    """Gridlane's work holding capacity on these fabrics, for Gridlane's own estimate (one query)."""
    fields = ("pk", "group_id", "queue_id", "gpus_milli", "cpus_milli", "memory_mib", "nodes", "fabric_id")
    rows = Workload.objects.filter(state__in=ACTIVE, fabric_id__in=fabric_ids).exclude(state=State.PENDING)
    return tuple(
        Job(
            str(pk),
            group,
            queue,
            Resources(gpus, cpus, memory),
            nodes=nodes,
            fabric_id=fid,
            started_at=started,
            runtime_limit_s=limit,
        )
        for pk, group, queue, gpus, cpus, memory, nodes, fid, started, limit in rows.values_list(
            *fields, "started_at", "runtime_limit_s"
        )
    )


@dataclass(frozen=True)
class PoolRow:
    fabric: str
    pool: str
    gpu_type: str
    total: int
    free: int
    used: int
    gridlane: int  # GPUs Gridlane's work holds on the whole fabric (any pool)
    others: int  # the rest of the fabric's use: people and tenants outside Gridlane
    observed_at: datetime
    fresh: bool


def capacity_rows(now: datetime) -> list[PoolRow]:
    """Each observed fabric's pools: free and in use now, Gridlane's use and others' (three queries)."""
    since = live_since(now)
    held = dict(
        Workload.objects.filter(state__in=ACTIVE, fabric__isnull=False)
        .values("fabric_id")
        .annotate(held_gpus=Sum(F("gpus_milli") * F("nodes")))
        .values_list("fabric_id", "held_gpus")
    )
    names = dict(Fabric.objects.values_list("pk", "name"))
    out = []
    for fid, observed_at, data in FabricFree.objects.order_by("fabric_id").values_list(
        "fabric_id", "observed_at", "data"
    ):
        try:
            answer = FreeNow.from_json(data)
        except (KeyError, TypeError, ValueError):
            continue
        used = sum(p.gpus_used for p in answer.pools)
        ours = (held.get(fid) or 0) // 1000
        for pool in answer.pools:
            out.append(
                PoolRow(
                    names.get(fid, str(fid)), pool.name or "(all)", pool.gpu_type or "any", pool.gpus_total,
                    pool.gpus_free, pool.gpus_used, ours, max(0, used - ours), observed_at, observed_at >= since,
                )
            )  # fmt: skip
    return out
