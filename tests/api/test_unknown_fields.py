"""Unknown fields in API bodies are a 400 naming them, never dropped: a typo (`"gpu": 4`) must not run with the
default resources. In single and bulk submits and every write endpoint of the workloads and tokens API."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from portal.accounts.models import ApiToken
from portal.known_fields import message, unknown_errors
from portal.workloads.models import Workload
from tests.api.test_workloads_api import BODY, URL


def send(client, url, body, method="post"):
    return getattr(client, method)(url, json.dumps(body), content_type="application/json")


def test_a_top_level_typo_is_refused_naming_it_and_nothing_runs(api_as, alice):
    response = send(api_as(alice), URL, {"queue": "train", "name": "typo", "command": "true", "gpu": 4})
    assert response.status_code == 400
    assert response.json() == {"errors": {"gpu": ["Unknown field; did you mean resources.gpus?"]}}
    assert not Workload.objects.exists()


def test_an_unknown_field_inside_resources_is_named_under_it(api_as, alice):
    body = BODY | {"resources": {"gpus": 1, "memory": 64}}
    response = send(api_as(alice), URL, body)
    assert response.status_code == 400
    assert response.json() == {"errors": {"resources.memory": ["Unknown field; did you mean memory_gb?"]}}
    assert not Workload.objects.exists()


def test_each_unknown_field_is_named_at_once_beside_other_errors(api_as, alice):
    response = send(api_as(alice), URL, BODY | {"gpu": 4, "colour": "blue"})
    errors = response.json()["errors"]
    assert response.status_code == 400
    assert sorted(errors) == ["colour", "gpu"]
    assert errors["colour"][0].startswith("Unknown field; this body takes ")


def test_a_bulk_item_with_an_unknown_field_is_refused_by_index_and_nothing_is_recorded(api_as, alice):
    items = [BODY | {"name": "fine"}, BODY | {"name": "typo", "gpu": 4}]
    response = send(api_as(alice), URL + "bulk/", {"items": items})
    assert response.status_code == 400
    assert response.json() == {"errors": {"items": {"1": {"gpu": ["Unknown field; did you mean resources.gpus?"]}}}}
    assert not Workload.objects.exists()
    response = send(api_as(alice), URL + "bulk/", {"items": [BODY], "atomic": True})
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["atomic"]


@pytest.mark.parametrize(
    ("path", "method", "body", "field"),
    [
        ("", "patch", {"priority": "normal", "prio": "high"}, "prio"),
        ("extend/", "post", {"hours": 1, "hour": 2}, "hour"),
        ("cancel/", "post", {"reason": "done"}, "reason"),
    ],
)
def test_the_workload_write_endpoints_refuse_unknown_fields(api_as, alice, submit, path, method, body, field):
    w = submit(alice, queue="notebooks", kind="notebook", name="nb", gpus="0.25", lease_hours=Decimal(2), command="")
    ends = w.lease_ends_at
    response = send(api_as(alice), f"{URL}{w.pk}/{path}", body, method)
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == [field]
    w.refresh_from_db()
    assert (w.state, w.priority, w.lease_ends_at) == ("pending", "normal", ends)


def test_the_token_endpoints_refuse_unknown_fields(api_as, alice):
    client = api_as(alice)
    response = send(client, "/api/v1/tokens/", {"name": "ci", "expires_days": 7})
    assert response.status_code == 400
    assert response.json() == {"errors": {"expires_days": ["Unknown field; did you mean expires_in_days?"]}}
    token = ApiToken.objects.filter(user=alice).first()
    response = send(client, f"/api/v1/tokens/{token.pk}/revoke/", {"now": True})
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["now"]
    token.refresh_from_db()
    assert token.revoked_at is None


def test_known_bodies_still_pass_and_the_words_are_bounded():
    assert unknown_errors({"queue": "q"}, {"queue"}) == {}
    assert unknown_errors(["not", "a", "dict"], {"queue"}) == {}
    many = unknown_errors({f"x{i}": 1 for i in range(100)}, {"queue"})
    assert len(many) == 20
    assert message("zzz", ["b", "a"]) == "Unknown field; this body takes a, b."
