"""Submissions are rate limited per identity: a fixed window counted in the database, 429 with Retry-After."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import time_machine

from portal.accounts import ratelimit
from portal.accounts.models import AuditEvent, RateLimitWindow, ServiceIdentity
from tests.conftest import TRAINING_FORM

JOB = {"queue": "train", "kind": "training", "name": "job", "command": "true"}
FORM = TRAINING_FORM
START = datetime(2026, 12, 1, 9, 0, 10, tzinfo=UTC)


def test_the_api_answers_429_with_retry_after_past_the_limit_and_opens_again(api_as, alice, bob, settings):
    settings.GRIDLANE_SUBMIT_RATE_LIMIT = 3
    client = api_as(alice)
    with time_machine.travel(START, tick=False) as clock:
        assert [client.post("/api/v1/workloads/", JOB, format="json").status_code for _ in range(3)] == [201] * 3
        refused = client.post("/api/v1/workloads/", JOB, format="json")
        assert refused.status_code == 429
        assert refused["Retry-After"] == "50"  # the window opened at 09:00:00 and lasts 60 s
        assert "More than 3 submissions" in refused.json()["errors"]["detail"][0]
        assert api_as(bob).post("/api/v1/workloads/", JOB, format="json").status_code == 201  # per identity
        clock.shift(timedelta(seconds=50))
        assert client.post("/api/v1/workloads/", JOB, format="json").status_code == 201
    assert AuditEvent.objects.filter(action="ratelimit.exceeded", target=f"submit:{alice.pk}").count() == 1
    assert RateLimitWindow.objects.filter(key=f"submit:{alice.pk}").count() == 1  # old windows are dropped


def test_the_form_says_so_too(client, alice, settings):
    settings.GRIDLANE_SUBMIT_RATE_LIMIT = 1
    client.force_login(alice)
    with time_machine.travel(START, tick=False):
        assert client.post("/workloads/new/", FORM).status_code == 302
        page = client.post("/workloads/new/", FORM)
        assert page.status_code == 429
        assert page["Retry-After"] == "50"
        assert "More than 1 submissions" in page.content.decode()
        partial = client.post("/workloads/new/", FORM, HTTP_HX_REQUEST="true")
        assert partial.status_code == 422  # what htmx swaps in, so the message shows


def test_an_agent_has_its_own_limit(api_as, agent):
    ServiceIdentity.objects.filter(pk=agent.pk).update(rate_limit_per_minute=2)
    agent.refresh_from_db()
    client = api_as(agent.user)
    with time_machine.travel(START, tick=False):
        codes = [client.post("/api/v1/workloads/", JOB, format="json").status_code for _ in range(3)]
    assert codes == [201, 201, 429]


def test_the_counter_counts_from_every_caller_of_the_same_key(db):
    with time_machine.travel(START, tick=False):
        assert [ratelimit.hit("k", limit=2, window_s=10) for _ in range(4)] == [None, None, 10, 10]
