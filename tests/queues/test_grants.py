"""Temporary grants: what may be asked for, the department rule that approves at once, IT's decisions, and the
audit log of each step. bob leads vision; the demo's local fabric has 8 GPUs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from portal.accounts.models import AuditEvent, ResourceGroup
from portal.queues import grants
from portal.queues.models import Fabric, Quota, QuotaGrant

HOUR = timedelta(hours=1)


@pytest.fixture
def local(cast):
    return Fabric.objects.get(name="local")


def ask_for(local, gpus=2, start_in=HOUR, hours=24, reason="a deadline"):
    start = timezone.now() + start_in
    return grants.Ask(local, int(gpus * 1000), start, start + timedelta(hours=hours), reason)


def asked(bob, team, ask):
    return grants.do_ask(bob, grants.check_ask(bob, team, ask, timezone.now()), timezone.now())


def refusal(bob, team, ask) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as error:
        grants.check_ask(bob, team, ask, timezone.now())
    return error.value.message_dict


@pytest.mark.parametrize(
    ("what", "change", "field", "words"),
    [
        ("no GPUs", {"gpus": 0}, "gpus_milli", "more than 0"),
        ("more GPUs than the fabric holds", {"gpus": 9}, "gpus_milli", "holds 8 GPUs"),
        ("ending before it starts", {"hours": -1}, "ends_at", "end after it starts"),
        ("longer than 90 days", {"hours": 91 * 24}, "ends_at", "at most 90 days"),
        ("ending in the past", {"start_in": -3 * HOUR, "hours": 1}, "ends_at", "in the past"),
        ("no reason", {"reason": "  "}, "reason", "blank"),
    ],
)
def test_an_ask_that_cannot_be_granted_is_refused_by_field_and_nothing_is_saved(
    bob, vision, local, what, change, field, words
):
    errors = refusal(bob, vision, ask_for(local, **change))
    assert words in " ".join(errors[field])
    assert not QuotaGrant.objects.exists()


def test_a_grant_overlapping_one_asked_for_or_approved_is_refused_with_what_to_do_instead(bob, vision, local):
    first = asked(bob, vision, ask_for(local, hours=24))
    errors = refusal(bob, vision, ask_for(local, start_in=12 * HOUR, hours=24))
    assert "overlaps" in errors["__all__"][0]
    assert "extend or withdraw that one instead" in errors["__all__"][0]
    # Back to back is no overlap; another fabric or team is none either.
    asked(bob, vision, ask_for(local, start_in=25 * HOUR, hours=1))
    # Once the first is declined, its window is free again.
    grants.do_decide(None, first, approve=False, note="no", now=timezone.now())
    asked(bob, vision, ask_for(local, start_in=2 * HOUR, hours=2))
    assert QuotaGrant.objects.count() == 3


def test_the_admin_refuses_an_overlapping_grant_with_a_clear_error_and_saves_nothing(client, it_admin, bob, vision,
                                                                                     local):  # fmt: skip
    asked(bob, vision, ask_for(local, hours=24))
    client.force_login(it_admin)
    start = timezone.now() + 2 * HOUR
    response = client.post(
        "/admin/queues/quotagrant/add/",
        {
            "team": vision.pk,
            "fabric": local.pk,
            "gpus_milli": "1000",
            "starts_at_0": start.strftime("%Y-%m-%d"),
            "starts_at_1": start.strftime("%H:%M:%S"),
            "ends_at_0": (start + HOUR).strftime("%Y-%m-%d"),
            "ends_at_1": (start + HOUR).strftime("%H:%M:%S"),
            "reason": "more",
        },
    )
    assert response.status_code == 200
    assert "overlaps this one" in response.content.decode()
    assert QuotaGrant.objects.count() == 1


def test_an_ask_waits_for_it_and_is_audited_at_each_step(bob, it_admin, vision, local):
    grant = asked(bob, vision, ask_for(local))
    assert grant.state == QuotaGrant.State.REQUESTED  # vision has no department
    created = AuditEvent.objects.get(action="quotagrant.created")
    assert created.actor == bob
    assert created.detail["after"]["reason"] == "a deadline"
    grants.check_decide(grant, approve=True)
    assert grants.do_decide(it_admin, grant, approve=True, note="fine for the deadline", now=timezone.now())
    grant.refresh_from_db()
    assert (grant.state, grant.decided_by, grant.decision_note) == ("approved", it_admin, "fine for the deadline")
    approved = AuditEvent.objects.get(action="quotagrant.approved")
    assert approved.actor == it_admin
    assert approved.detail["gpus"] == "2"
    assert approved.detail["note"] == "fine for the deadline"
    with pytest.raises(ValidationError, match="approved already"):
        grants.check_decide(grant, approve=False)
    assert not grants.do_decide(it_admin, grant, approve=False, note="", now=timezone.now())  # decided already
    assert grants.do_withdraw(bob, grant, timezone.now())
    assert AuditEvent.objects.get(action="quotagrant.withdrawn").actor == bob
    assert not grants.do_withdraw(bob, grant, timezone.now())


def test_a_declined_ask_says_why_in_the_audit_log(bob, it_admin, vision, local):
    grant = asked(bob, vision, ask_for(local))
    grants.do_decide(it_admin, grant, approve=False, note="the pool is full that week", now=timezone.now())
    event = AuditEvent.objects.get(action="quotagrant.declined")
    assert event.detail["note"] == "the pool is full that week"
    assert event.detail["before"] == "requested"


@pytest.fixture
def department(vision, local):
    """Research: vision's department, reserving 6 GPUs on local, of which vision reserves 4 and fraud (also of
    research) 1: 1 GPU unused."""
    research = ResourceGroup.objects.create(slug="research", name="Research")
    ResourceGroup.objects.filter(slug__in=["vision", "fraud"]).update(parent=research)
    Quota.objects.create(group=research, fabric=local, gpu_reservation_milli=6000, gpu_limit_milli=8000)
    Quota.objects.filter(group__slug="fraud").update(gpu_reservation_milli=1000)
    vision.refresh_from_db()
    return research


def test_an_ask_within_the_department_s_unused_reservation_is_approved_at_once(bob, vision, local, department):
    grant = asked(bob, vision, ask_for(local, gpus=1))
    assert grant.state == QuotaGrant.State.APPROVED
    assert grant.decision_note == grants.AUTOMATIC
    event = AuditEvent.objects.get(action="quotagrant.approved")
    assert event.actor is None
    assert event.detail["automatically"] is True


def test_an_ask_beyond_the_department_s_unused_reservation_waits_for_it(bob, vision, local, department):
    assert asked(bob, vision, ask_for(local, gpus=1.5)).state == QuotaGrant.State.REQUESTED


def test_approved_grants_of_the_department_s_teams_use_its_room_up_while_they_overlap(
    bob, charlie, vision, local, department
):
    fraud = ResourceGroup.objects.get(slug="fraud")
    first = asked(bob, fraud, ask_for(local, gpus=0.5, hours=24))  # fraud's: the same department's room
    assert first.state == QuotaGrant.State.APPROVED
    assert asked(bob, vision, ask_for(local, gpus=1, start_in=2 * HOUR, hours=2)).state == "requested"
    later = asked(bob, vision, ask_for(local, gpus=1, start_in=30 * HOUR, hours=2))  # after fraud's ends
    assert later.state == QuotaGrant.State.APPROVED


def test_a_department_without_a_reservation_there_approves_nothing_by_itself(bob, vision, local, department):
    Quota.objects.filter(group=department).update(gpu_reservation_milli=0)
    assert asked(bob, vision, ask_for(local, gpus=0.1)).state == QuotaGrant.State.REQUESTED


def test_an_approved_grant_reads_as_scheduled_active_or_expired_by_the_clock(bob, it_admin, vision, local):
    grant = asked(bob, vision, ask_for(local, hours=2))
    grants.do_decide(it_admin, grant, approve=True, note="", now=timezone.now())
    assert grant.shown_state(grant.starts_at - HOUR) == "scheduled"
    assert grant.shown_state(grant.starts_at) == "active"
    assert grant.active_at(grant.starts_at)
    assert grant.shown_state(grant.ends_at) == "expired"
    assert not grant.active_at(grant.ends_at)


def test_it_approves_selected_asks_in_the_admin_through_the_same_service(client, it_admin, bob, vision, local):
    grant = asked(bob, vision, ask_for(local))
    client.force_login(it_admin)
    response = client.post(
        "/admin/queues/quotagrant/", {"action": "approve", "_selected_action": [grant.pk]}, follow=True
    )
    assert "Approved 1." in response.content.decode()
    grant.refresh_from_db()
    assert (grant.state, grant.decided_by) == ("approved", it_admin)
    assert AuditEvent.objects.get(action="quotagrant.approved").actor == it_admin
    assert client.get(f"/admin/queues/quotagrant/{grant.pk}/change/").status_code == 200
