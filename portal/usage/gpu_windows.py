"""Each GPU's readings summed per five minutes (UsageGpuWindow), written at ingest beside the raw per-GPU rows,
so that the efficiency page of a long job groups a few thousand rows into its windows instead of every reading.

`add` takes the GPU rows of one post (a sampler's batch of readings on one node), sums them per GPU and five
minutes in Python (a post's readings may share a bucket: one upsert row each), and adds them with one
INSERT ... ON CONFLICT DO UPDATE: counts and sums add, the peak memory keeps the larger. Two posts of one node
never race (the node's turn, portal.usage.samples); two nodes write different rows. `rebuild` recomputes a
workload's windows from its raw rows in the database (for rows written before the windows existed).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction

from portal.usage.models import UsageGpuSample, UsageGpuWindow

BUCKET_S = 300  # five minutes: divides every idle window in whole minutes that is a multiple of five
TABLE = UsageGpuWindow._meta.db_table
UPSERT = (
    f"INSERT INTO {TABLE} (workload_id, start, node, gpu, readings, utilisation_sum, memory_peak_mib) "  # noqa: S608 (the model's own table)
    "VALUES (%s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (workload_id, start, node, gpu) DO UPDATE SET "
    f"readings = {TABLE}.readings + excluded.readings, "
    f"utilisation_sum = {TABLE}.utilisation_sum + excluded.utilisation_sum, "
    f"memory_peak_mib = CASE WHEN excluded.memory_peak_mib IS NULL OR {TABLE}.memory_peak_mib >= "
    f"excluded.memory_peak_mib THEN {TABLE}.memory_peak_mib ELSE excluded.memory_peak_mib END"
)
ROWS_PER_UPSERT = 500
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def bucket_of(at: datetime) -> datetime:
    """The start of the five minutes `at` falls in, counted from the epoch (whole seconds)."""
    seconds = int((at - EPOCH).total_seconds() // BUCKET_S) * BUCKET_S
    return datetime.fromtimestamp(seconds, UTC)


def sums(rows: Sequence[tuple[Any, datetime, str, int, float | None, int | None]]) -> list[tuple[Any, ...]]:
    """(workload, at, node, gpu, utilisation, memory) rows summed per workload, bucket, node and GPU. Pure."""
    found: dict[tuple[Any, datetime, str, int], list[Any]] = {}
    for workload, at, node, gpu, utilisation, memory in rows:
        acc = found.setdefault((workload, bucket_of(at), node, gpu), [0, 0.0, None])
        if utilisation is not None:
            acc[0] += 1
            acc[1] += utilisation
        if memory is not None and (acc[2] is None or memory > acc[2]):
            acc[2] = memory
    return [(*key, *acc) for key, acc in found.items()]


def add(
    cursor: Any, rows: Sequence[tuple[Any, datetime, str, int, float | None, int | None]], before: Any = None
) -> None:
    """Add a post's GPU rows (`at` a datetime, `workload` as the database takes it) to their windows. `before`, a
    (statement, parameters) to run first (the raw rows' INSERT): on PostgreSQL one statement does both (the INSERT
    as a data-modifying WITH), so that a post costs no round trip more than it did without the windows."""
    summed = sorted(sums(rows), key=lambda r: (r[1], r[3]))  # one order for every writer: no deadlock
    head, _, one = UPSERT.partition("VALUES ")
    one, _, tail = one.partition(" ON CONFLICT")
    statements = []
    for first in range(0, len(summed), ROWS_PER_UPSERT):
        part = summed[first : first + ROWS_PER_UPSERT]
        params = [
            connection.ops.adapt_datetimefield_value(v) if isinstance(v, datetime) else v for r in part for v in r
        ]
        statements.append((head + "VALUES " + ", ".join([one] * len(part)) + " ON CONFLICT" + tail, params))
    if before is not None and statements and connection.vendor == "postgresql":
        sql, params = statements[0]
        statements[0] = (f"WITH raw AS ({before[0]}) {sql}", [*before[1], *params])
    elif before is not None:
        statements.insert(0, before)
    for sql, params in statements:
        cursor.execute(sql, params)


def rebuild(workload_id: Any) -> int:
    """The workload's windows recomputed from its raw GPU rows (older rows, seeded rows); returns how many."""
    raw = UsageGpuSample.objects.filter(workload_id=workload_id).values_list(
        "workload_id", "at", "node", "gpu", "utilisation", "memory_mib"
    )
    rows = [(w, at, node, gpu, u, m) for w, at, node, gpu, u, m in raw.iterator(chunk_size=10_000)]
    summed = sums(rows)
    with transaction.atomic():
        UsageGpuWindow.objects.filter(workload_id=workload_id).delete()
        UsageGpuWindow.objects.bulk_create(
            [
                UsageGpuWindow(
                    workload_id=w, start=start, node=node, gpu=gpu, readings=n, utilisation_sum=total,
                    memory_peak_mib=peak,
                )
                for w, start, node, gpu, n, total, peak in summed
            ],
            batch_size=5000,
        )  # fmt: skip
    return len(summed)
