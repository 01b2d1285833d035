"""Retention deletes what is due and nothing else: raw samples, finished workloads' events and audit entries
older than their days, in bounded batches; rollups, live workloads' histories and recent rows stay."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from portal.accounts.models import AuditEvent, ResourceGroup
from portal.queues.models import Queue
from portal.usage.models import UsageGpuSample, UsageGpuWindow, UsageRollup, UsageSample
from portal.worker import retention, tasks
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State

DAY = timedelta(days=1)


def aged(model, days: float, **fields):
    return model.objects.create(at=timezone.now() - days * DAY, **fields)


def test_retention_deletes_what_is_due_and_nothing_else(alice, submit, settings, django_assert_max_num_queries):
    settings.GRIDLANE_RETENTION_DAYS = {"usage": 30, "events": 90, "audit": 365}
    now = timezone.now()
    done, live = submit(alice, name="done"), submit(alice, name="live")
    Workload.objects.filter(pk=done.pk).update(state=State.SUCCEEDED)
    keep = [
        aged(UsageSample, 29, workload=done, gpus_milli=1000),
        aged(WorkloadEvent, 400, workload=live, to_state="pending"),  # a live workload keeps its whole history
        aged(WorkloadEvent, 89, workload=done, to_state="running"),
        aged(AuditEvent, 364, action="policy.change"),
        aged(UsageGpuSample, 29, workload=done, gpu=0),
        UsageGpuWindow.objects.create(workload=done, gpu=0, start=now - 29 * DAY),
    ]
    due = [
        *(aged(UsageSample, 31 + i, workload=done, gpus_milli=1000) for i in range(7)),
        aged(WorkloadEvent, 91, workload=done, to_state="succeeded"),
        aged(AuditEvent, 366, action="signin"),
        aged(UsageGpuSample, 31, workload=done, gpu=0),
        UsageGpuWindow.objects.create(workload=done, gpu=0, start=now - 31 * DAY),
    ]
    vision = ResourceGroup.objects.get(slug="vision")
    rollup = UsageRollup.objects.create(group=vision, queue=Queue.objects.get(slug="train"), hour=now - 400 * DAY)

    # Bounded: two batches of three per kind at most, so one sample is left for next time.
    with django_assert_max_num_queries(5 * 2 * 2 + 4):
        deleted = retention.prune(now, batch=3, max_batches=2)
    assert deleted == {
        "usage samples": 6, "GPU readings": 1, "GPU windows": 1, "workload events": 1, "audit entries": 1
    }  # fmt: skip
    assert retention.prune(now, batch=3, max_batches=2) == {
        "usage samples": 1,
        "GPU readings": 0,
        "GPU windows": 0,
        "workload events": 0,
        "audit entries": 0,
    }

    for row in keep:
        assert type(row).objects.filter(pk=row.pk).exists(), row
    for row in due:
        assert not type(row).objects.filter(pk=row.pk).exists(), row
    assert UsageRollup.objects.filter(pk=rollup.pk).exists()  # rollups are kept


def test_a_setting_of_zero_days_keeps_that_kind_for_ever(alice, submit, settings):
    settings.GRIDLANE_RETENTION_DAYS = {"usage": 0, "events": 0, "audit": 0}
    aged(AuditEvent, 10_000, action="signin")
    assert retention.prune(timezone.now()) == {}
    assert AuditEvent.objects.filter(action="signin").exists()


def test_the_worker_prunes_once_per_period(alice, submit, settings):
    settings.GRIDLANE_RETENTION_DAYS = {"usage": 0, "events": 0, "audit": 30}
    settings.GRIDLANE_RETENTION_SECONDS = 3600
    aged(AuditEvent, 31, action="signin")
    tasks.cycle()
    assert not AuditEvent.objects.filter(action="signin").exists()
    aged(AuditEvent, 31, action="signin")
    tasks.cycle()  # within the hour: not again
    assert AuditEvent.objects.filter(action="signin").exists()
