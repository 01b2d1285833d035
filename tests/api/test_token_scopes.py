"""Scoped API tokens (portal.accounts.scopes): an access matrix of scopes x every route of the API, queues, the
spending cap, and tokens without scopes as powerful as ever."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts import scopes
from portal.accounts.models import ApiToken
from portal.api.auth import BearerTokenAuthentication
from portal.workloads.models import Workload

URL = "/api/v1/workloads/"
JOB = {"queue": "train", "kind": "training", "command": "true", "resources": {"gpus": 1}, "runtime_limit_minutes": 60}
NOTEBOOK = {"queue": "notebooks", "kind": "notebook", "lease_hours": 1, "runtime_limit_minutes": 60}


def bearer(plaintext: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def token_of(user: Any, **scope_fields: Any) -> tuple[ApiToken, APIClient]:
    token, plaintext = ApiToken.issue(user, "scoped", scopes=scope_fields or None)
    return token, bearer(plaintext)


def post(client: APIClient, url: str, body: Any) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


def refusal(response: Any) -> dict[str, list[str]]:
    assert response.status_code == 403, response.content
    errors: dict[str, list[str]] = response.json()["errors"]
    return errors


# --- Every route of the API, and the action each of its methods takes -------------------------------------------


def api_routes() -> list[tuple[str, str, Any, list[str]]]:
    """(pattern, URL name, view callback, its methods) for every route under /api/, format suffixes left out."""
    found: list[tuple[str, str, Any, list[str]]] = []

    def walk(patterns: Any, prefix: str, namespace: str | None) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                inner = namespace
                if p.namespace:
                    inner = f"{namespace}:{p.namespace}" if namespace else p.namespace
                walk(p.url_patterns, prefix + str(p.pattern), inner)
                continue
            assert isinstance(p, URLPattern)
            route = prefix + str(p.pattern)
            if not route.startswith("api/") or "format" in route:
                continue
            name = f"{namespace}:{p.name}" if namespace else str(p.name)
            actions = getattr(p.callback, "actions", None)
            cls = p.callback.cls  # type: ignore[attr-defined]  # every API view is DRF's
            if actions is not None:
                methods = [m.upper() for m in actions]
            else:
                methods = [m.upper() for m in cls.http_method_names if m not in ("options", "head") and hasattr(cls, m)]
            found.append((route, name, p.callback, methods))

    walk(get_resolver().url_patterns, "", None)
    return found


ROUTES = api_routes()
ENDPOINTS = sorted({(name, method) for _, name, _, methods in ROUTES for method in methods})


def takes_tokens(callback: Any) -> bool:
    """Whether the view reads bearer tokens at all (job callbacks and enrolment take none: scopes do not apply)."""
    return any(issubclass(a, BearerTokenAuthentication) for a in callback.cls.authentication_classes)


def test_every_write_of_every_route_has_an_action_or_is_refused_to_scoped_tokens_on_purpose():
    """A new endpoint that writes fails here until ENDPOINT_ACTIONS says what a scoped token may do with it."""
    assert len(ROUTES) > 30
    missing = [
        (name, method)
        for _, name, callback, methods in ROUTES
        for method in methods
        if method not in scopes.SAFE_METHODS
        and takes_tokens(callback)
        and (name, method) not in scopes.ENDPOINT_ACTIONS
    ]
    assert missing == []
    known = {(name, method) for name, method in ENDPOINTS}
    planned: set[tuple[str, str]] = set()  # mapped ahead of an endpoint to come
    assert set(scopes.ENDPOINT_ACTIONS) - known <= planned


def sample_kwargs(name: str, route: str, alice_workload: Workload, other_token: ApiToken) -> dict[str, Any]:
    values = {
        "pk": other_token.pk if name.startswith("api:token") else alice_workload.pk,
        "slug": "vision",
        "run_id": uuid.uuid4(),
        "workload_id": alice_workload.pk,
        "digest": "0" * 64,
        "kind": "teams",
        "key": "vision",
    }
    return {k: v for k, v in values.items() if f"<{k}>" in route or f":{k}>" in route}


SCOPE_SETS: dict[str, dict[str, Any]] = {
    "read-only": {"scope_actions": scopes.pack([scopes.READ])},
    "submit": {"scope_actions": scopes.pack([scopes.SUBMIT])},
    "cancel": {"scope_actions": scopes.pack([scopes.CANCEL])},
    "manage": {"scope_actions": scopes.pack([scopes.MANAGE])},
    "queues": {"scope_queues": ["train", "notebooks"]},
    "none": {},
}


@pytest.mark.parametrize("scope_set", sorted(SCOPE_SETS))
@pytest.mark.parametrize(("name", "method"), ENDPOINTS)
def test_access_matrix(alice, submit, scope_set, name, method):
    """Each scope set against each endpoint and method: refused, naming the missing scope, exactly when the
    endpoint's action is not among the token's (or no scoped token may use it); never for a token without scopes."""
    route, callback = next((r, c) for r, n, c, methods in ROUTES if n == name and method in methods)
    workload = submit(alice, gpus=1)
    other, _ = ApiToken.issue(alice, "another")
    token, client = token_of(alice, **SCOPE_SETS[scope_set])
    url = reverse(name, kwargs=sample_kwargs(name, route, workload, other))
    response = client.generic(method, url, "{}", content_type="application/json")
    data = getattr(response, "data", None)  # as the view answered it, whatever the renderer (the schema's: YAML)
    errors = data.get("errors", {}) if isinstance(data, dict) else {}
    refused = response.status_code == 403 and "missing_scope" in errors
    action = scopes.action_of(name, method)
    if not token.scoped or not takes_tokens(callback):
        expected = None
    elif action is None:
        expected = scopes.FULL
    else:
        expected = None if scopes.may(token, action) else action
    if expected is None and token.scope_queues and takes_tokens(callback) and name in scopes.TEAM_WIDE:
        expected = scopes.ALL_QUEUES  # a team-wide read is refused to a token limited to some queues
    assert refused == (expected is not None), (response.status_code, response.content[:300])
    if expected is not None:
        assert errors["missing_scope"] == [expected]


# --- Read-only, actions --------------------------------------------------------------------------------------------


def test_a_read_only_token_reads_but_never_writes(alice, submit):
    workload = submit(alice)
    _, client = token_of(alice, scope_actions=scopes.pack([scopes.READ]))
    assert client.get(URL).status_code == 200
    assert client.get(f"{URL}{workload.pk}/").status_code == 200
    assert client.get("/api/v1/queues/").status_code == 200
    assert refusal(post(client, URL, JOB | {"name": "x"})) == {
        "detail": ["This token may not submit."],
        "missing_scope": ["submit"],
    }
    assert refusal(post(client, f"{URL}{workload.pk}/cancel/", {}))["missing_scope"] == ["cancel"]
    patch = client.patch(f"{URL}{workload.pk}/", json.dumps({"priority": "high"}), content_type="application/json")
    assert refusal(patch)["missing_scope"] == ["manage"]
    assert refusal(client.delete(f"{URL}{workload.pk}/"))["missing_scope"] == [scopes.FULL]
    assert refusal(post(client, "/api/v1/tokens/", {"name": "more"}))["missing_scope"] == [scopes.FULL]
    workload.refresh_from_db()
    assert workload.state == "pending"
    assert Workload.objects.count() == 1


def test_a_submit_and_read_token_submits_but_cannot_cancel(alice):
    token, client = token_of(alice, scope_actions=scopes.pack([scopes.SUBMIT, scopes.READ]))
    created = post(client, URL, JOB | {"name": "mine"})
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    assert Workload.objects.get(pk=pk).token_id == token.pk  # the workload records the token it came with
    assert refusal(post(client, f"{URL}{pk}/cancel/", {})) == {
        "detail": ["This token may not cancel."],
        "missing_scope": ["cancel"],
    }


def test_a_token_without_scopes_keeps_its_users_full_power(alice, submit):
    token, client = token_of(alice)
    assert not token.scoped
    assert token.scope_summary == "full access"
    created = post(client, URL, JOB | {"name": "mine"})
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    assert Workload.objects.get(pk=pk).token_id == token.pk
    assert post(client, f"{URL}{pk}/cancel/", {}).status_code == 200
    nb = submit(alice, queue="notebooks", kind="notebook", name="nb", command="", lease_hours=Decimal(1))
    assert client.get(f"{URL}{nb.pk}/").status_code == 200
    assert post(client, "/api/v1/tokens/", {"name": "more"}).status_code == 201


def test_a_scoped_token_is_never_more_than_its_user(alice, bob, submit):
    """Scopes only take power away: bob's work stays bob's to cancel, whatever alice's token may do."""
    theirs = submit(bob)
    _, client = token_of(alice, scope_actions=scopes.pack([scopes.CANCEL, scopes.READ]))
    assert post(client, f"{URL}{theirs.pk}/cancel/", {}).status_code == 403
    theirs.refresh_from_db()
    assert theirs.state == "pending"


