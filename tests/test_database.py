"""A kept connection's health check (portal.database): no statement while nothing arrived on its socket, a
fresh connection when the server ended the old one, one `SELECT 1` when anything else arrived."""

from __future__ import annotations

import select
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections

from portal.database.base import DatabaseWrapper


@pytest.fixture
def kept(db: None) -> Iterator[Any]:
    """A connection of its own, opened as a request would open it (health checks on), closed after."""
    wrapper: Any = connections.create_connection("default")
    assert isinstance(wrapper, DatabaseWrapper)  # the settings name Gridlane's backend on PostgreSQL
    wrapper.ensure_connection()
    assert wrapper.settings_dict["CONN_HEALTH_CHECKS"]
    yield wrapper
    wrapper.close()


def statements_sent(wrapper: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every cursor the health check opens on the raw connection (Django's check sends `SELECT 1` on one)."""
    opened: list[str] = []
    raw_cursor = wrapper.connection.cursor

    def cursor(*args: Any, **kwargs: Any) -> Any:
        opened.append("cursor")
        return raw_cursor(*args, **kwargs)

    monkeypatch.setattr(wrapper.connection, "cursor", cursor)
    return opened


def wait_readable(wrapper: Any) -> None:
    """Until the server's message reaches the connection's socket (it is sent after the statement that caused
    it returns)."""
    poller = select.poll()
    poller.register(wrapper.connection.pgconn.socket, select.POLLIN)
    assert poller.poll(30_000), "nothing reached the connection's socket in 30 s"


def test_an_idle_connection_nothing_reached_is_usable_without_a_statement(kept, monkeypatch):
    with kept.cursor() as cursor:
        cursor.execute("SELECT 1")  # a request's work; its answer is read whole
    opened = statements_sent(kept, monkeypatch)

    assert kept.is_usable() is True
    assert opened == []


def test_a_connection_the_server_ended_is_found_unusable_and_the_next_request_gets_a_fresh_one(kept, monkeypatch):
    ended = kept.connection.info.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [ended])
        assert cursor.fetchone() == (True,)
    wait_readable(kept)
    opened = statements_sent(kept, monkeypatch)

    assert kept.is_usable() is False
    assert opened == ["cursor"]  # it asked the server, which had gone

    kept.health_check_done = False  # a new request (request_started) checks before its first query
    with kept.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != ended


def test_a_message_that_arrives_while_idle_costs_one_select_and_keeps_the_connection(kept, monkeypatch):
    kept.connection.execute("LISTEN gridlane_health_check_test")  # autocommit: listening at once
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:  # its own connection, in autocommit: the notice is sent at once
            cursor.execute("NOTIFY gridlane_health_check_test")
    finally:
        other.close()
    wait_readable(kept)
    kept_pid = kept.connection.info.backend_pid
    opened = statements_sent(kept, monkeypatch)

    assert kept.is_usable() is True
    assert opened == ["cursor"]
    assert kept.connection.info.backend_pid == kept_pid


def test_a_connection_left_in_an_aborted_transaction_is_asked_and_found_unusable(kept, monkeypatch):
    kept.connection.execute("BEGIN")
    with pytest.raises(Exception, match="division by zero"):
        kept.connection.execute("SELECT 1 / 0")
    opened = statements_sent(kept, monkeypatch)

    assert kept.is_usable() is False
    assert opened == ["cursor"]


def test_a_closed_connection_is_not_usable(kept):
    kept.connection.close()

    assert kept.is_usable() is False
