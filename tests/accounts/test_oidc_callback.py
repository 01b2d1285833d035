"""The OIDC callback at the HTTP level, against a fake provider back-channel that hands over crafted tokens:
what a valid sign-in looks like, and every forged or replayed callback refused."""

from __future__ import annotations

import base64
import hashlib
import time

import jwt
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from portal.accounts.models import AuditEvent, ExternalIdentity, Membership
from tests.accounts.conftest import finish_sign_in, start_sign_in
from tests.accounts.fake_provider import new_key


def signed_in_as(client):
    response = client.get("/accounts/")
    return response.context["user"].username if response.status_code == 200 else None


def last_failure():
    return AuditEvent.objects.filter(action="signin.failed").latest("pk").detail["reason"]


def test_the_authorization_request_carries_state_nonce_and_a_pkce_challenge(client, fake_idp):
    params = start_sign_in(client)
    assert params["response_type"] == "code"
    assert params["client_id"] == "gridlane-fake"
    assert set(params["scope"].split()) >= {"openid", "email", "profile", "groups"}
    assert params["code_challenge_method"] == "S256"
    assert len(params["state"]) >= 32
    assert len(params["nonce"]) >= 32
    assert params["redirect_uri"] == "http://testserver/oidc/callback/"


def test_a_valid_callback_signs_in_with_teams_from_claims(client, fake_idp):
    params = start_sign_in(client, next_url="/accounts/")
    fake_idp.id_token = fake_idp.sign(fake_idp.claims(params["nonce"]))
    response = finish_sign_in(client, params["state"])
    assert response.status_code == 302
    assert response["Location"] == "/accounts/"
    assert signed_in_as(client) == "dora"

    dora = get_user_model().objects.get(username="dora")
    assert dora.email == "dora@example.test"
    assert not dora.has_usable_password()
    assert [(m.group.slug, m.role) for m in Membership.objects.filter(user=dora)] == [("vision", "member")]
    assert ExternalIdentity.objects.get(user=dora).subject == "sub-dora"

    # The code went back with the PKCE verifier that matches the challenge, and the secret in the body.
    (token_request,) = fake_idp.token_requests
    verifier = token_request["code_verifier"][0]
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert challenge == params["code_challenge"]
    assert token_request["client_secret"] == ["fake-secret"]
    assert token_request["code"] == ["the-code"]
    assert client.session["oidc_id_token"] == fake_idp.id_token

    event = AuditEvent.objects.filter(action="signin").latest("pk")
    assert (event.actor, event.detail["method"]) == (dora, "oidc")
    assert AuditEvent.objects.filter(action="membership.created", actor=dora, target__icontains="vision").exists()


def test_a_callback_with_a_state_this_browser_never_sent_is_refused(client, fake_idp):
    start_sign_in(client)
    response = finish_sign_in(client, "a-forged-state")
    assert response.status_code == 403
    assert signed_in_as(client) is None
    assert fake_idp.token_requests == []  # refused before the code was ever spent
    assert "forged or replayed" in last_failure()


def test_a_callback_replayed_after_a_sign_in_is_refused_in_the_same_and_another_browser(client, fake_idp):
    params = start_sign_in(client)
    fake_idp.id_token = fake_idp.sign(fake_idp.claims(params["nonce"]))
    assert finish_sign_in(client, params["state"]).status_code == 302
    client.post("/accounts/logout/")

    assert finish_sign_in(client, params["state"]).status_code == 403
    assert finish_sign_in(Client(), params["state"]).status_code == 403
    assert len(fake_idp.token_requests) == 1
    assert AuditEvent.objects.filter(action="signin.failed").count() == 2


def _expired(fake, nonce):
    long_ago = int(time.time()) - 3600
    return fake.sign(fake.claims(nonce, iat=long_ago - 300, exp=long_ago))


REFUSED_TOKENS = {
    "a token for another sign-in's nonce": lambda fake, nonce: fake.sign(fake.claims("another-nonce")),
    "a token without a nonce": lambda fake, nonce: fake.sign(fake.claims(None)),
    "a token signed by another key under the provider's key id": lambda fake, nonce: fake.sign(
        fake.claims(nonce), key=new_key()
    ),
    "a token signed by a key the provider does not publish": lambda fake, nonce: fake.sign(
        fake.claims(nonce), key=new_key(), kid="someone-elses"
    ),
    "an expired token": _expired,
    "a token for another client": lambda fake, nonce: fake.sign(fake.claims(nonce, aud="another-client")),
    "a token from another issuer": lambda fake, nonce: fake.sign(fake.claims(nonce, iss="http://127.0.0.1:1")),
    "a token without an expiry": lambda fake, nonce: fake.sign(fake.claims(nonce, exp=None)),
    "a token signed with the client secret (HS256)": lambda fake, nonce: jwt.encode(
        fake.claims(nonce), "fake-secret" * 4, algorithm="HS256", headers={"kid": fake.kid}
    ),
    "an unsigned token (alg none)": lambda fake, nonce: jwt.encode(
        fake.claims(nonce), "", algorithm="none", headers={"kid": fake.kid}
    ),
    "no token at all": lambda fake, nonce: "",
}