# --- Queues ---------------------------------------------------------------------------------------------------


def test_a_queue_scoped_token_submits_reads_and_cancels_only_in_its_queues(alice, submit):
    in_train = submit(alice)
    in_notebooks = submit(alice, queue="notebooks", kind="notebook", name="nb", command="", lease_hours=Decimal(1))
    _, client = token_of(alice, scope_queues=["notebooks"])
    refused = refusal(post(client, URL, JOB | {"name": "x"}))
    assert refused == {
        "detail": ["This token may not submit to the queue 'train'."],
        "missing_scope": ["queue"],
        "queue": ["train"],
    }
    assert post(client, URL, NOTEBOOK | {"name": "nb2"}).status_code == 201
    listed = {row["id"] for row in client.get(URL).json()["results"]}
    assert str(in_train.pk) not in listed
    assert str(in_notebooks.pk) in listed
    assert [q["slug"] for q in client.get("/api/v1/queues/").json()] == ["notebooks"]
    assert refusal(client.get(f"{URL}{in_train.pk}/"))["queue"] == ["train"]
    assert refusal(client.get(f"{URL}{in_train.pk}/logs/"))["missing_scope"] == ["queue"]
    assert refusal(post(client, f"{URL}{in_train.pk}/cancel/", {}))["queue"] == ["train"]
    assert post(client, f"{URL}{in_notebooks.pk}/cancel/", {}).status_code == 200
    in_train.refresh_from_db()
    assert in_train.state == "pending"


