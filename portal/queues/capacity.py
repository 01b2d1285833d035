"""What planning makes of a fabric's observed capacity (kept on its row by the worker's capacity step,
portal.worker.capacity): an answer is fresh for FRESH_PERIODS observation periods; the capacity to plan with is
IT's declaration lowered per resource to a fresh answer, never raised; a fabric that keeps a queue of its own
(`queues_work`) is planned with the declaration alone. Below the worker and the burst pools, which both plan
with it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from fabrics.base import Resources
from fabrics.registry import fabric_class
from portal.queues.models import Fabric as FabricRow

# An answer older than this many observation periods is stale: planning falls back to the declaration.
FRESH_PERIODS = 3


def period() -> timedelta:
    return timedelta(seconds=settings.GRIDLANE_CAPACITY_SECONDS)


def live_since(now: datetime) -> datetime:
    """The oldest observation of what is free (portal/worker/live.py) that planning still reads."""
    return now - FRESH_PERIODS * period()


def fresh(row: FabricRow, now: datetime) -> bool:
    """Whether the fabric's last answer is recent enough to plan with."""
    return row.observed_at is not None and now - row.observed_at <= FRESH_PERIODS * period()


def queues_work(kind: str) -> bool:
    """Whether fabrics of this kind hold work that does not fit yet in a queue of their own."""
    try:
        return bool(getattr(fabric_class(kind), "queues_work", False))
    except (KeyError, ValueError):
        return False


def planned(row: FabricRow, now: datetime) -> Resources:
    """The capacity to plan with: the declaration, lowered per resource to a fresh answer, never raised."""
    declared = row.capacity
    observed = row.observed
    if observed is None or not fresh(row, now) or queues_work(row.kind):
        return declared
    return Resources(
        min(declared.gpus_milli, observed.gpus_milli),
        min(declared.cpus_milli, observed.cpus_milli),
        min(declared.memory_mib, observed.memory_mib),
    )
