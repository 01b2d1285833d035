"""A submit's context kept for a moment: what the submit reads before it records a workload (the queue with its
targets and fabrics, the caller's teams for it with their caps and tiers: services.entitlement.submit_context),
kept by each web process and used again by the same caller's next submits to the same queue, so that those send
three statements fewer. The API's single submit keeps the caller's token here too, under the same generation
(portal.api.auth.kept): a submit with a kept token and context sends one statement
(services.kept.KeptSubmit; bench.profile_submit prints it).

A kept context is used only while both hold:

- The generation it was read under is still the database's. On PostgreSQL the generation is one number that
  every statement writing a table the context is read from moves, in its own transaction (statement triggers:
  migration workloads 0013, which lists the tables). A submit reads it in a statement it sends anyway:
  - the API's single submit (services.kept.KeptSubmit) in the statement that records it, which
    writes, and counts the submit against the rate limit, only while the generation is still the one the
    context was kept under (`latest`); when it has moved, nothing was written and the submit goes the whole way;
  - any other in the rate limit's own count (accounts.ratelimit.check_submit), before it reads or uses a
    context (`kept`).
  Either way a change committed before a submit is seen by that submit. A context read after the generation was
  read may be newer than its generation says, never older.
- It was read less than KEEP_S ago, by the clock: a temporary quota grant starts or ends with no write at all.

Elsewhere (SQLite) there is no generation and every submit reads its context. The worker keeps what IT configures
between admissions under the same generation (portal.worker.snapshot.Settled).
"""

from __future__ import annotations

from collections.abc import Hashable
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from portal.generation import GENERATION_SQL, GENERATION_TABLE, read_generation

__all__ = ["GENERATION_SQL", "GENERATION_TABLE", "forget", "keep", "kept", "latest", "read_generation", "seen"]

KEEP_S = 1.0
MAX_KEPT = 512  # what a process keeps at most (a context per caller and queue, a token per caller); then anew

_kept: dict[Hashable, tuple[int, datetime, Any]] = {}
_newest: dict[str, int] = {}  # by database: the newest generation this process has seen; older ones are past


def kept(key: Hashable, generation: int, now: datetime | None = None) -> Any:
    """The context kept under `key`, when it was read under `generation` less than KEEP_S ago; else None."""
    found = _kept.get(key)
    if found is None:
        return None
    read_under, read_at, value = found
    now = now or timezone.now()
    if read_under != generation or not read_at <= now < read_at + timedelta(seconds=KEEP_S):
        return None
    return value


def latest(key: Hashable, now: datetime | None = None) -> tuple[int, Any] | None:
    """(the generation it was read under, the context) kept under `key`, when it was read less than KEEP_S ago,
    whatever the generation is now, as far as this process knows (`seen`): for a statement that records a submit
    only while the generation is still that one (services.submit with a rate-limit charge)."""
    found = _kept.get(key)
    if found is None:
        return None
    read_under, read_at, value = found
    now = now or timezone.now()
    if not read_at <= now < read_at + timedelta(seconds=KEEP_S) or read_under < _newest.get(connection.alias, 0):
        return None
    return read_under, value


def seen(generation: int) -> None:
    """The generation is at least this now: what was kept under an older one will not be offered again."""
    if generation > _newest.get(connection.alias, 0):
        _newest[connection.alias] = generation


def keep(key: Hashable, generation: int, value: Any, now: datetime | None = None) -> None:
    """Keep `value`, read under `generation` at `now`."""
    if len(_kept) >= MAX_KEPT:
        _kept.clear()
    _kept[key] = (generation, now or timezone.now(), value)
    seen(generation)


def forget() -> None:
    """Drop every kept context (this process's)."""
    _kept.clear()
    _newest.clear()
