"""Every statement about workloads written by hand (PostgreSQL), each one readable as one block, and the one
compare-and-swap helper every state change in bulk goes through (`swap_with_events`).

The rule all of them keep: a workload's state changes only from the state its writer read (a compare-and-swap:
`... WHERE state = <old>`), and each change writes its WorkloadEvent in the same statement, from what the UPDATE
returned: a row that moved on meanwhile is left alone and gets no event. Every statement here is one round trip
and atomic on its own. The ORM paths (SQLite, single changes) live beside the callers (services.lifecycle).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connection

from portal import sql
from portal.workloads import context
from portal.workloads.models import Workload, WorkloadEvent

EVENT_FIELDS = ("workload", "at", "actor", "from_state", "to_state", "reason")


def _table(model: Any) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _columns(model: Any, names: Sequence[str]) -> str:
    return ", ".join(sql.field_of(model, name)[0] for name in names)


def swap_with_events(
    ids: Sequence[Any],
    old: str,
    values: Mapping[str, Any],
    each: Mapping[str, tuple[str, Sequence[Any]]] | None = None,
    *,
    at: datetime,
    reason: str | Sequence[str],
    actor: Any = None,
) -> list[Any]:
    """Move every workload of `ids` still in state `old` (compare-and-swap), and write each one moved its event;
    returns the ids moved. One statement:

        WITH v AS (SELECT * FROM unnest(<ids>, <each column's values>...) AS v(id, c0, c1, ..., reason)),
             won AS (UPDATE workload t SET <values>, <column> = v.cN ... FROM v
                     WHERE t.id = v.id AND t.state = <old> RETURNING t.id, t.state, <reason>),
             e AS (INSERT INTO event (workload, at, actor, from_state, to_state, reason)
                   SELECT id, <at>, <actor>, <old>, state, reason FROM won)
        SELECT id FROM won

    `values`: field -> one value for every row (the new `state` among them, unless `each` has it); `each`:
    field -> (its SQL type, one value per id, in the order of `ids`). `reason`: the events' one reason, or one per
    id. A text given per row is refused when too long for its column, as an UPDATE of it would be."""
    arrays: list[tuple[str, str, Sequence[Any]]] = [("id", "uuid", [str(pk) for pk in ids])]
    sets, set_params = [], []
    for name, value in values.items():
        column, field = sql.field_of(Workload, name)
        sets.append(f"{column} = %s")
        set_params.append(field.get_db_prep_save(value, connection))
    for i, (name, (sql_type, per_row)) in enumerate((each or {}).items()):
        sets.append(f"{sql.field_of(Workload, name)[0]} = v.c{i}")
        arrays.append((f"c{i}", sql_type, per_row))
    one_reason = isinstance(reason, str)
    if not one_reason:
        arrays.append(("reason", "text", [r[:500] for r in reason]))
    unnest = ", ".join(f"%s::{sql_type}[]" for _, sql_type, _ in arrays)
    names = ", ".join(name for name, _, _ in arrays)
    state = sql.field_of(Workload, "state")[0]
    statement = (
        f"WITH v AS (SELECT * FROM unnest({unnest}) AS v({names})), "  # noqa: S608 (our own names; values are parameters)
        f"won AS (UPDATE {_table(Workload)} t SET {', '.join(sets)} FROM v "
        f"WHERE t.id = v.id AND t.{state} = %s RETURNING t.id, t.{state} AS state, "
        f"{'%s' if one_reason else 'v.reason'} AS reason), "
        f"e AS (INSERT INTO {_table(WorkloadEvent)} ({_columns(WorkloadEvent, EVENT_FIELDS)}) "
        "SELECT id, %s, %s, %s, state, reason FROM won) "
        "SELECT id FROM won"
    )
    params = [
        *(list(per_row) for _, _, per_row in arrays),
        *set_params,
        old,
        *([reason[:500]] if one_reason else []),
        at, getattr(actor, "pk", actor), old,
    ]  # fmt: skip
    with sql.prepared(binary_lists=True) as cursor:
        cursor.execute(statement, params)
        return [row[0] for row in cursor.fetchall()]


def insert_submitted(workload: Workload, event: WorkloadEvent, kick: list[str] | None) -> Any:
    """Insert a checked workload and, from its RETURNING, its first event, and NOTIFY the worker (`kick`: its
    channel and payload) when the transaction commits:

        WITH w AS (INSERT INTO workload ... ON CONFLICT DO NOTHING RETURNING 1),
             e AS (INSERT INTO event SELECT ... FROM w RETURNING id)
        SELECT e.id [, pg_notify(channel, payload)] FROM e

    Returns the event's id, or None when nothing was inserted (another workload of the owner has its
    idempotency key)."""
    w_sql, w_params = sql.insert_sql(workload, ignore_conflicts=True)
    e_sql, e_params = sql.insert_select_sql(event, "w")
    notify = ", pg_notify(%s, %s)" if kick else ""
    statement = f"WITH w AS ({w_sql} RETURNING 1), e AS ({e_sql} RETURNING id) SELECT e.id{notify} FROM e"  # noqa: S608
    with sql.prepared() as cursor:
        cursor.execute(statement, [*w_params, *e_params, *(kick or [])])
        row = cursor.fetchone()
    return None if row is None else row[0]


def insert_submitted_guarded(
    workload: Workload, event: WorkloadEvent, generation: int, charge: Any, kick: list[str] | None
) -> tuple[int, int | None, Any]:
    """insert_submitted, done only while the submit generation is still `generation` (the one the submit's
    context was kept under), and with the rate limit's count (`charge`: accounts.ratelimit.Charge) in the same
    statement; the workload is inserted only when the count is within the limit:

        WITH g AS (SELECT 1 FROM generation WHERE n = <generation>), old AS (...), counted AS (... FROM g),
             w AS (INSERT INTO workload SELECT ... FROM counted WHERE count <= <limit> ON CONFLICT DO NOTHING
                   RETURNING 1),
             e AS (INSERT INTO event SELECT ... FROM w RETURNING id)
        SELECT <generation now>, (SELECT count FROM counted), (SELECT id FROM e) [, notify when e has a row]

    Always one row: (the generation now, the count or None when not counted, the event's id or None)."""
    c_sql, c_params = charge.sql("g")
    w_sql, w_params = sql.insert_select_sql(workload, 'counted WHERE counted."count" <= %s', ignore_conflicts=True)
    e_sql, e_params = sql.insert_select_sql(event, "w")
    notify = ", (SELECT pg_notify(%s, %s) FROM e)" if kick else ""
    statement = (
        f"WITH g AS (SELECT 1 FROM {context.GENERATION_TABLE} WHERE n = %s), {c_sql}, "  # noqa: S608 (our tables)
        f"w AS ({w_sql} RETURNING 1), e AS ({e_sql} RETURNING id) "
        f'SELECT {context.GENERATION_SQL}, (SELECT "count" FROM counted), (SELECT id FROM e){notify}'
    )
    with sql.prepared() as cursor:
        cursor.execute(statement, [generation, *c_params, *w_params, charge.limit, *e_params, *(kick or [])])
        row = cursor.fetchone()
    return row[0], row[1], row[2]


def insert_many(workloads: Sequence[Workload], events: Sequence[WorkloadEvent]) -> None:
    """Insert checked workloads and their first events, one COPY each (a bulk submit, an array's elements)."""
    sql.copy_insert(workloads)
    sql.copy_insert(events)


def write_waiting_reasons(changed: Sequence[tuple[str, str, str, datetime | None, int]]) -> None:
    """Set why each pending workload waits (id, reason code, reason, estimated start, place in line); a workload
    no longer pending is left alone. An estimate shown is recorded in the same statement: the first one a workload
    ever had, and its latest (kept when it has none now). One statement per 1,000 rows:

        UPDATE workload w SET pending_reason_code = v.code, ...,
               first_estimated_start = COALESCE(w.first_estimated_start, v.estimate),
               last_estimated_start = COALESCE(v.estimate, w.last_estimated_start)
        FROM (VALUES ...) AS v(...) WHERE w.id = v.id AND w.state = 'pending'

    Elsewhere (SQLite) one executemany."""
    table = _table(Workload)
    with connection.cursor() as cursor:
        for start in range(0, len(changed), 1000):
            chunk = changed[start : start + 1000]
            if connection.vendor == "postgresql":
                values = ", ".join(["(%s::uuid, %s, %s, %s::timestamptz, %s::integer)"] * len(chunk))
                cursor.execute(
                    f"UPDATE {table} AS w SET pending_reason_code = v.code, pending_reason = v.reason, "  # noqa: S608 (our table name)
                    "estimated_start = v.estimate, queue_position = v.place, "
                    "first_estimated_start = COALESCE(w.first_estimated_start, v.estimate), "
                    "last_estimated_start = COALESCE(v.estimate, w.last_estimated_start) "
                    f"FROM (VALUES {values}) AS v(id, code, reason, estimate, place) "
                    "WHERE w.id = v.id AND w.state = 'pending'",
                    [item for row in chunk for item in row],
                )
            else:
                cursor.executemany(
                    f"UPDATE {table} SET pending_reason_code = %s, pending_reason = %s, estimated_start = %s, "  # noqa: S608
                    "queue_position = %s, first_estimated_start = COALESCE(first_estimated_start, %s), "
                    "last_estimated_start = COALESCE(%s, last_estimated_start) WHERE id = %s AND state = 'pending'",
                    [
                        (code, reason, estimate, place, estimate, estimate, job_id.replace("-", ""))
                        for job_id, code, reason, estimate, place in chunk
                    ],
                )
