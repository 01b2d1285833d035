"""Reading and writing named numbers (portal.counters.models.Counter): on PostgreSQL every write is one
statement, whatever the number of names."""

from __future__ import annotations

from django.db import connection
from django.db.models import F

from portal.counters.models import Counter


def count(**increments: float) -> None:
    """Add to named counters: count(cycles=1, admissions=3)."""
    record(increments, {})


def gauge(**values: float) -> None:
    """Set named gauges (or cursors): gauge(last_cycle_seconds=0.01)."""
    record({}, values)


def record(increments: dict[str, float], values: dict[str, float]) -> None:
    """count(**increments) and gauge(**values) together: on PostgreSQL one statement for both. A name may not be
    in both."""
    rows = {name: value for name, value in increments.items() if value}
    if connection.vendor == "postgresql":
        if rows or values:
            _upsert(rows | values, set(values))
        return
    for name, value in rows.items():
        Counter.objects.get_or_create(name=name)
        Counter.objects.filter(name=name).update(value=F("value") + value)
    for name, value in values.items():
        Counter.objects.update_or_create(name=name, defaults={"value": value})


def read(name: str) -> float | None:
    """The number under `name`, or None when nothing was ever written under it."""
    return Counter.objects.filter(name=name).values_list("value", flat=True).first()


def take_request(name: str) -> bool:
    """True (once) when a step was asked for (gauge(name=1)) while another process ran it."""
    return Counter.objects.filter(name=name, value=1).update(value=0) == 1


_TABLE = f'"{Counter._meta.db_table}"'


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
