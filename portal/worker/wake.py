"""Waking the worker when work arrives, so that a submit is admitted in milliseconds, not at the next tick.

On PostgreSQL a kick is a NOTIFY sent inside the submitting transaction: PostgreSQL delivers it when that
transaction commits (and drops it when it rolls back), straight to the worker's listener, which admits and
dispatches at once. Elsewhere (the embedded SQLite default) a kick is a django-q2 task enqueued on commit.
Either way, a kick lost (no worker listening, a restart) only waits for the periodic cycle.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from django.db import connection, transaction

log = logging.getLogger("gridlane.worker")

CHANNEL = "gridlane_kick"


def kick() -> None:
    """Ask the worker to admit and dispatch as soon as the current transaction commits."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])
        return

    def enqueue() -> None:
        from django_q.tasks import async_task

        try:
            async_task("portal.worker.tasks.kicked", task_name="kicked", group="cycle")
        except Exception:  # the periodic cycle will catch up; never fail a user's request over this
            log.exception("could not ask the worker for a cycle")

    transaction.on_commit(enqueue)


def listening() -> bool:
    """Whether kicks arrive as notifications (and need listen() running) rather than as django-q2 tasks."""
    return connection.vendor == "postgresql"


def listen(on_kick: Callable[[], object], stop: threading.Event, idle_s: float = 1.0) -> None:
    """Call on_kick once per burst of kicks until stop is set; reconnects when the database goes away.

    Runs in a thread of its own with a connection of its own (LISTEN needs one that stays open)."""
    params = connection.get_connection_params()
    while not stop.is_set():
        try:
            with psycopg.connect(**params, autocommit=True) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                on_kick()  # whatever arrived while nobody listened
                while not stop.is_set():
                    if _drain(conn, idle_s):
                        on_kick()
        except psycopg.OperationalError as error:
            log.warning("kick listener lost the database (%s); the periodic cycle carries on", error)
            stop.wait(idle_s)
        except Exception:
            log.exception("a kicked admission failed; the periodic cycle carries on")
            stop.wait(idle_s)


def _drain(conn: psycopg.Connection[tuple[object, ...]], timeout_s: float) -> bool:
    """Wait up to timeout_s for a notification; True when one or more came (all of them are taken)."""
    got = False
    for _ in conn.notifies(timeout=timeout_s, stop_after=1):
        got = True
    if got:  # take the rest of a burst without waiting: one admission serves them all
        for _ in conn.notifies(timeout=0):
            pass
    return got
