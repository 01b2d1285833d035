"""Fixed-window rate limits kept in the database, so every web process and worker counts together.

A window is a row (key, window start, count): one upsert per hit inserts it or adds one and returns the
count; old windows of the same key are deleted in the same statement (on PostgreSQL).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from portal import access, sql
from portal.accounts import audit
from portal.accounts.models import RateLimitWindow
from portal.workloads import context


class RateLimited(Exception):
    """Too many requests in this window; `retry_after` is how many seconds until the next one opens."""

    def __init__(self, retry_after: int, limit: int, window_s: int) -> None:
        super().__init__(f"More than {limit} submissions in {window_s} s; try again in {retry_after} s.")
        self.retry_after = retry_after
        self.limit = limit
        self.window_s = window_s


def hit(key: str, limit: int, window_s: int, now: datetime | None = None) -> int | None:
    """Count one request against `key`. Returns None when it is within `limit`, else seconds to wait."""
    return _hit(key, limit, window_s, now)[0]


def _hit(key: str, limit: int, window_s: int, now: datetime | None = None, also: str = "") -> tuple[int | None, Any]:
    """hit(), and the value of the SQL expression `also` read in the same statement (PostgreSQL only; else None)."""
    now = now or timezone.now()
    epoch = int(now.timestamp())
    start = datetime.fromtimestamp(epoch - epoch % window_s, tz=now.tzinfo)
    count, read = _count_one(key, start, also)
    if count <= limit:
        return None, read
    retry_after = max(1, math.ceil((start + timedelta(seconds=window_s) - now).total_seconds()))
    if count == limit + 1:  # record the first refusal in a window, not every one
        audit.record("ratelimit.exceeded", key, limit=limit, window_s=window_s)
    return retry_after, read


def _count_one(key: str, start: datetime, also: str = "") -> tuple[int, Any]:
    """Add one to the window's count, opening it if needed, and drop the key's older windows; returns the new
    count, and `also` read beside it. On PostgreSQL one statement (an upsert with RETURNING beside a DELETE);
    concurrent callers are serialised on the row, so each sees its own count. SQLite (3.35+) takes the upsert,
    and the delete apart.
    """
    table = connection.ops.quote_name(RateLimitWindow._meta.db_table)
    when = connection.ops.adapt_datetimefield_value(start)
    upsert = (
        f'INSERT INTO {table} ("key", "window_start", "count") VALUES (%s, %s, 1) '  # noqa: S608 (our table)
        f'ON CONFLICT ("key", "window_start") DO UPDATE SET "count" = {table}."count" + 1 RETURNING "count"'
    )
    older = f'DELETE FROM {table} WHERE "key" = %s AND "window_start" < %s'  # noqa: S608 (our table)
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


def submit_limit(user: Any) -> int:
    """Submissions per window allowed to this identity: an agent's own limit, else the site's."""
    service = access.service_of(user)
    if service is not None:
        return int(service.rate_limit_per_minute)
    return int(settings.GRIDLANE_SUBMIT_RATE_LIMIT)


def check_submit(user: Any) -> int | None:
    """Count one submission by `user`; raises RateLimited when the identity is over its limit.

    Returns the generation of what a submit's context is read from, read in the same statement (see
    portal.workloads.context): the submit that follows may use a context it read before under that generation.
    None where there is none (SQLite)."""
    limit = submit_limit(user)
    window_s = 60 if access.service_of(user) is not None else int(settings.GRIDLANE_SUBMIT_RATE_WINDOW_SECONDS)
    retry_after, generation = _hit(f"submit:{user.pk}", limit, window_s, also=context.GENERATION_SQL)
    if retry_after is not None:
        raise RateLimited(retry_after, limit, window_s)
    return None if generation is None else int(generation)
