"""A submit's context kept for a moment (portal.workloads.context): the same caller's next submit to the same queue
sends one statement in all (one that checks the generation, which also confirms the token kept beside the context:
portal.api.auth.kept; counts the submit against the rate limit; and records it), and any
change to what the context is read from is seen by the very next submit, whoever made it and however (the ORM, a
bulk update, raw SQL). The clock is frozen wherever a test relies on the
context being kept, so that how fast the machine runs never decides what a test sees."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.accounts.models import AuditEvent, Membership, RateLimitWindow, ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget, Quota, QuotaGrant
from portal.worker import wake
from portal.workloads import context, services
from portal.workloads.models import Workload, WorkloadEvent

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


def test_the_next_submit_to_the_same_queue_is_counted_and_recorded_by_one_statement(
    api_as, alice, frozen, django_assert_num_queries
):
    client = api_as(alice)
    client.get(URL)  # the token's use this minute is recorded (once a minute)
    with django_assert_num_queries(5):  # token, rate limit (and the generation), queue, teams, insert
        assert post(client, "first").status_code == 201
    with django_assert_num_queries(1) as captured:  # the insert, which checks the generation and counts
        answer = post(client, "second")
    assert answer.status_code == 201, answer.content
    insert = captured.captured_queries[0]["sql"]
    assert context.GENERATION_TABLE in insert, insert
    assert RateLimitWindow._meta.db_table in insert, insert
    data = answer.json()
    assert (data["queue"], data["group"], data["owner"], data["state"]) == ("train", "vision", "alice", "pending")
    assert counted(alice) == 2


def counted(user: Any) -> int:
    """The submits counted against the user's rate limit in the current window (the clock is frozen)."""
    return sum(RateLimitWindow.objects.filter(key=f"submit:{user.pk}").values_list("count", flat=True))


def test_when_the_generation_moved_the_insert_writes_nothing_and_the_submit_goes_the_whole_way(
    api_as, alice, frozen, django_assert_num_queries
):
    client = api_as(alice)
    client.get(URL)
    assert post(client, "kept").status_code == 201
    Queue.objects.filter(slug="train").update(name="Training, renamed")  # changes nothing a submit checks
    # the insert (nothing written: the generation moved); the token, looked up again with the generation; the
    # count; queue; teams; insert
    with django_assert_num_queries(6):
        answer = post(client, "after the change")
    assert answer.status_code == 201, answer.content
    assert Workload.objects.filter(name="after the change").count() == 1
    assert WorkloadEvent.objects.filter(workload__name="after the change").count() == 1
    assert counted(alice) == 2  # counted once
    with django_assert_num_queries(1):  # kept again, under the new generation
        assert post(client, "kept again").status_code == 201


def test_the_rate_limit_holds_where_the_insert_counts(api_as, alice, frozen, settings, django_assert_num_queries):
    settings.GRIDLANE_SUBMIT_RATE_LIMIT = 3
    client = api_as(alice)
    client.get(URL)
    assert [post(client, f"ok {n}").status_code for n in range(3)] == [201] * 3  # the 2nd and 3rd: kept
    for n, statements in enumerate((2, 1)):  # the first refusal in a window is audited
        with django_assert_num_queries(statements):
            refused = post(client, f"refused {n}")
        assert refused.status_code == 429, refused.content
        assert int(refused["Retry-After"]) >= 1
    assert not Workload.objects.filter(name__startswith="refused").exists()
    assert counted(alice) == 5  # a refused submit counts, as one counted on its own does
    assert AuditEvent.objects.filter(action="ratelimit.exceeded", target=f"submit:{alice.pk}").count() == 1


def test_the_insert_that_counts_in_a_new_window_drops_the_old_one(api_as, alice, settings):
    window = int(settings.GRIDLANE_SUBMIT_RATE_WINDOW_SECONDS)
    epoch = int(timezone.now().timestamp())
    end = datetime.fromtimestamp(epoch - epoch % window + window, tz=UTC)  # the end of the current window
    client = api_as(alice)
    with time_machine.travel(end - timedelta(seconds=context.KEEP_S / 4), tick=False) as traveller:
        assert post(client, "last of a window").status_code == 201
        traveller.shift(timedelta(seconds=context.KEEP_S / 2))  # the context is kept, the window is new
        with CaptureQueriesContext(connection) as captured:
            assert post(client, "first of the next").status_code == 201
    assert len(captured.captured_queries) == 1, [q["sql"][:80] for q in captured.captured_queries]
    windows = list(RateLimitWindow.objects.filter(key=f"submit:{alice.pk}").values_list("window_start", "count"))
    assert windows == [(end, 1)]


