"""Who sets a budget and within what (errors name their field), and the alerts at IT's thresholds: one message
per threshold and window, however many steps see it crossed."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from portal.budgets import step
from portal.budgets.models import Budget
from portal.notify.models import Event, Notification, Preference
from tests.budgets.conftest import T0, ran, set_budget

pytestmark = pytest.mark.usefixtures("at_t0")


def refused(by, team, user=None, **fields) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        set_budget(by, team, user, **fields)
    return caught.value.message_dict


def test_a_lead_sets_a_members_budget_within_the_teams_and_never_above(alice, bob, it_admin, vision):
    set_budget(it_admin, vision, gpu_hours=Decimal(40), money=Decimal(100))
    assert "gpu_hours" in refused(bob, vision, alice, gpu_hours=Decimal(50))
    assert "money" in refused(bob, vision, alice, money=Decimal("100.01"))
    hers = set_budget(bob, vision, alice, gpu_hours=Decimal(30))
    assert (hers.scope, hers.set_by) == (Budget.Scope.MEMBER, bob)
    # IT may not lower the team's below hers either: the error says whose is in the way.
    assert "alice" in refused(it_admin, vision, gpu_hours=Decimal(20))["gpu_hours"][0]


def test_the_teams_own_budget_is_its_and_other_teams_leads_and_members_set_none(alice, bob, charlie, vision):
    assert "user" in refused(bob, vision, gpu_hours=Decimal(10))
    with pytest.raises(PermissionDenied):
        set_budget(alice, vision, alice, gpu_hours=Decimal(1))
    with pytest.raises(PermissionDenied):
        set_budget(charlie, vision, alice, gpu_hours=Decimal(1))


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({}, "gpu_hours"),
        ({"gpu_hours": Decimal(0)}, "gpu_hours"),
        ({"money": Decimal(-1)}, "money"),
        ({"gpu_hours": Decimal(1), "window": "custom", "ends_on": date(2026, 12, 31)}, "starts_on"),
        (
            {"gpu_hours": Decimal(1), "window": "custom", "starts_on": date(2026, 12, 9), "ends_on": date(2026, 12, 9)},
            "ends_on",
        ),
        ({"gpu_hours": Decimal(1), "starts_on": date(2026, 12, 1)}, "starts_on"),
        ({"gpu_hours": Decimal(1), "thresholds": [100, 80]}, "thresholds"),
        ({"gpu_hours": Decimal(1), "thresholds": [0, 100]}, "thresholds"),
        ({"gpu_hours": Decimal(1), "thresholds": "80"}, "thresholds"),
    ],
)
def test_a_wrong_budget_is_refused_naming_its_field(it_admin, vision, fields, field):
    assert field in refused(it_admin, vision, **fields)


def test_a_member_of_another_team_or_its_agent_has_no_budget_here(it_admin, charlie, vision):
    assert refused(it_admin, vision, charlie, gpu_hours=Decimal(1))["user"] == ["Not a member of this team."]


def test_a_custom_window_counts_only_its_days(alice, it_admin, vision, submit):
    ran(submit, alice, gpus=1, hours=2, until=T0 - timedelta(days=2))
    ran(submit, alice, gpus=1, hours=3)
    since = set_budget(
        it_admin,
        vision,
        gpu_hours=Decimal(100),
        window="custom",
        starts_on=date(2026, 12, 14),
        ends_on=date(2026, 12, 16),
    )
    assert since.spent_gpu_hours == pytest.approx(3.0)


def test_a_threshold_crossed_tells_the_lead_once_and_the_next_window_again(alice, bob, it_admin, vision, submit):
    Preference.objects.create(user=bob, webhook_url="https://hooks.example.org/budget")
    set_budget(it_admin, vision, gpu_hours=Decimal(10))
    ran(submit, alice, gpus=1, hours=8.5)
    for _ in range(3):
        step.step(T0)
    (eighty,) = Notification.objects.filter(event=Event.BUDGET)
    assert (eighty.user, eighty.subject) == (bob, "Team vision: 80 % of the budget for December 2026")
    assert "8.5 of 10 GPU-hours" in eighty.text
    ran(submit, alice, gpus=1, hours=2, until=T0 + timedelta(hours=2))
    step.step(T0 + timedelta(hours=2))
    step.step(T0 + timedelta(hours=2))
    assert Notification.objects.filter(event=Event.BUDGET).count() == 2
    full = Notification.objects.filter(event=Event.BUDGET).exclude(pk=eighty.pk).get()
    assert full.subject.startswith("Team vision: 100 %")
    assert "New work waits" in full.text
    # January: nothing spent yet, nothing said; the thresholds count afresh.
    january = T0 + timedelta(days=20)
    step.step(january)
    assert Notification.objects.filter(event=Event.BUDGET).count() == 2
    assert Budget.objects.get(user=None).held_reason == ""


def test_a_lead_who_turned_budget_messages_off_hears_nothing(alice, bob, it_admin, vision, submit):
    Preference.objects.create(user=bob, webhook_url="https://hooks.example.org/budget", events=["failed"])
    set_budget(it_admin, vision, gpu_hours=Decimal(1))
    ran(submit, alice, gpus=1, hours=2)
    step.step(T0)
    assert not Notification.objects.filter(event=Event.BUDGET).exists()
