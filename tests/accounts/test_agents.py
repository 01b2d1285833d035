"""Agents (service identities): made by leads or IT, each with its own team, queues, sub-quota, expiry
and rate limit, and seeing only its own work."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken, AuditEvent, ServiceIdentity
from portal.queues.models import Queue
from portal.workloads.models import Workload

TOKEN_RE = re.compile(r"glt_[A-Za-z0-9_-]{43}")
JOB = {"queue": "train", "kind": "training", "name": "eval", "command": "python eval.py"}


def bearer(plaintext):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def agent_form(**overrides):
    form = {
        "name": "vision-bot",
        "group": "",
        "description": "nightly evaluations",
        "expires_on": (timezone.localdate() + timedelta(days=30)).isoformat(),
        "rate_limit_per_minute": "30",
        "gpu_reservation_milli": "1000",
        "gpu_limit_milli": "2000",
    }
    form.update(overrides)
    return form


@pytest.fixture
def bob_client(client, bob):
    client.force_login(bob)
    return client


def test_a_lead_creates_an_agent_that_works_under_its_own_name(bob_client, bob, alice, submit):
    from portal.accounts.models import ResourceGroup

    vision = ResourceGroup.objects.get(slug="vision")
    train = Queue.objects.get(slug="train")
    form = agent_form(group=vision.pk, allowed_queues=[train.pk])
    response = bob_client.post("/accounts/agents/new/", form)
    assert response.status_code == 200, response.content
    (plaintext,) = set(TOKEN_RE.findall(response.content.decode()))
    service = ServiceIdentity.objects.get()
    assert (service.name, service.group, service.created_by) == ("svc.vision-bot", vision, bob)
    assert not service.user.has_usable_password()
    assert not service.user.is_staff

    agent = bearer(plaintext)
    me = agent.get("/api/v1/me/").json()
    assert me["agent"]["queues"] == ["train"]
    assert me["teams"] == [{"slug": "vision", "role": "agent"}]
    assert [q["slug"] for q in agent.get("/api/v1/queues/").json()] == ["train"]
    created = agent.post("/api/v1/workloads/", JOB, format="json")
    assert created.status_code == 201
    assert (created.json()["owner"], created.json()["group"]) == ("svc.vision-bot", "vision")
    assert (
        agent.post("/api/v1/workloads/", JOB | {"queue": "notebooks", "kind": "notebook"}, format="json").status_code
        == 403
    )

    alices = submit(alice)
    assert [w["name"] for w in agent.get("/api/v1/workloads/").json()["results"]] == ["eval"]  # its own only
    assert agent.get(f"/api/v1/workloads/{alices.pk}/").status_code == 404
    bobs_view = {w.name for w in Workload.objects.filter(group=vision)}
    assert bobs_view == {"eval", "job"}  # the team (and its lead) sees the agent's work
    actions = set(AuditEvent.objects.filter(actor=bob).values_list("action", flat=True))
    assert {"user.created", "serviceidentity.created", "token.issued"} <= actions


def test_only_leads_and_it_create_agents(client, alice, charlie):
    for person in (alice, charlie):
        client.force_login(person)
        assert client.get("/accounts/agents/new/").status_code == 403
        assert client.post("/accounts/agents/new/", agent_form()).status_code == 403
    assert not ServiceIdentity.objects.exists()


def test_a_lead_may_pick_only_teams_they_lead(bob_client):
    from portal.accounts.models import ResourceGroup

    fraud = ResourceGroup.objects.get(slug="fraud")
    response = bob_client.post("/accounts/agents/new/", agent_form(group=fraud.pk))
    assert response.status_code == 422
    assert "group" in response.context["form"].errors


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"gpu_reservation_milli": "3000", "gpu_limit_milli": "2000"}, "gpu_limit_milli", "below the reservation"),
        ({"gpu_reservation_milli": "5000", "gpu_limit_milli": ""}, "gpu_reservation_milli", "reserves 4000"),
        ({"gpu_limit_milli": "7000"}, "gpu_limit_milli", "at most 6000"),
        ({"expires_on": "2999-01-01"}, "expires_on", "at most 365 days"),
        ({"name": "Not A Slug!"}, "name", "Enter a valid"),
    ],
)
def test_agent_settings_are_checked_against_the_team(bob_client, overrides, field, message):
    from portal.accounts.models import ResourceGroup

    form = agent_form(group=ResourceGroup.objects.get(slug="vision").pk) | overrides
    response = bob_client.post("/accounts/agents/new/", form)
    assert response.status_code == 422
    assert message in " ".join(response.context["form"].errors[field])
    assert not ServiceIdentity.objects.exists()


def test_agents_reservations_together_stay_within_the_teams(bob_client, agent):
    response = bob_client.post(
        "/accounts/agents/new/",
        agent_form(name="second", group=agent.group_id, gpu_reservation_milli="3500", gpu_limit_milli=""),
    )
    assert response.status_code == 422
    assert "1000 of them already" in " ".join(response.context["form"].errors["gpu_reservation_milli"])


def test_an_agent_may_only_be_given_queues_open_to_its_team(bob_client):
    from portal.accounts.models import ResourceGroup

    secret = Queue.objects.create(slug="fraud-only", name="Fraud only", kinds=["training"])
    secret.allowed_groups.add(ResourceGroup.objects.get(slug="fraud"))
    response = bob_client.post(
        "/accounts/agents/new/",
        agent_form(group=ResourceGroup.objects.get(slug="vision").pk, allowed_queues=[secret.pk]),
    )
    assert response.status_code == 422
    assert "allowed_queues" in response.context["form"].errors


def test_members_see_their_teams_agents_read_only_and_other_teams_not_at_all(client, alice, charlie, agent):
    client.force_login(alice)
    assert "svc.vision-bot" in client.get("/accounts/agents/").content.decode()
    page = client.get(f"/accounts/agents/{agent.pk}/")
    assert page.status_code == 200
    assert b"Issue token" not in page.content
    assert client.post(f"/accounts/agents/{agent.pk}/tokens/", {"name": "x", "expires_in_days": 7}).status_code == 403
    assert client.post(f"/accounts/agents/{agent.pk}/disable/").status_code == 403
    client.force_login(charlie)
    assert "svc.vision-bot" not in client.get("/accounts/agents/").content.decode()
    assert client.get(f"/accounts/agents/{agent.pk}/").status_code == 404


def test_a_lead_issues_tokens_no_longer_lived_than_the_agent_and_revokes_them(bob_client, agent):
    response = bob_client.post(f"/accounts/agents/{agent.pk}/tokens/", {"name": "ci", "expires_in_days": "365"})
    assert response.status_code == 200
    (plaintext,) = set(TOKEN_RE.findall(response.content.decode()))
    token = ApiToken.objects.get(user=agent.user, name="ci")
    assert token.expires_at == agent.expires_at
    assert bearer(plaintext).get("/api/v1/me/").status_code == 200
    assert bob_client.post(f"/accounts/agents/{agent.pk}/tokens/{token.pk}/revoke/").status_code == 302
    assert bearer(plaintext).get("/api/v1/me/").status_code == 401


def test_a_lead_changes_an_agents_settings(bob_client, agent):
    form = agent_form(rate_limit_per_minute="5", gpu_reservation_milli="500")
    del form["name"], form["group"]
    response = bob_client.post(f"/accounts/agents/{agent.pk}/", form)
    assert response.status_code == 302, response.content
    agent.refresh_from_db()
    assert (agent.rate_limit_per_minute, agent.gpu_reservation_milli) == (5, 500)
    assert agent.allowed_queues.count() == 0  # none ticked: all of the team's queues
    change = AuditEvent.objects.filter(action="serviceidentity.changed", detail__has_key="before").get()
    assert change.detail["before"]["rate_limit_per_minute"] == 30
    assert change.detail["after"]["rate_limit_per_minute"] == 5


@pytest.mark.parametrize("how", ["disabled", "expired"])
def test_a_disabled_or_expired_agent_is_refused(bob, agent, how):
    _, plaintext = ApiToken.issue(agent.user, "cli")
    client = bearer(plaintext)
    assert client.get("/api/v1/me/").status_code == 200
    if how == "disabled":
        from portal.accounts import agents

        agents.disable(agent, by=bob)
        assert not ApiToken.objects.filter(user=agent.user, revoked_at__isnull=True).exists()
    else:
        ServiceIdentity.objects.filter(pk=agent.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert client.get("/api/v1/me/").status_code == 401


def test_an_agent_has_no_session_and_mints_no_tokens(client, agent, api_as):
    client.force_login(agent.user)
    assert client.get("/").status_code == 302  # the session does not hold an agent
    response = api_as(agent.user).post("/api/v1/tokens/", {"name": "more"}, format="json")
    assert response.status_code == 403
    agent.user.set_password("guess")
    agent.user.save()
    assert not client.login(username="svc.vision-bot", password="guess")
