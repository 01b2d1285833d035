"""Wait objectives against the database: figures from the rollups' wait slices, and one alert per burn episode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from portal.accounts.models import Membership
from portal.notify.models import Event, Notification, Preference
from portal.objectives import evaluate
from portal.objectives.models import WaitObjective
from portal.queues.models import PriorityTier, Queue
from portal.usage import rollup
from portal.usage.models import WaitSlice
from portal.usage.waits import COLUMNS, THRESHOLDS_MIN, slice_of
from portal.workloads.models import Workload
from portal.workloads.states import State

NOW = slice_of(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))


def objective(**fields):
    values = {"slug": "train-p95", "name": "Training starts", "kind": "queue", "queue": Queue.objects.get(slug="train"),
              "threshold_minutes": 60, "percent": 95.0, "days": 30}  # fmt: skip
    return WaitObjective.objects.create(**(values | fields))


def starts(vision, at, n, waited_minutes, queue="train", tier="normal"):
    """n starts in the slice at `at`, each after waiting `waited_minutes`."""
    over = {col: n if waited_minutes > m else 0 for col, m in zip(COLUMNS, THRESHOLDS_MIN, strict=True)}
    WaitSlice.objects.update_or_create(
        group=vision, queue=Queue.objects.get(slug=queue), tier=tier, start=slice_of(at),
        defaults={"started": n, **over},
    )  # fmt: skip


def listening(*users):
    """They have e-mail on; charlie leads fraud (a team of the train queue, not bob's)."""
    Membership.objects.filter(user__username="charlie", group__slug="fraud").update(role=Membership.Role.LEAD)
    for user in users:
        Preference.objects.update_or_create(user=user, defaults={"email": True})


def test_the_objective_is_read_from_the_slices_the_rollup_writes(alice, submit):
    now = (datetime.now(UTC) - timedelta(hours=1)).replace(minute=30, second=0, microsecond=0)
    quick = [submit(alice, name=f"quick{i}") for i in range(19)]
    slow = submit(alice, name="slow")
    Workload.objects.filter(pk__in=[w.pk for w in quick]).update(
        state=State.RUNNING, submitted_at=now - timedelta(minutes=12), started_at=now - timedelta(minutes=10)
    )
    Workload.objects.filter(pk=slow.pk).update(
        state=State.RUNNING, submitted_at=now - timedelta(hours=3), started_at=now - timedelta(minutes=10)
    )
    rollup.roll_up(now - timedelta(minutes=20), now)
    goal = objective()
    status = evaluate.measure(goal, now)
    assert (status.started, status.over) == (20, 1)  # one in twenty waited over an hour: 5 %, the whole budget
    assert status.budget_remaining == pytest.approx(0.0)
    assert status.burn["slow_long"] == pytest.approx(1.0)
    assert status.wait_s is not None
    assert 60 <= status.wait_s <= 300


def test_a_tier_objective_counts_only_its_tier_s_work(vision, cast):
    starts(vision, NOW - timedelta(minutes=10), 4, 90, tier="high")
    starts(vision, NOW - timedelta(minutes=10), 6, 0, tier="normal")
    goal = objective(kind="tier", queue=None, tier=PriorityTier.objects.get(slug="high"), slug="high-p95")
    status = evaluate.measure(goal, NOW)
    assert (status.started, status.over) == (4, 4)


def test_a_burn_across_both_windows_alerts_once_and_again_only_after_it_recovers(vision, bob, charlie, it_admin):
    listening(bob, charlie, it_admin)
    goal = objective()
    starts(vision, NOW - timedelta(minutes=40), 10, 120)  # the last hour burns...
    starts(vision, NOW - timedelta(minutes=2), 5, 90)  # ...and so do the last five minutes

    assert evaluate.step(NOW)["episodes"] == 1
    sent = Notification.objects.filter(event=Event.OBJECTIVE)
    assert sorted(sent.values_list("user__username", flat=True)) == ["bob", "charlie", "it"]  # queue's leads, IT
    assert "Training starts" in sent.first().subject
    goal.refresh_from_db()
    assert goal.alert == WaitObjective.Alert.BURNING
    assert "fast" in goal.status["firing"]

    for minutes in (1, 2, 3):  # still burning, cycle after cycle: nothing more
        starts(vision, NOW + timedelta(minutes=minutes), 1, 90)
        assert evaluate.step(NOW + timedelta(minutes=minutes)).get("episodes") == 0
    assert sent.count() == 3

    later = NOW + timedelta(hours=8)  # the burn stopped: nothing waited in the windows since
    starts(vision, later - timedelta(minutes=3), 20, 0)
    evaluate.step(later)
    goal.refresh_from_db()
    assert goal.alert == WaitObjective.Alert.OK
    assert sent.count() == 3

    starts(vision, later + timedelta(minutes=20), 10, 120)  # a new burn: a new episode, a new message
    starts(vision, later + timedelta(minutes=58), 5, 90)
    assert evaluate.step(later + timedelta(hours=1))["episodes"] == 1
    assert sent.count() == 6


def test_a_team_objective_alerts_its_own_leads_and_it_only(vision, bob, charlie, it_admin):
    listening(bob, charlie, it_admin)
    objective(kind="team", queue=None, team=vision, slug="vision-p95")
    starts(vision, NOW - timedelta(minutes=30), 10, 120)
    starts(vision, NOW - timedelta(minutes=1), 5, 120)
    evaluate.step(NOW)
    assert sorted(Notification.objects.values_list("user__username", flat=True)) == ["bob", "it"]


def test_an_objective_with_no_work_neither_burns_nor_fails(cast):
    goal = objective()
    assert evaluate.step(NOW) == {"evaluated": 1, "episodes": 0}
    goal.refresh_from_db()
    assert goal.status["started"] == 0
    assert goal.status["budget_remaining"] == 1.0


def test_old_slices_are_pruned_past_the_longest_window(vision):
    starts(vision, NOW - timedelta(days=120), 3, 0)
    starts(vision, NOW - timedelta(days=10), 3, 0)
    evaluate.step(NOW)
    assert WaitSlice.objects.count() == 1


def test_the_step_never_breaks_the_cycle(monkeypatch, db):
    def boom(now):
        raise RuntimeError("no")

    monkeypatch.setattr(evaluate, "_step", boom)
    assert evaluate.step(NOW) == {}


def test_the_objective_keeps_to_one_scope(cast):
    from django.core.exceptions import ValidationError

    goal = WaitObjective(slug="x", name="X", kind="queue", team_id=1)
    with pytest.raises(ValidationError) as refused:
        goal.clean()
    assert set(refused.value.message_dict) == {"queue", "team"}


def test_the_worker_s_cycle_measures_and_alerts_once_across_its_cycles(alice, bob, it_admin, submit, settings):
    from portal.worker import tasks

    settings.GRIDLANE_ROLLUP_SECONDS = 0  # every cycle rolls up, then evaluates the objectives
    listening(bob, it_admin)
    objective()
    now = datetime.now(UTC)
    late = [submit(alice, name=f"late{i}") for i in range(3)]
    Workload.objects.filter(pk__in=[w.pk for w in late]).update(  # waited three hours, ran a moment
        state=State.SUCCEEDED, submitted_at=now - timedelta(hours=3), admitted_at=now - timedelta(minutes=1),
        started_at=now - timedelta(minutes=1), finished_at=now - timedelta(seconds=30),
    )  # fmt: skip
    for _ in range(3):
        tasks.cycle()
    assert WaitSlice.objects.filter(queue__slug="train").exists()  # written by the rollup step
    assert WaitObjective.objects.get(slug="train-p95").alert == WaitObjective.Alert.BURNING
    assert Notification.objects.filter(event=Event.OBJECTIVE).count() == 2  # bob and IT, once
