"""Fixed-window rate limits kept in the database, so every web process and worker counts together.

A window is a row (key, window start, count): one upsert per hit inserts it or adds one and returns the
count; old windows of the same key are deleted in the same statement (on PostgreSQL). A submission's count
(`Charge`) may instead be part of the statement that records it (services.submit): one round trip for both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from portal import access, sql
from portal.accounts import audit
from portal.accounts.models import RateLimitWindow
from portal.generation import GENERATION_SQL


class RateLimited(Exception):
    """Too many requests in this window; `retry_after` is how many seconds until the next one opens."""

    def __init__(self, retry_after: int, limit: int, window_s: int) -> None:
        super().__init__(f"More than {limit} submissions in {window_s} s; try again in {retry_after} s.")
        self.retry_after = retry_after
        self.limit = limit
        self.window_s = window_s


def hit(key: str, limit: int, window_s: int, now: datetime | None = None) -> int | None:
    """Count one request against `key`. Returns None when it is within `limit`, else seconds to wait."""
    now = now or timezone.now()
    start = window_start(now, window_s)
    count, _ = _count_one(key, start)
    return _refusal(key, count, limit, window_s, start, now)


def window_start(now: datetime, window_s: int) -> datetime:
    """The start of the fixed window of window_s seconds that `now` falls in."""
    epoch = int(now.timestamp())
    return datetime.fromtimestamp(epoch - epoch % window_s, tz=now.tzinfo)


def _refusal(key: str, count: int, limit: int, window_s: int, start: datetime, now: datetime) -> int | None:
    """None when `count` is within `limit`, else the seconds until the window ends (at least one). The first
    refusal in a window is audited, not every one."""
    if count <= limit:
        return None
    if count == limit + 1:
        audit.record("ratelimit.exceeded", key, limit=limit, window_s=window_s)
    return max(1, math.ceil((start + timedelta(seconds=window_s) - now).total_seconds()))


def _count_one(key: str, start: datetime, also: str = "") -> tuple[int, Any]:
    """Add one to the window's count, opening it if needed, and drop the key's older windows; returns the new
    count, and `also` read beside it. On PostgreSQL one statement (an upsert with RETURNING beside a DELETE);
    concurrent callers are serialised on the row, so each sees its own count. SQLite (3.35+) takes the upsert,
    and the delete apart.
    """
    when = connection.ops.adapt_datetimefield_value(start)
    older, upsert = _window_sql()
    with sql.prepared() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"WITH old AS ({older}) {upsert}{', ' + also if also else ''}", [key, when, key, when])
        else:
            cursor.execute(older, [key, when])
            cursor.execute(upsert, [key, when])
        row = cursor.fetchone()
    if row is None:  # an upsert with RETURNING always returns its row
        return 1, None
    return int(row[0]), (row[1] if also and connection.vendor == "postgresql" else None)


def _window_sql(source: str = "") -> tuple[str, str]:
    """The two statements that count one hit, each with (key, window start) as parameters: the key's older
    windows deleted, and the window's count upserted, returning the new count. With `source` (a common table
    expression's name) both act only when it has a row, to go inside a larger statement (Charge.sql)."""
    table = connection.ops.quote_name(RateLimitWindow._meta.db_table)
    # `source` is a name our own statements give (never a value): the values are parameters.
    only_if = f" AND EXISTS (SELECT 1 FROM {source})" if source else ""  # noqa: S608
    row = f"SELECT %s, %s, 1 FROM {source}" if source else "VALUES (%s, %s, 1)"  # noqa: S608
    older = f'DELETE FROM {table} WHERE "key" = %s AND "window_start" < %s{only_if}'  # noqa: S608 (our table)
    upsert = (
        f'INSERT INTO {table} ("key", "window_start", "count") {row} '
        f'ON CONFLICT ("key", "window_start") DO UPDATE SET "count" = {table}."count" + 1 RETURNING "count"'
    )
    return older, upsert


def submit_limit(user: Any) -> int:
    """Submissions per window allowed to this identity: an agent's own limit, else the site's."""
    service = access.service_of(user)
    if service is not None:
        return int(service.rate_limit_per_minute)
    return int(settings.GRIDLANE_SUBMIT_RATE_LIMIT)


def submit_window(user: Any) -> int:
    """The length in seconds of this identity's submit window: a minute for an agent, else the site's."""
    return 60 if access.service_of(user) is not None else int(settings.GRIDLANE_SUBMIT_RATE_WINDOW_SECONDS)


def check_submit(user: Any) -> int | None:
    """Count one submission by `user`; raises RateLimited when the identity is over its limit.

    Returns the generation of what a submit's context is read from, read in the same statement (see
    portal.generation): the submit that follows may use a context it read before under that generation.
    None where there is none (SQLite)."""
    return Charge.of(user).count()


@dataclass(frozen=True)
class Charge:
    """One submission to count against its identity's limit, in the current window: counted on its own
    (`count`, one statement), or by the statement that records the submission (services.submit puts `sql()`
    inside its insert, then hands the count it returned to `settle`)."""

    key: str
    limit: int
    window_s: int
    start: datetime
    now: datetime

    @classmethod
    def of(cls, user: Any, now: datetime | None = None) -> Charge:
        now = now or timezone.now()
        window_s = submit_window(user)
        return cls(f"submit:{user.pk}", submit_limit(user), window_s, window_start(now, window_s), now)

    def count(self) -> int | None:
        """Count it now (one statement); raises RateLimited when over the limit. Returns the generation read
        in the same statement (see check_submit), None where there is none."""
        count, generation = _count_one(self.key, self.start, GENERATION_SQL)
        self.settle(count)
        return None if generation is None else int(generation)

    def sql(self, source: str) -> tuple[str, list[Any]]:
        """The count as two common table expressions for PostgreSQL, `old` and `counted` (its RETURNING has
        "count"), that count only when `source` (a CTE's name) has a row: the older windows' delete and the
        window's upsert of _count_one."""
        when = connection.ops.adapt_datetimefield_value(self.start)
        older, upsert = _window_sql(source)
        return f"old AS ({older}), counted AS ({upsert})", [self.key, when, self.key, when]

    def settle(self, count: int) -> None:
        """Raise RateLimited when `count` (this submission's, counted) is over the limit."""
        retry_after = _refusal(self.key, count, self.limit, self.window_s, self.start, self.now)
        if retry_after is not None:
            raise RateLimited(retry_after, self.limit, self.window_s)
