"""Statements the hot paths compile once and send again (portal.sql): a token's look-up, a queue's targets, a
person's teams, a workload's INSERT. Each must give exactly what the ORM gives for the same values, on the
second run as on the first, and never answer one value with another's rows."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import DataError, connection
from django.db.models.sql import InsertQuery
from django.utils import timezone

from portal import sql
from portal.accounts.models import ApiToken, ResourceGroup
from portal.queues.models import QueueTarget
from portal.workloads import services
from portal.workloads.models import Workload


def targets(slug):
    return QueueTarget.objects.filter(queue__slug=slug, queue__enabled=True).select_related(
        "queue", "fabric", "fabric__posix_policy"
    )


def same(a, b):
    """Two lists of instances hold the same rows, and the same related rows loaded with them."""
    assert [(type(x), x.pk, vars_of(x)) for x in a] == [(type(y), y.pk, vars_of(y)) for y in b]


def vars_of(obj):
    related = {name: vars_of(value) for name, value in obj._state.fields_cache.items() if value is not None}
    return {k: v for k, v in vars(obj).items() if k != "_state"} | {"related": related}


def test_a_compiled_query_gives_what_the_orm_gives_for_each_value_it_is_run_with(cast):
    compiled = sql.Compiled(QueueTarget)
    for slug in ["train", "notebooks", "train", "no-such-queue", "train"]:
        got = compiled.run("targets", targets, slug)
        same(got, list(targets(slug)))
        for target in got:  # the related rows came with it: no query to reach them
            assert target.queue.slug == slug
            assert target.fabric.name
    assert len(compiled.cache) == 1


def test_compiled_annotations_ids_and_times_are_put_in_their_places(cast, alice, bob):
    from django.db.models import F, Value

    def teams(user_id, at):
        return (
            ResourceGroup.objects.filter(memberships__user=user_id)
            .annotate(role=F("memberships__role"), asked=Value(at))
            .order_by("slug")
        )

    compiled = sql.Compiled(ResourceGroup)
    now = timezone.now()
    for user in (alice, bob, alice):
        got = compiled.run("teams", teams, user.pk, now)
        assert [(g.slug, g.role, g.asked) for g in got] == [(g.slug, g.role, now) for g in teams(user.pk, now)]
        assert got


def test_a_token_is_found_with_its_user_in_one_statement(alice, django_assert_num_queries):
    token, plaintext = ApiToken.issue(alice, "t")
    ApiToken.lookup(plaintext)  # compiled here
    with django_assert_num_queries(1):
        found = ApiToken.lookup(plaintext)
        assert found is not None
        assert found.pk == token.pk
        assert found.user.username == "alice"
    assert ApiToken.lookup(plaintext[:-1] + ("A" if plaintext[-1] != "A" else "B")) is None


@pytest.mark.parametrize("ignore_conflicts", [False, True])
def test_a_compiled_insert_is_the_insert_django_compiles(cast, alice, submit, ignore_conflicts):
    first = submit(alice, name="first")
    for name, gpus in [("second", 1), ("third", 0.5)]:
        workload = services.check_submit(alice, services.SubmitRequest(
            queue="train", kind="training", name=name, command="true", gpus=Decimal(gpus)))  # fmt: skip
        workload.submitted_at = workload.updated_at = timezone.now()
        sql.insert_sql(first, ignore_conflicts)  # compiled with another object first
        statement, params = sql.insert_sql(workload, ignore_conflicts)
        expected, expected_params = fresh_insert(workload, ignore_conflicts)
        assert statement == expected
        assert [*map(plain, params)] == [*map(plain, expected_params)]
        assert [type(p) for p in params] == [type(p) for p in expected_params]  # adapted alike (Int4, Jsonb)
    assert Workload.objects.count() == 1


def test_every_value_of_a_compiled_insert_is_prepared_as_django_prepares_it(cast, alice, submit):
    """Plain values of plain fields pass straight (sql._direct); the rest (times, JSON, values of another type:
    a number given as text, a key as text) through the field. Either way the parameters equal Django's own."""
    import uuid

    from portal.workloads.models import WorkloadEvent

    parent = submit(alice, name="parent")
    now = timezone.now()
    workload = services.check_submit(alice, services.SubmitRequest(
        queue="train", kind="training", name="all", command="true", gpus=Decimal(1)))  # fmt: skip
    workload.submitted_at = workload.updated_at = now
    sql.insert_sql(workload, True)  # compiled with this one
    varied = {
        "lease_ends_at": now, "array_parent": parent, "code": {"digest": "x"}, "nodes": "3", "priority": 7,
        "id": str(uuid.uuid4()), "connect_url": "https://example.test/x", "array_index": None, "name": "",
    }  # fmt: skip
    for field, value in varied.items():
        setattr(workload, field, value)
        statement, params = sql.insert_sql(workload, True)
        expected, expected_params = fresh_insert(workload, True)
        assert statement == expected
        assert [*map(plain, params)] == [*map(plain, expected_params)], field
        assert [type(p) for p in params] == [type(p) for p in expected_params], field
    event = WorkloadEvent(workload=parent, at=now, actor=alice, to_state="pending", reason="r")
    for actor in (alice, None):
        event.actor = actor
        assert [*map(plain, sql.insert_sql(event)[1])] == [*map(plain, fresh_insert(event, False)[1])]


def plain(param):
    """A parameter's value: a JSON value's wrapper (psycopg's Jsonb) compares by identity, its value does not."""
    return getattr(param, "obj", param)


