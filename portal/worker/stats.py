"""What the worker counts for /metrics, kept in the database so the web process can serve it: named counters
and gauges (portal.counters, re-exported here) and the queue-wait histogram per team."""

from __future__ import annotations

import math

from django.db.models import F

from portal.counters.counts import count, gauge, read, record, take_request
from portal.worker.models import WaitBucket
from portal.workloads.models import Workload

# Queue-wait histogram bounds, in seconds: 10 s to a day.
WAIT_BUCKETS = (10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 4 * 3600.0, 24 * 3600.0, math.inf)


def observe_wait(group_id: int, w: Workload) -> None:
    """A workload started: count its queue wait (submit -> start) in its team's histogram."""
    if w.started_at is None:
        return
    wait = max(0.0, (w.started_at - w.submitted_at).total_seconds())
    le = next(b for b in WAIT_BUCKETS if wait <= b)
    WaitBucket.objects.get_or_create(group_id=group_id, le=le)
    WaitBucket.objects.filter(group_id=group_id, le=le).update(
        count=F("count") + 1, total_seconds=F("total_seconds") + wait
    )


def observe_waits(started: list[Workload]) -> None:
    """observe_wait for many starts: one update per team and bucket they fall in, not one per start."""
    sums: dict[tuple[int, float], tuple[int, float]] = {}
    for w in started:
        if w.started_at is None:
            continue
        wait = max(0.0, (w.started_at - w.submitted_at).total_seconds())
        key = (w.group_id, next(b for b in WAIT_BUCKETS if wait <= b))
        n, total = sums.get(key, (0, 0.0))
        sums[key] = (n + 1, total + wait)
    for (group_id, le), (n, total) in sums.items():
        WaitBucket.objects.get_or_create(group_id=group_id, le=le)
        WaitBucket.objects.filter(group_id=group_id, le=le).update(
            count=F("count") + n, total_seconds=F("total_seconds") + total
        )


__all__ = ["WAIT_BUCKETS", "count", "gauge", "observe_wait", "observe_waits", "read", "record", "take_request"]
