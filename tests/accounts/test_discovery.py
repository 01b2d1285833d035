"""Endpoints from the real test provider's discovery document (tests/idp), fetched once, issuer checked."""

from __future__ import annotations

import pytest

from portal.accounts import oidc


@pytest.fixture
def fresh_discovery(monkeypatch):
    monkeypatch.setattr(oidc, "_discovered", {})


def test_endpoints_come_from_discovery_when_not_set_one_by_one(settings, fresh_discovery):
    endpoints = oidc.endpoints()
    issuer = settings.GRIDLANE_OIDC["ISSUER"]
    assert endpoints.issuer == issuer
    assert (endpoints.authorization, endpoints.token, endpoints.userinfo, endpoints.jwks) == (
        f"{issuer}/auth",
        f"{issuer}/token",
        f"{issuer}/me",
        f"{issuer}/jwks",
    )
    assert endpoints.end_session == f"{issuer}/session/end"
    assert list(oidc._discovered) == [settings.GRIDLANE_OIDC["DISCOVERY_URL"]]  # kept for the next sign-in


def test_a_discovery_document_for_another_issuer_is_refused(settings, fresh_discovery):
    settings.GRIDLANE_OIDC = {**settings.GRIDLANE_OIDC, "ISSUER": "http://127.0.0.1:9/other"}
    with pytest.raises(oidc.ProviderUnavailable, match="names issuer"):
        oidc.endpoints()


def test_an_unreachable_provider_shows_a_page_not_a_crash(client, cast, settings, fresh_discovery):
    settings.GRIDLANE_OIDC = {**settings.GRIDLANE_OIDC, "DISCOVERY_URL": "http://127.0.0.1:9/.well-known/x"}
    response = client.get("/oidc/authenticate/")
    assert response.status_code == 503
    assert b"cannot reach" in response.content


def test_without_a_client_id_there_is_no_provider_sign_in(client, cast, settings):
    settings.OIDC_RP_CLIENT_ID = ""
    assert client.get("/oidc/authenticate/").status_code == 404
    assert b"sso" not in client.get("/accounts/login/").content