def test_a_bulk_submit_with_a_queue_scoped_token(alice):
    token, client = token_of(alice, scope_queues=["train"])
    items = [JOB | {"name": f"job-{i}"} for i in range(3)]
    done = post(client, f"{URL}bulk/", {"items": items})
    assert done.status_code == 201, done.content
    assert set(Workload.objects.values_list("token_id", flat=True)) == {token.pk}
    refused = refusal(post(client, f"{URL}bulk/", {"items": [*items, NOTEBOOK | {"name": "nb"}]}))
    assert refused["missing_scope"] == ["queue"]
    assert refused["queue"] == ["notebooks"]
    assert Workload.objects.count() == 3  # nothing of the refused batch was recorded


def test_a_queue_scoped_tokens_dry_run_is_refused_as_its_submit_would_be(alice):
    """A dry run is a read, but of a submit to a queue: a token limited to other queues gets the submit's 403."""
    _, client = token_of(alice, scope_queues=["notebooks"], scope_actions=scopes.pack(["read"]))
    refused = refusal(post(client, f"{URL}dry-run/", JOB | {"name": "x"}))
    assert (refused["missing_scope"], refused["queue"]) == (["queue"], ["train"])
    bulk = refusal(post(client, f"{URL}bulk/dry-run/", {"items": [NOTEBOOK | {"name": "nb"}, JOB | {"name": "x"}]}))
    assert (bulk["missing_scope"], bulk["queue"]) == (["queue"], ["train"])
    answer = post(client, f"{URL}dry-run/", NOTEBOOK | {"name": "nb"})
    assert answer.status_code == 200, answer.content
    assert answer.json()["outcome"] in {"admit", "wait"}
    assert Workload.objects.count() == 0


# --- The cap ----------------------------------------------------------------------------------------------------


def test_the_cap_refuses_a_submit_once_the_tokens_work_would_pass_it(alice):
    _token, client = token_of(alice, cap_gpu_hours=Decimal(2))
    first = post(client, URL, JOB | {"name": "a"})  # 1 GPU for up to an hour: 1 GPU-hour committed
    assert first.status_code == 201, first.content
    assert post(client, URL, JOB | {"name": "b"}).status_code == 201  # 2 committed: at the cap, not past it
    refused = refusal(post(client, URL, JOB | {"name": "c"}))
    assert refused["missing_scope"] == [scopes.CAP]
    assert "cap of 2 GPU-hours" in refused["detail"][0]
    assert Workload.objects.count() == 2
    # The first ran for 30 minutes and ended: what it spent counts, not its limit (0.5 + 1 GPU-hours).
    start = timezone.now() - timedelta(hours=2)
    Workload.objects.filter(pk=first.json()["id"]).update(
        state="succeeded", started_at=start, finished_at=start + timedelta(minutes=30)
    )
    assert post(client, URL, JOB | {"name": "d", "runtime_limit_minutes": 30}).status_code == 201
    assert refusal(post(client, URL, JOB | {"name": "e", "runtime_limit_minutes": 1}))["missing_scope"] == [scopes.CAP]
    assert post(client, URL, JOB | {"name": "cpu", "resources": {"gpus": 0}}).status_code == 201  # no GPU-hours


