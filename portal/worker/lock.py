"""One scheduling cycle at a time: a PostgreSQL advisory lock, or a lease row on SQLite.

Both let go on a crash: the advisory lock dies with the connection, the lease expires.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.utils import timezone

from portal.worker.models import CycleLock

LEASE = timedelta(minutes=5)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@contextmanager
def cycle_lock(name: str = "scheduling-cycle") -> Iterator[bool]:
    """Yields True when this process holds the lock for the block, False when another does."""
    if connection.vendor == "postgresql":
        key = zlib.crc32(name.encode())
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
            row = cursor.fetchone()
            held = bool(row and row[0])
        try:
            yield held
        finally:
            if held:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
        return

    holder = uuid.uuid4().hex
    now = timezone.now()
    CycleLock.objects.get_or_create(name=name, defaults={"expires_at": _EPOCH})
    held = CycleLock.objects.filter(name=name, expires_at__lt=now).update(holder=holder, expires_at=now + LEASE) == 1
    try:
        yield held
    finally:
        if held:
            CycleLock.objects.filter(name=name, holder=holder).update(holder="", expires_at=_EPOCH)
