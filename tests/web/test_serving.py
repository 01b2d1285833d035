"""What every response carries and what the probes say: a request id, forwarded headers believed only from the
front proxy, /healthz, /readyz (JSON for IT, a status code for probes) and the same facts on /metrics."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from portal.accounts.models import AuditEvent
from portal.queues.models import Fabric
from portal.worker import tasks
from tests.conftest import TRAINING_FORM


def test_every_response_names_its_request_and_keeps_the_proxys_id(client):
    first, second = client.get("/healthz"), client.get("/healthz")
    assert len(first["X-Request-ID"]) == 32
    assert first["X-Request-ID"] != second["X-Request-ID"]
    given = "3f2a9c0e4b7d4e1f9a8b7c6d5e4f3a2b"
    assert client.get("/healthz", HTTP_X_REQUEST_ID=given)["X-Request-ID"] == given
    assert client.get("/healthz", HTTP_X_REQUEST_ID="x\ny")["X-Request-ID"] != "x\ny"  # not an id: replaced
    assert client.get("/api/v1/nothing-here/")["X-Request-ID"]


def test_an_api_path_that_matches_nothing_answers_json_404(client):
    response = client.get("/api/v1/nothing-here/")
    assert response.status_code == 404
    assert response.json() == {"errors": {"detail": ["Not found."]}}


def test_a_server_error_is_logged_with_its_request_id_and_answered_in_json(api_as, alice, monkeypatch, caplog):
    from portal.api import views

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(views.WorkloadViewSet, "list", broken)
    client = api_as(alice)
    client.raise_request_exception = False
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = client.get("/api/v1/workloads/", HTTP_X_REQUEST_ID="req-0123456789")
    assert response.status_code == 500
    assert response.json() == {
        "errors": {"detail": ["Something went wrong on our side; IT can look it up by the request id req-0123456789."]}
    }
    [record] = [r for r in caplog.records if r.name == "django.request"]
    assert record.request_id == "req-0123456789"
    assert record.exc_info is not None


def test_a_server_error_on_a_page_shows_its_request_id(client, alice, monkeypatch):
    from portal.workloads import views

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(views, "_submit", broken)
    client.force_login(alice)
    client.raise_request_exception = False
    response = client.post(
        "/workloads/new/", TRAINING_FORM, HTTP_ACCEPT="text/html", HTTP_X_REQUEST_ID="req-0123456789"
    )
    assert response.status_code == 500
    assert response["X-Request-ID"] == "req-0123456789"
    assert '<code class="request-id">req-0123456789</code>' in response.content.decode()


def test_forwarded_headers_count_only_from_a_trusted_proxy(alice, settings):
    """A client that names itself (X-Forwarded-For) is not believed; the proxy's word is (the audit shows it)."""
    settings.GRIDLANE_TRUSTED_PROXIES = ["10.9.0.0/16"]
    for remote, want in (("10.9.0.5", "203.0.113.7"), ("198.51.100.1", "198.51.100.1")):
        client = Client(REMOTE_ADDR=remote)
        client.post("/accounts/login/", {"username": "alice", "password": "wrong"}, HTTP_X_FORWARDED_FOR="203.0.113.7")
        event = AuditEvent.objects.order_by("-pk").first()
        assert event is not None
        assert (event.action, event.detail.get("ip")) == ("signin.failed", want), event.detail


@pytest.mark.django_db(transaction=True)
def test_readyz_checks_the_database_the_workers_last_cycle_and_each_fabric(cast, client):
    Fabric.objects.filter(name="local").update(observed_at=None)
    answer = client.get("/readyz")
    assert answer.status_code == 503  # no worker has cycled yet
    checks = answer.json()["checks"]
    assert checks["database"]["ok"] is True
    assert (checks["worker"]["ok"], checks["worker"]["last_cycle_age_s"]) == (False, None)
    assert client.get("/readyz", {"check": "database"}).status_code == 200  # the web processes' probe

    tasks.cycle()
    answer = client.get("/readyz")
    assert answer.status_code == 200, answer.json()
    checks = answer.json()["checks"]
    assert checks["worker"]["ok"] is True
    assert checks["fabrics"]["local"]["ok"] is True
    assert checks["fabrics"]["local"]["last_contact"] is not None

    stale = checks["worker"]["stale_after_s"]
    with time_machine.travel(timezone.now() + timedelta(seconds=stale - 1), tick=False):
        assert client.get("/readyz").status_code == 200
    with time_machine.travel(timezone.now() + timedelta(hours=1), tick=False):
        answer = client.get("/readyz")
        assert answer.status_code == 503  # the worker stopped cycling an hour ago
        assert answer.json()["checks"]["worker"]["ok"] is False
        assert answer.json()["checks"]["fabrics"]["local"]["ok"] is False  # not heard from in three periods
        metrics = client.get("/metrics").content.decode()
    assert "gridlane_ready 0.0" in metrics
    assert "gridlane_database_up 1.0" in metrics
    assert "gridlane_worker_up 0.0" in metrics
    assert 'gridlane_fabric_up{fabric="local"} 0.0' in metrics
    assert 'gridlane_fabric_last_contact_age_seconds{fabric="local"}' in metrics
    assert client.get("/healthz").content == b"ok"
