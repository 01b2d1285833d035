"""Read the database once per cycle into the scheduler's frozen snapshot (a fixed number of queries)."""

from __future__ import annotations

from datetime import datetime

from fabrics.base import Resources
from portal.queues.models import Fabric, Queue, Quota
from portal.workloads.models import Workload
from portal.workloads.states import ACTIVE, State
from scheduler import model

WORKLOAD_FIELDS = (
    "id",
    "group_id",
    "queue_id",
    "fabric_id",
    "state",
    "priority",
    "submitted_at",
    "started_at",
    "runtime_limit_s",
    "gpus_milli",
    "cpus_milli",
    "memory_mib",
    "nodes",
    "pending_reason_code",
    "pending_reason",
    "estimated_start",
)


def _limit(value: int | None) -> int:
    return model.UNLIMITED if value is None else value


def job_of(w: Workload) -> model.Job:
    return model.Job(
        id=str(w.pk),
        group_id=w.group_id,
        queue_id=w.queue_id,
        per_node=w.per_node,
        nodes=w.nodes,
        priority=w.priority,
        submitted_at=w.submitted_at,
        runtime_limit_s=w.runtime_limit_s,
        fabric_id=w.fabric_id,
        started_at=w.started_at,
    )


def build(now: datetime) -> tuple[model.Snapshot, dict[str, Workload]]:
    """The snapshot, and the pending workloads it holds by id (to apply decisions without reloading)."""
    fabrics = {
        f.pk: model.FabricState(f.pk, f.name, f.capacity, f.healthy) for f in Fabric.objects.filter(enabled=True)
    }
    queues = {
        q.pk: model.QueueState(
            q.pk, q.slug, tuple(t.fabric_id for t in q.targets.all() if t.fabric_id in fabrics), q.preemptible
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
    }
    rows = list(Workload.objects.filter(state__in=[State.PENDING, *ACTIVE]).only(*WORKLOAD_FIELDS))
    pending = {str(w.pk): w for w in rows if w.state == State.PENDING and w.queue_id in queues}
    snapshot = model.Snapshot(
        now=now,
        fabrics=fabrics,
        queues=queues,
        quotas=quotas,
        pending=tuple(job_of(w) for w in pending.values()),
        running=tuple(job_of(w) for w in rows if w.state != State.PENDING),
    )
    return snapshot, pending
