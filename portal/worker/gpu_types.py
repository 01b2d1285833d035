"""The GPU types the targets of a queue have, by their fabrics' inventories: the reader the workloads layer asks
through its seam (portal.workloads.gpu_types, registered in portal.worker.apps).

A target's types are those its last fresh observation names (fabrics/live.py), plus the one its settings pin
(a Slurm or PBS fabric's `gpu_type`, a Kubernetes fabric's `gpu_flavor`). A request that names no type is open
(any type). A named type must be one some target of the queue has; targets without it are skipped when the job
is routed (scheduler/soonest.py).
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from portal.queues.models import Fabric, Queue
from portal.worker import live
from portal.worker.capacity import live_since

SETTINGS = ("gpu_type", "gpu_flavor")


def offered(queue: Queue, now: datetime | None = None) -> list[str]:
    """The GPU types the queue's targets have, sorted (two queries)."""
    now = now or timezone.now()
    fabrics = list(Fabric.objects.filter(enabled=True, targets__queue=queue).distinct())
    observed = live.fresh(now, live_since(now))
    types: set[str] = set()
    for fabric in fabrics:
        for key in SETTINGS:
            value = str((fabric.settings or {}).get(key) or "").lower()
            if value:
                types.add(value)
        answer = observed.get(fabric.pk)
        if answer is not None:
            types |= answer[1].types()
    return sorted(types)