def test_the_cap_counts_a_bulk_submit_whole_and_a_repeat_never_twice(alice):
    _token, client = token_of(alice, cap_gpu_hours=Decimal("2.5"))
    items = [JOB | {"name": f"job-{i}"} for i in range(3)]
    assert refusal(post(client, f"{URL}bulk/", {"items": items}))["missing_scope"] == [scopes.CAP]
    assert Workload.objects.count() == 0
    assert post(client, f"{URL}bulk/", {"items": items[:2]}).status_code == 201
    keyed = client.post(URL, json.dumps(JOB | {"name": "k", "resources": {"gpus": 0.5}}),
                        content_type="application/json", HTTP_IDEMPOTENCY_KEY="k1")  # fmt: skip
    assert keyed.status_code == 201, keyed.content
    again = client.post(URL, json.dumps(JOB | {"name": "k", "resources": {"gpus": 0.5}}),
                        content_type="application/json", HTTP_IDEMPOTENCY_KEY="k1")  # fmt: skip
    assert again.status_code == 200
    assert again.json()["id"] == keyed.json()["id"]


def test_the_cap_counts_every_element_of_an_array(alice):
    _, client = token_of(alice, cap_gpu_hours=Decimal(3))
    assert refusal(post(client, URL, JOB | {"name": "arr", "array": "0-3"}))["missing_scope"] == [scopes.CAP]
    done = post(client, URL, JOB | {"name": "arr", "array": "0-2"})
    assert done.status_code == 201, done.content
    assert refusal(post(client, URL, JOB | {"name": "one"}))["missing_scope"] == [scopes.CAP]


# --- Statements ----------------------------------------------------------------------------------------------


def test_a_scoped_tokens_submit_costs_the_statements_of_any_other(alice, django_assert_num_queries):
    """Actions and queues come with the token's row: the kept way is still one statement."""
    import time_machine

    _, client = token_of(alice, scope_actions=scopes.pack([scopes.SUBMIT, scopes.READ]), scope_queues=["train"])
    with time_machine.travel(timezone.now(), tick=False):
        client.get(URL)  # the token's use this minute is recorded (once a minute)
        with django_assert_num_queries(5):  # token, rate limit (and the generation), queue, teams, insert
            assert post(client, URL, JOB | {"name": "first"}).status_code == 201
        with django_assert_num_queries(1):  # the insert, which checks the generation and counts
            assert post(client, URL, JOB | {"name": "second"}).status_code == 201


def test_a_scoped_token_reads_in_as_many_statements_as_one_without_scopes(alice, submit):
    """The scopes come with the token's row: a scoped token's requests read nothing more (the queue filter is a
    condition of the same statements)."""
    workload = submit(alice)
    _, plain = token_of(alice)
    _, scoped = token_of(alice, scope_actions=scopes.pack([scopes.READ, scopes.CANCEL]), scope_queues=["train"])
    for client in (plain, scoped):
        client.get(URL)  # each token's use this minute is recorded first (once a minute)
    for path in (URL, f"{URL}{workload.pk}/", "/api/v1/queues/"):
        counts = []
        for client in (plain, scoped):
            with CaptureQueriesContext(connection) as captured:
                assert client.get(path).status_code == 200
            counts.append(len(captured.captured_queries))
        assert counts[0] == counts[1], (path, counts)


def test_me_says_what_the_calling_token_may_do(alice):
    _, client = token_of(alice, scope_actions=scopes.pack([scopes.READ]), scope_queues=["train"])
    assert client.get("/api/v1/me/").json()["token"] == {
        "scoped": True,
        "read_only": True,
        "actions": ["read"],
        "queues": ["train"],
        "cap_gpu_hours": None,
        "cap_money": None,
        "currency": settings.GRIDLANE_CURRENCY,
    }
    _, plain = token_of(alice)
    assert plain.get("/api/v1/me/").json()["token"]["scoped"] is False
