"""Queue figures read by the API and pages: backlog, running, recent p95 wait, how good recent estimated starts were
(a bounded number of queries)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Q
from django.utils import timezone

from portal.queues.models import Queue
from portal.workloads.calibration import ERROR_WINDOW, Calibration, calibration_of
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler.estimates import percentile  # one percentile for every page and estimate

WAIT_WINDOW = ERROR_WINDOW  # 7 days


@dataclass(frozen=True)
class QueueFigures:
    queue: Queue
    backlog: int
    running: int
    p95_wait_seconds: float | None
    estimates: Calibration | None = None  # how good its estimated starts were over the same window


def queue_figures(queues: Iterable[Queue]) -> list[QueueFigures]:
    """Three queries whatever the number of queues (the estimates' errors come with the waits)."""
    counted = list(
        Queue.objects.filter(pk__in=[q.pk for q in queues]).annotate(
            backlog=Count("workloads", filter=Q(workloads__state__in=[State.PENDING, State.ADMITTED])),
            running=Count("workloads", filter=Q(workloads__state__in=[State.DISPATCHING, State.RUNNING])),
        )
    )
    waits: defaultdict[int, list[float]] = defaultdict(list)
    errors: defaultdict[int, list[float]] = defaultdict(list)
    now = timezone.now()
    seen = Workload.objects.filter(queue__in=counted).filter(
        Q(started_at__gte=now - WAIT_WINDOW) | Q(state=State.PENDING, array_size=0)
    )
    rows = seen.values_list("queue_id", "submitted_at", "started_at", "estimate_error_s")
    for queue_id, submitted_at, started_at, error in rows:
        waits[queue_id].append(waited(submitted_at, started_at, now))
        if error is not None:
            errors[queue_id].append(float(error))
    return [
        QueueFigures(q, q.backlog, q.running, percentile(waits[q.pk], 95), calibration_of(errors[q.pk]))
        for q in counted
    ]


def waited(submitted_at: datetime, started_at: datetime | None, now: datetime) -> float:
    """A workload's wait in seconds, as every page counts it: until it started, or, still waiting, until now (a
    p95 of 0 while a job has waited 5 minutes would say the opposite of what is true). IT's Queues page and the
    team dashboard both count waits so, with `percentile`."""
    return max(0.0, ((started_at or now) - submitted_at).total_seconds())
