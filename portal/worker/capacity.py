"""What each fabric has now (nodes up, agents online), asked every GRIDLANE_CAPACITY_SECONDS and kept on its row.

The scheduler plans with IT's declaration lowered to the last answer while that answer is fresh (`planned`);
an answer never raises it: capacity a site keeps for other uses is not Gridlane's to hand out. A fabric that
keeps a queue of its own (Slurm, PBS, Kubernetes: `queues_work`) is planned with the declaration alone: work
that does not fit now waits in that queue, which says why (Gridlane shows it), and a Kubernetes autoscaler
only adds nodes for pods that wait. Its answer still shows on the IT pages and sets its health.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db.models import Q

from fabrics.base import FabricError
from portal.queues.capacity import FRESH_PERIODS, fresh, live_since, period, planned, queues_work
from portal.queues.models import Fabric as FabricRow
from portal.worker import live
from portal.worker.connections import fabric_for
from portal.worker.health import set_health

log = logging.getLogger("gridlane.worker")

# What planning reads of an observation lives a layer down (portal.queues.capacity): the burst pools read it too.
__all__ = ["FRESH_PERIODS", "fresh", "live_since", "observe", "observe_all", "period", "planned", "queues_work"]

# When each fabric was last asked, answered or not: a fabric that fails is not asked again every cycle.
_asked: dict[int, datetime] = {}


def observe_all(now: datetime) -> int:
    """Ask each enabled fabric whose answer is older than GRIDLANE_CAPACITY_SECONDS; returns how many answered."""
    every = period()
    due = FabricRow.objects.filter(enabled=True).filter(Q(observed_at__isnull=True) | Q(observed_at__lte=now - every))
    answered = 0
    for row in due:
        asked = _asked.get(row.pk)
        if asked is not None and now - every < asked <= now:
            continue
        _asked[row.pk] = now
        answered += observe(row, now)
    return answered


def observe(row: FabricRow, now: datetime) -> bool:
    """Ask one fabric and keep its answer; False (nothing kept, the fabric marked unhealthy) when it fails."""
    try:
        answer = fabric_for(row).capacity()
    except FabricError as error:
        log.warning("capacity of %s unknown: %s", row.name, error)
        set_health(row, healthy=False, detail=str(error))
        return False
    except Exception as error:  # a fabric's bug must not stop the cycle: plan on with what was known
        log.exception("capacity of %s failed", row.name)
        set_health(row, healthy=False, detail=f"capacity check failed: {error}")
        return False
    total = answer.total
    fields = {
        "observed_gpus_milli": max(0, total.gpus_milli),
        "observed_cpus_milli": max(0, total.cpus_milli),
        "observed_memory_mib": max(0, total.memory_mib),
        "observed_at": now,
        "observed_detail": answer.detail[:300],
    }
    FabricRow.objects.filter(pk=row.pk).update(**fields)
    for name, value in fields.items():
        setattr(row, name, value)
    live.keep(row.pk, answer.free, now)
    set_health(row, healthy=answer.healthy, detail="" if answer.healthy else answer.detail)
    return True
