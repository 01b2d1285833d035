"""One holder at a time for each phase of the worker: a PostgreSQL advisory lock, or a lease row on SQLite.

Both let go on a crash: the advisory lock dies with the connection, the lease expires.
"""

from __future__ import annotations

import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.utils import timezone

from portal.worker.models import CycleLock

LEASE = timedelta(minutes=5)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RETRY_S = 0.003


@contextmanager
def cycle_lock(name: str = "scheduling-cycle", wait_s: float = 0.0) -> Iterator[bool]:
    """Yields True when this process holds the lock for the block, False when another held it throughout
    `wait_s` seconds (0: do not wait)."""
    deadline = time.monotonic() + wait_s
    take = _try_advisory if connection.vendor == "postgresql" else _try_lease
    while True:
        held = take(name)
        if held is not None or time.monotonic() >= deadline:
            break
        time.sleep(_RETRY_S)
    try:
        yield held is not None
    finally:
        if held is not None:
            held()


def _try_advisory(name: str) -> Callable[[], None] | None:
    """Take the lock now, returning what lets it go; None when another holds it."""
    key = zlib.crc32(name.encode())
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        row = cursor.fetchone()
    if not (row and row[0]):
        return None

    def release() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [key])

    return release


def _try_lease(name: str) -> Callable[[], None] | None:
    holder = uuid.uuid4().hex
    now = timezone.now()
    CycleLock.objects.get_or_create(name=name, defaults={"expires_at": _EPOCH})
    if CycleLock.objects.filter(name=name, expires_at__lt=now).update(holder=holder, expires_at=now + LEASE) != 1:
        return None

    def release() -> None:
        CycleLock.objects.filter(name=name, holder=holder).update(holder="", expires_at=_EPOCH)

    return release