@pytest.mark.parametrize("name", REFUSED_TOKENS)
def test_a_callback_with_a_bad_id_token_is_refused(client, fake_idp, name):
    params = start_sign_in(client)
    fake_idp.id_token = REFUSED_TOKENS[name](fake_idp, params["nonce"])
    response = finish_sign_in(client, params["state"])
    assert response.status_code == 403
    assert b"Sign-in refused" in response.content
    assert signed_in_as(client) is None
    assert not get_user_model().objects.filter(username="dora").exists()
    event = AuditEvent.objects.filter(action="signin.failed").latest("pk")
    assert (event.actor, event.detail["method"]) == (None, "oidc")


def test_userinfo_for_another_subject_is_refused(client, fake_idp):
    fake_idp.person("dora", ["vision"], sub="sub-mallory")
    params = start_sign_in(client)
    fake_idp.id_token = fake_idp.sign(fake_idp.claims(params["nonce"]))
    assert finish_sign_in(client, params["state"]).status_code == 403
    assert "another subject" in last_failure()


@pytest.mark.parametrize(
    ("login", "reason"),
    [("svc.vision-bot", "belong to agents"), ("dora smith!", "not a usable username"), ("", "missing")],
)
def test_claims_that_cannot_name_a_person_here_are_refused(client, fake_idp, login, reason):
    fake_idp.person(login, ["vision"], sub="sub-x")
    params = start_sign_in(client)
    fake_idp.id_token = fake_idp.sign(fake_idp.claims(params["nonce"], sub="sub-x"))
    assert finish_sign_in(client, params["state"]).status_code == 403
    assert reason in last_failure()


def test_an_existing_person_is_adopted_once_and_the_name_is_not_taken_twice(client, fake_idp, alice):
    fake_idp.person("alice", ["vision-leads"], sub="sub-alice")
    params = start_sign_in(client)
    fake_idp.id_token = fake_idp.sign(fake_idp.claims(params["nonce"], sub="sub-alice"))
    assert finish_sign_in(client, params["state"]).status_code == 302
    assert Membership.objects.get(user=alice, group__slug="vision").role == "lead"

    other = Client()
    fake_idp.person("alice", ["vision"], sub="sub-an-impostor")
    params = start_sign_in(other)
    fake_idp.id_token = fake_idp.sign(fake_idp.claims(params["nonce"], sub="sub-an-impostor"))
    assert finish_sign_in(other, params["state"]).status_code == 403
    assert "already belongs to another identity" in last_failure()


def test_a_disabled_account_cannot_sign_in(client, fake_idp, alice):
    fake_idp.person("alice", ["vision"], sub="sub-alice")
    alice.is_active = False
    alice.save()
    params = start_sign_in(client)
    fake_idp.id_token = fake_idp.sign(fake_idp.claims(params["nonce"], sub="sub-alice"))
    assert finish_sign_in(client, params["state"]).status_code == 403
    assert "disabled" in last_failure()


def test_an_error_from_the_provider_is_refused_and_spends_the_state(client, fake_idp):
    params = start_sign_in(client)
    response = client.get("/oidc/callback/", {"error": "access_denied", "state": params["state"]})
    assert response.status_code == 403
    assert "access_denied" in last_failure()
    assert params["state"] not in client.session["oidc_states"]


def test_claims_that_change_change_access_at_the_next_sign_in(client, fake_idp, alice, submit):
    visions = submit(alice)
    params = start_sign_in(client)
    fake_idp.id_token = fake_idp.sign(fake_idp.claims(params["nonce"]))
    finish_sign_in(client, params["state"])
    assert client.get(visions.get_absolute_url()).status_code == 200
    client.post("/accounts/logout/")

    fake_idp.person("dora", ["fraud"])
    params = start_sign_in(client)
    fake_idp.id_token = fake_idp.sign(fake_idp.claims(params["nonce"]))
    finish_sign_in(client, params["state"])
    assert [m.group.slug for m in Membership.objects.filter(user__username="dora")] == ["fraud"]
    assert client.get(visions.get_absolute_url()).status_code == 404
    assert AuditEvent.objects.filter(action="membership.deleted", target__icontains="vision").exists()


def test_signing_out_ends_the_providers_session_too(client, fake_idp):
    params = start_sign_in(client)
    fake_idp.id_token = fake_idp.sign(fake_idp.claims(params["nonce"]))
    finish_sign_in(client, params["state"])
    response = client.post("/accounts/logout/")
    assert response.status_code == 302
    location = response["Location"]
    assert location.startswith(f"{fake_idp.issuer}/logout?")
    assert f"id_token_hint={fake_idp.id_token}" in location
    assert "post_logout_redirect_uri=http%3A%2F%2Ftestserver%2Faccounts%2Fsigned-out%2F" in location
    assert signed_in_as(client) is None
    assert AuditEvent.objects.filter(action="signout", actor__username="dora").exists()
    assert client.get("/accounts/logout/").status_code == 405  # sign-out is a POST (CSRF-protected) only
