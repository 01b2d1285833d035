"""Read the database once per cycle into the scheduler's frozen snapshot (a fixed number of queries)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from django.conf import settings
from django.db.models import F, Window
from django.db.models.functions import RowNumber

from fabrics.base import Resources
from portal.accounts.models import ResourceGroup, ServiceIdentity
from portal.queues.models import Fabric, PriorityTier, Queue, Quota
from portal.worker.capacity import planned
from portal.worker.models import GroupUsage
from portal.worker.usage import average_gpus
from portal.workloads.models import Workload
from portal.workloads.states import ACTIVE, State
from scheduler import model


class Row(NamedTuple):
    """What applying a decision needs to know of a workload, read as plain values (thousands per cycle)."""

    id: UUID
    state: str
    queue_id: int
    pending_reason_code: str
    pending_reason: str
    estimated_start: datetime | None
    queue_position: int


# Read as tuples, not model instances: building 15,000 instances would cost more than deciding on them.
FIELDS = (
    "id", "state", "queue_id", "pending_reason_code", "pending_reason", "estimated_start",  # -> Row
    "owner_id", "group_id", "fabric_id", "priority", "submitted_at", "started_at", "runtime_limit_s",
    "gpus_milli", "cpus_milli", "memory_mib", "nodes", "native_kind", "array_parent_id", "array_throttle",
    "gpu_idle_warned_at", "queue_position",  # the last -> Row
)  # fmt: skip


def _limit(value: int | None) -> int:
    return model.UNLIMITED if value is None else value


def job_of(values: tuple[Any, ...], kinds: dict[str, tuple[int, ...]] | None = None) -> model.Job:
    """kinds: the fabric ids of each kind, for native work (which runs only where its scheduler reads it)."""
    (pk, _, queue_id, _, _, _, owner_id, group_id, fabric_id, priority, submitted_at, started_at, runtime_limit_s,
     gpus, cpus, memory, nodes, native_kind, array_parent_id, array_throttle, idle_warned_at, _) = values  # fmt: skip
    return model.Job(
        id=str(pk),
        group_id=group_id,
        queue_id=queue_id,
        per_node=Resources(gpus, cpus, memory),
        nodes=nodes,
        priority=priority,
        submitted_at=submitted_at,
        runtime_limit_s=runtime_limit_s,
        fabric_id=fabric_id,
        started_at=started_at,
        owner_id=owner_id,
        only_on=(kinds or {}).get(native_kind, ()) if native_kind else None,
        array_id=str(array_parent_id) if array_parent_id else "",
        array_throttle=array_throttle or 0,
        gpus_idle=idle_warned_at is not None,
    )


def pending_candidates() -> list[tuple[Any, ...]]:
    """The pending work a cycle considers: in each team's queue and priority tier, the oldest
    GRIDLANE_CANDIDATES_PER_QUEUE. Within one of those, fair share orders mostly by age (size moves it a
    little), so the rest wait their turn in the slice; their reason and estimate are refreshed when they
    come into it."""
    # An array's parent is never scheduled: its elements are.
    ranked = Workload.objects.filter(state=State.PENDING, array_size=0).annotate(
        place=Window(
            RowNumber(), partition_by=[F("group_id"), F("queue_id"), F("priority")], order_by=F("submitted_at").asc()
        )
    )
    return list(ranked.filter(place__lte=settings.GRIDLANE_CANDIDATES_PER_QUEUE).values_list(*FIELDS))


def weights() -> model.Weights:
    return model.Weights(**settings.GRIDLANE_PRIORITY_WEIGHTS)


def build(now: datetime) -> tuple[model.Snapshot, dict[str, Row]]:
    """The snapshot, and the pending and holding workloads it was built from, by id (for applying decisions)."""
    # Each fabric as it is now: what IT declared, lowered to what it last reported (capacity.planned).
    rows = list(Fabric.objects.filter(enabled=True))
    fabrics = {
        f.pk: model.FabricState(f.pk, f.name, planned(f, now), f.healthy, f.gpu_sharing, size=f.capacity) for f in rows
    }
    kinds: dict[str, tuple[int, ...]] = {}
    for f in rows:
        kinds[f.kind] = (*kinds.get(f.kind, ()), f.pk)
    queues = {
        q.pk: model.QueueState(
            q.pk,
            q.slug,
            tuple(t.fabric_id for t in q.targets.all() if t.fabric_id in fabrics),
            q.preemptible,
            idle_preemptible=q.gpu_idle_action == Queue.GpuIdleAction.PREEMPTIBLE,
            gpu_share=q.gpu_share_percent,
        )
        for q in Queue.objects.prefetch_related("targets")
    }
    quotas = {
        (q.group_id, q.fabric_id): model.Quota(
            q.group_id,
            q.fabric_id,
            reservation=q.reservation,
            limit=Resources(_limit(q.gpu_limit_milli), _limit(q.cpu_limit_milli), _limit(q.memory_limit_mib)),
        )
        for q in Quota.objects.all()
        if q.fabric_id is None or q.fabric_id in fabrics
    }
    values = list(Workload.objects.filter(state__in=ACTIVE).values_list(*FIELDS))
    values += pending_candidates()
    by_id = {str(v[0]): Row._make((*v[:6], v[-1])) for v in values}
    half_life_s = settings.GRIDLANE_FAIR_SHARE_HALF_LIFE_HOURS * 3600
    usage = {
        u.group_id: average_gpus(u.decayed_gpu_seconds, u.updated_at, now, half_life_s)
        for u in GroupUsage.objects.all()
    }
    agents = [
        (user_id, limit, reserved, disabled is None and expires > now)
        for user_id, limit, reserved, disabled, expires in ServiceIdentity.objects.values_list(
            "user_id", "gpu_limit_milli", "gpu_reservation_milli", "disabled_at", "expires_at"
        )
    ]
    snapshot = model.Snapshot(
        now=now,
        fabrics=fabrics,
        queues=queues,
        quotas=quotas,
        pending=tuple(job_of(v, kinds) for v in values if v[1] == State.PENDING and v[2] in queues),
        running=tuple(job_of(v, kinds) for v in values if v[1] != State.PENDING),
        usage=usage,
        shares=shares(quotas, fabrics),
        # An agent's own GPU cap inside its team's, and the GPUs owed it out of its team's reservation.
        owner_limits={user_id: limit for user_id, limit, _, _ in agents if limit is not None},
        owner_reservations={user_id: reserved for user_id, _, reserved, active in agents if reserved and active},
        agents=frozenset(user_id for user_id, _, _, _ in agents),
        member_limits={
            pk: cap
            for pk, cap in ResourceGroup.objects.filter(member_gpu_limit_milli__isnull=False).values_list(
                "pk", "member_gpu_limit_milli"
            )
            if cap is not None
        },
        weights=weights(),
        tiers=tier_states(PriorityTier.objects.values_list("slug", "weight", "may_preempt")),
    )
    return snapshot, by_id


def tier_states(rows: Any) -> dict[str, model.TierState]:
    """IT's tiers as the scheduler sees them, from (slug, weight, may_preempt) rows: a higher weight is a higher
    rank, and tiers of equal weight share one (neither preempts the other)."""
    rows = list(rows)
    ranks = {w: i for i, w in enumerate(sorted({w for _, w, _ in rows}))}
    return {slug: model.TierState(weight, may_preempt, ranks[weight]) for slug, weight, may_preempt in rows}


def shares(
    quotas: dict[tuple[int, int | None], model.Quota], fabrics: dict[int, model.FabricState]
) -> dict[int, float]:
    """Each team's allocation in GPUs (the L of fair share): its reservations, or else its weight's share of
    the GPUs nobody reserved."""
    total = sum(f.capacity.gpus_milli for f in fabrics.values()) / 1000
    reserved: dict[int, float] = {}
    for (group_id, fabric_id), quota in quotas.items():
        if fabric_id is not None:
            reserved[group_id] = reserved.get(group_id, 0.0) + quota.reservation.gpus_milli / 1000
    weights = dict(ResourceGroup.objects.values_list("pk", "fair_share_weight"))
    unreserved = max(0.0, total - sum(reserved.values()))
    weight_sum = sum(weights.values()) or 1
    return {g: max(reserved.get(g, 0.0), unreserved * w / weight_sum) for g, w in weights.items()}
