"""A token's spending cap in money (ApiToken.cap_money): finished work counts what it cost where it ran, work not
yet ended all of its limit at the dearest of its queue's targets; a submit past the cap is refused, naming
cap_money. And a token limited to some queues may not read a team's usage, which spans all of its queues."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts import scopes
from portal.accounts.models import ApiToken
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.workloads.models import Workload
from portal.workloads.services import token_cap

URL = "/api/v1/workloads/"
# One GPU and one CPU for an hour: 2.50 an hour on the local fabric, 5.00 on the dear one (memory is not charged).
JOB = {
    "queue": "train",
    "kind": "training",
    "command": "true",
    "resources": {"gpus": 1, "cpus": 1, "memory_gb": 1},
    "runtime_limit_minutes": 60,
}


@pytest.fixture
def priced(cast: Any) -> tuple[Fabric, Fabric]:
    """The train queue behind two priced fabrics: the demo's local one, and a dearer one."""
    local = Fabric.objects.get(name="local")
    Fabric.objects.filter(pk=local.pk).update(gpu_hour_price=Decimal(2), cpu_hour_price=Decimal("0.5"))
    dear = Fabric.objects.create(
        name="dear", kind="local", gpus_milli=8000, cpus_milli=16000, memory_mib=65536,
        gpu_hour_price=Decimal(4), cpu_hour_price=Decimal(1), memory_gb_hour_price=None,
    )  # fmt: skip
    QueueTarget.objects.create(queue=Queue.objects.get(slug="train"), fabric=dear, order=1)
    return local, dear


def token_of(user: Any, **scope_fields: Any) -> tuple[ApiToken, APIClient]:
    token, plaintext = ApiToken.issue(user, "capped", scopes=scope_fields)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return token, client


def post(client: APIClient, body: Any, url: str = URL) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


def refused_scope(response: Any) -> str:
    assert response.status_code == 403, response.content
    (missing,) = response.json()["errors"]["missing_scope"]
    return str(missing)


@override_settings(GRIDLANE_CURRENCY="EUR")
def test_the_money_cap_counts_limits_at_the_dearest_target_and_finished_work_at_its_cost(alice, priced):
    local, _dear = priced
    _token, client = token_of(alice, cap_money=Decimal(12))
    first = post(client, JOB | {"name": "a"})  # up to an hour at 5.00 (the dear fabric's price): 5.00 committed
    assert first.status_code == 201, first.content
    assert post(client, JOB | {"name": "b"}).status_code == 201  # 10.00 committed
    refused = post(client, JOB | {"name": "c"})  # 15.00 would pass 12.00
    assert refused_scope(refused) == scopes.CAP_MONEY
    detail = refused.json()["errors"]["detail"][0]
    assert "cap of 12.00 EUR would be passed: 10.00 spent or committed, 5.00 asked for" in detail
    assert Workload.objects.count() == 2
    # The first ran for 30 minutes on the local fabric and ended: it cost 1.25 (2.50 an hour), not 5.00.
    start = timezone.now() - timedelta(hours=2)
    Workload.objects.filter(pk=first.json()["id"]).update(
        state="succeeded", started_at=start, finished_at=start + timedelta(minutes=30), fabric=local
    )
    assert token_cap.spent(_token.pk)[1] == pytest.approx(6.25)
    assert post(client, JOB | {"name": "d"}).status_code == 201  # 6.25 + 5.00 = 11.25
    assert refused_scope(post(client, JOB | {"name": "e", "runtime_limit_minutes": 10})) == scopes.CAP_MONEY
    assert post(client, JOB | {"name": "f", "runtime_limit_minutes": 6}).status_code == 201  # 0.50: 11.75
    # Work that ended without starting cost nothing.
    Workload.objects.filter(name="b").update(state="cancelled", finished_at=timezone.now())
    assert token_cap.spent(_token.pk)[1] == pytest.approx(6.75)