def fresh_insert(obj, ignore_conflicts):
    from django.db.models.constants import OnConflict
    from django.db.models.fields import AutoFieldMixin

    fields = [f for f in type(obj)._meta.concrete_fields if not isinstance(f, AutoFieldMixin) and not f.generated]
    query = InsertQuery(type(obj), on_conflict=OnConflict.IGNORE if ignore_conflicts else None)
    query.insert_values(fields, [obj])
    ((statement, params),) = query.get_compiler(connection=connection).as_sql()
    return statement, list(params)


def test_columns_selected_only_to_order_by_are_cut_as_the_orm_cuts_them(cast):
    """DISTINCT with an order the select does not hold makes the ORM select more columns than it gives."""
    from django.db.models.functions import Lower

    rows = sql.Rows().rows(
        "ordered slugs", lambda: ResourceGroup.objects.order_by(Lower("name")).distinct().values_list("slug", "pk")
    )
    assert rows == list(ResourceGroup.objects.order_by(Lower("name")).distinct().values_list("slug", "pk"))
    assert all(len(row) == 2 for row in rows)

    def teams(user_id):
        return ResourceGroup.objects.exclude(pk=user_id).order_by(Lower("name")).distinct()

    same(sql.Compiled(ResourceGroup).run("ordered", teams, 0), list(teams(0)))


@pytest.mark.parametrize("flavour", [{"flat": True}, {"named": True}])
def test_compiled_rows_refuse_flat_and_named_rows(cast, flavour):
    fields = ["slug"] if "flat" in flavour else ["slug", "pk"]
    with pytest.raises(TypeError, match="values_list"):
        sql.Rows().rows("slugs", lambda: ResourceGroup.objects.values_list(*fields, **flavour))


@pytest.mark.parametrize("way", ["set_each", "by_case"])
def test_set_each_gives_each_row_its_own_value(cast, alice, submit, way, django_assert_num_queries):
    """On PostgreSQL in one statement whatever the number of rows (unnested arrays); elsewhere a CASE per row."""
    import uuid

    def set_each(name, values, blank_only=False):
        if way == "set_each":
            return sql.set_each(Workload, name, values, blank_only=blank_only)
        return sql._set_each_by_case(Workload, name, values, blank_only=blank_only)

    workloads = [submit(alice, name=f"w{i}") for i in range(6)]
    Workload.objects.filter(pk=workloads[0].pk).update(external_id="first-writer")
    values = {w.pk: f"job-{i}" for i, w in enumerate(workloads)} | {uuid.uuid4(): "nobody's"}
    with django_assert_num_queries(1):
        assert set_each("external_id", values, blank_only=True) == 5
    got = dict(Workload.objects.values_list("pk", "external_id"))
    assert got == {w.pk: "first-writer" if i == 0 else f"job-{i}" for i, w in enumerate(workloads)}
    scripts = {w.pk: f"#!/bin/sh\n# '{i}' %s\n" for i, w in enumerate(workloads)}
    with django_assert_num_queries(1):
        assert set_each("rendered", scripts) == 6
    assert [w.rendered for w in Workload.objects.order_by("name")] == [f"#!/bin/sh\n# '{i}' %s\n" for i in range(6)]
    assert sql.set_each(Workload, "rendered", {}) == 0
    with pytest.raises(DataError):  # too long for the column: refused, never cut short
        set_each("external_id", {workloads[1].pk: "x" * 201})


def test_among_finds_what_in_finds_with_the_list_sent_as_one_array(cast, alice, submit):
    """sql.among: the rows `__in=` a long list finds, the list sent as one value on PostgreSQL (not a
    placeholder each); ids that match nothing, repeated ones, and none at all are as `__in=` has them."""
    import uuid

    workloads = [submit(alice, name=f"w{i}") for i in range(4)]
    field = Workload._meta.get_field("id")
    strangers = [uuid.uuid4() for _ in range(3000)]
    for ids in ([w.pk for w in workloads[:3]] + strangers, [workloads[0].pk] * 3, strangers, []):
        expected = set(Workload.objects.filter(pk__in=ids).values_list("name", flat=True))
        query = Workload.objects.filter(pk__in=sql.among(field, ids)).values_list("name", flat=True)
        assert set(query) == expected
        if connection.vendor == "postgresql" and ids:
            _, params = query.query.sql_with_params()
            assert len(params) == 1  # one array, not a parameter each


def test_rows_filled_in_answer_from_memory_and_a_query_on_them_keeps_the_relation(
    alice, submit, django_assert_num_queries
):
    """sql.prefetched: what a related manager's .all() gives for rows known already; a query built on them is
    the relation's, as on rows prefetch_related left (never every row of the table)."""
    one, other = submit(alice, name="one"), submit(alice, name="other")
    event = one.events.get()
    fresh = Workload.objects.get(pk=one.pk)
    sql.prefetched(fresh, "events", [event])
    with django_assert_num_queries(0):
        assert list(fresh.events.all()) == [event]
        assert fresh.events.count() == 1
        assert fresh.events.exists()
        assert fresh.events.all()[0] == event
    assert list(fresh.events.filter(to_state="pending")) == [event]  # one's, not other's
    assert list(fresh.events.order_by("-at").values_list("workload_id", flat=True)) == [one.pk]
    assert fresh.events.exclude(pk=event.pk).count() == 0
    assert other.events.get().workload_id == other.pk
