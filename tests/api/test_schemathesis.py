"""Schemathesis against the OpenAPI schema at /api/v1/schema/: whatever a client sends, no 5xx.

Bounded (25 examples per operation, derandomized) so it runs in seconds and the same way every time.
Callers: alice with a personal token, and an agent with its own; requests go through the WSGI app.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from portal.accounts.models import ApiToken
from portal.wsgi import application

schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", application)


@pytest.fixture
def callers(cast: Any, agent: Any, submit: Any, settings: Any) -> Iterator[list[dict[str, str]]]:
    settings.GRIDLANE_SUBMIT_RATE_LIMIT = 10_000  # a 429 is no failure, but it would cut the exploration short
    submit(cast["alice"])
    headers = []
    for user in (cast["alice"], agent.user):
        _, plaintext = ApiToken.issue(user, "schemathesis")
        headers.append({"Authorization": f"Bearer {plaintext}"})
    # As Django's test client does: keep the test's connection (and its transaction) across WSGI requests.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield headers
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
def test_no_input_makes_the_api_fail(case, callers):
    for headers in callers:
        response = case.call(headers=headers)
        case.validate_response(response, checks=[not_a_server_error])


def test_a_huge_page_size_is_capped_not_a_database_error(api_as, alice, submit):
    """Found by the exploration above: ?limit= beyond a 64-bit integer reached SQL's LIMIT."""
    submit(alice)
    response = api_as(alice).get("/api/v1/workloads/", {"limit": "99999999999999999999"})
    assert response.status_code == 200
    assert len(response.json()["results"]) == 1


def test_a_nul_in_a_list_filter_matches_nothing_rather_than_failing(api_as, alice, submit):
    """Found by the exploration above: ?group=%00 reached PostgreSQL, which refuses NUL in text."""
    submit(alice)
    for name in ("group", "queue", "kind"):
        response = api_as(alice).get("/api/v1/workloads/", {name: "\x00"})
        assert response.status_code == 200
        assert response.json()["results"] == []