def test_the_money_cap_counts_a_bulk_submit_and_an_array_whole(alice, priced):
    _token, client = token_of(alice, cap_money=Decimal(12))
    items = [JOB | {"name": f"job-{i}"} for i in range(3)]
    assert refused_scope(post(client, {"items": items}, f"{URL}bulk/")) == scopes.CAP_MONEY
    assert refused_scope(post(client, JOB | {"name": "arr", "array": "0-2"})) == scopes.CAP_MONEY
    assert Workload.objects.count() == 0
    assert post(client, {"items": items[:2]}, f"{URL}bulk/").status_code == 201
    assert refused_scope(post(client, JOB | {"name": "one"})) == scopes.CAP_MONEY


def test_both_caps_hold_each_on_its_own(alice, priced):
    _token, client = token_of(alice, cap_money=Decimal(100), cap_gpu_hours=Decimal(1))
    assert post(client, JOB | {"name": "a"}).status_code == 201
    assert refused_scope(post(client, JOB | {"name": "b"})) == scopes.CAP  # 2 GPU-hours: the GPU cap is first
    _token, cheap = token_of(alice, cap_money=Decimal(1), cap_gpu_hours=Decimal(100))
    assert refused_scope(post(cheap, JOB | {"name": "c"})) == scopes.CAP_MONEY


def test_unpriced_work_costs_nothing_against_the_money_cap(alice):
    _token, client = token_of(alice, cap_money=Decimal("0.01"))
    for name in ("a", "b", "c"):  # the demo's fabric has no prices
        assert post(client, JOB | {"name": name}).status_code == 201


def test_me_and_the_token_list_show_the_money_cap(alice, api_as):
    with override_settings(GRIDLANE_CURRENCY="CHF"):
        _token, client = token_of(alice, cap_money=Decimal("250.5"))
        me = client.get("/api/v1/me/").json()["token"]
        assert (me["cap_money"], me["currency"], me["scoped"]) == ("250.50", "CHF", True)
        listed = api_as(alice).get("/api/v1/tokens/").json()
        assert [t["scopes"]["cap_money"] for t in listed if t["name"] == "capped"] == ["250.50"]
        assert _token.scope_summary == "money cap 250.50 CHF"


def test_a_money_capped_submit_reads_a_bounded_number_of_statements(alice, priced, django_assert_max_num_queries):
    """Beside any submit's statements: its transaction (a savepoint here), the lock on the token's row, the count
    and the prices of the new work's queues; the same whatever the token has submitted before."""
    _token, client = token_of(alice, cap_money=Decimal(1000))
    client.get(URL)  # the token's use this minute is recorded first (once a minute)
    for i in range(3):
        assert post(client, JOB | {"name": f"warm-{i}"}).status_code == 201
    with django_assert_max_num_queries(8):
        assert post(client, JOB | {"name": "counted"}).status_code == 201
    with django_assert_max_num_queries(13):
        assert post(client, {"items": [JOB | {"name": f"b-{i}"} for i in range(5)]}, f"{URL}bulk/").status_code == 201


# --- A team's usage, read with a token limited to some queues -------------------------------------------------


def test_a_queue_scoped_token_may_not_read_a_teams_usage_which_spans_all_its_queues(alice):
    _token, queued = token_of(alice, scope_queues=["train"])
    refused = queued.get("/api/v1/groups/vision/usage/")
    assert refused_scope(refused) == scopes.ALL_QUEUES
    assert refused_scope(queued.get("/api/v1/groups/no-such-team/usage/")) == scopes.ALL_QUEUES  # tells nothing
    _token, read_only = token_of(alice, scope_actions=scopes.pack([scopes.READ]))
    assert read_only.get("/api/v1/groups/vision/usage/").status_code == 200
    _token, capped = token_of(alice, cap_money=Decimal(5))
    assert capped.get("/api/v1/groups/vision/usage/").status_code == 200
    assert queued.get(URL).status_code == 200  # its own queues' work it still reads
