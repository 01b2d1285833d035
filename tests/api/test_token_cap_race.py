"""Submits with the same capped token arriving together never pass its cap between them (PostgreSQL, each client
on a connection of its own): the token's row is held while one of them counts and records its work
(portal.workloads.services.token_cap.guarded)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.workloads.models import Workload
from portal.workloads.services import token_cap
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
URL = "/api/v1/workloads/"
JOB = {"queue": "train", "kind": "training", "command": "true", "resources": {"gpus": 1}, "runtime_limit_minutes": 60}


def client_of(plaintext: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def waiting_for_the_token() -> bool:
    """Whether another connection waits for a lock on a token's row (to hold it for a capped submit, or to note
    the token's use, which waits as well while a submit holds it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # else a transaction sees its first look at it again
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND wait_event_type = 'Lock' "
            "AND query LIKE %s",
            ['%"accounts_apitoken"%'],
        )
        return bool(cursor.fetchone()[0])


def run_clients(bodies: list[tuple[str, Any]], plaintext: str) -> list[int]:
    """Send each (url, body) from a thread of its own, all released together; their answers' status codes."""
    codes: list[int] = []
    failures: list[BaseException] = []
    start = threading.Barrier(len(bodies))

    def one(url: str, body: Any) -> None:
        try:
            start.wait(60)
            codes.append(client_of(plaintext).post(url, json.dumps(body), content_type="application/json").status_code)
        except BaseException as failed:  # reported by the test, not lost in the thread
            failures.append(failed)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=body) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    return codes


def test_the_second_of_two_submits_together_waits_for_the_first_and_counts_its_work(alice, settings, monkeypatch):
    """The first to count waits, holding the token, until the second is seen waiting for it: the second then
    counts the first one's work, and is refused. (Without the lock the second never waits: this fails.)"""
    settings.GRIDLANE_SUBMIT_RATE_LIMIT = 1000
    token, plaintext = ApiToken.issue(alice, "capped", scopes={"cap_gpu_hours": Decimal(1)})
    counting = token_cap.spent
    first = threading.Lock()

    def spent_then_wait(token_id: int) -> tuple[float, float]:
        counted = counting(token_id)
        if first.acquire(blocking=False):  # the first to count, and only it
            wait_until(waiting_for_the_token, timeout=60)
        return counted

    monkeypatch.setattr(token_cap, "spent", spent_then_wait)
    bodies = [(URL, JOB | {"name": "one"}), (URL, JOB | {"name": "two"})]
    codes = run_clients(bodies, plaintext)
    assert sorted(codes) == [201, 403]
    assert Workload.objects.filter(token=token).count() == 1


def test_many_submits_released_together_get_exactly_what_the_cap_allows(alice, settings):
    """Eight clients, single and bulk submits of one GPU-hour each, released at once with a cap of three: three
    get through, five are refused, whatever the order they reach the database in."""
    settings.GRIDLANE_SUBMIT_RATE_LIMIT = 1000
    token, plaintext = ApiToken.issue(alice, "capped", scopes={"cap_gpu_hours": Decimal(3)})
    bodies: list[tuple[str, Any]] = []
    for i in range(8):
        job = JOB | {"name": f"job-{i}"}
        bodies.append((URL, job) if i % 2 else (f"{URL}bulk/", {"items": [job]}))
    codes = Counter(run_clients(bodies, plaintext))
    assert codes == {201: 3, 403: 5}
    assert Workload.objects.filter(token=token).count() == 3
    assert token_cap.spent(token.pk)[0] == pytest.approx(3.0)
