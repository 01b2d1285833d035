"""The worker's estimates with learned runtimes: work that fills the pool and whose shape has a history of short
runs is expected to end when such runs end, not at its runtime limit; each estimate shown is recorded."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from portal.queues.models import Quota
from portal.worker import tasks
from portal.workloads import calibration
from portal.workloads.models import Workload
from portal.workloads.states import State


def test_an_estimate_plans_with_the_learned_runtime_once_history_supports_it(alice, submit):
    Quota.objects.filter(group__slug="vision").update(gpu_limit_milli=None)
    big = submit(alice, name="big", command="sleep 300", gpus=8, runtime_limit_minutes=30)
    tasks.admit()
    assert Workload.objects.get(pk=big.pk).state == State.ADMITTED
    waiting = submit(alice, name="next", command="true", gpus=2)
    tasks.admit()
    waiting.refresh_from_db()
    by_limit = waiting.estimated_start
    assert by_limit is not None
    assert abs((by_limit - (timezone.now() + timedelta(minutes=30))).total_seconds()) < 30
    assert waiting.first_estimated_start == waiting.last_estimated_start == by_limit

    # Five runs of big's shape (team, queue, 8 GPUs on one node, 30 minutes) that ended lately took 5 minutes.
    ended = timezone.now() - timedelta(hours=1)
    for i in range(5):
        done = submit(alice, name=f"done{i}", command="true", gpus=8, runtime_limit_minutes=30)
        Workload.objects.filter(pk=done.pk).update(
            state=State.SUCCEEDED, started_at=ended - timedelta(minutes=5), finished_at=ended
        )
    calibration.LEARNED.forget()  # (the worker reads them again every ten minutes)
    tasks.admit()
    waiting.refresh_from_db()
    learned = waiting.estimated_start
    assert learned is not None
    assert abs((learned - (timezone.now() + timedelta(minutes=5))).total_seconds()) < 30
    assert waiting.first_estimated_start == by_limit  # the first estimate shown stays recorded
    assert waiting.last_estimated_start == learned
    assert Workload.objects.get(pk=big.pk).state == State.ADMITTED  # admission is as it was
    assert waiting.state == State.PENDING
