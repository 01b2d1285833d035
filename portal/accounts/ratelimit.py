"""Fixed-window rate limits kept in the database, so every web process and worker counts together.

A window is a row (key, window start, count): the first hit in a window inserts it, the others add one.
Costs two or three small queries per hit; old windows of the same key are deleted as new ones open.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from portal import access
from portal.accounts import audit
from portal.accounts.models import RateLimitWindow


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
    epoch = int(now.timestamp())
    start = datetime.fromtimestamp(epoch - epoch % window_s, tz=now.tzinfo)
    window = RateLimitWindow.objects.filter(key=key, window_start=start)
    with transaction.atomic():
        if not window.update(count=F("count") + 1):
            try:
                with transaction.atomic():
                    RateLimitWindow.objects.create(key=key, window_start=start, count=1)
            except IntegrityError:  # another process opened the window first
                window.update(count=F("count") + 1)
            else:
                RateLimitWindow.objects.filter(key=key, window_start__lt=start).delete()
        count = window.values_list("count", flat=True).get()
    if count <= limit:
        return None
    retry_after = max(1, math.ceil((start + timedelta(seconds=window_s) - now).total_seconds()))
    if count == limit + 1:  # record the first refusal in a window, not every one
        audit.record("ratelimit.exceeded", key, limit=limit, window_s=window_s)
    return retry_after


def submit_limit(user: Any) -> int:
    """Submissions per window allowed to this identity: an agent's own limit, else the site's."""
    service = access.service_of(user)
    if service is not None:
        return int(service.rate_limit_per_minute)
    return int(settings.GRIDLANE_SUBMIT_RATE_LIMIT)


def check_submit(user: Any) -> None:
    """Count one submission by `user`; raises RateLimited when the identity is over its limit."""
    limit = submit_limit(user)
    window_s = 60 if access.service_of(user) is not None else int(settings.GRIDLANE_SUBMIT_RATE_WINDOW_SECONDS)
    retry_after = hit(f"submit:{user.pk}", limit, window_s)
    if retry_after is not None:
        raise RateLimited(retry_after, limit, window_s)
