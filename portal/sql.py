"""Small tools for the few statements written by hand on the hot paths (a submit, a token's use): Django's own
INSERT put inside a larger statement, and related rows read by another query handed to an object."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connection, models
from django.db.models import QuerySet
from django.db.models.constants import OnConflict
from django.db.models.fields import AutoFieldMixin
from django.db.models.query import ValuesListIterable
from django.db.models.sql import InsertQuery


def insert_sql(obj: models.Model, ignore_conflicts: bool = False) -> tuple[str, list[Any]]:
    """Django's own INSERT of one object (every concrete field but an auto-increment key), as SQL and
    parameters, to be put inside a larger statement (`WITH w AS (<insert> RETURNING ...) ...`)."""
    model = type(obj)
    fields = [f for f in model._meta.concrete_fields if not isinstance(f, AutoFieldMixin) and not f.generated]
    query = InsertQuery(model, on_conflict=OnConflict.IGNORE if ignore_conflicts else None)
    query.insert_values(fields, [obj])
    ((sql, params),) = query.get_compiler(connection=connection).as_sql()
    return sql, list(params)


def insert_select_sql(obj: models.Model, source: str) -> tuple[str, list[Any]]:
    """The INSERT of insert_sql as `INSERT ... SELECT <values> FROM <source>`: a row only for each row of
    `source` (say, none when the insert it depends on did nothing)."""
    sql, params = insert_sql(obj)
    head, values = sql.split(" VALUES (", 1)
    return f"{head} SELECT {values.removesuffix(')')} FROM {source}", params  # noqa: S608 (Django-compiled SQL; values are parameters)


def copy_insert(objs: Sequence[models.Model]) -> None:
    """Insert objects of one model with one COPY (PostgreSQL): the fastest road in for a bulk submit's rows,
    with no statement to build and no parameter per value. Sets each one as saved, as bulk_create does. A
    violated constraint raises IntegrityError, as an INSERT would. Auto-increment keys are left unset."""
    model = type(objs[0])
    fields = [f for f in model._meta.concrete_fields if not isinstance(f, AutoFieldMixin) and not f.generated]
    # Values go as they are (psycopg adapts each type) except those a field must prepare (JSON).
    prepared = [isinstance(f, models.JSONField) for f in fields]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    statement = f"COPY {connection.ops.quote_name(model._meta.db_table)} ({columns}) FROM STDIN"
    started = time.monotonic()
    with connection.cursor() as cursor, connection.wrap_database_errors, cursor.cursor.copy(statement) as copy:
        for obj in objs:
            copy.write_row([
                f.get_db_prep_save(getattr(obj, f.attname), connection) if prep else getattr(obj, f.attname)
                for f, prep in zip(fields, prepared, strict=True)
            ])  # fmt: skip
    if connection.queries_logged:  # counted and shown like any other statement (tests pin statement counts)
        connection.queries_log.append(
            {"sql": f"{statement} ({len(objs)} rows)", "time": f"{time.monotonic() - started:.3f}"}
        )
    for obj in objs:
        obj._state.adding, obj._state.db = False, connection.alias


class Compiled:
    """A query built and compiled by the ORM once per shape, then run again (as a raw query of `model`) with
    other values in its parameters: a query with a dozen subqueries costs more to build than to run.

    `run(shape, build, *values)` calls `build(*stand_ins)` the first time it meets `shape`, with stand-ins no
    real value equals (ids and a time far outside any real one), and keeps its SQL and parameters; each run
    puts `values` where the stand-ins were. `shape` must name everything that decides the query's structure
    (which columns `build` annotates, say): two different queries under one shape would run the first."""

    STAND_INS = (-2_000_000_011, -2_000_000_013, datetime(1901, 2, 3, 4, 5, 6, 789, tzinfo=UTC))
    MAX_SHAPES = 256

    def __init__(self, model: type[models.Model]) -> None:
        self.model = model
        self.cache: dict[Hashable, tuple[str, tuple[Any, ...]]] = {}

    def run(self, shape: Hashable, build: Callable[..., QuerySet[Any]], *values: Any) -> Any:
        stand_ins = self.STAND_INS[: len(values)]
        found = self.cache.get(shape)
        if found is None:
            if len(self.cache) >= self.MAX_SHAPES:
                self.cache.clear()
            found = self.cache[shape] = build(*stand_ins).query.sql_with_params()
        statement, params = found
        by_stand_in = dict(zip(stand_ins, values, strict=True))
        return self.model._default_manager.raw(statement, [_put(p, by_stand_in) for p in params])


class Rows:
    """Fixed queries of plain values (a `values_list`), compiled by the ORM once and then sent as they are: the
    worker's snapshot reads a dozen such queries on every admission, and building them cost more than running
    them. Rows come back as the queryset would give them: the same tuples, converted by the same fields.

    `rows(shape, build)` calls `build()` the first time it meets `shape`; `shape` must name everything that
    decides the query, its parameters included (a setting it filters by, say). One per process, for any model."""

    MAX_SHAPES = 256

    def __init__(self) -> None:
        self.cache: dict[tuple[str, Hashable], tuple[str, tuple[Any, ...], Any, Any]] = {}

    def rows(self, shape: Hashable, build: Callable[[], QuerySet[Any]]) -> list[tuple[Any, ...]]:
        key = (connection.alias, shape)
        found = self.cache.get(key)
        if found is None:
            if len(self.cache) >= self.MAX_SHAPES:
                self.cache.clear()
            queryset = build()
            if queryset._fields is None or not issubclass(queryset._iterable_class, ValuesListIterable):  # type: ignore[attr-defined]
                raise TypeError("sql.Rows runs values_list() querysets, whose rows are plain tuples")
            compiler = queryset.query.get_compiler(connection=connection)
            statement, params = compiler.as_sql()
            fields = [s[0] for s in compiler.select[0 : compiler.col_count]]
            found = self.cache[key] = (statement, tuple(params), compiler, compiler.get_converters(fields))
        statement, params, compiler, converters = found
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            rows = cursor.fetchall()
        if converters:
            return [tuple(row) for row in compiler.apply_converters(rows, converters)]
        return [tuple(row) for row in rows]


ROWS = Rows()


def _put(param: Any, by_stand_in: dict[Any, Any]) -> Any:
    """The value for a stand-in, else the parameter as it was (compared by type too: True == 1)."""
    for stand_in, value in by_stand_in.items():
        if type(param) is type(stand_in) and param == stand_in:
            return value
    return param


def field_of(model: type[models.Model], name: str) -> tuple[str, models.Field[Any, Any]]:
    """A concrete field by its name or attname, with its column quoted for SQL written by hand."""
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or field.column is None:
        raise TypeError(f"{model.__name__}.{name} is not a column")
    return connection.ops.quote_name(field.column), field


def prefetched(instance: Any, related: str, rows: list[Any]) -> None:
    """Fill `instance.<related>.all()` with rows read by another query, as prefetch_related does."""
    found = getattr(instance, related).all()  # lazy: no query
    found._result_cache = rows
    found._prefetch_done = True
    instance._prefetched_objects_cache = {**getattr(instance, "_prefetched_objects_cache", {}), related: found}
