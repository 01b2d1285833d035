"""Small tools for the few statements written by hand on the hot paths (a submit, a token's use): Django's own
INSERT put inside a larger statement, and related rows read by another query handed to an object."""

from __future__ import annotations

from typing import Any

from django.db import connection, models
from django.db.models.constants import OnConflict
from django.db.models.fields import AutoFieldMixin
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


def prefetched(instance: Any, related: str, rows: list[Any]) -> None:
    """Fill `instance.<related>.all()` with rows read by another query, as prefetch_related does."""
    found = getattr(instance, related).all()  # lazy: no query
    found._result_cache = rows
    found._prefetch_done = True
    instance._prefetched_objects_cache = {**getattr(instance, "_prefetched_objects_cache", {}), related: found}
