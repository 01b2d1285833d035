"""Timestamps are read by psycopg's compiled loader where the session is in UTC (portal.sql.UtcTimestamps): the
same aware datetimes Django's own loader gives, from every kind of cursor. The suite runs on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.backends.postgresql.base import DatabaseWrapper
from django.db.backends.postgresql.psycopg_any import register_tzloader  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.pq import Format
from rest_framework.test import APIClient

from portal import sql
from portal.accounts.models import ApiToken
from portal.workloads.models import Workload

TIMESTAMPTZ = 1184

FIRST, LAST = datetime(1, 1, 2, tzinfo=UTC), datetime(9999, 12, 30, tzinfo=UTC)
# hypothesis takes naive bounds and gives each value the zone `timezones` draws
instants = st.datetimes(FIRST.replace(tzinfo=None), LAST.replace(tzinfo=None), timezones=st.just(UTC))


def loader_of(conn) -> type:
    return conn.adapters.get_loader(TIMESTAMPTZ, Format.TEXT)


@pytest.mark.django_db
def test_a_django_connection_reads_timestamps_with_the_compiled_loader():
    connection.ensure_connection()
    assert loader_of(connection.connection) is sql.UtcTimestamps
    with connection.cursor() as cursor:  # Django's cursor keeps it: the zones agree
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    assert now.tzinfo is UTC


@pytest.mark.django_db
@settings(max_examples=300, deadline=None)
@given(st.lists(instants, min_size=1, max_size=20))
def test_each_instant_reads_back_as_django_s_own_loader_reads_it(values):
    """Through Django's cursor and the prepared one, each value comes back equal, in UTC, and the same as the
    datetime Django's loader makes of the same text."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT unnest(%s::timestamptz[]), unnest(%s::timestamptz[])::text", [values, values])
        rows = cursor.fetchall()
    with sql.prepared() as cursor:
        cursor.execute("SELECT unnest(%s::timestamptz[])", [values])
        prepared = [v for (v,) in cursor.fetchall()]
    texts = [text for _, text in rows]
    with connection.cursor() as cursor:  # Django's loader, put back on this cursor only
        register_tzloader(UTC, cursor.cursor)
        cursor.execute("SELECT unnest(%s::text[])::timestamptz", [texts])
        django_s = [v for (v,) in cursor.fetchall()]
        assert loader_of(cursor.cursor) is not sql.UtcTimestamps
    assert [v for v, _ in rows] == prepared == django_s == values
    assert {v.tzinfo for v, _ in rows} | {v.tzinfo for v in prepared} == {UTC}
    assert [v.utcoffset() for v in django_s] == [timedelta(0)] * len(values)


@pytest.mark.django_db
def test_infinity_is_refused_as_django_s_loader_refuses_it():
    from django.db import DataError

    with connection.cursor() as cursor:
        cursor.execute("SELECT 'infinity'::timestamptz")
        with pytest.raises(DataError, match="after year 10K"):
            cursor.fetchone()


def test_a_model_s_timestamps_come_back_as_written(alice):
    _, token = ApiToken.issue(alice, "timestamps")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    answer = client.post(
        "/api/v1/workloads/", {"queue": "train", "kind": "training", "command": "true", "name": "t"}, format="json"
    )
    assert answer.status_code == 201, answer.content
    at = datetime(2031, 7, 14, 9, 30, 15, 123456, tzinfo=UTC)
    Workload.objects.filter(pk=answer.json()["id"]).update(submitted_at=at)
    again = Workload.objects.get(pk=answer.json()["id"])
    assert again.submitted_at == at
    assert again.submitted_at.tzinfo is UTC
    assert Workload.objects.filter(pk=again.pk).values_list("submitted_at", flat=True).get() == at


@pytest.mark.django_db(transaction=True)
def test_a_connection_in_another_zone_keeps_django_s_loader():
    """Where the database's TIME_ZONE is not UTC, the session reads in that zone: Django's loader stays, and
    values come back in that zone."""
    settings_dict = connection.settings_dict | {"TIME_ZONE": "Europe/Paris"}
    paris = DatabaseWrapper(settings_dict, alias="paris")
    try:
        paris.ensure_connection()
        assert loader_of(paris.connection) is not sql.UtcTimestamps
        with paris.cursor() as cursor:
            cursor.execute("SELECT '2030-06-01 12:00:00+00'::timestamptz")
            (value,) = cursor.fetchone()
        assert value == datetime(2030, 6, 1, 12, tzinfo=UTC)
        assert value.utcoffset() == timedelta(hours=2)  # read in Paris, summer time
    finally:
        paris.close()
