"""Statements the hot paths send again and again are prepared by PostgreSQL once per connection (portal.sql.prepared):
parsed and planned once, then only executed with each call's values. The suite runs on PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
import time_machine
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from portal import sql
from portal.accounts.models import ApiToken
from portal.workloads import context

JOB = {"queue": "train", "kind": "training", "command": "true", "resources": {"gpus": 0, "cpus": 1}}
CONTEXT = ('SELECT "queues_queuetarget"', 'SELECT "accounts_resourcegroup"')  # a submit's context: its two reads


def prepared_here() -> dict[str, int]:
    """This connection's prepared statements: the first words of each, and how often each was executed."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements")
        return {text[:60]: runs for text, runs in cursor.fetchall()}


def api(user):
    _, token = ApiToken.issue(user, "prepared")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_a_submit_s_statements_are_prepared_once_and_then_only_executed(cast, alice):
    client = api(alice)
    assert client.post("/api/v1/workloads/", JOB | {"name": "first"}, format="json").status_code == 201
    first = prepared_here()
    starts = sorted(first)
    assert any(s.startswith('SELECT "accounts_apitoken"') for s in starts), starts  # the token's look-up
    assert any(s.startswith('SELECT "queues_queuetarget"') for s in starts), starts  # the queue's targets
    assert any(s.startswith('SELECT "accounts_resourcegroup"') for s in starts), starts  # the person's teams
    assert any(s.startswith("WITH w AS (INSERT INTO") for s in starts), starts  # the workload, its event, the kick
    assert any(s.startswith("WITH old AS (DELETE FROM") for s in starts), starts  # the rate limit's count
    with time_machine.travel(timezone.now(), tick=False):  # the context kept (portal.workloads.context) stays
        for n in range(2, 5):
            assert client.post("/api/v1/workloads/", JOB | {"name": f"again {n}"}, format="json").status_code == 201
    again = prepared_here()
    guarded = [s for s in again if s.startswith("WITH g AS (SELECT 1 FROM")]  # the insert that checks and counts
    assert len(guarded) == 1, sorted(again)
    assert sorted(again) == sorted([*starts, *guarded])  # the same statements, none prepared twice
    assert again[guarded[0]] == 3
    # the token, the queue, the teams, the count on its own, the insert that does not count: left out while the
    # context and the token are kept (portal.api.auth.kept)
    assert all(again[s] == first[s] for s in starts)
    context.forget()
    assert client.post("/api/v1/workloads/", JOB | {"name": "read again"}, format="json").status_code == 201
    last = prepared_here()
    assert sorted(last) == sorted(again)
    assert all(last[s] == again[s] + 1 for s in starts)  # the whole way again, each statement only executed
    assert last[guarded[0]] == again[guarded[0]]


def test_the_query_log_shows_a_prepared_statement_with_its_values(cast, alice):
    client = api(alice)
    with CaptureQueriesContext(connection) as captured:
        response = client.post("/api/v1/workloads/", JOB | {"name": "shown-in-the-log"}, format="json")
    assert response.status_code == 201
    insert = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("WITH w AS (INSERT")]
    assert len(insert) == 1
    assert "'shown-in-the-log'" in insert[0]
    assert "%s" not in insert[0]


@pytest.mark.django_db(transaction=True)  # closes its connection: not inside the test's transaction
def test_with_preparing_off_nothing_is_prepared_and_submits_still_work(cast, alice, settings):
    settings.GRIDLANE_DB_PREPARE = False
    connection.close()  # a connection of its own: none of the other tests' statements on it
    client = api(alice)
    for n in range(3):
        assert client.post("/api/v1/workloads/", JOB | {"name": f"unprepared {n}"}, format="json").status_code == 201
    assert prepared_here() == {}


@pytest.mark.django_db(transaction=True)  # rolls back transactions of its own
def test_a_statement_prepared_in_a_transaction_rolled_back_is_still_there_after(cast, alice):
    """PostgreSQL keeps prepared statements across a rollback (they belong to the session); psycopg forgets its
    own list on a rollback and prepares again. Either way the next run works and gives the right rows."""
    rows = sql.Rows()

    def alices_teams():
        from portal.accounts.models import ResourceGroup

        return ResourceGroup.objects.filter(memberships__user=alice.pk).order_by("slug").values_list("slug")

    def fail_after_preparing() -> None:
        with transaction.atomic():
            assert rows.rows("teams", alices_teams) == list(alices_teams())
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1/0")

    with pytest.raises(DatabaseError):  # the transaction's rollback
        fail_after_preparing()
    assert rows.rows("teams", alices_teams) == list(alices_teams())
    with transaction.atomic():
        with pytest.raises(DatabaseError):  # a savepoint's rollback
            fail_after_preparing()
        assert rows.rows("teams", alices_teams) == list(alices_teams())
    connection.close()  # a new connection: prepared afresh
    assert rows.rows("teams", alices_teams) == list(alices_teams())
    assert any(s.startswith('SELECT "accounts_resourcegroup"."slug"') for s in prepared_here())


def test_a_statement_is_sent_in_postgresql_s_form_converted_once(db):
    assert sql.numbered("SELECT %s, %s WHERE a LIKE '50%%' AND b = %s") == "SELECT $1, $2 WHERE a LIKE '50%' AND b = $3"
    assert sql.numbered("SELECT '%%s', %s") == "SELECT '%s', $1"  # a percent sign, then an s: no value
    assert sql.numbered("SELECT 1") == "SELECT 1"
    with pytest.raises(ValueError, match="neither"):
        sql.numbered("SELECT %d")
    with connection.cursor() as plain, sql.prepared() as prepared:
        cases: list[tuple[str, list[Any]]] = [
            ("SELECT %s::int + %s::int, '5%%'", [2, 3]),
            ("SELECT %s || '%%s'", ["x"]),
        ]
        for statement, params in cases:
            plain.execute(statement, params)
            prepared.execute(statement, params)
            assert prepared.fetchall() == plain.fetchall()
