"""An API token's own spending caps: ApiToken.cap_gpu_hours (GPU-hours) and ApiToken.cap_money (money, in the
site's currency, GRIDLANE_CURRENCY, as the chargeback counts it).

Work submitted with a token carries it (Workload.token). What that work has spent or may still spend counts
against the caps:
- work that ran and ended: what it spent, from start to end. Its GPU-hours, and its cost at the prices of the
  fabric it ran on (its GPUs, CPUs and memory, each at the fabric's price per hour, as the usage rollups and the
  chargeback count them; the fabric's prices as they are now);
- work that ended without starting: nothing;
- work not yet ended (waiting or running): all of its runtime limit (its lease, for a notebook or VM), which it
  may still use. In money, at the highest price among its queue's targets (a safe upper bound: it is not known
  yet where it runs, or whether it runs to its limit; the cap never lets through more than it says).
A submit whose own count (the same: all of its limit, every element of an array, at the highest price among its
queue's targets) would take a total past its cap is refused, TokenCapSpent, naming the cap.

Two submits with the same capped token arriving together must not both pass on the same count: `guarded` holds
the token's row (SELECT ... FOR UPDATE, PostgreSQL) for the submit's transaction, and counts only once it holds it,
in a statement of its own (a statement that waited for the lock in itself would count on a snapshot taken before
the other submit committed). The other waits, then counts the first one's work. SQLite serializes writes anyway.

Only capped tokens pay for this: the lock and one counting statement, and for a money cap one more, the prices of
the new work's queues' targets. Every other submit goes its way unchanged.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction

from portal.queues.models import Fabric, QueueTarget
from portal.workloads.models import Workload
from portal.workloads.services.errors import TokenCapSpent
from portal.workloads.states import FINISHED

GPU_HOURS, MONEY = "cap_gpu_hours", "cap_money"
_EPSILON = 1e-6


def stamp(workloads: Sequence[Workload], token: Any) -> None:
    """Record the token the work is submitted with (None: a session, nothing to record)."""
    if token is None:
        return
    for workload in workloads:
        workload.token_id = token.pk


def capped(token: Any) -> bool:
    return getattr(token, "cap_gpu_hours", None) is not None or getattr(token, "cap_money", None) is not None


@contextmanager
def guarded(token: Any) -> Iterator[None]:
    """A transaction holding a capped token's row until it ends: check and record the work inside it. Nothing for
    a token without a cap."""
    if not capped(token):
        yield
        return
    with transaction.atomic():
        if connection.vendor == "postgresql":
            table = connection.ops.quote_name(type(token)._meta.db_table)
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR UPDATE", [token.pk])  # noqa: S608
        yield


def _seconds(workload: Workload) -> int:
    return workload.lease_s if workload.lease_s is not None else workload.runtime_limit_s


def asked_gpu_hours(workload: Workload) -> float:
    """What a new workload may spend, in GPU-hours: all of its runtime limit (or lease), on all of its nodes, for
    every element of an array."""
    return workload.gpus_milli * workload.nodes * _seconds(workload) * max(workload.array_size, 1) / 3_600_000


def _per_hour(workload: Workload, gpu: Any, cpu: Any, memory_gb: Any) -> float:
    """What an hour of one node of the workload costs at these prices (None: not charged)."""
    return (
        workload.gpus_milli / 1000 * float(gpu or 0)
        + workload.cpus_milli / 1000 * float(cpu or 0)
        + workload.memory_mib / 1024 * float(memory_gb or 0)
    )


def asked_money(workloads: Sequence[Workload]) -> float:
    """What new workloads may cost: all of each one's limit, on all of its nodes, every element of an array, at the
    highest price among its queue's targets (one query)."""
    prices: dict[int, list[tuple[Any, Any, Any]]] = defaultdict(list)
    rows = QueueTarget.objects.filter(queue_id__in={w.queue_id for w in workloads}).values_list(
        "queue_id", "fabric__gpu_hour_price", "fabric__cpu_hour_price", "fabric__memory_gb_hour_price"
    )
    for queue_id, *price in rows:
        prices[queue_id].append(tuple(price))  # type: ignore[arg-type]
    total = 0.0
    for w in workloads:
        rate = max((_per_hour(w, *p) for p in prices[w.queue_id]), default=0.0)
        total += rate * w.nodes * _seconds(w) * max(w.array_size, 1) / 3600
    return total


