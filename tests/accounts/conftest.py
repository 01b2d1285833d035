from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.accounts.fake_provider import FakeProvider


@pytest.fixture(scope="session")
def _fake_provider() -> Iterator[FakeProvider]:
    provider = FakeProvider()
    yield provider
    provider.close()


@pytest.fixture
def fake_idp(_fake_provider: FakeProvider, settings: Any, cast: Any) -> FakeProvider:
    """The fake provider, with Gridlane's sign-in pointed at it for this test."""
    for name, value in _fake_provider.settings().items():
        setattr(settings, name, value)
    _fake_provider.token_requests.clear()
    _fake_provider.person("dora", ["vision"])
    return _fake_provider


def start_sign_in(client: Any, next_url: str = "/") -> dict[str, str]:
    """Begin a sign-in as a browser would; returns the authorization request's parameters."""
    response = client.get("/oidc/authenticate/", {"next": next_url})
    assert response.status_code == 302, response.content
    location = urlparse(response["Location"])
    return {key: values[0] for key, values in parse_qs(location.query).items()}


def finish_sign_in(client: Any, state: str, code: str = "the-code") -> Any:
    return client.get("/oidc/callback/", {"code": code, "state": state})
