"""Waking the worker when work arrives, so that a submit is admitted in milliseconds, not at the next tick.

On PostgreSQL a kick is a NOTIFY sent inside the submitting transaction: PostgreSQL delivers it when that
transaction commits (and drops it when it rolls back), straight to the worker's listener, which admits and
dispatches at once. Elsewhere (the embedded SQLite default) a kick is a django-q2 task enqueued on commit.
Either way, a kick lost (no worker listening, a restart) only waits for the periodic cycle.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

import psycopg
from django.db import DatabaseError, connection, transaction

from portal.workloads import kick as kick_seam

log = logging.getLogger("gridlane.worker")

CHANNEL = "gridlane_kick"
# What a kick asks for, sent as its payload (portal.workloads.kick, the seam the workloads layer owns): a burst
# of submits (ADMIT) costs no fabric poll per admission (see tasks.FollowUp).
EVERYTHING = kick_seam.EVERYTHING
ADMIT = kick_seam.ADMIT


def kick(need: str = EVERYTHING) -> None:
    """Ask the worker to admit and dispatch (and, unless `need` is ADMIT, sync) once the current transaction
    commits."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, need])
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


# The listening connection notices a database that went away without a word (a cut network) by TCP keepalives
# and by a query of its own every PING_S of quiet; a closed one (a restart) fails the next wait at once.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}
PING_S = 15.0
CONNECT_TIMEOUT_S = 10


def listen(
    on_kick: Callable[[bool], object],
    stop: threading.Event,
    idle_s: float = 1.0,
    rest: Callable[[float], object] | None = None,
) -> None:
    """Call on_kick once per burst of kicks until stop is set; reconnects when the database goes away, however
    long it stays away (trying again every idle_s), and then calls on_kick for what arrived meanwhile.
    on_kick's argument says whether any kick of the burst asked for more than ADMIT (status: a sync).

    When kicks arrived while on_kick ran (a stream of submits), the listener rests (`rest`, stop.wait by default)
    a few times as long as on_kick took before it takes them (see rest_after); a kick that finds it idle is taken
    at once.

    Runs in a thread of its own with a connection of its own (LISTEN needs one that stays open)."""
    rest = rest or stop.wait
    params = connection.get_connection_params() | KEEPALIVES
    params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    while not stop.is_set():
        try:
            with psycopg.connect(**params, autocommit=True) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                on_kick(True)  # whatever arrived while nobody listened
                quiet_s = 0.0
                came: list[str] = []  # kicks that arrived while on_kick ran
                while not stop.is_set():
                    if (burst := _drain(conn, idle_s, came)) is not None:
                        started = time.monotonic()
                        on_kick(burst)
                        if came := _arrived(conn):
                            rest(rest_after(time.monotonic() - started))
                        quiet_s = 0.0
                    elif (quiet_s := quiet_s + idle_s) >= PING_S:
                        conn.execute("SELECT 1")
                        quiet_s = 0.0
        except (psycopg.OperationalError, DatabaseError) as error:
            log.warning("kick listener lost the database (%s); trying again in %g s", error, idle_s)
            forget_connection()
            stop.wait(idle_s)
        except Exception:
            log.exception("a kicked admission failed; the periodic cycle carries on")
            forget_connection()
            stop.wait(idle_s)


# Under a stream of kicks (more arrived while an admission ran) the listener rests after each admission for STREAM_REST
# times as long as it took, up to MAX_REST_S: the kicks that arrive meanwhile share the next admission, so a stream
# costs the worker's admissions at most a ninth of a core (each reads every active workload's version, and whole what
# changed, and the dispatch that follows it has a round's own cost too) and leaves the rest to the web processes taking
# the submits and to the database. Measured side by side on two cores with the worker beside the web server: resting as
# long as an admission took gave 225 and 251 submits/s (the worker 1.8-2.1 ms of CPU a submit), three times as long 256
# and 273 (1.4 ms); later, with the submit cheaper, three times 456 and 459 submits/s (the worker 0.71-0.75 ms, the
# database 0.89-0.93), eight times 485 and 490 (0.51-0.53 ms, the database 0.78-0.82). Work in a stream waits for its
# admission up to a round and eight rounds' rest (MAX_REST_S of rest at most), not a round and three. A kick that finds
# the worker idle, the next one of a client that waits for each admission included, is admitted at once.
STREAM_REST = 8.0
MAX_REST_S = 0.25


def rest_after(admission_s: float) -> float:
    """How long the listener waits after an admission that took admission_s before it looks for kicks again."""
    return min(max(STREAM_REST * admission_s, 0.0), MAX_REST_S)


def forget_connection() -> None:
    """Drop this thread's Django connection after a database error, so the next query opens a fresh one
    instead of failing on the dead one (a request does this between requests; a long-lived thread must)."""
    with contextlib.suppress(DatabaseError):  # it was dead already: closed all the same
        connection.close()


def _drain(conn: psycopg.Connection[tuple[object, ...]], timeout_s: float, came: list[str]) -> bool | None:
    """Take the kicks that came while the last admission ran (`came`), or else wait up to timeout_s for one, and
    the rest of their burst without waiting (one admission serves them all). None when none came; else whether
    any of them asked for more than ADMIT."""
    payloads = came or [n.payload for n in conn.notifies(timeout=timeout_s, stop_after=1)]
    if not payloads:
        return None
    payloads = payloads + _arrived(conn)
    return any(p != ADMIT for p in payloads)


def _arrived(conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    """The payloads of the kicks that have arrived and not been taken yet, without waiting."""
    return [n.payload for n in conn.notifies(timeout=0)]
