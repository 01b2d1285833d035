"""Hourly rollups: the pure arithmetic on spans, then the worker's step against the database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from portal.usage import rollup
from portal.usage.models import UsageMemberRollup, UsageRollup, UsageSample
from portal.usage.rollup import Span, compute
from portal.workloads.models import Workload
from portal.workloads.states import State

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def span(gpus=1.0, submitted=T0, started=None, finished=None, group=1, queue=1, owner=1):
    return Span(group, queue, owner, gpus, submitted, started, finished)


def test_two_gpus_running_half_an_hour_make_one_gpu_hour():
    s = span(gpus=2, started=T0 + timedelta(minutes=30), finished=T0 + timedelta(hours=1))
    cells, members = compute([("w", s)], set(), {}, T0, T0 + timedelta(hours=2))
    assert cells[(1, 1, T0)].gpu_hours == pytest.approx(1.0)
    assert cells[(1, 1, T0)].pending_gpu_hours == pytest.approx(1.0)  # it waited the first half hour
    assert members[(1, 1, T0)].gpu_hours == pytest.approx(1.0)
    assert (1, 1, T0 + timedelta(hours=1)) not in cells


def test_a_run_across_the_hour_is_split_between_both_hours():
    s = span(started=T0 + timedelta(minutes=45), finished=T0 + timedelta(minutes=75))
    cells, _ = compute([("w", s)], set(), {}, T0, T0 + timedelta(hours=2))
    assert cells[(1, 1, T0)].gpu_hours == pytest.approx(0.25)
    assert cells[(1, 1, T0 + timedelta(hours=1))].gpu_hours == pytest.approx(0.25)


def test_the_current_hour_counts_only_up_to_now():
    s = span(started=T0)
    cells, _ = compute([("w", s)], set(), {1: 4.0}, T0, T0 + timedelta(minutes=15))
    assert cells[(1, 1, T0)].gpu_hours == pytest.approx(0.25)
    assert cells[(1, 1, T0)].reserved_gpu_hours == pytest.approx(1.0)  # 4 GPUs reserved for a quarter hour


def test_waits_of_the_workloads_started_in_the_hour_give_p50_and_p95():
    spans = [
        (f"w{i}", span(submitted=T0, started=T0 + timedelta(minutes=i), finished=T0 + timedelta(minutes=i + 1)))
        for i in range(1, 11)
    ]
    cells, _ = compute(spans, set(), {}, T0, T0 + timedelta(hours=1))
    assert sorted(cells[(1, 1, T0)].waits) == [60.0 * i for i in range(1, 11)]


def test_a_workload_marked_idle_counts_its_gpu_hours_as_idle():
    s = span(gpus=4, started=T0, finished=T0 + timedelta(hours=1))
    cells, members = compute([("w", s)], {("w", T0)}, {}, T0, T0 + timedelta(hours=1))
    assert cells[(1, 1, T0)].idle_gpu_hours == pytest.approx(4.0)
    assert members[(1, 1, T0)].idle_gpu_hours == pytest.approx(4.0)


def test_the_step_samples_running_work_and_writes_rollups_per_team_queue_and_member(alice, bob, submit):
    # Half past an hour that has passed: two minutes later is still the same hour, whenever the test runs.
    now = (datetime.now(UTC) - timedelta(hours=1)).replace(minute=30, second=0, microsecond=0)
    busy = submit(alice, name="busy", gpus=2)
    lazy = submit(bob, name="lazy", gpus=1)
    waiting = submit(alice, name="waiting", gpus=1)
    started = now - timedelta(minutes=3)
    Workload.objects.filter(pk__in=[busy.pk, lazy.pk]).update(
        state=State.RUNNING, submitted_at=started - timedelta(minutes=1), started_at=started
    )
    Workload.objects.filter(pk=waiting.pk).update(submitted_at=now - timedelta(minutes=2))
    # A fabric reported utilisation: lazy's GPUs sit idle this hour, busy's work hard.
    UsageSample.objects.create(workload=lazy, at=now - timedelta(seconds=30), gpus_milli=1000, gpu_utilisation=5)
    UsageSample.objects.create(workload=busy, at=now - timedelta(seconds=30), gpus_milli=2000, gpu_utilisation=95)

    rollup.step(now)

    assert UsageSample.objects.filter(at=now).count() == 0  # each has a sample from the last minute
    rows = UsageRollup.objects.filter(group__slug="vision", queue__slug="train")
    gpu_hours = sum(r.gpu_hours for r in rows)
    assert gpu_hours == pytest.approx(3 * 3 / 60, rel=0.02)
    assert sum(r.idle_gpu_hours for r in rows) == pytest.approx(1 * 3 / 60, rel=0.02)
    assert sum(r.pending_gpu_hours for r in rows) == pytest.approx((2 + 1 + 2) / 60, rel=0.05)
    assert sum(r.reserved_gpu_hours for r in rows) > 0
    assert sum(r.started for r in rows) == 2
    by_member = {m.user.username: m.gpu_hours for m in UsageMemberRollup.objects.select_related("user")}
    assert by_member["alice"] == pytest.approx(2 * 3 / 60, rel=0.02)
    assert by_member["bob"] == pytest.approx(3 / 60, rel=0.02)

    rollup.step(now + timedelta(minutes=2))  # idempotent: rows are rewritten, not added to
    assert UsageRollup.objects.filter(group__slug="vision").count() == rows.count()
    assert UsageSample.objects.filter(at=now + timedelta(minutes=2)).count() == 2  # due now: one per running


def test_the_step_never_breaks_the_cycle(monkeypatch, db):
    def boom(*args):
        raise RuntimeError("database went away")

    monkeypatch.setattr(rollup, "_step", boom)
    assert rollup.step(datetime.now(UTC)) == 0


def test_the_worker_cycle_keeps_the_rollups(alice, submit):
    from portal.worker import tasks

    submit(alice, name="waits-a-bit", gpus=1)
    tasks.cycle()
    assert UsageRollup.objects.filter(group__slug="vision").exists()


def test_a_running_workload_without_a_recent_sample_gets_one(alice, submit):
    reported, quiet = submit(alice, name="reported", gpus=1), submit(alice, name="quiet", gpus=0.5)
    now = datetime.now(UTC)
    Workload.objects.filter(pk__in=[reported.pk, quiet.pk]).update(state=State.RUNNING, started_at=now)
    UsageSample.objects.create(workload=reported, at=now - timedelta(seconds=10), gpus_milli=1000, gpu_utilisation=50)
    rollup.step(now)
    assert list(UsageSample.objects.filter(at=now).values_list("workload__name", "gpus_milli")) == [("quiet", 500)]
