"""Priority tiers at submit and on PATCH: the choices are the tiers the caller's team may use, in the service,
the API, the form and the CLI alike; anything else is a 400 on `priority` naming the tiers there are."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fabrics.base import FabricError, TierHints
from portal.accounts.models import AuditEvent, ResourceGroup
from portal.queues.models import Fabric, PriorityTier
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import TRAINING_FORM

JOB = {"queue": "train", "kind": "training", "name": "job", "command": "true"}
HTMX = {"HTTP_HX_REQUEST": "true"}


def job(priority: str) -> services.SubmitRequest:
    return services.SubmitRequest(queue="train", kind="training", name="job", command="true", priority=priority)


@pytest.fixture
def gold(cast):
    """A tier IT made for fraud only."""
    tier = PriorityTier.objects.create(slug="gold", name="Gold", weight=5, order=40)
    tier.allowed_groups.add(ResourceGroup.objects.get(slug="fraud"))
    return tier


def test_the_three_tiers_of_old_exist_with_their_weights_open_to_all(cast):
    found = PriorityTier.objects.values_list("slug", "weight", "open_to_all", "leads_only")
    assert list(found) == [("low", 0, True, False), ("normal", 1, True, False), ("high", 2, True, True)]


def test_a_tier_open_to_a_team_is_usable_by_it_and_refused_to_another_naming_the_choices(alice, charlie, gold):
    workload, _ = services.submit(charlie, job(priority="gold"))
    assert workload.priority == "gold"
    with pytest.raises(services.SubmitRejected) as rejected:
        services.submit(alice, job(priority="gold"))
    # alice is a member of vision, not a lead: high is not hers to choose either
    assert rejected.value.errors == {"priority": ["Choose a priority tier team vision may use: low, normal."]}


def test_a_tier_for_leads_only_is_refused_to_a_member_with_the_tiers_she_may_use(alice, bob):
    with pytest.raises(services.SubmitRejected) as rejected:
        services.submit(alice, job(priority="high"))
    said = "Only a team lead or IT may use the tier high; choose one of: low, normal."
    assert rejected.value.errors["priority"] == [said]
    workload, _ = services.submit(bob, job(priority="high"))
    assert workload.priority == "high"


def test_the_api_answers_400_on_priority_and_the_submit_keeps_its_five_statements(
    api_as, alice, charlie, gold, django_assert_num_queries
):
    answer = api_as(alice).post("/api/v1/workloads/", JOB | {"priority": "gold"}, format="json")
    assert answer.status_code == 400
    assert answer.json()["errors"] == {"priority": ["Choose a priority tier team vision may use: low, normal."]}
    client = api_as(charlie)
    client.get("/api/v1/workloads/")  # the token's first use this minute costs one more
    with django_assert_num_queries(5):
        answer = client.post("/api/v1/workloads/", JOB | {"priority": "gold"}, format="json")
    assert answer.status_code == 201, answer.content
    assert answer.json()["priority"] == "gold"


def test_a_tier_for_several_teams_is_offered_to_each(api_as, alice, gold):
    gold.allowed_groups.add(ResourceGroup.objects.get(slug="vision"))
    answer = api_as(alice).post("/api/v1/workloads/", JOB | {"priority": "gold"}, format="json")
    assert answer.status_code == 201, answer.content


def test_the_form_offers_the_tiers_of_the_users_teams_in_its_order(client, alice, bob, charlie, gold):
    client.force_login(alice)
    page = client.get("/workloads/new/").content.decode()
    start = page.index('<select name="priority"')
    options = page[start : page.index("</select>", start)]
    # high is for team leads: a member is not offered it (the submit would refuse it), her lead is.
    assert [o for o in ("low", "normal", "high", "gold") if f'value="{o}"' in options] == ["low", "normal"]
    client.force_login(bob)
    page = client.get("/workloads/new/").content.decode()
    start = page.index('<select name="priority"')
    assert "High (team leads)" in page[start : page.index("</select>", start)]
    client.force_login(alice)
    response = client.post("/workloads/new/", TRAINING_FORM | {"priority": "gold"}, **HTMX)
    assert response.status_code == 422
    assert not Workload.objects.exists()
    client.force_login(charlie)
    assert 'value="gold"' in client.get("/workloads/new/").content.decode()
    response = client.post("/workloads/new/", TRAINING_FORM | {"priority": "gold"}, **HTMX)
    assert response.status_code in (200, 302), response.content.decode()[:500]
    assert Workload.objects.get().priority == "gold"


def test_a_lead_moves_pending_work_to_a_tier_of_its_team_and_not_to_another(api_as, alice, bob, submit, gold):
    workload = submit(alice)
    url = f"/api/v1/workloads/{workload.pk}/"
    refused = api_as(bob).patch(url, json.dumps({"priority": "gold"}), content_type="application/json")
    assert refused.status_code == 400
    assert refused.json()["errors"] == {"priority": ["Choose a priority tier team vision may use: low, normal, high."]}
    gold.allowed_groups.add(ResourceGroup.objects.get(slug="vision"))
    moved = api_as(bob).patch(url, json.dumps({"priority": "gold"}), content_type="application/json")
    assert moved.status_code == 200, moved.content
    assert Workload.objects.get(pk=workload.pk).priority == "gold"


class Reordering:
    """A fabric with priorities of its own that records what it was told (or refuses)."""

    def __init__(self, refuse: bool = False) -> None:
        self.told: list[tuple[str, Any]] = []
        self.refuse = refuse

    def reprioritise(self, external_id: str, tier: Any) -> bool:
        if self.refuse:
            raise FabricError("Access/permission denied", retryable=False)
        self.told.append((external_id, tier))
        return True


@pytest.mark.parametrize("state", [State.DISPATCHING, State.RUNNING, State.PENDING])
def test_queued_work_that_moves_tier_is_reordered_inside_its_fabric_too(bob, submit, gold, monkeypatch, state):
    gold.allowed_groups.add(ResourceGroup.objects.get(slug="vision"))
    PriorityTier.objects.filter(slug="gold").update(slurm_qos="gold", slurm_nice=10)
    fabric = Reordering()
    monkeypatch.setattr(services.actions, "connect", lambda config: fabric)
    workload = submit(bob)
    Workload.objects.filter(pk=workload.pk).update(state=state, fabric=Fabric.objects.get(name="local"),
                                                   external_id="42")  # fmt: skip
    services.do_reprioritize(bob, Workload.objects.get(pk=workload.pk), "gold")
    record = AuditEvent.objects.get(action="workload.reprioritized")
    if state != State.DISPATCHING:  # not in a fabric's queue: Gridlane's own order is all there is
        assert fabric.told == []
        assert "fabric" not in record.detail
        return
    assert fabric.told == [("42", TierHints("gold", slurm_qos="gold", slurm_nice=10))]
    assert record.detail["fabric"] == "reordered on local too"


def test_a_fabric_that_refuses_the_new_order_keeps_its_own_and_the_audit_says_so(bob, submit, monkeypatch):
    monkeypatch.setattr(services.actions, "connect", lambda config: Reordering(refuse=True))
    PriorityTier.objects.filter(slug="high").update(slurm_nice=0)
    workload = submit(bob)
    Workload.objects.filter(pk=workload.pk).update(state=State.DISPATCHING, fabric=Fabric.objects.get(name="local"),
                                                   external_id="42")  # fmt: skip
    moved = services.do_reprioritize(bob, Workload.objects.get(pk=workload.pk), "high")
    assert moved.priority == "high"
    record = AuditEvent.objects.get(action="workload.reprioritized")
    assert record.detail["fabric"] == "local kept its own order: Access/permission denied"
