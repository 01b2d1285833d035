"""A submit's context kept for a moment (portal.workloads.context): the same caller's next submit to the same queue
sends two statements fewer, and any change to what the context is read from is seen by the very next submit,
whoever made it and however (the ORM, a bulk update, raw SQL). The clock is frozen wherever a test relies on the
context being kept, so that how fast the machine runs never decides what a test sees."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.accounts.models import Membership, ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget, Quota, QuotaGrant
from portal.workloads import context, services

generation_migration = importlib.import_module("portal.workloads.migrations.0013_submit_generation")

URL = "/api/v1/workloads/"
JOB = {"queue": "train", "kind": "training", "command": "true", "resources": {"gpus": 1}}


def post(client: Any, name: str, **fields: Any) -> Any:
    return client.post(URL, json.dumps(JOB | {"name": name} | fields), content_type="application/json")


def generation() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {context.GENERATION_SQL}")
        return int(cursor.fetchone()[0])


@pytest.fixture
def frozen() -> Any:
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        yield traveller


def test_the_next_submit_to_the_same_queue_sends_two_statements_fewer(api_as, alice, frozen, django_assert_num_queries):
    client = api_as(alice)
    client.get(URL)  # the token's use this minute is recorded (once a minute)
    with django_assert_num_queries(5):  # token, rate limit (and the generation), queue, teams, insert
        assert post(client, "first").status_code == 201
    with django_assert_num_queries(3) as captured:  # token, rate limit (and the generation), insert
        answer = post(client, "second")
    assert answer.status_code == 201, answer.content
    assert context.GENERATION_SQL in captured.captured_queries[1]["sql"]
    data = answer.json()
    assert (data["queue"], data["group"], data["owner"], data["state"]) == ("train", "vision", "alice", "pending")


def test_a_context_is_kept_per_caller_and_per_queue(api_as, alice, bob, frozen, django_assert_num_queries):
    alices, bobs = api_as(alice), api_as(bob)
    for client in (alices, bobs):
        client.get(URL)
    assert post(alices, "alices").status_code == 201
    with django_assert_num_queries(5):  # bob's teams are his own: read for him
        assert post(bobs, "bobs").status_code == 201
    with django_assert_num_queries(5):  # another queue: read for it
        assert post(alices, "notebook", queue="notebooks", kind="notebook").status_code == 201


def test_a_context_is_kept_for_at_most_a_second_by_the_clock(api_as, alice, django_assert_num_queries):
    client = api_as(alice)
    client.get(URL)
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        assert post(client, "first").status_code == 201
        traveller.shift(timedelta(seconds=context.KEEP_S / 2))
        with django_assert_num_queries(3):
            assert post(client, "within").status_code == 201
        traveller.shift(timedelta(seconds=context.KEEP_S / 2))
        with django_assert_num_queries(5):  # a temporary grant may have started or ended meanwhile: read again
            assert post(client, "after").status_code == 201
        traveller.shift(timedelta(seconds=-10))
        with django_assert_num_queries(5):  # a clock put back keeps nothing read "later"
            assert post(client, "before").status_code == 201


def _run_sql(statement: str) -> Callable[[], None]:
    def run() -> None:
        with connection.cursor() as cursor:
            cursor.execute(statement)

    return run


def _vision() -> ResourceGroup:
    return ResourceGroup.objects.get(slug="vision")


# Each change would refuse alice's next submit (status, field); each is made after a context was kept for her.
REFUSING: dict[str, tuple[Callable[[], Any], int, str]] = {
    "her membership ends": (lambda: Membership.objects.filter(user__username="alice").delete(), 403, "detail"),
    "her team is taken off the queue": (
        lambda: Queue.objects.get(slug="train").allowed_groups.remove(_vision()),
        403,
        "detail",
    ),
    "the queue is closed": (lambda: Queue.objects.filter(slug="train").update(enabled=False), 400, "queue"),
    "the queue takes notebooks only": (
        lambda: Queue.objects.filter(slug="train").update(kinds=["notebook"]),
        400,
        "kind",
    ),
    "the queue's longest runtime is cut": (
        lambda: Queue.objects.filter(slug="train").update(max_runtime_minutes=30),
        400,
        "runtime_limit_minutes",
    ),
    "her team's GPU limit drops to none": (
        lambda: Quota.objects.filter(group__slug="vision").update(gpu_limit_milli=0),
        400,
        "resources",
    ),
    "the fabric shrinks to no GPUs": (
        lambda: Fabric.objects.filter(name="local").update(gpus_milli=0),
        400,
        "resources",
    ),
    "the queue loses its fabric": (lambda: QueueTarget.objects.filter(queue__slug="train").delete(), 400, "queue"),
    "raw SQL closes the queue": (
        _run_sql("UPDATE queues_queue SET enabled = false WHERE slug = 'train'"),
        400,
        "queue",
    ),
}


@pytest.mark.parametrize("change", REFUSING)
def test_a_change_to_what_the_context_is_read_from_is_seen_by_the_very_next_submit(api_as, alice, frozen, change):
    client = api_as(alice)
    assert post(client, "kept").status_code == 201
    before = generation()
    make, status, field = REFUSING[change]
    make()
    assert generation() != before
    answer = post(client, "after the change")
    assert answer.status_code == status, answer.content
    assert field in answer.json()["errors"], answer.json()


def test_a_raise_is_seen_at_once_too(api_as, alice, frozen):
    Quota.objects.filter(group__slug="vision").update(gpu_limit_milli=0)
    client = api_as(alice)
    refused = post(client, "over the limit")
    assert refused.status_code == 400
    assert "resources" in refused.json()["errors"]
    QuotaGrant.objects.create(
        team=_vision(),
        fabric=Fabric.objects.get(name="local"),
        gpus_milli=2000,
        state=QuotaGrant.State.APPROVED,
        starts_at=timezone.now() - timedelta(minutes=1),
        ends_at=timezone.now() + timedelta(hours=1),
    )
    assert post(client, "within the grant").status_code == 201


def test_an_agents_kept_context_follows_its_list_of_queues(api_as, agent, frozen):
    client = api_as(agent.user)
    assert post(client, "kept").status_code == 201
    agent.allowed_queues.set([Queue.objects.get(slug="notebooks")])
    answer = post(client, "no longer its queue")
    assert answer.status_code == 403, answer.content


def _tables(statements: list[dict[str, str]]) -> set[str]:
    return {t for q in statements for t in re.findall(r'(?:FROM|JOIN) "(\w+)"', q["sql"])}


def test_every_table_a_context_is_read_from_moves_the_generation(alice, it_admin, agent):
    """The list of watched tables (migration 0013) covers what the context's statements read, for a person, for IT
    and for an agent; and a write to each, even one that changes no row, moves the generation."""
    read: set[str] = set()
    for user in (alice, it_admin, agent.user):
        user = type(user).objects.select_related("service_identity").get(pk=user.pk)
        with CaptureQueriesContext(connection) as captured:
            services.submit_context(user, "train")
        assert captured.captured_queries, "the context was read"
        read |= _tables(captured.captured_queries)
    assert read <= set(generation_migration.WATCHED), read - set(generation_migration.WATCHED)
    for table in generation_migration.WATCHED:
        before = generation()
        _run_sql(f'DELETE FROM "{table}" WHERE false')()  # noqa: S608 (the migration's own list)
        assert generation() > before, table


def test_a_submit_without_a_generation_reads_its_context_every_time(alice, django_assert_num_queries):
    services.submit_context(alice, "train", generation=None)
    with django_assert_num_queries(2):
        services.submit_context(alice, "train", generation=None)


def test_kept_compares_generation_and_age():
    now = timezone.now()
    context.keep("key", 7, "value", now)
    assert context.kept("key", 7, now) == "value"
    assert context.kept("key", 7, now + timedelta(seconds=context.KEEP_S) - timedelta(microseconds=1)) == "value"
    assert context.kept("key", 8, now) is None  # something changed since
    assert context.kept("key", 7, now + timedelta(seconds=context.KEEP_S)) is None  # too old
    assert context.kept("key", 7, now - timedelta(microseconds=1)) is None  # read "later" than now
    assert context.kept("other", 7, now) is None
    context.forget()
    assert context.kept("key", 7, now) is None


def test_a_process_keeps_a_bounded_number_of_contexts(monkeypatch):
    monkeypatch.setattr(context, "MAX_KEPT", 3)
    now = timezone.now()
    for n in range(3):
        context.keep(n, 1, n, now)
    assert [context.kept(n, 1, now) for n in range(3)] == [0, 1, 2]
    context.keep(3, 1, 3, now)  # one past the bound: it starts again
    assert [context.kept(n, 1, now) for n in range(4)] == [None, None, None, 3]
