"""IT's priority tiers (the admin): a tier nobody may use is a clear error and nothing is saved, every change is
audited like a queue's, a tier that unfinished work still names is not deleted, and fabric hints are checked."""

from __future__ import annotations

import pytest

from portal.accounts.models import AuditEvent, ResourceGroup
from portal.queues.models import PriorityTier
from portal.workloads.models import Workload
from portal.workloads.states import State

ADD = "/admin/queues/prioritytier/add/"
FORM = {"name": "Gold", "slug": "gold", "weight": "5", "order": "40"}


@pytest.fixture
def it_client(client, it_admin):
    client.force_login(it_admin)
    return client


def test_a_tier_nobody_may_use_is_refused_and_nothing_is_saved(it_client):
    response = it_client.post(ADD, FORM)
    assert response.status_code == 200
    assert "Nobody could use this tier: choose the teams that may, or tick Every team." in response.content.decode()
    assert not PriorityTier.objects.filter(slug="gold").exists()
    assert not AuditEvent.objects.filter(action="prioritytier.created").exists()


def test_a_tier_for_one_team_is_saved_and_audited_with_who_made_it(it_client, it_admin):
    fraud = ResourceGroup.objects.get(slug="fraud")
    response = it_client.post(ADD, FORM | {"allowed_groups": [fraud.pk], "may_preempt": "on", "slurm_qos": "gold"})
    assert response.status_code == 302, response.content.decode()[:2000]
    tier = PriorityTier.objects.get(slug="gold")
    assert (tier.weight, tier.may_preempt, tier.slurm_qos) == (5, True, "gold")
    assert list(tier.allowed_groups.all()) == [fraud]
    created = AuditEvent.objects.get(action="prioritytier.created")
    assert (created.actor, created.detail["after"]["weight"]) == (it_admin, 5.0)
    assert AuditEvent.objects.filter(action="prioritytier.changed", detail__field="allowed_groups").exists()


def test_taking_the_last_team_off_a_tier_is_refused(it_client):
    tier = PriorityTier.objects.create(slug="gold", name="Gold", weight=5)
    tier.allowed_groups.add(ResourceGroup.objects.get(slug="fraud"))
    response = it_client.post(f"/admin/queues/prioritytier/{tier.pk}/change/", FORM | {"allowed_groups": []})
    assert "Nobody could use this tier" in response.content.decode()
    assert tier.allowed_groups.count() == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [("slurm_qos", "gold; rm -rf /"), ("slurm_nice", "20000"), ("pbs_priority", "2000"),
     ("kubernetes_priority_class", "Not_A_Name"), ("slug", "Gold Tier")],
)  # fmt: skip
def test_fabric_hints_are_checked_before_anything_is_saved(it_client, field, value):
    response = it_client.post(ADD, FORM | {"open_to_all": "on", field: value})
    assert response.status_code == 200
    assert 'class="errorlist' in response.content.decode()
    assert not PriorityTier.objects.filter(name="Gold").exists()


def test_a_tier_named_by_work_that_has_not_ended_is_not_deleted(it_client, alice, submit):
    tier = PriorityTier.objects.create(slug="gold", name="Gold", weight=5, open_to_all=True)
    workload = submit(alice, priority="gold")
    url = f"/admin/queues/prioritytier/{tier.pk}/delete/"
    page = it_client.get(url).content.decode()
    assert "1 workload at this tier that has not ended" in page
    it_client.post(url, {"post": "yes"})
    assert PriorityTier.objects.filter(pk=tier.pk).exists()
    Workload.objects.filter(pk=workload.pk).update(state=State.SUCCEEDED)
    it_client.post(url, {"post": "yes"})
    assert not PriorityTier.objects.filter(pk=tier.pk).exists()
    assert AuditEvent.objects.filter(action="prioritytier.deleted").exists()


def test_a_tiers_slug_cannot_change_once_it_exists(it_client):
    tier = PriorityTier.objects.get(slug="normal")
    page = it_client.get(f"/admin/queues/prioritytier/{tier.pk}/change/").content.decode()
    assert 'name="slug"' not in page
