"""The access matrix: every page and endpoint, for alice (vision member), bob (vision lead), charlie (fraud
member), IT, an agent of vision (a service identity using `train` only) and nobody signed in.

Pages are for people: an agent has no session (its cells read LOGIN: sent to sign in), and the API
takes bearer tokens. One test per page or endpoint asserts its whole row; each cell runs on the same
world inside a savepoint that is rolled back after it, so a cancel in one cell changes no other.
Another team's workload answers 404 everywhere; managing what one may see but not manage answers 403.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken, ResourceGroup
from portal.objectives.models import WaitObjective
from portal.queues.models import Fabric, Queue, QueueTarget, QuotaGrant
from tests.conftest import TRAINING_FORM

LOGIN = "login"  # a redirect to the sign-in page
WHO = ("alice", "bob", "charlie", "it", "agent", "anon")

FORM = TRAINING_FORM
AGENT_FORM = {
    "description": "changed",
    "expires_on": (timezone.localdate() + timedelta(days=20)).isoformat(),
    "rate_limit_per_minute": "10",
    "gpu_reservation_milli": "0",
    "gpu_limit_milli": "",
}
JOB = {"queue": "train", "kind": "training", "name": "job", "command": "true"}


def cells(alice: Any, bob: Any, charlie: Any, it: Any, agent: Any = LOGIN, anon: Any = LOGIN) -> dict[str, Any]:
    return {"alice": alice, "bob": bob, "charlie": charlie, "it": it, "agent": agent, "anon": anon}


def api(alice: Any, bob: Any, charlie: Any, it: Any, agent: Any, anon: Any = 401) -> dict[str, Any]:
    return cells(alice, bob, charlie, it, agent, anon)


# (what, method, path, body, expected status per identity). {a}, {b}, {c}, {s}: alice's, bob's, charlie's
# and the agent's workloads; {agent}: the agent's id; {g}: a temporary grant vision's lead asked for.
PAGES = [
    ("my workloads", "get", "/", None, cells(200, 200, 200, 200)),
    ("my teams' workloads", "get", "/?scope=team", None, cells(200, 200, 200, 200)),
    ("the new-run form", "get", "/workloads/new/", None, cells(200, 200, 200, 200)),
    ("alice's workload", "get", "/workloads/{a}/", None, cells(200, 200, 404, 200)),
    ("charlie's workload", "get", "/workloads/{c}/", None, cells(404, 404, 200, 200)),
    ("the agent's workload", "get", "/workloads/{s}/", None, cells(200, 200, 404, 200)),
    ("cancel alice's workload", "post", "/workloads/{a}/cancel/", {}, cells(302, 302, 404, 302)),
    ("cancel bob's workload", "post", "/workloads/{b}/cancel/", {}, cells(403, 302, 404, 302)),
    ("cancel charlie's workload", "post", "/workloads/{c}/cancel/", {}, cells(404, 404, 302, 302)),
    ("cancel the agent's workload", "post", "/workloads/{s}/cancel/", {}, cells(403, 302, 404, 302)),
    ("submit to train", "post", "/workloads/new/", FORM, cells(302, 302, 302, 422)),
    (
        "submit to fraud's own queue",
        "post",
        "/workloads/new/",
        FORM | {"queue": "fraud-gpu"},
        cells(422, 422, 302, 302),
    ),
    ("vision's usage as CSV", "get", "/teams/vision/usage.csv", None, cells(403, 200, 404, 200)),
    ("fraud's usage as CSV", "get", "/teams/fraud/usage.csv", None, cells(404, 404, 403, 200)),
    ("vision's chargeback", "get", "/teams/vision/chargeback/", None, cells(403, 200, 404, 200)),
    ("fraud's chargeback", "get", "/teams/fraud/chargeback/?month=2026-11", None, cells(404, 404, 403, 200)),
    ("ask for more GPUs for vision", "get", "/teams/vision/grants/new/", None, cells(403, 200, 404, 403)),
    ("ask for more GPUs for fraud", "get", "/teams/fraud/grants/new/", None, cells(404, 404, 403, 403)),
    ("set a budget of vision", "get", "/teams/vision/budgets/set/", None, cells(403, 200, 404, 200)),
    ("set a budget of fraud", "get", "/teams/fraud/budgets/set/", None, cells(404, 404, 403, 200)),
    ("withdraw vision's grant", "post", "/teams/vision/grants/{g}/withdraw/", {}, cells(403, 302, 404, 403)),
    ("withdraw it as fraud's", "post", "/teams/fraud/grants/{g}/withdraw/", {}, cells(404, 404, 404, 404)),
    ("IT's temporary grants page", "get", "/it/grants/", None, cells(404, 404, 404, 200)),
    ("approve vision's grant", "post", "/it/grants/{g}/decide/", {"decision": "approve"}, cells(404, 404, 404, 302)),
    ("my account", "get", "/accounts/", None, cells(200, 200, 200, 200)),
    (
        "create a personal token",
        "post",
        "/accounts/tokens/",
        {"name": "t", "expires_in_days": "7"},
        cells(200, 200, 200, 200),
    ),
    ("the agents list", "get", "/accounts/agents/", None, cells(200, 200, 200, 200)),
    ("the new-agent form", "get", "/accounts/agents/new/", None, cells(403, 200, 403, 200)),
    ("vision's agent", "get", "/accounts/agents/{agent}/", None, cells(200, 200, 404, 200)),
    ("change vision's agent", "post", "/accounts/agents/{agent}/", AGENT_FORM, cells(403, 302, 404, 302)),
    (
        "issue a token to vision's agent",
        "post",
        "/accounts/agents/{agent}/tokens/",
        {"name": "t", "expires_in_days": "7"},
        cells(403, 200, 404, 200),
    ),
    ("disable vision's agent", "post", "/accounts/agents/{agent}/disable/", {}, cells(403, 302, 404, 302)),
    ("the what-if page", "get", "/it/what-if/", None, cells(404, 404, 404, 200)),
    (
        "ask for a what-if",
        "post",
        "/it/what-if/",
        {"days": "7", "kind": "capacity", "fabric": "local", "gpus": "16"},
        cells(404, 404, 404, 302),
    ),
    ("IT's wait objectives", "get", "/it/objectives/", None, cells(404, 404, 404, 200)),
    ("vision's wait objective", "get", "/it/objectives/vision-p95/", None, cells(404, 200, 404, 200)),
    (
        "try a remedy on vision's wait objective",
        "post",
        "/it/objectives/vision-p95/",
        {"days": "7", "kind": "capacity", "fabric": "local", "gpus": "16"},
        cells(404, 404, 404, 302),
    ),
    ("wait objectives in the admin", "get", "/admin/objectives/waitobjective/", None, cells(LOGIN, LOGIN, LOGIN, 200)),
    ("the admin", "get", "/admin/", None, cells(LOGIN, LOGIN, LOGIN, 200)),
    ("the audit log", "get", "/admin/accounts/auditevent/", None, cells(LOGIN, LOGIN, LOGIN, 200)),
    ("quotas in the admin", "get", "/admin/queues/quota/", None, cells(LOGIN, LOGIN, LOGIN, 200)),
    ("temporary grants in the admin", "get", "/admin/queues/quotagrant/", None, cells(LOGIN, LOGIN, LOGIN, 200)),
    (
        "vision's grant in the admin",
        "get",
        "/admin/queues/quotagrant/{g}/change/",
        None,
        cells(LOGIN, LOGIN, LOGIN, 200),
    ),
    ("claim mappings in the admin", "get", "/admin/accounts/claimmapping/", None, cells(LOGIN, LOGIN, LOGIN, 200)),
]
API = [
    ("queues", "get", "/api/v1/queues/", None, api(200, 200, 200, 200, 200)),
    ("workloads", "get", "/api/v1/workloads/", None, api(200, 200, 200, 200, 200)),
    ("alice's workload", "get", "/api/v1/workloads/{a}/", None, api(200, 200, 404, 200, 404)),
    ("charlie's workload", "get", "/api/v1/workloads/{c}/", None, api(404, 404, 200, 200, 404)),
    ("the agent's workload", "get", "/api/v1/workloads/{s}/", None, api(200, 200, 404, 200, 200)),
    ("alice's workload's logs", "get", "/api/v1/workloads/{a}/logs/", None, api(200, 200, 404, 200, 404)),
    ("charlie's workload's logs", "get", "/api/v1/workloads/{c}/logs/", None, api(404, 404, 200, 200, 404)),
    ("cancel alice's workload", "post", "/api/v1/workloads/{a}/cancel/", None, api(200, 200, 404, 200, 404)),
    ("cancel bob's workload", "post", "/api/v1/workloads/{b}/cancel/", None, api(403, 200, 404, 200, 404)),
    ("cancel charlie's workload", "post", "/api/v1/workloads/{c}/cancel/", None, api(404, 404, 200, 200, 404)),
    ("cancel the agent's workload", "post", "/api/v1/workloads/{s}/cancel/", None, api(403, 200, 404, 200, 200)),
    (
        "raise alice's workload to high",
        "patch",
        "/api/v1/workloads/{a}/",
        {"priority": "high"},
        api(403, 200, 404, 200, 404),
    ),
    (
        "lower the agent's workload",
        "patch",
        "/api/v1/workloads/{s}/",
        {"priority": "low"},
        api(403, 200, 404, 200, 403),
    ),
    ("lower charlie's workload", "patch", "/api/v1/workloads/{c}/", {"priority": "low"}, api(404, 404, 403, 200, 404)),
    ("submit to train", "post", "/api/v1/workloads/", JOB, api(201, 201, 201, 400, 201)),
    (
        "submit to train as vision",
        "post",
        "/api/v1/workloads/",
        JOB | {"group": "vision"},
        api(201, 201, 400, 201, 201),
    ),
    (
        "submit to fraud's own queue",
        "post",
        "/api/v1/workloads/",
        JOB | {"queue": "fraud-gpu"},
        api(403, 403, 201, 201, 403),
    ),
    (
        "submit a notebook",
        "post",
        "/api/v1/workloads/",
        JOB | {"queue": "notebooks", "kind": "notebook", "command": ""},
        api(201, 201, 201, 400, 403),
    ),
    ("submit at high priority", "post", "/api/v1/workloads/", JOB | {"priority": "high"}, api(400, 201, 400, 400, 400)),
    ("vision's usage and cost", "get", "/api/v1/groups/vision/usage/", None, api(200, 200, 404, 200, 200)),
    ("fraud's usage and cost", "get", "/api/v1/groups/fraud/usage/?by=member", None, api(404, 404, 200, 200, 404)),
    (
        "set a member's budget",
        "post",
        "/api/v1/groups/vision/budgets/",
        {"user": "alice", "gpu_hours": 5},
        api(403, 200, 404, 200, 403),
    ),
    (
        "set the team's own budget",
        "post",
        "/api/v1/groups/vision/budgets/",
        {"gpu_hours": 5},
        api(403, 400, 404, 200, 403),
    ),
    ("who am I", "get", "/api/v1/me/", None, api(200, 200, 200, 200, 200)),
    ("my tokens", "get", "/api/v1/tokens/", None, api(200, 200, 200, 200, 403)),
    ("create a token", "post", "/api/v1/tokens/", {"name": "t"}, api(201, 201, 201, 201, 403)),
    ("the OpenAPI schema", "get", "/api/v1/schema/", None, api(200, 200, 200, 200, 200, anon=200)),
]


@pytest.fixture
def world(cast: dict[str, Any], agent: Any, submit: Any) -> dict[str, Any]:
    fraud_gpu = Queue.objects.create(slug="fraud-gpu", name="Fraud GPUs", kinds=["training"])
    fraud_gpu.allowed_groups.add(ResourceGroup.objects.get(slug="fraud"))
    QueueTarget.objects.create(queue=fraud_gpu, fabric=Fabric.objects.get(name="local"))
    vision = ResourceGroup.objects.get(slug="vision")
    WaitObjective.objects.create(slug="vision-p95", name="Vision's waits", kind="team", team=vision)
    return {
        "people": cast | {"agent": agent.user, "anon": None},
        "agent_obj": agent,
        "ids": {
            "a": submit(cast["alice"], name="alices").pk,
            "b": submit(cast["bob"], name="bobs").pk,
            "c": submit(cast["charlie"], name="charlies").pk,
            "s": submit(agent.user, name="agents").pk,
            "agent": agent.pk,
            "g": QuotaGrant.objects.create(
                team=ResourceGroup.objects.get(slug="vision"),
                fabric=Fabric.objects.get(name="local"),
                gpus_milli=1000,
                starts_at=timezone.now(),
                ends_at=timezone.now() + timedelta(days=1),
                reason="a deadline",
            ).pk,
        },
    }


def page_client(user: Any) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def api_client(user: Any) -> APIClient:
    client = APIClient()
    if user is not None:
        _, plaintext = ApiToken.issue(user, "matrix")
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def outcome(response: Any) -> Any:
    if response.status_code == 302 and "/login/" in response["Location"]:
        return LOGIN
    return response.status_code


def each_identity(world: dict[str, Any], call: Any) -> dict[str, Any]:
    """What each identity gets, each on the same world: every call runs in a savepoint rolled back after it."""
    got = {}
    for who in WHO:
        with transaction.atomic():
            got[who] = call(world["people"][who])
            transaction.set_rollback(True)
    return got


def rows(table: list[tuple[str, str, str, Any, dict[str, Any]]]) -> list[Any]:
    return [pytest.param(method, path, body, want, id=what) for what, method, path, body, want in table]


@pytest.mark.parametrize(("method", "path", "body", "want"), rows(PAGES))
def test_pages(world, method, path, body, want):
    url = path.format(**world["ids"])

    def call(user: Any) -> Any:
        client = page_client(user)
        return outcome(client.get(url) if method == "get" else client.post(url, body))

    assert each_identity(world, call) == want


@pytest.mark.parametrize(("method", "path", "body", "want"), rows(API))
def test_api(world, method, path, body, want):
    url = path.format(**world["ids"])

    def call(user: Any) -> Any:
        request = getattr(api_client(user), method)
        response = request(url, body, format="json") if body is not None else request(url)
        if response.status_code >= 400:
            assert set(response.json()) == {"errors"}  # one error shape, whatever the refusal
        return outcome(response)

    assert each_identity(world, call) == want


SEES = {
    "alice": {"alices", "bobs", "agents"},
    "bob": {"alices", "bobs", "agents"},
    "charlie": {"charlies"},
    "it": {"alices", "bobs", "charlies", "agents"},
    "agent": {"agents"},
}


@pytest.mark.parametrize("who", SEES)
def test_who_sees_which_workloads_in_lists(world, who):
    listed = api_client(world["people"][who]).get("/api/v1/workloads/").json()["results"]
    assert {w["name"] for w in listed} == SEES[who]
    if who != "agent":
        page = page_client(world["people"][who]).get("/?scope=team")
        assert {w.name for w in page.context["workloads"]} == SEES[who]


QUEUES = {
    "alice": {"train", "notebooks", "scripts"},
    "bob": {"train", "notebooks", "scripts"},
    "charlie": {"train", "notebooks", "scripts", "fraud-gpu"},
    "it": {"train", "notebooks", "scripts", "fraud-gpu"},
    "agent": {"train"},
}


@pytest.mark.parametrize("who", QUEUES)
def test_who_may_use_which_queues(world, who):
    listed = api_client(world["people"][who]).get("/api/v1/queues/").json()
    assert {q["slug"] for q in listed} == QUEUES[who]
    if who != "agent":
        form = page_client(world["people"][who]).get("/workloads/new/").context["form"]
        assert {slug for slug, _ in form.fields["queue"].choices} == QUEUES[who] - {"notebooks"}  # training only


@pytest.mark.parametrize(("who", "sees"), [("alice", True), ("bob", True), ("charlie", False), ("it", True)])
def test_who_sees_which_agents(world, who, sees):
    page = page_client(world["people"][who]).get("/accounts/agents/")
    assert ("svc.vision-bot" in page.content.decode()) is sees