def test_a_refused_submit_is_counted_once_however_it_is_refused(api_as, alice, frozen):
    client = api_as(alice)
    assert post(client, "kept").status_code == 201
    assert post(client, "a notebook", kind="notebook").status_code == 400  # refused by the kept context
    assert counted(alice) == 2
    assert post(client, "bad resources", resources={"gpus": -1}).status_code == 400  # refused by the serializer
    assert counted(alice) == 3
    answer = client.post(URL, "{not json", content_type="application/json")
    assert answer.status_code == 400
    assert counted(alice) == 4


def test_the_rate_limit_answers_before_a_bad_body_does(api_as, alice, frozen, settings):
    settings.GRIDLANE_SUBMIT_RATE_LIMIT = 1
    client = api_as(alice)
    assert post(client, "kept").status_code == 201
    assert post(client, "bad resources", resources={"gpus": -1}).status_code == 429
    assert client.post(URL, "{not json", content_type="application/json").status_code == 429
    assert post(client, "a notebook", kind="notebook").status_code == 429


def test_a_refusal_by_a_kept_context_is_checked_again_when_the_generation_moved(api_as, alice, frozen):
    client = api_as(alice)
    assert post(client, "kept").status_code == 201
    Queue.objects.filter(slug="train").update(kinds=["training", "batch", "notebook"])
    answer = post(client, "a notebook now", kind="notebook")
    assert answer.status_code == 201, answer.content  # the kept context refused it; the queue read again took it
    assert counted(alice) == 2


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
        with django_assert_num_queries(1):
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
    assert not Workload.objects.filter(name="after the change").exists()


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


@pytest.mark.django_db(transaction=True)  # a kick is delivered when its transaction commits
def test_the_insert_that_counts_kicks_the_worker_only_when_it_records(api_as, alice, settings):
    settings.GRIDLANE_KICK_WORKER = True
    settings.GRIDLANE_SUBMIT_RATE_LIMIT = 2
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as listener:
        listener.execute(f"LISTEN {wake.CHANNEL}")
        client = api_as(alice)
        with time_machine.travel(timezone.now(), tick=False):
            statuses = [post(client, f"n{n}").status_code for n in range(3)]  # the whole way, kept, refused
        assert statuses == [201, 201, 429]
        with connection.cursor() as cursor:  # notifications arrive in commit order: this one last
            cursor.execute("SELECT pg_notify(%s, 'marker')", [wake.CHANNEL])
        heard = []
        for note in listener.notifies():
            heard.append(note.payload)
            if note.payload == "marker":
                break
    assert heard == [wake.ADMIT, wake.ADMIT, "marker"]


capacity_migration = importlib.import_module(
    "portal.workloads.migrations.0016_capacity_observations_move_no_generation"
)


def test_a_capacity_observation_moves_no_generation_and_what_a_context_reads_still_does(alice):
    """The worker writes what it observes of a fabric every GRIDLANE_CAPACITY_SECONDS; no kept context reads it, so
    it leaves the generation (and every kept context) as it was. A queue, a quota, a token or what IT declares of a
    fabric still moves it."""
    from portal.accounts.models import ApiToken

    token = ApiToken.objects.filter(user=alice).first() or ApiToken.objects.create(user=alice, name="t", digest="d")
    before = generation()
    Fabric.objects.filter(name="local").update(
        observed_gpus_milli=1000, observed_cpus_milli=1000, observed_memory_mib=1024,
        observed_at=timezone.now(), observed_detail="2 nodes up",
    )  # fmt: skip
    Fabric.objects.filter(name="local").update(healthy=False, health_detail="down")
    assert generation() == before
    for change in (
        lambda: Queue.objects.filter(slug="train").update(description="moved"),
        lambda: Quota.objects.filter(group__slug="vision").update(gpu_limit_milli=1000),
        lambda: ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now()),
        lambda: Fabric.objects.filter(name="local").update(gpus_milli=3000),
    ):
        before = generation()
        change()
        assert generation() > before


def test_every_column_of_a_fabric_is_declared_or_observed():
    """A new column of queues_fabric is sorted into what moves the generation or what does not (migration 0016)."""
    columns = {f.column for f in Fabric._meta.concrete_fields}
    assert columns == set(capacity_migration.DECLARED) | set(capacity_migration.OBSERVED)
    assert not set(capacity_migration.DECLARED) & set(capacity_migration.OBSERVED)
