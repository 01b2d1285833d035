"""What the worker counts for /metrics, kept in the database so the web process can serve it."""

from __future__ import annotations

import math

from django.db import connection
from django.db.models import F

from portal.worker.models import WaitBucket, WorkerStats
from portal.workloads.models import Workload

# Queue-wait histogram bounds, in seconds: 10 s to a day.
WAIT_BUCKETS = (10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 4 * 3600.0, 24 * 3600.0, math.inf)


def count(**increments: float) -> None:
    """Add to named counters: count(cycles=1, admissions=3). On PostgreSQL one statement for them all (an
    admission counts four, after every kick)."""
    record(increments, {})


def gauge(**values: float) -> None:
    """Set named gauges: gauge(last_cycle_seconds=0.01)."""
    record({}, values)


def record(increments: dict[str, float], values: dict[str, float]) -> None:
    """count(**increments) and gauge(**values) together: on PostgreSQL one statement for both (an admission
    does both after every kick). A name may not be in both."""
    rows = {name: value for name, value in increments.items() if value}
    if connection.vendor == "postgresql":
        if rows or values:
            _upsert(rows | values, set(values))
        return
    for name, value in rows.items():
        WorkerStats.objects.get_or_create(name=name)
        WorkerStats.objects.filter(name=name).update(value=F("value") + value)
    for name, value in values.items():
        WorkerStats.objects.update_or_create(name=name, defaults={"value": value})


_TABLE = f'"{WorkerStats._meta.db_table}"'


def _upsert(rows: dict[str, float], gauges: set[str]) -> None:
    """INSERT each (name, value), or add the value to an existing counter's, or set an existing gauge's (those
    named in `gauges`) to it."""
    values = ", ".join(["(%s, %s)"] * len(rows))
    new_value = f'{_TABLE}."value" + EXCLUDED."value"'
    if gauges:
        new_value = f'CASE WHEN EXCLUDED."name" = ANY(%s) THEN EXCLUDED."value" ELSE {new_value} END'
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO {_TABLE} ("name", "value") VALUES {values} '  # noqa: S608 (our table; values are parameters)
            f'ON CONFLICT ("name") DO UPDATE SET "value" = {new_value}',
            [item for pair in rows.items() for item in pair] + ([sorted(gauges)] if gauges else []),
        )


def take_request(name: str) -> bool:
    """True (once) when a step was asked for (gauge(name=1)) while another process ran it."""
    return WorkerStats.objects.filter(name=name, value=1).update(value=0) == 1


def observe_wait(group_id: int, w: Workload) -> None:
    """A workload started: count its queue wait (submit -> start) in its team's histogram."""
    if w.started_at is None:
        return
    wait = max(0.0, (w.started_at - w.submitted_at).total_seconds())
    le = next(b for b in WAIT_BUCKETS if wait <= b)
    WaitBucket.objects.get_or_create(group_id=group_id, le=le)
    WaitBucket.objects.filter(group_id=group_id, le=le).update(
        count=F("count") + 1, total_seconds=F("total_seconds") + wait
    )


def observe_waits(started: list[Workload]) -> None:
    """observe_wait for many starts: one update per team and bucket they fall in, not one per start."""
    sums: dict[tuple[int, float], tuple[int, float]] = {}
    for w in started:
        if w.started_at is None:
            continue
        wait = max(0.0, (w.started_at - w.submitted_at).total_seconds())
        key = (w.group_id, next(b for b in WAIT_BUCKETS if wait <= b))
        n, total = sums.get(key, (0, 0.0))
        sums[key] = (n + 1, total + wait)
    for (group_id, le), (n, total) in sums.items():
        WaitBucket.objects.get_or_create(group_id=group_id, le=le)
        WaitBucket.objects.filter(group_id=group_id, le=le).update(
            count=F("count") + n, total_seconds=F("total_seconds") + total
        )
