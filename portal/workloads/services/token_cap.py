"""An API token's own spending cap (ApiToken.cap_gpu_hours): the GPU-hours of the work submitted with it.

Work submitted with a token carries it (Workload.token). What that work has spent or may still spend counts
against the cap: work that ran, its GPU-hours from start to end; work that ended without starting, none; work not
yet ended, all of its runtime limit (its lease, for a notebook or VM), which it may still use. A submit whose
GPU-hours (the same count: all of its limit, every element of an array) would take the total past the cap is
refused, TokenCapSpent. Only capped tokens pay for the count: one query, over the token's own workloads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection

from portal.workloads.models import Workload
from portal.workloads.services.errors import TokenCapSpent
from portal.workloads.states import FINISHED


def stamp(workloads: Sequence[Workload], token: Any) -> None:
    """Record the token the work is submitted with (None: a session, nothing to record)."""
    if token is None:
        return
    for workload in workloads:
        workload.token_id = token.pk


def capped(token: Any) -> bool:
    return getattr(token, "cap_gpu_hours", None) is not None


def asked_gpu_hours(workload: Workload) -> float:
    """What a new workload may spend, in GPU-hours: all of its runtime limit (or lease), on all of its nodes, for
    every element of an array."""
    seconds = workload.lease_s if workload.lease_s is not None else workload.runtime_limit_s
    return workload.gpus_milli * workload.nodes * seconds * max(workload.array_size, 1) / 3_600_000


def spent_gpu_hours(token_id: int) -> float:
    """The GPU-hours the token's work has spent, or holds as its limit while not ended (one query)."""
    table = connection.ops.quote_name(Workload._meta.db_table)
    if connection.vendor == "postgresql":
        elapsed = "EXTRACT(EPOCH FROM (finished_at - started_at))"
    else:
        elapsed = "(julianday(finished_at) - julianday(started_at)) * 86400.0"
    ended = ", ".join(["%s"] * len(FINISHED))
    statement = (
        f"SELECT COALESCE(SUM(gpus_milli * nodes * CASE "  # noqa: S608 (our table and constants)
        f"WHEN started_at IS NOT NULL AND finished_at IS NOT NULL THEN {elapsed} "
        f"WHEN state IN ({ended}) THEN 0 "
        f"ELSE COALESCE(lease_s, runtime_limit_s) END), 0) FROM {table} "
        f"WHERE token_id = %s AND array_size = 0"  # an array counts as its elements
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, [*sorted(FINISHED), token_id])
        row = cursor.fetchone()
    return float(row[0] or 0) / 3_600_000


def check(token: Any, workloads: Sequence[Workload]) -> None:
    """TokenCapSpent when the work would take a capped token past its cap; nothing for any other token."""
    if not capped(token) or not workloads:
        return
    asked = sum(asked_gpu_hours(w) for w in workloads)
    spent = spent_gpu_hours(token.pk)
    cap = float(token.cap_gpu_hours)
    if spent + asked > cap + 1e-9:
        raise TokenCapSpent(cap, spent, asked)