def _rate(alias: str, fabric: str) -> str:
    """SQL: what an hour of one node of workload `alias` costs at the prices of fabric `fabric`."""
    return (
        f"({alias}.gpus_milli / 1000.0 * COALESCE({fabric}.gpu_hour_price, 0) "
        f"+ {alias}.cpus_milli / 1000.0 * COALESCE({fabric}.cpu_hour_price, 0) "
        f"+ {alias}.memory_mib / 1024.0 * COALESCE({fabric}.memory_gb_hour_price, 0))"
    )


def spent(token_id: int) -> tuple[float, float]:
    """The GPU-hours and the money the token's work has spent, or holds as its limit while not ended (one
    query)."""
    q = connection.ops.quote_name
    table, fabrics, targets = (q(m._meta.db_table) for m in (Workload, Fabric, QueueTarget))
    if connection.vendor == "postgresql":
        elapsed = "EXTRACT(EPOCH FROM (w.finished_at - w.started_at))"
    else:
        elapsed = "(julianday(w.finished_at) - julianday(w.started_at)) * 86400.0"
    ended = ", ".join(["%s"] * len(FINISHED))
    seconds = (
        f"CASE WHEN w.started_at IS NOT NULL AND w.finished_at IS NOT NULL THEN {elapsed} "
        f"WHEN w.state IN ({ended}) THEN 0 ELSE COALESCE(w.lease_s, w.runtime_limit_s) END"
    )
    # Per hour: where it ran, once it ended; the dearest of its queue's targets while it may still run.
    dearest = (
        f"(SELECT MAX({_rate('w', 'tf')}) FROM {targets} t "  # noqa: S608 (our tables)
        f"JOIN {fabrics} tf ON tf.id = t.fabric_id WHERE t.queue_id = w.queue_id)"
    )
    rate = (
        f"CASE WHEN w.started_at IS NOT NULL AND w.finished_at IS NOT NULL THEN COALESCE({_rate('w', 'f')}, 0) "
        f"ELSE COALESCE({dearest}, 0) END"
    )
    statement = (
        f"SELECT COALESCE(SUM(w.gpus_milli * w.nodes * ({seconds})), 0), "  # noqa: S608 (our tables and constants)
        f"COALESCE(SUM(w.nodes * ({seconds}) * ({rate})), 0) "
        f"FROM {table} w LEFT JOIN {fabrics} f ON f.id = w.fabric_id "
        f"WHERE w.token_id = %s AND w.array_size = 0"  # an array counts as its elements
    )
    finished = sorted(FINISHED)
    with connection.cursor() as cursor:
        cursor.execute(statement, [*finished, *finished, token_id])
        row = cursor.fetchone()
    return float(row[0] or 0) / 3_600_000, float(row[1] or 0) / 3600


def spent_gpu_hours(token_id: int) -> float:
    """The GPU-hours the token's work has spent, or holds as its limit while not ended (one query)."""
    return spent(token_id)[0]


def check(token: Any, workloads: Sequence[Workload]) -> None:
    """TokenCapSpent when the work would take a capped token past one of its caps (its GPU-hours first); nothing
    for any other token. Call it inside `guarded(token)`, and record the work in the same transaction."""
    if not capped(token) or not workloads:
        return
    gpu_hours, money = spent(token.pk)
    if token.cap_gpu_hours is not None:
        asked = sum(asked_gpu_hours(w) for w in workloads)
        cap = float(token.cap_gpu_hours)
        if gpu_hours + asked > cap + _EPSILON:
            raise TokenCapSpent(cap, gpu_hours, asked)
    if token.cap_money is not None:
        asked = asked_money(workloads)
        cap = float(token.cap_money)
        if money + asked > cap + _EPSILON:
            raise TokenCapSpent(cap, money, asked, scope=MONEY)
