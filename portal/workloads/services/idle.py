"""Idle warnings on running work (the worker's, see portal/worker/idle.py and gpu_idle.py): set once per idle
spell and taken back when the work is used again, each a compare-and-swap with an event while the work runs."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State


def do_warn_idle(workload: Workload, stop_at: datetime, reason: str) -> bool:
    """Record, once per idle spell, when a running idle notebook will be stopped; False if warned already."""
    return _warn_once(workload, "idle_stop_at", stop_at, reason)


def do_clear_idle(workload: Workload, reason: str) -> bool:
    """Take back the idle warning of a notebook used again (or no longer under an idle limit)."""
    return _clear_warning(workload, "idle_stop_at", reason)


def do_warn_gpu_idle(workload: Workload, now: datetime, reason: str) -> bool:
    """Record, once per idle spell, that the owner of running work whose GPUs sit idle was warned; False if
    warned already (or it no longer runs)."""
    return _warn_once(workload, "gpu_idle_warned_at", now, reason)


def do_clear_gpu_idle(workload: Workload, reason: str) -> bool:
    """Take back the GPU idle warning of work whose GPUs are busy again (or whose use is no longer known)."""
    return _clear_warning(workload, "gpu_idle_warned_at", reason)


def _warn_once(workload: Workload, field: str, value: datetime, reason: str) -> bool:
    """Set a warning's time on running work that has none yet, with an event saying why (compare-and-swap)."""
    with transaction.atomic():
        unset = {f"{field}__isnull": True}
        warned = Workload.objects.filter(pk=workload.pk, state=State.RUNNING, **unset).update(**{field: value})
        if warned:
            WorkloadEvent.objects.create(workload=workload, to_state=State.RUNNING, reason=reason[:500])
    if warned:
        setattr(workload, field, value)
    return bool(warned)


def _clear_warning(workload: Workload, field: str, reason: str) -> bool:
    """Take a warning back, as it was read (compare-and-swap), with an event while the work runs."""
    given = getattr(workload, field)
    if given is None:
        return False
    with transaction.atomic():
        cleared = Workload.objects.filter(pk=workload.pk, **{field: given}).update(**{field: None})
        if cleared and workload.state == State.RUNNING:
            WorkloadEvent.objects.create(workload=workload, to_state=State.RUNNING, reason=reason[:500])
    setattr(workload, field, None)
    return bool(cleared)
