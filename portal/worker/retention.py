"""Retention: raw usage samples (with their GPUs' readings and five-minute sums), workload events and audit
entries older than their setting's days go, in bounded batches, at most once per GRIDLANE_RETENTION_SECONDS;
hourly rollups are kept (dashboards read only
those, and they are recomputed only for the last few minutes' hours, so old samples are never needed again).

A workload's events go only once the workload has finished: a live workload keeps its whole history.
A setting of 0 days keeps that kind of row for ever.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Model, QuerySet

from portal.accounts.models import AuditEvent
from portal.usage.models import UsageGpuSample, UsageGpuWindow, UsageSample
from portal.worker import stats
from portal.workloads.models import WorkloadEvent
from portal.workloads.states import FINISHED

log = logging.getLogger("gridlane.worker")

LAST_RUN = "retention_at"


def due(now: datetime) -> bool:
    last = stats.read(LAST_RUN)
    return last is None or now.timestamp() - last >= settings.GRIDLANE_RETENTION_SECONDS


def prunable(now: datetime) -> dict[str, QuerySet[Model]]:
    """What retention may delete now, by kind (only the kinds whose setting is not 0)."""
    days = settings.GRIDLANE_RETENTION_DAYS
    kinds: dict[str, QuerySet[Model]] = {}
    if days.get("usage"):
        cutoff = now - timedelta(days=days["usage"])
        kinds["usage samples"] = UsageSample.objects.filter(at__lt=cutoff)
        kinds["GPU readings"] = UsageGpuSample.objects.filter(at__lt=cutoff)
        kinds["GPU windows"] = UsageGpuWindow.objects.filter(start__lt=cutoff)
    if days.get("events"):
        cutoff = now - timedelta(days=days["events"])
        kinds["workload events"] = WorkloadEvent.objects.filter(at__lt=cutoff, workload__state__in=FINISHED)
    if days.get("audit"):
        kinds["audit entries"] = AuditEvent.objects.filter(at__lt=now - timedelta(days=days["audit"]))
    return kinds


def prune(now: datetime, batch: int | None = None, max_batches: int | None = None) -> dict[str, int]:
    """Delete what is due, at most `max_batches` batches of `batch` rows per kind (the rest goes next time);
    returns how many rows of each kind went. Each batch is two short statements, oldest first by primary key."""
    batch = batch or settings.GRIDLANE_RETENTION_BATCH
    max_batches = max_batches or settings.GRIDLANE_RETENTION_MAX_BATCHES
    deleted: dict[str, int] = {}
    for kind, rows in prunable(now).items():
        total = 0
        for _ in range(max_batches):
            pks = list(rows.order_by("pk").values_list("pk", flat=True)[:batch])
            if not pks:
                break
            total += rows.model._default_manager.filter(pk__in=pks).delete()[0]
            if len(pks) < batch:
                break
        deleted[kind] = total
    return deleted


def step(now: datetime) -> dict[str, int]:
    """The worker's retention step: prune when due (never raises: retention that lags must not stop scheduling)."""
    try:
        if not due(now):
            return {}
        deleted = prune(now)
        stats.gauge(**{LAST_RUN: now.timestamp()})
    except Exception:
        log.exception("retention failed; the next cycle tries again")
        return {}
    if any(deleted.values()):
        log.info("retention: deleted %s", ", ".join(f"{n} {kind}" for kind, n in deleted.items()))
    return deleted
