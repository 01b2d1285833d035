"""The submit generation: one number that every statement writing a table a submit's context is read from moves,
in its own transaction (PostgreSQL statement triggers: migration workloads 0013 lists the tables; 0016 leaves
out what the worker observes of a fabric, its capacity and health, which no kept context reads). What is read
under one generation may be used again while the generation is still that one (portal.workloads.context, the
worker's settled settings). The rate limit reads it beside its count (portal.accounts.ratelimit), so a submit
learns it in a statement it sends anyway.

This module is below every app (it imports none): anything may read the generation.
"""

from __future__ import annotations

from django.db import connection

from portal import sql

GENERATION_TABLE = "workloads_submit_generation"
# An expression, read beside another statement's own columns (the rate limit's count, a token's row).
GENERATION_SQL = f'(SELECT "n" FROM "{GENERATION_TABLE}")'  # noqa: S608 (our table)


def read_generation() -> int | None:
    """The generation now (one statement), or None where there is none (SQLite)."""
    if connection.vendor != "postgresql":
        return None
    with sql.prepared() as cursor:
        cursor.execute(f"SELECT {GENERATION_SQL}")
        row = cursor.fetchone()
    return None if row is None or row[0] is None else int(row[0])
