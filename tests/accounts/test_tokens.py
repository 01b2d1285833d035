"""Personal API tokens: created and revoked by their owner, shown once, hashed at rest, last use recorded."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken, AuditEvent, _digest

TOKEN_RE = re.compile(r"glt_[A-Za-z0-9_-]{43}")


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


def bearer(plaintext):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def create_token(client, name="laptop", days="30"):
    response = client.post("/accounts/tokens/", {"name": name, "expires_in_days": days})
    assert response.status_code == 200, response.content
    (plaintext,) = set(TOKEN_RE.findall(response.content.decode()))
    return response, plaintext


def test_a_personal_token_is_shown_once_and_kept_only_as_a_digest(alice_client, alice):
    response, plaintext = create_token(alice_client)
    assert response["Cache-Control"] == "no-store"
    token = ApiToken.objects.get(user=alice)
    assert token.digest == _digest(plaintext)  # HMAC-SHA256 under a key derived from the secret key
    assert plaintext not in json.dumps(list(ApiToken.objects.values()), default=str)
    assert token.expires_at is not None
    assert timedelta(days=29) < token.expires_at - timezone.now() <= timedelta(days=30)
    assert plaintext not in alice_client.get("/accounts/").content.decode()  # never shown again
    assert bearer(plaintext).get("/api/v1/me/").json()["username"] == "alice"
    event = AuditEvent.objects.get(action="token.issued")
    assert (event.actor, event.target) == (alice, f"{token.hint}… of alice")


def test_revoking_a_token_stops_it_at_once(alice_client, alice):
    _, plaintext = create_token(alice_client)
    token = ApiToken.objects.get(user=alice)
    assert alice_client.post(f"/accounts/tokens/{token.pk}/revoke/").status_code == 302
    response = bearer(plaintext).get("/api/v1/workloads/")
    assert response.status_code == 401
    assert response.json() == {"errors": {"detail": ["The token is unknown, revoked or expired."]}}
    assert AuditEvent.objects.filter(action="token.revoked", actor=alice).count() == 1


def test_nobody_revokes_someone_elses_token(alice_client, bob):
    token, _ = ApiToken.issue(bob, "bob's")
    assert alice_client.post(f"/accounts/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_use_is_recorded_at_most_once_a_minute(alice):
    token, plaintext = ApiToken.issue(alice, "cli")
    client = bearer(plaintext)
    with time_machine.travel(timezone.now(), tick=False) as clock:
        client.get("/api/v1/workloads/")
        client.get("/api/v1/queues/")
        first = timezone.now()
        clock.shift(timedelta(seconds=61))
        client.get("/api/v1/workloads/")
    token.refresh_from_db()
    assert token.last_used_at == first + timedelta(seconds=61)
    uses = AuditEvent.objects.filter(action="token.used").order_by("pk")
    assert [(e.actor, e.detail["method"], e.detail["path"]) for e in uses] == [
        (alice, "GET", "/api/v1/workloads/"),
        (alice, "GET", "/api/v1/workloads/"),
    ]


def test_an_expired_token_is_refused(alice):
    _, plaintext = ApiToken.issue(alice, "old", expires_at=timezone.now() - timedelta(seconds=1))
    assert bearer(plaintext).get("/api/v1/workloads/").status_code == 401


def test_tokens_through_the_api_list_create_and_revoke(api_as, alice):
    client = api_as(alice)
    created = client.post("/api/v1/tokens/", {"name": "ci", "expires_in_days": 7}, format="json")
    assert created.status_code == 201
    body = created.json()
    assert TOKEN_RE.fullmatch(body["token"])
    assert body["hint"] == body["token"][:12]
    listed = client.get("/api/v1/tokens/").json()
    assert "token" not in listed[0]
    assert {t["name"] for t in listed} == {"ci", "tests"}
    revoked = client.post(f"/api/v1/tokens/{body['id']}/revoke/")
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    assert bearer(body["token"]).get("/api/v1/me/").status_code == 401


def test_a_token_name_is_shown_escaped(alice_client):
    response, _ = create_token(alice_client, name='<script>alert("x")</script>')
    page = response.content.decode()
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
